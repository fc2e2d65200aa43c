// Fuzzes response planning past the parser: a request the real parser accepted, against a file
// state the input chooses (a file, its .br and .gz siblings, a directory's index, an error page:
// each missing, forbidden, regular, a directory, something else or unavailable, of any size and
// modification time) and a configuration. Planning must end after a bounded number of lookups,
// the plan must hold what RFC 9110 and response_plan.h say of it (status, framing, 304, 412,
// 416 and 206 only when their conditions hold, no body for HEAD, ranges inside the file), the
// written head must be well formed with no line the input could inject, and planning through a
// scratch a different plan used must give the same head.
//
// Input: setup lines, an empty line, then the request head (its blank line is added).
//   <role> <kind> <size> <mtime>   role: file, br, gz, index, page; kind: regular, dir, missing,
//                                  forbidden, other, unavailable (by first letter)
//   config <max_ranges> <max_discarded_body> <flags>   flags: see kFlag* below (with --compress
//                                  and its variants: 256, 512)
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "server/http/conditional.h"
#include "server/http/http_date.h"
#include "server/http/mime_types.h"
#include "server/http/origin_headers.h"
#include "server/http/range.h"
#include "server/http/request_parser.h"
#include "server/http/response_plan.h"
#include "tests/fuzz/fuzz_text.h"

namespace ringd::http {
namespace {

using fuzz::FuzzText;
using fuzz::TakeNumber;
using fuzz::TakeSigned;
using fuzz::TakeWord;

constexpr int64_t kMtime = 1445412480;  // Wed, 21 Oct 2015 07:28:00 GMT
constexpr std::string_view kErrorPage = "error.html";
constexpr std::string_view kFallback = "fallback.html";
constexpr std::string_view kBoundary = "ringd-0123456789abcdef";
// A shard writes a response head into a buffer this long (Exchange::kHeadBytes in
// server/core/shard.h) and answers 500 when it does not fit.
constexpr size_t kShardHeadBytes = 4096;

// config's flags.
constexpr uint64_t kFlagPrecompressed = 1;  // look for .br and .gz siblings
constexpr uint64_t kFlagDotFiles = 2;       // --serve-dot-files
constexpr uint64_t kFlagRedirectHttps = 4;  // --redirect-https (on port 8443)
constexpr uint64_t kFlagOrigin = 8;         // Cache-Control rules, added headers, error pages
constexpr uint64_t kFlagPrefetch = 16;      // the caller looks up the paths a step prefetches
constexpr uint64_t kFlagWarmBySize = 32;    // the other plan differs in sizes, not times
constexpr uint64_t kFlagFallback = 64;      // --fallback /fallback.html
constexpr uint64_t kFlagAutoindex = 128;    // --autoindex: directories without an index listed
constexpr uint64_t kFlagCompress = 256;     // --compress, for text/* of 10 bytes to 1 MB
constexpr uint64_t kFlagVariants = 512;     // every coding's variant is ready

enum Role { kFile, kBr, kGz, kIndex, kPage, kFallbackFile, kRoles };

// What the planner learns of a path depends on the path alone: its role by name.
Role RoleOf(std::string_view path) {
  if (path == kErrorPage) return kPage;
  if (path == kFallback) return kFallbackFile;
  if (path.ends_with(".br")) return kBr;
  if (path.ends_with(".gz")) return kGz;
  if (path.ends_with("index.html")) return kIndex;
  return kFile;
}

FileMeta::Kind KindOf(std::string_view word) {
  switch (word.empty() ? 'm' : word[0]) {
    case 'r':
      return FileMeta::Kind::kRegular;
    case 'd':
      return FileMeta::Kind::kDirectory;
    case 'f':
      return FileMeta::Kind::kForbidden;
    case 'o':
      return FileMeta::Kind::kOther;
    case 'u':
      return FileMeta::Kind::kUnavailable;
    default:
      return FileMeta::Kind::kMissing;
  }
}

// A pretend document root that, like the server's file cache, knows only the paths it has been
// asked to fetch (unless `all_known`).
class FuzzFiles : public FileMetaSource {
 public:
  FileMeta meta[kRoles];
  bool all_known = false;

