// HTTP/2 requests and responses as the HTTP core sees them (RFC 9113 section 8). A stream's
// decoded header fields become the same Request an HTTP/1.1 head parses into, so the planner,
// ranges, conditionals and the log never learn which protocol asked; and the response head
// WriteResponseHead writes for HTTP/1.1 becomes the field list of a HEADERS frame, so both
// protocols carry the same fields. Sans-IO: nghttp2 (server/core/h2_connection.cc) frames them.
//
//   std::string_view kept[kH2FieldCount];            // values of the fields H2FieldOf names
//   Header regular[kH2FieldCount];  Request req;
//   if (int status = BuildH2Request(kept, regular, &req)) { /* answer status */ }
//
//   H2ResponseField out[kMaxH2ResponseFields];
//   size_t n = H2ResponseFields(head, head_len, out, kMaxH2ResponseFields);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/http/request_parser.h"

namespace ringd::http {

// The request fields the server reads; every other field is decoded and dropped.
enum class H2Field : uint8_t {
  kMethod,
  kPath,
  kScheme,
  kAuthority,
  kHost,
  kRange,
  kIfMatch,
  kIfNoneMatch,
  kIfModifiedSince,
  kIfUnmodifiedSince,
  kIfRange,
  kAcceptEncoding,
  kContentLength,
  kReferer,
  kUserAgent,
  kNone,  // a field the server does not read
};
constexpr size_t kH2FieldCount = static_cast<size_t>(H2Field::kNone);

// Which kept field a decoded name is. Names arrive lowercase (nghttp2 refuses others: RFC 9113
// section 8.2.1).
H2Field H2FieldOf(std::string_view name);

// Builds `out` from the kept fields' values (empty: absent); views point into `values`.
// `regular` (kH2FieldCount entries) receives the fields Request::Find is asked for (Referer,
// User-Agent). Returns 0, or the status that answers a request the planner must not see:
// 400 for a :path that is not origin-form or "*" (RFC 9113 section 8.3.1), a :authority or
// Host with characters no host has, a Content-Length that is not a number.
int BuildH2Request(const std::string_view (&values)[kH2FieldCount], Header* regular, Request* out);

struct H2ResponseField {
  std::string_view name;
  std::string_view value;
};
// The status, the dozen fields WriteResponseHead writes of its own, and fifty of the operator's
// added headers; a head with more is answered 500, as one too long for its buffer is.
constexpr size_t kMaxH2ResponseFields = 64;

// Turns an HTTP/1.1 response head (status line, fields, blank line) into HTTP/2 fields: first
// ":status", then every field but the connection-specific ones (Connection, Keep-Alive,
// Transfer-Encoding: RFC 9113 section 8.2.2), names lowercased in place in `head`. Returns the
// fields written, or 0 if `head` is not such a head or has more fields than `cap`.
size_t H2ResponseFields(char* head, size_t len, H2ResponseField* out, size_t cap);

}  // namespace ringd::http
