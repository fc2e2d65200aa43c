#include "server/http/origin_headers.h"

#include "server/http/text.h"

namespace ringd::http {
namespace {

constexpr auto kTchar = AlnumPlus("!#$%&'*+-.^_`|~");

// Fields ringd writes itself: adding them would send two (or contradict framing). Cache-Control
// has flags of its own. Vary is a list and may be added (Vary: Origin for CORS).
constexpr std::string_view kOwnFields[] = {
    "server",           "date",          "content-type",
    "content-length",   "last-modified", "etag",
    "content-encoding", "content-range", "accept-ranges",
    "location",         "allow",         "connection",
    "keep-alive",       "cache-control", "transfer-encoding",
    "trailer",          "upgrade",
};

constexpr std::string_view kCacheControl = "Cache-Control: ";
constexpr std::string_view kCrlf = "\r\n";

}  // namespace

bool GlobMatch(std::string_view pattern, std::string_view text) {
  // The classic two-cursor match: on a mismatch, let the last '*' swallow one more byte.
  size_t p = 0, t = 0;
  size_t star = std::string_view::npos, star_t = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_t = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++star_t;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!kTchar[static_cast<unsigned char>(c)]) return false;
  }
  return true;
}

bool IsFieldValue(std::string_view s) {
  if (s.empty() || s.front() == ' ' || s.front() == '\t' || s.back() == ' ' || s.back() == '\t')
    return false;
  for (char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
  }
  return true;
}

bool IsPlainRootPath(std::string_view path) {
  if (path.empty() || path.find('\0') != std::string_view::npos) return false;
  size_t start = 0;
  while (start < path.size()) {
    const size_t slash = path.find('/', start);
    const std::string_view seg = path.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (seg.empty() || seg == "." || seg == "..") return false;
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return true;
}

bool ErrorPageAllowed(int status) {
  switch (status) {
    case 400:  // a target that parsed but cannot name a file
    case 403:
    case 404:
    case 405:
    case 412:
    case 413:
    case 414:
    case 416:
    case 501:
    case 503:
      return true;
    default:
      return false;
  }
}

size_t OriginHeaders::LongestCacheLine() const {
  size_t longest = default_line_.size();
  for (const Rule& r : rules_) longest = r.line.size() > longest ? r.line.size() : longest;
  return longest;
}

bool OriginHeaders::Fits(size_t cache_line, size_t added, std::string* error) const {
  if (cache_line + added <= kMaxBytes) return true;
  *error = "the added headers and the longest Cache-Control line take more than " +
           std::to_string(kMaxBytes) + " bytes together";
  return false;
}

bool OriginHeaders::AddCacheRule(std::string_view glob, std::string_view value,
                                 std::string* error) {
  if (glob.starts_with('/')) glob.remove_prefix(1);  // paths are matched relative to the root
  if (glob.empty()) {
    *error = "--cache-control: expected GLOB=VALUE with a non-empty glob";
    return false;
  }
  if (!IsFieldValue(value)) {
    *error = "--cache-control: '" + std::string(value) +
             "' is not a header value (empty, control bytes, or surrounding spaces)";
    return false;
  }
  Rule r{std::string(glob), std::string(kCacheControl) + std::string(value) + std::string(kCrlf)};
  if (!Fits(r.line.size() > LongestCacheLine() ? r.line.size() : LongestCacheLine(), added_.size(),
            error)) {
    *error = "--cache-control: " + *error;
    return false;
  }
  rules_.push_back(std::move(r));
  return true;
}

bool OriginHeaders::SetDefaultCacheControl(std::string_view value, std::string* error) {
  if (!IsFieldValue(value)) {
    *error = "--default-cache-control: '" + std::string(value) +
             "' is not a header value (empty, control bytes, or surrounding spaces)";
    return false;
  }
  std::string line = std::string(kCacheControl) + std::string(value) + std::string(kCrlf);
  size_t longest = 0;
  for (const Rule& r : rules_) longest = r.line.size() > longest ? r.line.size() : longest;
  if (!Fits(line.size() > longest ? line.size() : longest, added_.size(), error)) {
    *error = "--default-cache-control: " + *error;
    return false;
  }
  default_line_ = std::move(line);
  return true;
}

bool OriginHeaders::AddHeader(std::string_view name, std::string_view value, std::string* error) {
  if (!IsToken(name)) {
    *error = "--add-header: '" + std::string(name) + "' is not a header name (a token)";
    return false;
  }
  for (std::string_view own : kOwnFields) {
    if (EqualsIgnoreCase(name, own)) {
      *error = "--add-header: ringd writes " + std::string(name) + " itself" +
               (own == "cache-control" ? "; use --cache-control or --default-cache-control" : "");
      return false;
    }
  }
  if (!IsFieldValue(value)) {
    *error = "--add-header: the value of " + std::string(name) +
             " is not a header value (empty, control bytes, or surrounding spaces)";
    return false;
  }
  std::string line = std::string(name) + ": " + std::string(value) + std::string(kCrlf);
  if (!Fits(LongestCacheLine(), added_.size() + line.size(), error)) {
    *error = "--add-header: " + *error;
    return false;
  }
  added_ += line;
  return true;
}

bool OriginHeaders::SetErrorPage(int status, std::string_view path, std::string* error) {
  if (!ErrorPageAllowed(status)) {
    *error = "--error-page: ringd cannot serve a page of its own choosing for " +
             std::to_string(status) + " (one of 400 403 404 405 412 413 414 416 501 503)";
    return false;
  }
  if (path.empty()) {
    *error = "--error-page: expected STATUS=/PATH";
    return false;
  }
  if (!IsPlainRootPath(path)) {
    *error = "--error-page: '/" + std::string(path) + "' is not a plain path beneath the root";
    return false;
  }
  for (auto& [code, page] : error_pages_) {
    if (code == status) {
      page = std::string(path);  // the last one given wins, as a repeated flag does
      return true;
    }
  }
  error_pages_.emplace_back(status, std::string(path));
  return true;
}

std::string_view OriginHeaders::CacheControlFor(std::string_view path) const {
  for (const Rule& r : rules_) {
    if (GlobMatch(r.glob, path)) return r.line;
  }
  return default_line_;
}

std::string_view OriginHeaders::ErrorPage(int status) const {
  for (const auto& [code, page] : error_pages_) {
    if (code == status) return page;
  }
  return {};
}

}  // namespace ringd::http
