// An incremental, allocation-free HTTP/1.1 request-head parser (RFC 9112 sections 2-3, 5-6).
//
// The caller keeps the bytes received so far in one buffer and calls ParseRequest again after
// each read, passing how many of them it had already offered (`prev_len`), so the end-of-head
// search resumes where it stopped. Headers land in an array the caller owns; every string_view
// in the result points into the caller's buffer.
//
//   Header headers[64];
//   Request req;
//   ParseResult r = ParseRequest(buf, prev_len, ParserLimits{}, headers, 64, &req);
//   if (r.status == ParseStatus::kDone) { /* serve req, then drop r.consumed bytes */ }
//   if (r.status == ParseStatus::kError) { /* answer r.error_status, then close */ }
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ringd::http {

enum class Method : uint8_t {
  kGet,
  kHead,
  kOptions,
  kPost,
  kPut,
  kDelete,
  kPatch,
  kTrace,
  kConnect,
  kUnknown,  // a syntactically valid token we do not implement (answered 501)
};

struct Header {
  std::string_view name;
  std::string_view value;
};

// How the request says its body is framed (RFC 9112 section 6.3).
enum class BodyFraming : uint8_t { kNone, kContentLength, kChunked };

struct Request {
  Method method = Method::kUnknown;
  std::string_view method_text;
  std::string_view target;  // raw, still percent-encoded
  int version_minor = 1;    // HTTP/1.0 or HTTP/1.1 (1.x with x > 1 is treated as 1.1)
  const Header* headers = nullptr;
  size_t num_headers = 0;

  // Derived from the headers while parsing, so later stages need not search for them.
  std::string_view host;
  bool keep_alive = true;  // RFC 9112 section 9.3: 1.1 persists unless "close"; 1.0 only on request
  BodyFraming body = BodyFraming::kNone;
  uint64_t content_length = 0;
  std::string_view if_match, if_none_match, if_modified_since, if_unmodified_since, if_range;
  std::string_view range, accept_encoding;

  // The value of the first header named `name` (case-insensitive), or an empty view.
  std::string_view Find(std::string_view name) const;
};

// Empty lines before a request line are skipped (RFC 9112 section 2.2), up to this many bytes;
// more is 400. A buffer holding a partial head may hold these too, beyond max_head_bytes.
constexpr size_t kMaxLeadingEmptyBytes = 8;

struct ParserLimits {
  size_t max_request_line = 8192;  // longer: 414
  size_t max_head_bytes = 16384;   // request line + header section; larger: 431
  size_t max_headers = 64;         // more fields: 431 (also capped by the caller's array)
};

enum class ParseStatus : uint8_t { kNeedMore, kDone, kError };

struct ParseResult {
  ParseStatus status = ParseStatus::kNeedMore;
  size_t consumed = 0;            // kDone: bytes of the request head, including the blank line
  int error_status = 0;           // kError: the status to answer (400, 414, 431, 501, 505)
  const char* error_reason = "";  // kError: a short text for logs
  // Every parse error closes the connection: once framing is in doubt, nothing after it can be
  // trusted as a request.
};

// The method a token names (case-sensitive, RFC 9110 section 9.1); kUnknown for any other.
Method MethodFromText(std::string_view text);

ParseResult ParseRequest(std::string_view buf, size_t prev_len, const ParserLimits& limits,
                         Header* headers, size_t headers_cap, Request* out);

}  // namespace ringd::http
