// Response planning: from a parsed request and file metadata, decide the status, the headers and
// which bytes of which file to send (RFC 9110). Sans-IO: metadata comes from a FileMetaSource the
// caller implements; when it does not know a path yet, planning stops with kNeedLookup, the
// caller fetches the metadata (asynchronously, through its cache), and calls PlanResponse again.
//
//   PlanScratch scratch;  ResponsePlan plan;
//   PlanStep step = PlanResponse(req, config, meta_source, scratch, &plan);
//   if (step.status == PlanStatus::kNeedLookup) { fetch(step.lookup_path); retry later; }
//   size_t n = WriteResponseHead(plan, date, buf, sizeof buf);
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "server/http/compression.h"
#include "server/http/dir_listing.h"
#include "server/http/http_date.h"
#include "server/http/mime_types.h"
#include "server/http/origin_headers.h"
#include "server/http/range.h"
#include "server/http/request_parser.h"
#include "server/http/request_target.h"

namespace ringd::http {

struct FileMeta {
  // kUnavailable: the lookup failed for a passing reason (out of descriptors or memory): 503.
  enum class Kind : uint8_t { kMissing, kForbidden, kRegular, kDirectory, kOther, kUnavailable };
  Kind kind = Kind::kMissing;
  uint64_t size = 0;
  int64_t mtime_sec = 0;
  uint64_t inode = 0;
  uint64_t dev = 0;  // with inode, the file's identity
  int64_t mtime_nsec = 0;
  int error = 0;  // kMissing, kForbidden, kUnavailable: the open's errno (0: none known)
};

// A directory's listing (--autoindex), made for one request by the caller, off the planner.
// Status 200: its body is made and sent piece by piece by the caller (ResponsePlan::
// streamed_body), as long as it turns out; the plan says only how it is framed.
struct ListingResult {
  int status = 200;  // 200, or the error to answer: 403, 404, 500, 503
};

class FileMetaSource {
 public:
  virtual ~FileMetaSource() = default;
  // Metadata of `relative_path` beneath the document root ("." is the root itself), or nullopt
  // when it is not known yet. Must not block.
  virtual std::optional<FileMeta> Lookup(std::string_view relative_path) = 0;
  // The listing of the directory `relative_path` made for the request being planned, or nullopt
  // when none has been made yet (planning stops with kNeedListing). Only asked with
  // PlannerConfig::autoindex. Must not block.
  virtual std::optional<ListingResult> Listing(std::string_view relative_path) {
    (void)relative_path;
    return std::nullopt;
  }
  // --compress: the bytes of `meta`'s file compressed with `coding`, when a variant is cached
  // ready, else nullopt (the plan then asks for it in ResponsePlan::compress_wanted). The bytes
  // stay valid until the caller's response is done with them. Must not block.
  virtual std::optional<std::string_view> Variant(const FileMeta& meta, Coding coding) {
    (void)meta;
    (void)coding;
    return std::nullopt;
  }
};

struct PlannerConfig {
  TargetOptions target;
  const MimeTypes* mime = nullptr;
  std::string_view index_file = "index.html";
  // --fallback: a path beneath the root (relative, e.g. "index.html") served in place of a file
  // that does not exist, as nginx's `try_files $uri $uri/ /index.html`; empty: none. Only a
  // lookup that finds nothing falls back: hidden segments, forbidden files, directories without
  // an index and a trailing slash on a file keep their answers.
  std::string_view fallback;
  // --autoindex: a directory without an index file is answered with a listing of it (as nginx's
  // autoindex), in this format; off: 403.
  bool autoindex = false;
  ListingFormat autoindex_format = ListingFormat::kHtml;
  size_t max_ranges = 16;     // more ranges than this: 200 with the whole file
  bool precompressed = true;  // look for file.br and file.gz siblings
  // --compress: which files are compressed on the fly, when no sibling serves the client;
  // null: none is.
  const CompressPolicy* compress = nullptr;
  uint64_t max_discarded_body = 65536;  // a larger request body is refused with 413
  std::string_view multipart_boundary = "ringd-byteranges-0123456789";  // per process
  // Cache-Control, added headers and error pages (--cache-control, --add-header, --error-page);
  // null: none.
  const OriginHeaders* origin = nullptr;
  // --redirect-https: every GET and HEAD is answered 301 to the same target over HTTPS, on the
  // request's host with this port suffix (":8443", or empty for 443).
  bool redirect_to_https = false;
  std::string_view https_port_suffix;
};

// Caller-owned working space; the plan's string_views point into it.
struct PlanScratch {
  // The longest path a file can have (Linux's PATH_MAX, its NUL included): a target whose path
  // decodes to more names no file, and is 404 without asking the file system.
  static constexpr size_t kMaxPath = 4096;
  // The longest request target: whatever --max-request-line lets through (at most 65,536 bytes,
  // tied to the flag's ceiling in server/shard.h) is decoded here, never refused for its length.
  static constexpr size_t kMaxTarget = 65536;
  char target[kMaxTarget + 1];
  char file[kMaxPath + 64];         // the selected file's relative path
  char sibling[kMaxPath + 64];      // candidate .br / .gz paths
  char prefetch[2][kMaxPath + 64];  // PlanStep::prefetch's paths
  char location[3 * kMaxPath + 16];
  // The selected file's validators as header text, kept for the next plan: most requests ask
  // for a file whose (mtime, size) the last plan already formatted.
  char etag[40];
  char variant_etag[kMaxVariantETag];  // a compressed variant's (--compress)
  size_t etag_len = 0;
  int64_t etag_mtime_sec = 0;
  uint64_t etag_size = 0;
  char last_modified[kHttpDateLen];
  int64_t last_modified_sec = 0;
  bool has_last_modified = false;
};

struct ResponsePlan {
  int status = 500;
  bool keep_alive = false;    // the caller may clear it (max requests, shutdown)
  bool http10 = false;        // the request was HTTP/1.0: persisting needs saying so
  bool send_body = true;      // false for HEAD and 304: headers only
  uint64_t discard_body = 0;  // request body bytes to skip before the next request

