#include "server/http/site_table.h"

#include <algorithm>

#include "server/http/request_target.h"

namespace ringd::http {
namespace {

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool NameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
}

}  // namespace

std::string_view NormalizeHost(std::string_view host, char (&out)[kMaxHostName + 1]) {
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return {};
    host = host.substr(0, close + 1);  // an IPv6 literal keeps its brackets, loses its port
  } else {
    host = host.substr(0, host.find(':'));
    if (!host.empty() && host.back() == '.') host.remove_suffix(1);  // one trailing dot, as nginx
  }
  if (host.empty() || host.size() > kMaxHostName) return {};
  for (size_t i = 0; i < host.size(); ++i) out[i] = Lower(host[i]);
  return std::string_view(out, host.size());
}

std::string_view RequestHost(std::string_view host_field, std::string_view target) {
  AbsoluteForm form;
  if (!target.empty() && target.front() != '/' && SplitAbsoluteForm(target, &form)) {
    const size_t at = form.authority.rfind('@');
    return at == std::string_view::npos ? form.authority : form.authority.substr(at + 1);
  }
  return host_field;
}

bool ParseSiteName(std::string_view name, std::string* normal, std::string* error) {
  std::string n;
  n.reserve(name.size());
  for (char c : name) n += Lower(c);
  std::string_view body = n;
  if (body.starts_with("*.")) body.remove_prefix(2);
  const bool literal6 = body.size() > 2 && body.front() == '[' && body.back() == ']';
  bool ok = !body.empty() && n.size() <= kMaxHostName && body.front() != '.' &&
            body.back() != '.' && body.find("..") == std::string_view::npos;
  if (literal6) {
    ok = n == body && std::all_of(body.begin() + 1, body.end() - 1, [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == ':' || c == '.';
         });
  } else {
    ok = ok && std::all_of(body.begin(), body.end(), NameChar);
  }
  if (!ok) {
    *error = "'" + std::string(name) +
             "' is not a site name (a host name such as example.org, a wildcard such as "
             "*.example.org, or an address)";
    return false;
  }
  *normal = std::move(n);
  return true;
}

bool SiteTable::Add(const std::vector<std::string>& names, std::string* error) {
  if (sites_ >= kMaxSites) {
    *error = "more than " + std::to_string(kMaxSites) + " sites";
    return false;
  }
  if (names.empty()) {
    *error = "a site needs at least one name";
    return false;
  }
  const int index = static_cast<int>(sites_);
  for (const std::string& given : names) {
    std::string name;
    if (!ParseSiteName(given, &name, error)) return false;
    const bool wildcard = name.starts_with("*.");
    auto& map = wildcard ? wildcard_ : exact_;
    if (wildcard) name.erase(0, 1);  // ".example.org"
    if (!map.emplace(name, index).second) {
      *error = "the site name '" + given + "' is given twice";
      return false;
    }
  }
  ++sites_;
  return true;
}

int SiteTable::Match(std::string_view host) const {
  if (host.empty()) return kNoSite;
  if (auto it = exact_.find(absl::string_view(host.data(), host.size())); it != exact_.end())
    return it->second;
  if (wildcard_.empty()) return kNoSite;
  // Longest suffix first: ".b.example.org" before ".example.org" for "a.b.example.org".
  for (size_t dot = host.find('.'); dot != std::string_view::npos; dot = host.find('.', dot + 1)) {
    const std::string_view suffix = host.substr(dot);
    auto it = wildcard_.find(absl::string_view(suffix.data(), suffix.size()));
    if (it != wildcard_.end()) return it->second;
  }
  return kNoSite;
}

}  // namespace ringd::http