  std::optional<FileMeta> Lookup(std::string_view path) override {
    if (!all_known && known_.count(std::string(path)) == 0) return std::nullopt;
    return meta[RoleOf(path)];
  }
  bool Known(std::string_view path) const { return known_.count(std::string(path)) != 0; }
  void Fetch(std::string_view path) { known_.emplace(path); }

  // --autoindex: every directory's listing, once started (or always, with `all_known`),
  // answers with `listing_status` (its body is streamed by the caller).
  int listing_status = 200;
  std::optional<ListingResult> Listing(std::string_view dir) override {
    if (listings_.count(std::string(dir)) == 0) {
      if (!all_known) return std::nullopt;
      listings_.emplace(dir);
    }
    return ListingResult{listing_status};
  }
  bool Listed(std::string_view dir) const { return listings_.count(std::string(dir)) != 0; }

  // --compress: a variant of every file in every coding, "variant <coding>", when `variants`.
  bool variants = false;
  std::optional<std::string_view> Variant(const FileMeta& meta, Coding coding) override {
    FUZZ_CHECK(meta.kind == FileMeta::Kind::kRegular && coding != Coding::kIdentity);
    if (!variants) return std::nullopt;
    static const std::string bodies[kCodings] = {"", "variant gzip", "variant br", "variant zstd"};
    return std::string_view(bodies[static_cast<int>(coding)]);
  }
  void MakeListing(std::string_view dir) { listings_.emplace(dir); }

