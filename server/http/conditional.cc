#include "server/http/conditional.h"

#include "server/http/http_date.h"
#include "server/http/text.h"

namespace ringd::http {
namespace {

size_t FormatHex(uint64_t v, char* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  char tmp[16];
  size_t n = 0;
  do {
    tmp[n++] = kHex[v & 15];
    v >>= 4;
  } while (v != 0);
  for (size_t i = 0; i < n; ++i) out[i] = tmp[n - 1 - i];
  return n;
}

// Splits an entity-tag into (weak, opaque-tag with quotes); false if it is not one.
bool ParseETag(std::string_view tag, bool& weak, std::string_view& opaque) {
  weak = tag.size() >= 2 && tag[0] == 'W' && tag[1] == '/';
  if (weak) tag.remove_prefix(2);
  if (tag.size() < 2 || tag.front() != '"' || tag.back() != '"') return false;
  opaque = tag;
  return true;
}

}  // namespace

size_t FormatETag(int64_t mtime_sec, uint64_t size, char* out) {
  size_t n = 0;
  out[n++] = '"';
  n += FormatHex(static_cast<uint64_t>(mtime_sec), out + n);
  out[n++] = '-';
  n += FormatHex(size, out + n);
  out[n++] = '"';
  return n;
}

bool ETagListMatches(std::string_view list, std::string_view etag, bool weak) {
  list = TrimOws(list);
  if (list == "*") return true;
  bool etag_weak;
  std::string_view etag_opaque;
  if (!ParseETag(etag, etag_weak, etag_opaque)) return false;
  // entity-tags may hold commas inside their quotes, so walk the list by hand.
  size_t i = 0;
  while (i < list.size()) {
    while (i < list.size() && (list[i] == ' ' || list[i] == '\t' || list[i] == ',')) ++i;
    if (i >= list.size()) break;
    const size_t start = i;
    if (list.substr(i, 2) == "W/") i += 2;
    if (i >= list.size() || list[i] != '"') return false;  // malformed: matches nothing
    const size_t close = list.find('"', i + 1);
    if (close == std::string_view::npos) return false;
    i = close + 1;
    bool w;
    std::string_view opaque;
    if (!ParseETag(list.substr(start, i - start), w, opaque)) return false;
    const bool match = opaque == etag_opaque && (weak || (!w && !etag_weak));
    if (match) return true;
  }
  return false;
}

Precondition EvaluatePreconditions(const Request& req, const Validators& v) {
  // Step 1: If-Match (strong comparison); else step 2: If-Unmodified-Since.
  if (!req.if_match.empty()) {
    if (!ETagListMatches(req.if_match, v.etag, /*weak=*/false)) return Precondition::kFailed;
  } else if (!req.if_unmodified_since.empty()) {
    const auto since = ParseHttpDate(TrimOws(req.if_unmodified_since));
    if (since && v.last_modified_sec > *since) return Precondition::kFailed;
  }
  // Step 3: If-None-Match (weak comparison); else step 4: If-Modified-Since, GET/HEAD only.
  if (!req.if_none_match.empty()) {
    if (ETagListMatches(req.if_none_match, v.etag, /*weak=*/true)) {
      return req.method == Method::kGet || req.method == Method::kHead ? Precondition::kNotModified
                                                                       : Precondition::kFailed;
    }
  } else if (!req.if_modified_since.empty() &&
             (req.method == Method::kGet || req.method == Method::kHead)) {
    const auto since = ParseHttpDate(TrimOws(req.if_modified_since));
    if (since && v.last_modified_sec <= *since) return Precondition::kNotModified;
  }
  return Precondition::kProceed;
}

bool IfRangeAllows(std::string_view if_range, const Validators& v) {
  if_range = TrimOws(if_range);
  if (if_range.empty()) return true;
  if (if_range.front() == '"' || if_range.starts_with("W/")) {
    bool weak;
    std::string_view opaque;
    return ParseETag(if_range, weak, opaque) && !weak && if_range == v.etag;
  }
  const auto date = ParseHttpDate(if_range);
  return date && *date == v.last_modified_sec;
}

}  // namespace ringd::http
