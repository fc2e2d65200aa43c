// Turns a raw request-target into a safe path below the document root (RFC 9112 section 3.2,
// RFC 3986 sections 2.1 and 5.2.4). Pure: no file system access.
//
//   char scratch[kMaxTarget];
//   TargetResult t = NormalizeTarget("/a/./b/../c%20d?x=1", TargetOptions{}, scratch, sizeof
//   scratch);
//   // t.status == 0, t.path == "/a/c d", t.query == "x=1"
#pragma once

#include <cstddef>
#include <string_view>

namespace ringd::http {

struct TargetOptions {
  // Segments that start with '.' answer 404 unless this is set; "/.well-known/" is always allowed.
  bool serve_dot_files = false;
};

struct TargetResult {
  int status = 0;            // 0: ok; otherwise the HTTP status to answer (400 or 404)
  const char* reason = "";   // for logs, when status != 0
  std::string_view path;     // decoded, normalised, always starts with '/'; in `scratch`
  std::string_view query;    // raw, without '?'; points into the target
  bool is_asterisk = false;  // the target was "*" (OPTIONS only)

  // The path without its leading '/', as openat() beneath the root wants it ("" for the root).
  std::string_view Relative() const { return path.substr(1); }
  bool HasTrailingSlash() const { return path.size() > 0 && path.back() == '/'; }
};

// An absolute-form target ("http://host[:port]/path?query", RFC 9112 section 3.2.2), apart:
// the authority, and the rest ("/path?query"; "/" alone, or "/?query", where the path is empty).
struct AbsoluteForm {
  std::string_view authority;
  std::string_view path;    // starts with '/'
  std::string_view suffix;  // what follows a path-less authority ("?query"), or empty
};
// Whether `target` is in absolute-form (an http or https URI); *out its parts.
bool SplitAbsoluteForm(std::string_view target, AbsoluteForm* out);

// `scratch` must hold at least target.size() + 1 bytes; the result's path lives there.
TargetResult NormalizeTarget(std::string_view target, const TargetOptions& options, char* scratch,
                             size_t scratch_cap);

// Percent-encodes `path` for a Location header: every byte outside RFC 3986's pchar and '/'.
// Returns the length written, or 0 if `out_cap` is too small.
size_t EncodePath(std::string_view path, char* out, size_t out_cap);

}  // namespace ringd::http