  // The body comes from a file when `file_path` is set, else from `inline_body`.
  std::string_view file_path;    // relative to the root; "" when none
  FileMeta file;                 // the selected file's metadata
  std::string_view inline_body;  // static text (error pages)
  // Neither: the caller makes the body as it goes (a directory listing), of a length not known
  // up front. No Content-Length: HTTP/1.1 sends it chunked (RFC 9112 section 7.1), an HTTP/1.0
  // response ends with the connection (keep_alive is false), HTTP/2 ends it with END_STREAM.
  bool streamed_body = false;

  std::string_view content_type;
  std::string_view content_encoding;  // "gzip", "br", "zstd" or ""
  bool vary_accept_encoding = false;
  // --compress: the response is a compressed variant of `file`, with the variant's ETag: a 200
  // whose inline_body is the variant's bytes (which the caller holds until the response is
  // done), or a 304 for the variant's tag (made or not).
  bool variant = false;
  // --compress: the client takes this coding of the file, and no variant is ready: the file is
  // served as it is, and the caller has the variant made for the next request.
  Coding compress_wanted = Coding::kIdentity;
  // These two view the PlanScratch the plan was made with, as file_path and location may:
  // valid until its next plan (the shard writes the head straight after planning).
  std::string_view etag;
  std::string_view last_modified;  // the IMF-fixdate of file.mtime_sec, or empty
  uint64_t content_length = 0;     // what Content-Length says (also for HEAD)
  bool allow_header = false;       // 405 and OPTIONS: Allow: GET, HEAD, OPTIONS
  std::string_view location;       // 301
  uint32_t retry_after_s = 0;      // a Retry-After field when not 0 (a rate limit's refusal)
  // Precomputed header lines (OriginHeaders), written as they are: a "Cache-Control: ...\r\n"
  // line for a file's 200, 206 or 304, and the added headers of any 200, 206 or 304.
  std::string_view cache_control;
  std::string_view added_headers;

  // Ranges: count 0 means the whole file. One range is a plain 206; several, multipart.
  RangeSet ranges;
  bool multipart = false;
  uint64_t unsatisfied_length = 0;  // 416: Content-Range: bytes */<this>
  std::string_view multipart_boundary;

  const char* reason = "";  // why, for the access log and the error log
  // A 403, 404 or 503 decided by a lookup: the path it looked up (relative to the root; views the
  // PlanScratch or the configuration, as file_path) and the open's errno, for the error log.
  std::string_view failed_path;
  int failed_error = 0;
};

// kNeedListing: the caller lists the directory lookup_path (off the shard: it may block) and
// plans again once Listing answers for it.
// The bytes of the file a body that is not multipart sends: its one range, or the whole file.
struct FileSlice {
  uint64_t first = 0;
  uint64_t length = 0;
};
inline FileSlice BodySlice(const ResponsePlan& plan) {
  if (plan.ranges.count == 1) return {plan.ranges.ranges[0].first, plan.ranges.ranges[0].Length()};
  return {0, plan.file.size};
}

enum class PlanStatus : uint8_t { kReady, kNeedLookup, kNeedListing };

struct PlanStep {
  PlanStatus status = PlanStatus::kReady;
  // kNeedLookup: the path the caller must look up first; kNeedListing: the directory to list.
  std::string_view lookup_path;
  // kNeedLookup: paths the plan asks for next if lookup_path is a file (its .br and .gz
  // siblings, with --precompressed), which the caller may look up beside it: one wait for the
  // three instead of three waits in a row. Empty views where there are none.
  std::string_view prefetch[2];
  // kNeedListing: the directory's decoded URL path ("/pub/"), the listing's title.
  std::string_view listing_url_path;
};

PlanStep PlanResponse(const Request& req, const PlannerConfig& config, FileMetaSource& source,
                      PlanScratch& scratch, ResponsePlan* out);

// nginx's own status for a plaintext HTTP request sent to an HTTPS port (NGX_HTTP_TO_HTTPS):
// PlanError answers it 400, with a page that says so.
constexpr int kPlainHttpToHttps = 497;

// A plan for an error answered before (or instead of) a request: a parse error, a timeout,
// plaintext on an HTTPS port. Such errors close the connection unless `keep_alive` is set.
void PlanError(int status, bool keep_alive, ResponsePlan* out);
// An error answering a parsed request (a 503 when its file cannot be looked up): as above, and
// a HEAD request's answer has no body.
void PlanError(int status, const Request& req, ResponsePlan* out);

// The reason phrase for a status code ("Not Found").
std::string_view ReasonPhrase(int status);

// Writes the status line and header section, ending with the blank line. `date` is an
// IMF-fixdate (kHttpDateLen bytes). Returns the bytes written, or 0 if `cap` is too small.
size_t WriteResponseHead(const ResponsePlan& plan, std::string_view date,
                         std::string_view server_name, char* out, size_t cap);

}  // namespace ringd::http
