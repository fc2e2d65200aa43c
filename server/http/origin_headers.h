// What an origin tells the caches and browsers in front of it: Cache-Control chosen by a glob on
// the path, headers added to every successful response, and files served as error pages. Built
// once at start-up from the flags; the planner only picks header lines that are already written
// out, so a request formats nothing (a glob match per rule until one matches is its whole cost).
//
//   OriginHeaders origin;
//   origin.AddCacheRule("*.css", "public, max-age=31536000, immutable");   // first match wins
//   origin.SetDefaultCacheControl("no-cache");
//   origin.AddHeader("X-Content-Type-Options", "nosniff");
//   origin.SetErrorPage(404, "404.html");
//   origin.CacheControlFor("css/site.css");   // "Cache-Control: public, ...\r\n"
//   origin.added();                           // "X-Content-Type-Options: nosniff\r\n"
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ringd::http {

// Glob matching as a shell does it, on a whole path: '*' matches any run of bytes, '/' included
// (so "*.css" matches "a/b/site.css"), '?' matches one byte, everything else matches itself.
bool GlobMatch(std::string_view pattern, std::string_view text);

// RFC 9110 section 5.6.2: a header field name is a token.
bool IsToken(std::string_view s);
// RFC 9110 section 5.5, what ringd accepts from an operator: visible ASCII, obs-text, SP and HTAB
// inside; no CR, LF, NUL or other control byte; no leading or trailing whitespace.
bool IsFieldValue(std::string_view s);

// Whether `path` (relative to the document root, without its leading '/') is a plain path
// beneath it, as a request would name it: non-empty segments, none "." or "..", no NUL. The
// files an operator names (--error-page, --fallback) are such paths.
bool IsPlainRootPath(std::string_view path);

// Statuses an --error-page may replace: those ringd decides for a request it has parsed.
bool ErrorPageAllowed(int status);

class OriginHeaders {
 public:
  // Bytes the added header lines and the longest Cache-Control line may take together, so that a
  // response head always fits its buffer (tied to it by a static_assert in server/core/shard.h).
  static constexpr size_t kMaxBytes = 2048;

  // Each returns false with one line in *error when the input is not acceptable.
  bool AddCacheRule(std::string_view glob, std::string_view value, std::string* error);
  bool SetDefaultCacheControl(std::string_view value, std::string* error);
  // A header to add to every 200, 206 and 304 response. Names ringd writes itself are refused.
  bool AddHeader(std::string_view name, std::string_view value, std::string* error);
  // `path` is relative to the document root, without a leading '/'.
  bool SetErrorPage(int status, std::string_view path, std::string* error);

  // The "Cache-Control: ...\r\n" line for a file at `path` (relative to the root), or "" when no
  // rule matches and there is no default.
  std::string_view CacheControlFor(std::string_view path) const;
  // Every added header, each "Name: value\r\n", in the order given; "" when none.
  std::string_view added() const { return added_; }
  // The relative path of the page for `status`, or "" when none was configured.
  std::string_view ErrorPage(int status) const;
  // Every (status, relative path) configured, in the order given.
  const std::vector<std::pair<int, std::string>>& error_pages() const { return error_pages_; }
  bool empty() const {
    return rules_.empty() && default_line_.empty() && added_.empty() && error_pages_.empty();
  }

 private:
  bool Fits(size_t cache_line, size_t added, std::string* error) const;
  size_t LongestCacheLine() const;

  struct Rule {
    std::string glob;
    std::string line;  // "Cache-Control: VALUE\r\n"
  };
  std::vector<Rule> rules_;
  std::string default_line_;
  std::string added_;
  std::vector<std::pair<int, std::string>> error_pages_;
};

}  // namespace ringd::http
