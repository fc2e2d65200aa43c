#include "server/http/request_target.h"

#include <array>

#include "server/http/text.h"

namespace ringd::http {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

TargetResult Fail(int status, const char* reason) {
  TargetResult r;
  r.status = status;
  r.reason = reason;
  return r;
}

// unreserved / sub-delims / ':' / '@' (RFC 3986 pchar), plus '/' between segments.
constexpr std::array<bool, 256> kPathSafe = AlnumPlus("-._~!$&'()*+,;=:@/");

}  // namespace

namespace {

// A segment of a normalised path that starts with a dot, other than a leading /.well-known.
bool HasHiddenSegment(std::string_view path) {
  for (size_t s = 0; s < path.size(); ++s) {
    if (path[s] == '/' && s + 1 < path.size() && path[s + 1] == '.') {
      const std::string_view rest = path.substr(s + 1);
      const bool well_known = s == 0 && (rest == ".well-known" || rest.starts_with(".well-known/"));
      if (!well_known) return true;
    }
  }
  return false;
}

}  // namespace

bool SplitAbsoluteForm(std::string_view target, AbsoluteForm* out) {
  std::string_view p = target;
  if (p.size() <= 7 || !(EqualsIgnoreCase(p.substr(0, 7), "http://") ||
                         (p.size() > 8 && EqualsIgnoreCase(p.substr(0, 8), "https://")))) {
    return false;
  }
  p.remove_prefix(p[4] == ':' ? 7 : 8);
  const size_t end = p.find_first_of("/?#");
  out->authority = p.substr(0, end);
  if (end == std::string_view::npos || p[end] != '/') {
    // "http://host" or "http://host?q": the path is empty, which means "/".
    out->suffix = end == std::string_view::npos ? std::string_view() : p.substr(end);
    out->path = "/";
  } else {
    out->suffix = std::string_view();
    out->path = p.substr(end);
  }
  return true;
}

TargetResult NormalizeTarget(std::string_view target, const TargetOptions& options, char* scratch,
                             size_t scratch_cap) {
  if (target == "*") {
    TargetResult r;
    r.is_asterisk = true;
    r.path = "*";
    return r;
  }
  std::string_view path = target;
  std::string_view suffix;  // "?query#fragment" after the path
  // absolute-form (RFC 9112 section 3.2.2): its path, and what follows a path-less authority.
  // The authority is not used for lookup: ringd serves one document root.
  if (AbsoluteForm form; SplitAbsoluteForm(target, &form)) {
    path = form.path;
    suffix = form.suffix;
  }
  if (path.empty() || path.front() != '/') return Fail(400, "target is not origin-form");

  TargetResult r;
  const size_t qpos = path.find_first_of("?#");
  if (qpos != std::string_view::npos) {
    suffix = path.substr(qpos);
    path = path.substr(0, qpos);
  }
  if (!suffix.empty() && suffix.front() == '?') {
    r.query = suffix.substr(1, suffix.find('#') == std::string_view::npos ? std::string_view::npos
                                                                          : suffix.find('#') - 1);
  }
  if (scratch_cap < path.size() + 1) return Fail(414, "target longer than the scratch buffer");

  // Decode and remove dot-segments in one pass over segments. `out` only ever shrinks relative to
  // the input, and segments are decoded before "." and ".." are recognised, so "%2e%2e" is "..".
  size_t out = 0;
  size_t i = 0;             // at a '/'
  bool ends_as_dir = true;  // the last segment was empty, "." or "..": the path names a directory
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') ++i;  // merge repeated slashes, as nginx does
    const size_t seg_start = out;
    scratch[out++] = '/';
    while (i < path.size() && path[i] != '/') {
      char c = path[i];
      if (c == '%') {
        if (i + 2 >= path.size()) return Fail(400, "truncated percent-encoding");
        const int hi = HexValue(path[i + 1]), lo = HexValue(path[i + 2]);
        if (hi < 0 || lo < 0) return Fail(400, "bad percent-encoding");
        c = static_cast<char>(hi * 16 + lo);
        if (c == '\0') return Fail(400, "encoded NUL in path");
        if (c == '/') return Fail(400, "encoded '/' in a path segment");
        i += 3;
      } else if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
        return Fail(400, "raw space or control character in target");  // the parser stops these too
      } else {
        ++i;
      }
      scratch[out++] = c;
    }
    const std::string_view seg(scratch + seg_start + 1, out - seg_start - 1);
    ends_as_dir = seg.empty() || seg == "." || seg == "..";
    if (seg == "..") {
      if (seg_start == 0) return Fail(400, "path climbs above the root");
      // Drop this segment and the one before it: back to just before the previous '/'.
      out = seg_start;
      while (scratch[out - 1] != '/') --out;
      --out;
    } else if (ends_as_dir) {
      out = seg_start;  // "." and "" vanish; the trailing slash is added back below
    }
  }
  if (out == 0 || ends_as_dir) scratch[out++] = '/';
  r.path = std::string_view(scratch, out);

  // Hidden segments are judged on the normalised path, so "/a/../.git/x" is caught and
  // "/.x/../a" is not.
  if (!options.serve_dot_files && HasHiddenSegment(r.path)) return Fail(404, "hidden path segment");
  return r;
}

size_t EncodePath(std::string_view path, char* out, size_t out_cap) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  size_t n = 0;
  for (char c : path) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (kPathSafe[u]) {
      if (n + 1 > out_cap) return 0;
      out[n++] = c;
    } else {
      if (n + 3 > out_cap) return 0;
      out[n++] = '%';
      out[n++] = kHex[u >> 4];
      out[n++] = kHex[u & 15];
    }
  }
  return n;
}

}  // namespace ringd::http