 private:
  std::set<std::string> known_;
  std::set<std::string> listings_;
};

struct Setup {
  FuzzFiles files;
  PlannerConfig config;
  uint64_t flags = kFlagPrecompressed;
};

const MimeTypes& Mime() {
  static const MimeTypes* mime = new MimeTypes();
  return *mime;
}

const OriginHeaders& Origin() {
  static const OriginHeaders* origin = [] {
    auto* o = new OriginHeaders();
    std::string error;
    FUZZ_CHECK(o->AddCacheRule("*.css", "public, max-age=31536000, immutable", &error));
    FUZZ_CHECK(o->SetDefaultCacheControl("no-cache", &error));
    FUZZ_CHECK(o->AddHeader("X-Content-Type-Options", "nosniff", &error));
    for (int status : {400, 403, 404, 405, 412, 413, 414, 416, 501, 503}) {
      FUZZ_CHECK(o->SetErrorPage(status, kErrorPage, &error));
    }
    return o;
  }();
  return *origin;
}

const CompressPolicy& Policy() {
  static const CompressPolicy* policy = [] {
    auto* p = new CompressPolicy();
    std::string error;
    FUZZ_CHECK(p->ParseTypes("text/*", &error));
    p->min_bytes = 10;
    p->max_bytes = 1 << 20;
    return p;
  }();
  return *policy;
}

Setup ReadSetup(FuzzText* in) {
  Setup s;
  s.files.meta[kFile] = FileMeta{FileMeta::Kind::kRegular, 1000, kMtime, 1};
  while (!in->empty() && !in->EndOfSection()) {
    std::string_view line = in->Line();
    const std::string_view role = TakeWord(&line);
    if (role == "config") {
      s.config.max_ranges = TakeNumber(&line, 16);
      s.config.max_discarded_body = TakeNumber(&line, 65536);
      s.flags = TakeNumber(&line, kFlagPrecompressed);
      continue;
    }
    Role r;
    if (role == "file") {
      r = kFile;
    } else if (role == "br") {
      r = kBr;
    } else if (role == "gz") {
      r = kGz;
    } else if (role == "index") {
      r = kIndex;
    } else if (role == "page") {
      r = kPage;
    } else if (role == "fallback") {
      r = kFallbackFile;
    } else if (role == "listing") {
      // What a lister answers (ListingResult): 200, or one of the errors it can give; any
      // other number picks one of those.
      static constexpr int kListingStatuses[] = {200, 403, 404, 500, 503};
      const uint64_t n = TakeNumber(&line, 200);
      const bool known = std::find(std::begin(kListingStatuses), std::end(kListingStatuses), n) !=
                         std::end(kListingStatuses);
      s.files.listing_status = known ? static_cast<int>(n) : kListingStatuses[n % 5];
      continue;
    } else {
      continue;
    }
    FileMeta& m = s.files.meta[r];
    m.kind = KindOf(TakeWord(&line));
    m.size = TakeNumber(&line, 0) & INT64_MAX;  // st_size: a non-negative off_t
    m.mtime_sec = TakeSigned(&line, kMtime);
    m.inode = r + 1;
  }
  s.config.mime = &Mime();
  s.config.precompressed = (s.flags & kFlagPrecompressed) != 0;
  s.config.target.serve_dot_files = (s.flags & kFlagDotFiles) != 0;
  s.config.redirect_to_https = (s.flags & kFlagRedirectHttps) != 0;
  s.config.https_port_suffix = ":8443";
  if (s.flags & kFlagOrigin) s.config.origin = &Origin();
  if (s.flags & kFlagFallback) s.config.fallback = kFallback;
  s.config.autoindex = (s.flags & kFlagAutoindex) != 0;
  if (s.flags & kFlagCompress) s.config.compress = &Policy();
  s.files.variants = (s.flags & kFlagVariants) != 0;
  s.config.multipart_boundary = kBoundary;
  return s;
}

// Plans `req` as a shard does: looks up what the planner asks for, and plans again.
void Plan(const Request& req, const Setup& s, FuzzFiles& files, PlanScratch& scratch,
          ResponsePlan* plan) {
  for (int step_count = 0;; ++step_count) {
    // A directory, its index, the index's two siblings and an error page: five lookups at most
    // (a path, the fallback, its two siblings and an error page; a directory, its index, its
    // listing and an error page: fewer).
    FUZZ_CHECK(step_count <= 5);
    const PlanStep step = PlanResponse(req, s.config, files, scratch, plan);
    if (step.status == PlanStatus::kReady) return;
    if (step.status == PlanStatus::kNeedListing) {
      // Only with --autoindex, for a directory the request names (with its slash), once.
      FUZZ_CHECK(s.config.autoindex && !files.Listed(step.lookup_path));
      FUZZ_CHECK(step.listing_url_path.starts_with("/") && step.listing_url_path.ends_with("/"));
      files.MakeListing(step.lookup_path);
      continue;
    }
    // Each wait is for a path not known yet: else planning would never end.
    FUZZ_CHECK(!step.lookup_path.empty() && !files.Known(step.lookup_path));
    files.Fetch(step.lookup_path);
    for (std::string_view also : step.prefetch) {
      if (also.empty()) continue;
      FUZZ_CHECK(also.ends_with(".br") || also.ends_with(".gz"));
      if ((s.flags & kFlagPrefetch) && !files.Known(also)) files.Fetch(also);
    }
  }
}

std::string Head(const ResponsePlan& plan) {
  char date[kHttpDateLen];
  FormatHttpDate(kMtime + 100, date);
  static char buf[65536];
  const size_t n =
      WriteResponseHead(plan, std::string_view(date, kHttpDateLen), "ringd", buf, sizeof buf);
  FUZZ_CHECK(n > 0);
  // Only a 301's Location (from a long target) can make a head longer than a shard's buffer.
  if (n > kShardHeadBytes) FUZZ_CHECK(plan.status == 301);
  return std::string(buf, n);
}

bool IsErrorStatus(int status) { return status >= 400; }

// 500 only from a listing that failed (ListingResult).
bool ValidStatus(int status) {
  for (int s : {200, 206, 301, 304, 400, 403, 404, 405, 412, 413, 414, 416, 500, 501, 503}) {
    if (s == status) return true;
  }
  return false;
}

std::string_view HeaderValue(std::string_view head, std::string_view name) {
  const std::string key = "\r\n" + std::string(name) + ": ";
  const size_t at = head.find(key);
  if (at == std::string_view::npos) return {};
  const size_t start = at + key.size();
  return head.substr(start, head.find("\r\n", start) - start);
}

// The head is a status line and header lines, each "Name: value" with a name ringd writes (or
// the operator added) at most once, and no CR, LF or other control byte inside a line.
void CheckHeadSyntax(const ResponsePlan& plan, std::string_view head) {
  const std::string status_line = "HTTP/1.1 " + std::to_string(plan.status) + " " +
                                  std::string(ReasonPhrase(plan.status)) + "\r\n";
  FUZZ_CHECK(head.starts_with(status_line));
  FUZZ_CHECK(head.ends_with("\r\n\r\n"));
  static constexpr std::string_view kNames[] = {
      "Server",
      "Date",
      "Content-Type",
      "Content-Length",
      "Last-Modified",
      "ETag",
      "Content-Encoding",
      "Vary",
      "Content-Range",
      "Accept-Ranges",
      "Location",
      "Allow",
      "Cache-Control",
      "Connection",
      "X-Content-Type-Options",
      "Transfer-Encoding",
  };
  int seen[std::size(kNames)] = {};
  std::string_view rest = head.substr(status_line.size(), head.size() - status_line.size() - 2);
  while (!rest.empty()) {
    const size_t end = rest.find("\r\n");
    FUZZ_CHECK(end != std::string_view::npos);
    const std::string_view line = rest.substr(0, end);
    rest.remove_prefix(end + 2);
    const size_t colon = line.find(": ");
    FUZZ_CHECK(colon != std::string_view::npos);
    const std::string_view name = line.substr(0, colon);
    FUZZ_CHECK(IsToken(name));
    for (char ch : line.substr(colon + 2)) {
      const unsigned char c = static_cast<unsigned char>(ch);
      FUZZ_CHECK((c >= 0x20 || c == '\t') && c != 0x7f);
    }
    size_t i = 0;
    while (i < std::size(kNames) && kNames[i] != name) ++i;
    FUZZ_CHECK(i < std::size(kNames));
    FUZZ_CHECK(++seen[i] == 1);
  }
  const std::string_view length = HeaderValue(head, "Content-Length");
  // A streamed body (a listing) has no length: chunked over HTTP/1.1, ended by the close over
  // HTTP/1.0.
  FUZZ_CHECK(length.empty() == (plan.status == 304 || plan.streamed_body));
  if (!length.empty()) FUZZ_CHECK(length == std::to_string(plan.content_length));
  const std::string_view coding = HeaderValue(head, "Transfer-Encoding");
  FUZZ_CHECK(coding == (plan.streamed_body && !plan.http10 ? "chunked" : ""));
  if (plan.streamed_body && plan.http10) FUZZ_CHECK(!plan.keep_alive);
  const std::string_view range = HeaderValue(head, "Content-Range");
  if (plan.status == 416) {
    FUZZ_CHECK(range == "bytes */" + std::to_string(plan.unsatisfied_length));
  } else if (plan.status == 206 && !plan.multipart) {
    const ByteRange& r = plan.ranges.ranges[0];
    FUZZ_CHECK(range == "bytes " + std::to_string(r.first) + "-" + std::to_string(r.last) + "/" +
                            std::to_string(plan.file.size));
  } else {
    FUZZ_CHECK(range.empty());
  }
  const std::string_view type = HeaderValue(head, "Content-Type");
  FUZZ_CHECK(type.starts_with("multipart/byteranges; boundary=") == plan.multipart);
}

// What body_send.cc sends for a multipart plan: each part's head and slice, then the tail.
uint64_t MultipartBytes(const ResponsePlan& plan) {
  const MultipartLayout layout(plan.ranges, plan.content_type, plan.file.size,
                               plan.multipart_boundary);
  char buf[1024];
  uint64_t total = 0;
  for (size_t i = 0; i < plan.ranges.count; ++i) {
    const size_t n = layout.PartHead(i, buf);
    FUZZ_CHECK(n <= MultipartLayout::kMaxPartHead);
    total += n + plan.ranges.ranges[i].Length();
  }
  const size_t tail = layout.Tail(buf);
  FUZZ_CHECK(tail <= MultipartLayout::kMaxBoundary + 8);
  return total + tail;
}

// The status is one ringd sends, HEAD has no body, and the framing holds: one body source, and
// Content-Length is what it holds.
void CheckStatusAndFraming(const Request& req, const PlannerConfig& config,
                           const ResponsePlan& plan) {
  FUZZ_CHECK(ValidStatus(plan.status));
  if (req.method == Method::kHead) FUZZ_CHECK(!plan.send_body);

  FUZZ_CHECK(plan.inline_body.empty() || plan.file_path.empty());
  if (!plan.inline_body.empty()) FUZZ_CHECK(plan.content_length == plan.inline_body.size());
  if (!plan.file_path.empty()) {
    FUZZ_CHECK(plan.file.kind == FileMeta::Kind::kRegular);
    FUZZ_CHECK(plan.status == 200 || plan.status == 206 || IsErrorStatus(plan.status));
    if (IsErrorStatus(plan.status)) {
      FUZZ_CHECK(plan.file_path == kErrorPage && config.origin != nullptr);
    }
  }
  if (plan.inline_body.empty() && plan.file_path.empty()) FUZZ_CHECK(plan.content_length == 0);
  // A 200 from memory is a listing, under --autoindex, and only for a directory's target; or a
  // compressed variant (--compress) of a file no sibling serves the client, sent whole.
  if (plan.variant) {
    FUZZ_CHECK(config.compress != nullptr && plan.vary_accept_encoding);
    FUZZ_CHECK(plan.status == 200 || plan.status == 304);
    FUZZ_CHECK(plan.file.kind == FileMeta::Kind::kRegular && plan.file_path.empty());
    FUZZ_CHECK(config.compress->Compressible(plan.content_type, plan.file.size));
    if (plan.status == 200) {
      FUZZ_CHECK(plan.inline_body == "variant " + std::string(plan.content_encoding));
    }
    FUZZ_CHECK(plan.compress_wanted == Coding::kIdentity);
  } else if (plan.streamed_body) {
    // A streamed 200 is a listing, under --autoindex, and only for a directory's target; nothing
    // else is streamed.
    FUZZ_CHECK(plan.status == 200 && config.autoindex && plan.inline_body.empty() &&
               plan.file_path.empty());
    FUZZ_CHECK(plan.content_type == ListingContentType(config.autoindex_format));
  }
  if (plan.status != 206) FUZZ_CHECK(plan.ranges.count == 0 && !plan.multipart);
  if (plan.status == 200 && !plan.file_path.empty()) {
    FUZZ_CHECK(plan.content_length == plan.file.size);
  }
  if (IsErrorStatus(plan.status) && !plan.file_path.empty()) {
    FUZZ_CHECK(plan.content_length == plan.file.size);  // an error page goes whole
  }
}

// A file's 200, 206 or 304: the answers that carry validators and origin headers.
bool IsFileAnswer(const ResponsePlan& plan) {
  return plan.status == 206 || plan.status == 304 ||
         (plan.status == 200 && (!plan.file_path.empty() || plan.variant));
}

// Validators and origin headers belong to a file's 200, 206 and 304 only; a Content-Encoding
// names the sibling sent, for a request that accepts encodings.
void CheckOriginHeadersAndEncoding(const Request& req, const PlannerConfig& config,
                                   const ResponsePlan& plan) {
  if (!IsFileAnswer(plan)) {
    FUZZ_CHECK(plan.etag.empty() && plan.last_modified.empty() && plan.cache_control.empty());
    FUZZ_CHECK(plan.content_encoding.empty());
    // OPTIONS and a listing carry the added headers too.
    if (!(plan.status == 200 && (req.method == Method::kOptions || plan.streamed_body))) {
      FUZZ_CHECK(plan.added_headers.empty());
    }
  }
  if (plan.vary_accept_encoding) FUZZ_CHECK(config.precompressed || config.compress != nullptr);
  if (plan.content_encoding == "br")
    FUZZ_CHECK(plan.status == 304 || plan.variant || plan.file_path.ends_with(".br"));
  if (plan.content_encoding == "gzip")
    FUZZ_CHECK(plan.status == 304 || plan.variant || plan.file_path.ends_with(".gz"));
  if (plan.content_encoding == "zstd") FUZZ_CHECK(plan.variant);
  if (!plan.content_encoding.empty()) FUZZ_CHECK(!req.accept_encoding.empty());
  // A coding to make only for a file sent as it is, to a client that takes that coding.
  if (plan.compress_wanted != Coding::kIdentity) {
    FUZZ_CHECK(config.compress != nullptr && !plan.variant && plan.content_encoding.empty());
    FUZZ_CHECK(plan.vary_accept_encoding && plan.file.kind == FileMeta::Kind::kRegular);
    FUZZ_CHECK(ChooseCoding(ParseAcceptEncoding(req.accept_encoding)) == plan.compress_wanted);
  }
}

// RFC 9110 section 14.2: a Range header applies to a GET whose If-Range allows it. A file's 200
// or 206 is a 206 exactly when the range, parsed again, is satisfiable, with the same ranges.
void CheckRangeApplied(const Request& req, const PlannerConfig& config, const ResponsePlan& plan,
                       const Validators& validators) {
  const bool range_applies =
      req.method == Method::kGet && !req.range.empty() && IfRangeAllows(req.if_range, validators);
  RangeSet again;
  const RangeOutcome outcome =
      range_applies ? ParseRange(req.range, plan.file.size, config.max_ranges, &again)
                    : RangeOutcome::kIgnore;
  FUZZ_CHECK(outcome != RangeOutcome::kUnsatisfiable);  // that is a 416
  FUZZ_CHECK((plan.status == 206) == (outcome == RangeOutcome::kSatisfiable));
  if (plan.status == 206) {
    FUZZ_CHECK(again.count == plan.ranges.count);
    for (size_t i = 0; i < again.count; ++i) {
      FUZZ_CHECK(again.ranges[i].first == plan.ranges.ranges[i].first);
      FUZZ_CHECK(again.ranges[i].last == plan.ranges.ranges[i].last);
    }
  }
}

// A file's 200, 206 or 304: its ETag and Last-Modified are the file's, and the request's
// preconditions and range agree with the status.
void CheckFileAnswer(const Request& req, const PlannerConfig& config, const ResponsePlan& plan) {
  const bool get_or_head = req.method == Method::kGet || req.method == Method::kHead;
  FUZZ_CHECK(get_or_head && !config.redirect_to_https);
  char etag[kMaxVariantETag];
  if (plan.variant) {  // weak, and the coding's
    FUZZ_CHECK(
        plan.etag ==
        std::string_view(
            etag, FormatVariantETag(plan.file.mtime_sec, plan.file.size,
                                    ChooseCoding(ParseAcceptEncoding(req.accept_encoding)), etag)));
  } else {
    FUZZ_CHECK(plan.etag ==
               std::string_view(etag, FormatETag(plan.file.mtime_sec, plan.file.size, etag)));
  }
  char date[kHttpDateLen];
  FormatHttpDate(plan.file.mtime_sec, date);
  FUZZ_CHECK(plan.last_modified == std::string_view(date, kHttpDateLen));
  const Validators validators{plan.etag, plan.file.mtime_sec};
  const Precondition pre = EvaluatePreconditions(req, validators);
  if (plan.status == 304) {
    FUZZ_CHECK(pre == Precondition::kNotModified);
    FUZZ_CHECK(!plan.send_body && plan.content_length == 0 && plan.file_path.empty());
  } else {
    FUZZ_CHECK(pre == Precondition::kProceed);
    if (plan.variant) {
      FUZZ_CHECK(plan.status == 200 && plan.ranges.count == 0);  // a variant goes whole
    } else {
      CheckRangeApplied(req, config, plan, validators);
    }
  }
}

// 412 and 416 only when their conditions hold; a 206's ranges are ordered, apart, inside the
// file and no more than allowed, and its length is what the body sends.
void CheckFailedConditionsAndRanges(const Request& req, const PlannerConfig& config,
                                    const ResponsePlan& plan) {
  if (plan.status == 412) {
    FUZZ_CHECK(!req.if_match.empty() || !req.if_unmodified_since.empty());
  }
  if (plan.status == 416) {
    FUZZ_CHECK(req.method == Method::kGet && !req.range.empty());
    RangeSet again;
    FUZZ_CHECK(ParseRange(req.range, plan.unsatisfied_length, config.max_ranges, &again) ==
               RangeOutcome::kUnsatisfiable);
  }

  if (plan.status == 206) {
    FUZZ_CHECK(req.method == Method::kGet && plan.send_body);
    const RangeSet& set = plan.ranges;
    FUZZ_CHECK(set.count >= 1 && set.count <= std::min(config.max_ranges, RangeSet::kCapacity));
    for (size_t i = 0; i < set.count; ++i) {
      FUZZ_CHECK(set.ranges[i].first <= set.ranges[i].last);
      FUZZ_CHECK(set.ranges[i].last < plan.file.size);  // no byte beyond the file
      if (i > 0) FUZZ_CHECK(set.ranges[i - 1].last + 1 < set.ranges[i].first);
    }
    if (set.count == 1) {
      FUZZ_CHECK(!plan.multipart && plan.content_length == set.ranges[0].Length());
    } else {
      FUZZ_CHECK(plan.multipart && plan.multipart_boundary == config.multipart_boundary);
      FUZZ_CHECK(plan.content_length == MultipartBytes(plan));
    }
  }
}

// A Location only on a 301, local or https, with no space or control byte; OPTIONS is 200, 400
// (a target that is neither a path nor "*") or 413.
void CheckRedirectAndOptions(const Request& req, const ResponsePlan& plan) {
  if (plan.status == 301) {
    FUZZ_CHECK(!plan.location.empty());
    FUZZ_CHECK(plan.location.front() == '/' || plan.location.starts_with("https://"));
    for (char ch : plan.location) {
      const unsigned char c = static_cast<unsigned char>(ch);
      FUZZ_CHECK(c > 0x20 && c != 0x7f);
    }
  } else {
    FUZZ_CHECK(plan.location.empty());
  }
  if (req.method == Method::kOptions) {
    FUZZ_CHECK(plan.status == 200 || plan.status == 400 || plan.status == 413);
  }
}

// Connection: what the request allows, closed after the errors that leave it in doubt.
void CheckConnection(const Request& req, const PlannerConfig& config, const ResponsePlan& plan) {
  if (!req.keep_alive || req.body == BodyFraming::kChunked) FUZZ_CHECK(!plan.keep_alive);
  for (int s : {400, 413, 414, 500, 501, 503}) {
    if (plan.status == s) FUZZ_CHECK(!plan.keep_alive);
  }
  if (plan.keep_alive) FUZZ_CHECK(plan.discard_body == req.content_length);
  FUZZ_CHECK(plan.discard_body <= config.max_discarded_body);
  FUZZ_CHECK(plan.http10 == (req.version_minor == 0));
}

// Every check of the plan itself, in groups; the written head is CheckHeadSyntax's.
void CheckPlan(const Request& req, const Setup& s, const ResponsePlan& plan) {
  const PlannerConfig& config = s.config;
  CheckStatusAndFraming(req, config, plan);
  CheckOriginHeadersAndEncoding(req, config, plan);
  if (IsFileAnswer(plan)) CheckFileAnswer(req, config, plan);
  CheckFailedConditionsAndRanges(req, config, plan);
  CheckRedirectAndOptions(req, plan);
  CheckConnection(req, config, plan);
}

int FuzzOne(const uint8_t* data, size_t size) {
  FuzzText in(data, size);
  Setup s = ReadSetup(&in);
  const std::string text = std::string(in.Rest()) + "\r\n\r\n";
  Header headers[64];
  Request req;
  if (ParseRequest(text, 0, ParserLimits{}, headers, 64, &req).status != ParseStatus::kDone) {
    return 0;
  }

  const auto fresh = std::make_unique<PlanScratch>();
  ResponsePlan plan;
  Plan(req, s, s.files, *fresh, &plan);
  CheckPlan(req, s, plan);
  const std::string head = Head(plan);
  CheckHeadSyntax(plan, head);

  // The same request through a scratch another plan used, for files of other sizes or times
  // (what a shard's scratch holds from its last request), gives the same head.
  Setup other = s;
  other.files.all_known = true;
  for (FileMeta& m : other.files.meta) {
    if (s.flags & kFlagWarmBySize) {
      m.size = (m.size + 1) & INT64_MAX;
    } else {
      m.mtime_sec = static_cast<int64_t>(static_cast<uint64_t>(m.mtime_sec) + 1);
    }
  }
  const auto used = std::make_unique<PlanScratch>();
  ResponsePlan other_plan;
  Plan(req, other, other.files, *used, &other_plan);
  ResponsePlan again;
  Plan(req, s, s.files, *used, &again);
  FUZZ_CHECK(Head(again) == head);
  return 0;
}

}  // namespace
}  // namespace ringd::http

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ringd::http::FuzzOne(data, size);
}
