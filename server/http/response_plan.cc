#include "server/http/response_plan.h"

#include <cstring>
#include <optional>

#include "server/http/accept_encoding.h"
#include "server/http/conditional.h"
#include "server/http/http_date.h"
#include "server/http/text.h"

namespace ringd::http {
namespace {

#define RINGD_ERROR_PAGE(code, text)                                                         \
  "<html>\r\n<head><title>" #code " " text "</title></head>\r\n<body>\r\n<center><h1>" #code \
  " " text "</h1></center>\r\n<hr><center>ringd</center>\r\n</body>\r\n</html>\r\n"

struct StatusInfo {
  int code;
  std::string_view reason;
  std::string_view page;  // the HTML body of an error response; empty for success codes
};

constexpr StatusInfo kStatuses[] = {
    {200, "OK", ""},
    {206, "Partial Content", ""},
    {301, "Moved Permanently", RINGD_ERROR_PAGE(301, "Moved Permanently")},
    {304, "Not Modified", ""},
    {400, "Bad Request", RINGD_ERROR_PAGE(400, "Bad Request")},
    {403, "Forbidden", RINGD_ERROR_PAGE(403, "Forbidden")},
    {404, "Not Found", RINGD_ERROR_PAGE(404, "Not Found")},
    {405, "Method Not Allowed", RINGD_ERROR_PAGE(405, "Method Not Allowed")},
    {408, "Request Timeout", RINGD_ERROR_PAGE(408, "Request Timeout")},
    {412, "Precondition Failed", RINGD_ERROR_PAGE(412, "Precondition Failed")},
    {413, "Content Too Large", RINGD_ERROR_PAGE(413, "Content Too Large")},
    {414, "URI Too Long", RINGD_ERROR_PAGE(414, "URI Too Long")},
    {416, "Range Not Satisfiable", RINGD_ERROR_PAGE(416, "Range Not Satisfiable")},
    {421, "Misdirected Request", RINGD_ERROR_PAGE(421, "Misdirected Request")},
    {429, "Too Many Requests", RINGD_ERROR_PAGE(429, "Too Many Requests")},
    {431, "Request Header Fields Too Large",
     RINGD_ERROR_PAGE(431, "Request Header Fields Too Large")},
    {500, "Internal Server Error", RINGD_ERROR_PAGE(500, "Internal Server Error")},
    {501, "Not Implemented", RINGD_ERROR_PAGE(501, "Not Implemented")},
    {503, "Service Unavailable", RINGD_ERROR_PAGE(503, "Service Unavailable")},
    {505, "HTTP Version Not Supported", RINGD_ERROR_PAGE(505, "HTTP Version Not Supported")},
};
#undef RINGD_ERROR_PAGE

// nginx's page for kPlainHttpToHttps.
constexpr std::string_view kPlainHttpToHttpsPage =
    "<html>\r\n<head><title>400 The plain HTTP request was sent to HTTPS port</title></head>\r\n"
    "<body>\r\n<center><h1>400 Bad Request</h1></center>\r\n<center>The plain HTTP request was "
    "sent to HTTPS port</center>\r\n<hr><center>ringd</center>\r\n</body>\r\n</html>\r\n";

const StatusInfo& Info(int status) {
  for (const StatusInfo& s : kStatuses) {
    if (s.code == status) return s;
  }
  return Info(500);
}

constexpr std::string_view kHtml = "text/html; charset=utf-8";

// An error or redirect answered with a small HTML page.
PlanStep Page(int status, const char* reason, const Request& req, ResponsePlan* out) {
  const StatusInfo& info = Info(status);
  out->status = info.code;
  out->inline_body = info.page;
  out->content_type = kHtml;
  out->content_length = info.page.size();
  out->send_body = req.method != Method::kHead;
  out->reason = reason;
  // As nginx: after these the request (or the server) is in doubt, so the connection ends.
  if (status == 400 || status == 413 || status == 414 || status == 500 || status == 501 ||
      status == 503) {
    out->keep_alive = false;
  }
  return PlanStep{};
}

PlanStep NeedLookup(std::string_view path) {
  PlanStep step;
  step.status = PlanStatus::kNeedLookup;
  step.lookup_path = path;
  return step;
}

// Writes a + b + c into buf (capacity cap); returns the joined view, or empty if it does not fit.
// The parts may already lie in buf (a prefix of it), hence memmove.
std::string_view Join(char* buf, size_t cap, std::string_view a, std::string_view b,
                      std::string_view c = {}) {
  if (a.size() + b.size() + c.size() > cap) return {};
  // Empty views may have a null data(): memmove must not see those, even for zero bytes.
  if (!a.empty()) std::memmove(buf, a.data(), a.size());
  if (!b.empty()) std::memmove(buf + a.size(), b.data(), b.size());
  if (!c.empty()) std::memmove(buf + a.size() + b.size(), c.data(), c.size());
  return std::string_view(buf, a.size() + b.size() + c.size());
}

// Whether the plan asks for `path`'s precompressed siblings once it knows `path` is a file.
bool AsksForSiblings(const PlannerConfig& config, std::string_view path) {
  return config.precompressed && !path.ends_with(".gz") && !path.ends_with(".br");
}

// The precompressed siblings the planner asks for, in the order it asks (br first: a tie of
// q-values keeps br).
constexpr std::string_view kSiblingSuffixes[2] = {".br", ".gz"};

// `path`'s siblings from the `first`-th on, named in `step` to be looked up beside the lookup
// the plan waits for.
void PrefetchSiblings(std::string_view path, size_t first, PlanScratch& scratch, PlanStep* step) {
  for (size_t i = first; i < 2; ++i) {
    step->prefetch[i - first] =
        Join(scratch.prefetch[i - first], sizeof scratch.prefetch[0], path, kSiblingSuffixes[i]);
  }
}

// NeedLookup for `path`, with the siblings the plan asks for next if it is a file, to look up
// beside it.
PlanStep NeedLookupOfFile(std::string_view path, const PlannerConfig& config,
                          PlanScratch& scratch) {
  PlanStep step = NeedLookup(path);
  if (AsksForSiblings(config, path)) PrefetchSiblings(path, 0, scratch, &step);
  return step;
}

// An error for a parsed request: the operator's page for its status when there is one
// (--error-page: a file beneath the root, served whole with the error status, without validators
// or ranges), else the built-in page. A page file that is missing, or not a regular file, falls
// back to the built-in page.
PlanStep Error(int status, const char* reason, const Request& req, const PlannerConfig& config,
               FileMetaSource& source, ResponsePlan* out) {
  Page(status, reason, req, out);
  const std::string_view page =
      config.origin != nullptr ? config.origin->ErrorPage(status) : std::string_view();
  if (page.empty()) return PlanStep{};
  const std::optional<FileMeta> meta = source.Lookup(page);
  if (!meta) return NeedLookup(page);
  if (meta->kind != FileMeta::Kind::kRegular) return PlanStep{};
  out->inline_body = {};
  out->file_path = page;  // the configuration's string: lives as long as the process
  out->file = *meta;
  out->content_type = config.mime != nullptr ? config.mime->ForPath(page)
                                             : std::string_view("application/octet-stream");
  out->content_length = meta->size;
  out->ranges.count = 0;
  out->multipart = false;
  return PlanStep{};
}

// An error decided after a file was selected: the page replaces the file, but whether the
// response varies on Accept-Encoding still holds.
PlanStep ErrorAfterSelect(int status, const char* reason, const Request& req,
                          const PlannerConfig& config, FileMetaSource& source, ResponsePlan* out) {
  ResponsePlan error;  // a fresh plan, with what holds for the error as for the file
  error.keep_alive = out->keep_alive;
  error.http10 = out->http10;
  error.discard_body = out->discard_body;
  error.vary_accept_encoding = out->vary_accept_encoding;
  error.unsatisfied_length = out->unsatisfied_length;  // 416's Content-Range
  *out = error;
  return Error(status, reason, req, config, source, out);
}

size_t Put(char* out, size_t n, size_t cap, std::string_view s) {
  if (n == SIZE_MAX || n + s.size() > cap) return SIZE_MAX;
  if (!s.empty()) std::memcpy(out + n, s.data(), s.size());
  return n + s.size();
}

size_t PutUint(char* out, size_t n, size_t cap, uint64_t v) {
  char digits[20];
  return Put(out, n, cap, std::string_view(digits, FormatUint(v, digits)));
}

// Starts a plan for `req` from a fresh value, so that nothing of an earlier plan in `out`
// survives into this one.
void StartPlan(const Request& req, ResponsePlan* out) {
  *out = ResponsePlan{};
  out->keep_alive = req.keep_alive;
  out->http10 = req.version_minor == 0;
}

// The request's body framing and method: a step when they decide the response alone (413, an
// OPTIONS answer, 405, 501), nothing when the request goes on to a file (GET, HEAD) or to the
// redirect (those and a resource's OPTIONS, with --redirect-https).
std::optional<PlanStep> PlanBodyAndMethod(const Request& req, const PlannerConfig& config,
                                          FileMetaSource& source, ResponsePlan* out) {
  // A body we will not read is never parsed as the next request: a small one is skipped, a
  // chunked one ends the connection after this response, a large one is refused.
  if (req.body == BodyFraming::kChunked) {
    out->keep_alive = false;
  } else if (req.content_length > config.max_discarded_body) {
    out->keep_alive = false;
    return Error(413, "request body too large", req, config, source, out);
  } else {
    out->discard_body = req.content_length;
  }

  switch (req.method) {
    case Method::kGet:
    case Method::kHead:
      return std::nullopt;
    case Method::kOptions:  // RFC 9110 section 9.3.7
      // A plaintext listener that redirects sends a resource's OPTIONS to HTTPS as it does a
      // GET; the site's added headers (CORS, HSTS) go out over TLS alone.
      if (config.redirect_to_https && req.target != "*") return std::nullopt;
      out->status = 200;
      out->allow_header = true;
      out->content_length = 0;
      out->send_body = false;
      out->reason = "options";
      if (config.origin != nullptr && !config.redirect_to_https)
        out->added_headers = config.origin->added();
      return PlanStep{};
    case Method::kUnknown:
      return Error(501, "unknown method", req, config, source, out);
    default:
      out->allow_header = true;
      return Error(405, "method not allowed", req, config, source, out);
  }
}

// --redirect-https: 301 to https://HOST[:PORT]TARGET, the request's host without its port and
// its target as received; an absolute-form target gives its own host (RFC 9112 section 3.2.2,
// Host ignored), its path and its query.
PlanStep PlanHttpsRedirect(const Request& req, const PlannerConfig& config, FileMetaSource& source,
                           PlanScratch& scratch, ResponsePlan* out) {
  std::string_view host = req.host;
  std::string_view target = req.target;
  std::string_view suffix;
  AbsoluteForm form;
  if (SplitAbsoluteForm(req.target, &form)) {
    // RFC 9112 section 3.2.2: the target's authority names the host, whatever Host says. It
    // is held to what a Host value may hold (the parser lets any visible byte into a target),
    // so that a Location is never built from what Host would have refused; no userinfo.
    if (form.authority.find('@') != std::string_view::npos)
      return Error(400, "userinfo in the target", req, config, source, out);
    if (!AllHostChars(form.authority))
      return Error(400, "bad host in the target", req, config, source, out);
    host = form.authority;
    target = form.path;
    suffix = form.suffix;
  } else if (target.empty() || target.front() != '/') {
    return Error(400, "target is not origin-form", req, config, source, out);
  }
  if (!host.empty() && host.front() == '[') {
    host = host.substr(0, host.find(']') + 1);  // an IPv6 literal keeps its brackets
  } else {
    host = host.substr(0, host.find(':'));
  }
  if (host.empty()) return Error(400, "no host to redirect to", req, config, source, out);
  const std::string_view origin =
      Join(scratch.location, sizeof scratch.location, "https://", host, config.https_port_suffix);
  const std::string_view location =
      origin.empty() ? origin
                     : Join(scratch.location, sizeof scratch.location, origin, target, suffix);
  if (location.empty()) return Error(414, "redirect target too long", req, config, source, out);
  out->location = location;
  return Page(301, "redirect to https", req, out);
}

// A directory without an index, with --autoindex: its listing, once the caller has read the
// directory (the status); the body follows as the caller makes it. No validators and no ranges
// (a listing is made per request); the added headers, as on any 200.
PlanStep PlanListing(const Request& req, const PlannerConfig& config, FileMetaSource& source,
                     std::string_view dir, std::string_view url_path, ResponsePlan* out) {
  const std::optional<ListingResult> listing = source.Listing(dir);
  if (!listing) {
    PlanStep step;
    step.status = PlanStatus::kNeedListing;
    step.lookup_path = dir;
    step.listing_url_path = url_path;
    return step;
  }
  if (listing->status != 200)
    return Error(listing->status, "directory listing failed", req, config, source, out);
  out->status = 200;
  out->reason = "directory listing";
  out->streamed_body = true;
  out->content_length = 0;
  if (out->http10) out->keep_alive = false;  // the close ends an HTTP/1.0 body of no length
  out->content_type = ListingContentType(config.autoindex_format);
  out->send_body = req.method != Method::kHead;
  if (config.origin != nullptr) out->added_headers = config.origin->added();
  return PlanStep{};
}

// An error answered because of what the lookup of `path` found: the error log says which path
// and why.
PlanStep FailedLookup(PlanStep step, const FileMeta& found, std::string_view path,
                      ResponsePlan* out) {
  out->failed_path = path;
  out->failed_error = found.error;
  return step;
}

// The file resolution ended at: a regular file is selected (*meta, and nothing returned), else
// its error (`missing` is the reason for a 404).
std::optional<PlanStep> SelectedFile(const FileMeta& found, std::string_view path,
                                     const char* missing, const Request& req,
                                     const PlannerConfig& config, FileMetaSource& source,
                                     ResponsePlan* out, FileMeta* meta) {
  switch (found.kind) {
    case FileMeta::Kind::kRegular:
      *meta = found;
      return std::nullopt;
    case FileMeta::Kind::kForbidden:
      return FailedLookup(Error(403, "permission denied", req, config, source, out), found, path,
                          out);
    case FileMeta::Kind::kUnavailable:
      return FailedLookup(Error(503, "file lookup failed for now", req, config, source, out), found,
                          path, out);
    case FileMeta::Kind::kDirectory:  // "dir/index.html" (or the fallback) is itself a directory
    case FileMeta::Kind::kMissing:
    case FileMeta::Kind::kOther:
      break;
  }
  return FailedLookup(Error(404, missing, req, config, source, out), found, path, out);
}

// The regular file the target names: "dir" is a 301 to "dir/", "dir/" is "dir/index.html", and
// a path that names nothing is the fallback file, when there is one (--fallback).
// Sets *path (in scratch.file, or the fallback's) and *meta and returns nothing when there is
// one; otherwise the step: a lookup to wait for, the redirect, or the error.
std::optional<PlanStep> ResolveFile(const Request& req, const PlannerConfig& config,
                                    FileMetaSource& source, PlanScratch& scratch, ResponsePlan* out,
                                    std::string_view* path, FileMeta* meta) {
  const TargetResult target =
      NormalizeTarget(req.target, config.target, scratch.target, sizeof scratch.target);
  if (target.status != 0) return Error(target.status, target.reason, req, config, source, out);
  if (target.path.size() > PlanScratch::kMaxPath)
    return Error(404, "path longer than any file's", req, config, source, out);
  if (target.is_asterisk)
    return Error(400, "asterisk-form outside OPTIONS", req, config, source, out);

  std::string_view rel = target.Relative();
  if (!rel.empty() && rel.back() == '/') rel.remove_suffix(1);
  *path = rel.empty() ? std::string_view(".") : rel;
  std::optional<FileMeta> found = source.Lookup(*path);
  if (!found) {
    // Most paths name a file: its siblings are looked up beside it. (Not a target that ends in
    // a slash, or the root: those are directories, or errors.)
    if (target.HasTrailingSlash() || rel.empty()) return NeedLookup(*path);
    return NeedLookupOfFile(*path, config, scratch);
  }
  if (found->kind == FileMeta::Kind::kMissing && !config.fallback.empty()) {
    // Nothing there: the fallback file is served in its place, planned as if it had been asked
    // for (its type, siblings, validators and ranges). The request itself (the access log's
    // line) stays what the client sent.
    *path = config.fallback;  // the configuration's string: lives as long as the process
    found = source.Lookup(*path);
    if (!found) return NeedLookupOfFile(*path, config, scratch);
    return SelectedFile(*found, *path, "no such file, nor the fallback", req, config, source, out,
                        meta);
  }
  if (found->kind == FileMeta::Kind::kUnavailable) {
    return FailedLookup(Error(503, "file lookup failed for now", req, config, source, out), *found,
                        *path, out);
  }
  if (found->kind == FileMeta::Kind::kForbidden && target.HasTrailingSlash() && !rel.empty()) {
    // A name that cannot be opened, asked as a directory: nginx opens its index beneath it,
    // which a file's name refuses as not a directory (404) and a directory that cannot be
    // searched as forbidden (403). Its "." entry tells the two apart the same way.
    const std::string_view dot = Join(scratch.file, sizeof scratch.file, rel, "/.");
    if (dot.empty()) return Error(404, "path longer than any file's", req, config, source, out);
    const std::optional<FileMeta> beneath = source.Lookup(dot);
    if (!beneath) return NeedLookup(dot);
    if (beneath->kind == FileMeta::Kind::kMissing)
      return Error(404, "trailing slash on a file", req, config, source, out);
    if (beneath->kind == FileMeta::Kind::kUnavailable)
      return Error(503, "file lookup failed for now", req, config, source, out);
  }
  if (found->kind == FileMeta::Kind::kDirectory) {
    if (!target.HasTrailingSlash()) {
      size_t n = EncodePath(target.path, scratch.location, sizeof scratch.location - 2);
      if (n == 0) return Error(414, "redirect target too long", req, config, source, out);
      scratch.location[n++] = '/';
      if (!target.query.empty()) {
        const std::string_view loc(scratch.location, n);
        std::string_view with_query =
            Join(scratch.location + n, sizeof scratch.location - n, "?", target.query);
        if (with_query.empty())
          return Error(414, "redirect target too long", req, config, source, out);
        n = loc.size() + with_query.size();
      }
      out->location = std::string_view(scratch.location, n);
      return Page(301, "directory without trailing slash", req, out);
    }
    *path = rel.empty() ? Join(scratch.file, sizeof scratch.file, config.index_file, "")
                        : Join(scratch.file, sizeof scratch.file, rel, "/", config.index_file);
    if (path->empty())
      return Error(404, "index path longer than any file's", req, config, source, out);
    found = source.Lookup(*path);
    if (!found) return NeedLookupOfFile(*path, config, scratch);
    if (found->kind == FileMeta::Kind::kMissing) {
      if (config.autoindex) {
        return PlanListing(req, config, source, rel.empty() ? std::string_view(".") : rel,
                           target.path, out);
      }
      // As nginx without autoindex.
      return FailedLookup(Error(403, "directory without an index", req, config, source, out),
                          *found, *path, out);
    }
  } else {
    if (target.HasTrailingSlash() && found->kind == FileMeta::Kind::kRegular) {
      return Error(404, "trailing slash on a file", req, config, source, out);
    }
    *path = Join(scratch.file, sizeof scratch.file, *path, "");
  }
  // A missing file's precompressed siblings may stand in for it, as with nginx's gzip_static: a
  // site can ship app.js.gz alone (PlanResponse decides). (With --fallback, a path that names
  // nothing was the fallback above, as nginx's try_files finds no $uri.)
  if (found->kind == FileMeta::Kind::kMissing && !target.HasTrailingSlash() &&
      AsksForSiblings(config, *path)) {
    *meta = *found;
    return std::nullopt;
  }
  return SelectedFile(*found, *path, "no such file", req, config, source, out, meta);
}

// Precompressed siblings: file.br and file.gz, when not older than the file (any age when the
// file is missing: meta is kMissing). Any such sibling makes the response depend on
// Accept-Encoding, whether or not this client takes it. Sets
// *selected and *selected_path to the sibling the client takes best, if any; a step when a
// sibling must be looked up first.
std::optional<PlanStep> SelectEncoding(const Request& req, const PlannerConfig& config,
                                       FileMetaSource& source, PlanScratch& scratch,
                                       std::string_view path, const FileMeta& meta,
                                       ResponsePlan* out, FileMeta* selected,
                                       std::string_view* selected_path) {
  if (!AsksForSiblings(config, path)) return std::nullopt;
  const AcceptedCodings accepted = ParseAcceptEncoding(req.accept_encoding);
  int best_q = 0;
  struct Candidate {
    std::string_view suffix, coding;
    int q;
  } candidates[] = {{kSiblingSuffixes[0], "br", accepted.br},
                    {kSiblingSuffixes[1], "gzip", accepted.gzip}};
  for (size_t i = 0; i < 2; ++i) {
    const Candidate& c = candidates[i];
    const std::string_view sibling_path =
        Join(scratch.sibling, sizeof scratch.sibling, path, c.suffix);
    if (sibling_path.empty()) break;
    const auto sibling = source.Lookup(sibling_path);
    if (!sibling) {
      PlanStep step = NeedLookup(sibling_path);
      PrefetchSiblings(path, i + 1, scratch, &step);  // those asked for after it
      return step;
    }
    if (sibling->kind != FileMeta::Kind::kRegular) continue;
    if (meta.kind == FileMeta::Kind::kRegular && sibling->mtime_sec < meta.mtime_sec) continue;
    out->vary_accept_encoding = true;
    if (c.q > best_q) {  // br first, so a tie keeps br
      best_q = c.q;
      *selected = *sibling;
      out->content_encoding = c.coding;
    }
  }
  if (!out->content_encoding.empty()) {
    const std::string_view suffix = out->content_encoding == "br" ? ".br" : ".gz";
    // scratch.sibling may hold the other candidate now; rebuild the winner in place.
    *selected_path = Join(scratch.sibling, sizeof scratch.sibling, path, suffix);
  }
  return std::nullopt;
}

// The selected file's body, validators and origin headers. The ETag and Last-Modified text is
// formatted into `scratch` once per file version.
void SetFileHeaders(const Request& req, const PlannerConfig& config, PlanScratch& scratch,
                    std::string_view path, const FileMeta& selected, std::string_view selected_path,
                    ResponsePlan* out) {
  out->file = selected;  // from here on, errors go through ErrorAfterSelect
  out->file_path = selected_path;
  if (scratch.etag_len == 0 || scratch.etag_mtime_sec != selected.mtime_sec ||
      scratch.etag_size != selected.size) {
    scratch.etag_len = FormatETag(selected.mtime_sec, selected.size, scratch.etag);
    scratch.etag_mtime_sec = selected.mtime_sec;
    scratch.etag_size = selected.size;
  }
  out->etag = std::string_view(scratch.etag, scratch.etag_len);
  if (!scratch.has_last_modified || scratch.last_modified_sec != selected.mtime_sec) {
    FormatHttpDate(selected.mtime_sec, scratch.last_modified);
    scratch.last_modified_sec = selected.mtime_sec;
    scratch.has_last_modified = true;
  }
  out->last_modified = std::string_view(scratch.last_modified, kHttpDateLen);
  out->content_length = selected.size;
  // Chosen by the path asked for (app.js), not the encoding served (app.js.gz); written out at
  // start-up, and kept for 304 (RFC 9110 section 15.4.5) as for 200 and 206.
  if (config.origin != nullptr) {
    out->cache_control = config.origin->CacheControlFor(path);
    out->added_headers = config.origin->added();
  }
  out->send_body = req.method != Method::kHead;
}

// The status for the selected file: 304 or 412 from the preconditions, else 200, or 206 (or 416)
// from a Range header that applies.
PlanStep PlanPreconditionsAndRanges(const Request& req, const PlannerConfig& config,
                                    FileMetaSource& source, const FileMeta& selected,
                                    ResponsePlan* out, bool ranges = true) {
  const Validators validators{out->etag, selected.mtime_sec};
  switch (EvaluatePreconditions(req, validators)) {
    case Precondition::kProceed:
      break;
    case Precondition::kNotModified:
      out->status = 304;
      out->send_body = false;
      out->file_path = {};
      out->inline_body = {};  // a variant's (the caller still holds it until the end)
      out->content_length = 0;
      out->reason = "not modified";
      return PlanStep{};
    case Precondition::kFailed:
      return ErrorAfterSelect(412, "precondition failed", req, config, source, out);
  }

  out->status = 200;
  out->reason = "ok";
  // RFC 9110 section 14.2: Range applies to GET only. A compressed variant is sent whole, as
  // nginx's gzip does (a range of bytes that exist only in one cache is not worth their cost).
  if (!ranges || req.method != Method::kGet || req.range.empty() ||
      !IfRangeAllows(req.if_range, validators))
    return PlanStep{};
  switch (ParseRange(req.range, selected.size, config.max_ranges, &out->ranges)) {
    case RangeOutcome::kIgnore:
      out->ranges.count = 0;
      break;
    case RangeOutcome::kUnsatisfiable:
      out->unsatisfied_length = selected.size;
      return ErrorAfterSelect(416, "range not satisfiable", req, config, source, out);
    case RangeOutcome::kSatisfiable:
      out->status = 206;
      out->reason = "partial";
      if (out->ranges.count == 1) {
        out->content_length = out->ranges.ranges[0].Length();
      } else {
        out->multipart = true;
        out->multipart_boundary = config.multipart_boundary;
        out->content_length = MultipartLayout(out->ranges, out->content_type, selected.size,
                                              config.multipart_boundary)
                                  .ContentLength();
      }
      break;
  }
  return PlanStep{};
}

// --compress, for a file no sibling serves this client: its compressed variant when one is
// ready, else the file as it is and the coding to make (compress_wanted). Either way the
// response varies on Accept-Encoding.
std::optional<PlanStep> PlanVariant(const Request& req, const PlannerConfig& config,
                                    FileMetaSource& source, PlanScratch& scratch,
                                    const FileMeta& selected, ResponsePlan* out) {
  out->vary_accept_encoding = true;
  const Coding coding = ChooseCoding(ParseAcceptEncoding(req.accept_encoding));
  if (coding == Coding::kIdentity) return std::nullopt;
  const std::string_view etag(
      scratch.variant_etag,
      FormatVariantETag(selected.mtime_sec, selected.size, coding, scratch.variant_etag));
  const std::optional<std::string_view> body = source.Variant(selected, coding);
  if (!body) {
    // A client revalidating the variant it holds is answered for it, made or not (its tag
    // comes from the file's validators alone): 304, with no bytes needed.
    if (req.if_none_match.empty() ||
        EvaluatePreconditions(req, {etag, selected.mtime_sec}) != Precondition::kNotModified) {
      out->compress_wanted = coding;
      return std::nullopt;
    }
  } else {
    out->file_path = {};  // the body is the variant's bytes, not the file's
    out->inline_body = *body;
    out->content_length = body->size();
  }
  out->variant = true;
  out->content_encoding = CodingName(coding);
  out->etag = etag;
  return PlanPreconditionsAndRanges(req, config, source, selected, out, /*ranges=*/false);
}

}  // namespace

std::string_view ReasonPhrase(int status) { return Info(status).reason; }

void PlanError(int status, bool keep_alive, ResponsePlan* out) {
  *out = ResponsePlan{};
  Request none;
  none.method = Method::kGet;
  if (status == kPlainHttpToHttps) {
    Page(400, "plain HTTP to HTTPS port", none, out);
    out->inline_body = kPlainHttpToHttpsPage;
    out->content_length = kPlainHttpToHttpsPage.size();
  } else {
    Page(status, "request error", none, out);
  }
  out->keep_alive = keep_alive;
}

void PlanError(int status, const Request& req, ResponsePlan* out) {
  *out = ResponsePlan{};
  out->keep_alive = req.keep_alive;
  out->http10 = req.version_minor == 0;
  Page(status, "request error", req, out);
}

PlanStep PlanResponse(const Request& req, const PlannerConfig& config, FileMetaSource& source,
                      PlanScratch& scratch, ResponsePlan* out) {
  StartPlan(req, out);
  if (std::optional<PlanStep> done = PlanBodyAndMethod(req, config, source, out)) return *done;
  if (config.redirect_to_https) return PlanHttpsRedirect(req, config, source, scratch, out);
  std::string_view path;
  FileMeta meta;
  if (std::optional<PlanStep> done = ResolveFile(req, config, source, scratch, out, &path, &meta)) {
    return *done;
  }
  out->content_type = config.mime != nullptr ? config.mime->ForPath(path)
                                             : std::string_view("application/octet-stream");
  FileMeta selected = meta;
  std::string_view selected_path = path;
  if (std::optional<PlanStep> done = SelectEncoding(req, config, source, scratch, path, meta, out,
                                                    &selected, &selected_path)) {
    return *done;
  }
  // A missing file with no sibling this client takes: 404, varying on Accept-Encoding when a
  // sibling exists (another client would get it).
  if (selected.kind != FileMeta::Kind::kRegular) {
    return FailedLookup(ErrorAfterSelect(404, "no such file", req, config, source, out), selected,
                        path, out);
  }
  SetFileHeaders(req, config, scratch, path, selected, selected_path, out);
  if (out->content_encoding.empty() && config.compress != nullptr &&
      config.compress->Compressible(out->content_type, selected.size)) {
    if (std::optional<PlanStep> done = PlanVariant(req, config, source, scratch, selected, out)) {
      return *done;
    }
  }
  return PlanPreconditionsAndRanges(req, config, source, selected, out);
}

size_t WriteResponseHead(const ResponsePlan& plan, std::string_view date,
                         std::string_view server_name, char* out, size_t cap) {
  size_t n = 0;
  char code[3] = {static_cast<char>('0' + plan.status / 100),
                  static_cast<char>('0' + plan.status / 10 % 10),
                  static_cast<char>('0' + plan.status % 10)};
  n = Put(out, n, cap, "HTTP/1.1 ");
  n = Put(out, n, cap, std::string_view(code, 3));
  n = Put(out, n, cap, " ");
  n = Put(out, n, cap, ReasonPhrase(plan.status));
  n = Put(out, n, cap, "\r\nServer: ");
  n = Put(out, n, cap, server_name);
  n = Put(out, n, cap, "\r\nDate: ");
  n = Put(out, n, cap, date);
  n = Put(out, n, cap, "\r\n");
  if (plan.status != 304) {
    if (plan.multipart) {
      n = Put(out, n, cap, "Content-Type: multipart/byteranges; boundary=");
      n = Put(out, n, cap, plan.multipart_boundary);
      n = Put(out, n, cap, "\r\n");
    } else if (!plan.content_type.empty()) {
      n = Put(out, n, cap, "Content-Type: ");
      n = Put(out, n, cap, plan.content_type);
      n = Put(out, n, cap, "\r\n");
    }
    if (!plan.streamed_body) {
      n = Put(out, n, cap, "Content-Length: ");
      n = PutUint(out, n, cap, plan.content_length);
      n = Put(out, n, cap, "\r\n");
    } else if (!plan.http10) {
      n = Put(out, n, cap, "Transfer-Encoding: chunked\r\n");
    }
  }
  if (!plan.last_modified.empty()) {
    n = Put(out, n, cap, "Last-Modified: ");
    n = Put(out, n, cap, plan.last_modified);
    n = Put(out, n, cap, "\r\n");
  }
  if (!plan.etag.empty()) {
    n = Put(out, n, cap, "ETag: ");
    n = Put(out, n, cap, plan.etag);
    n = Put(out, n, cap, "\r\n");
  }
  if (!plan.content_encoding.empty()) {
    n = Put(out, n, cap, "Content-Encoding: ");
    n = Put(out, n, cap, plan.content_encoding);
    n = Put(out, n, cap, "\r\n");
  }
  if (plan.vary_accept_encoding) n = Put(out, n, cap, "Vary: Accept-Encoding\r\n");
  if (plan.status == 206 && !plan.multipart) {
    const ByteRange& r = plan.ranges.ranges[0];
    n = Put(out, n, cap, "Content-Range: bytes ");
    n = PutUint(out, n, cap, r.first);
    n = Put(out, n, cap, "-");
    n = PutUint(out, n, cap, r.last);
    n = Put(out, n, cap, "/");
    n = PutUint(out, n, cap, plan.file.size);
    n = Put(out, n, cap, "\r\n");
  }
  if (plan.status == 416) {
    n = Put(out, n, cap, "Content-Range: bytes */");
    n = PutUint(out, n, cap, plan.unsatisfied_length);
    n = Put(out, n, cap, "\r\n");
  }
  if (plan.status == 200 || plan.status == 206) {
    if (!plan.file_path.empty()) n = Put(out, n, cap, "Accept-Ranges: bytes\r\n");
  }
  if (!plan.location.empty()) {
    n = Put(out, n, cap, "Location: ");
    n = Put(out, n, cap, plan.location);
    n = Put(out, n, cap, "\r\n");
  }
  if (plan.allow_header) n = Put(out, n, cap, "Allow: GET, HEAD, OPTIONS\r\n");
  if (plan.retry_after_s != 0) {
    n = Put(out, n, cap, "Retry-After: ");
    n = PutUint(out, n, cap, plan.retry_after_s);
    n = Put(out, n, cap, "\r\n");
  }
  n = Put(out, n, cap, plan.cache_control);
  n = Put(out, n, cap, plan.added_headers);
  // RFC 9112 section 9.6: "close" when this is the last response; an HTTP/1.0 client persists
  // only when told "keep-alive" (RFC 9112 Appendix C.2.2).
  if (!plan.keep_alive) {
    n = Put(out, n, cap, "Connection: close\r\n");
  } else if (plan.http10) {
    n = Put(out, n, cap, "Connection: keep-alive\r\n");
  }
  n = Put(out, n, cap, "\r\n");
  return n == SIZE_MAX ? 0 : n;
}

}  // namespace ringd::http
