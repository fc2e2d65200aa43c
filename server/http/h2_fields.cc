// HTTP/2 request fields into a Request, and an HTTP/1.1 response head into HTTP/2 fields.
#include "server/http/h2_fields.h"

#include "server/http/decimal.h"
#include "server/http/text.h"

namespace ringd::http {

H2Field H2FieldOf(std::string_view name) {
  switch (name.size()) {
    case 4:
      if (name == "host") return H2Field::kHost;
      break;
    case 5:
      if (name == ":path") return H2Field::kPath;
      if (name == "range") return H2Field::kRange;
      break;
    case 7:
      if (name == ":method") return H2Field::kMethod;
      if (name == ":scheme") return H2Field::kScheme;
      if (name == "referer") return H2Field::kReferer;
      break;
    case 8:
      if (name == "if-match") return H2Field::kIfMatch;
      if (name == "if-range") return H2Field::kIfRange;
      break;
    case 10:
      if (name == ":authority") return H2Field::kAuthority;
      if (name == "user-agent") return H2Field::kUserAgent;
      break;
    case 13:
      if (name == "if-none-match") return H2Field::kIfNoneMatch;
      break;
    case 14:
      if (name == "content-length") return H2Field::kContentLength;
      break;
    case 15:
      if (name == "accept-encoding") return H2Field::kAcceptEncoding;
      break;
    case 17:
      if (name == "if-modified-since") return H2Field::kIfModifiedSince;
      break;
    case 19:
      if (name == "if-unmodified-since") return H2Field::kIfUnmodifiedSince;
      break;
  }
  return H2Field::kNone;
}

int BuildH2Request(const std::string_view (&values)[kH2FieldCount], Header* regular, Request* out) {
  const auto value = [&](H2Field f) { return values[static_cast<size_t>(f)]; };
  Request& req = *out;
  req = Request{};
  req.version_minor = 1;  // answered with HTTP/1.1's semantics (RFC 9110 section 6.2)
  req.keep_alive = true;  // a stream ends; the connection persists
  req.method_text = value(H2Field::kMethod);
  req.method = MethodFromText(req.method_text);
  // RFC 9113 section 8.3.1: :path is origin-form, or "*" for OPTIONS. (nghttp2 has checked that
  // it is present and not empty for every method but CONNECT.)
  req.target = value(H2Field::kPath);
  if (req.method == Method::kConnect) {
    req.target = value(H2Field::kAuthority);  // authority-form: answered 405 like HTTP/1.1's
  } else if (req.target.empty() || (req.target.front() != '/' && req.target != "*")) {
    return 400;
  }
  // Section 8.3.1: the authority is :authority when present, else Host.
  req.host =
      value(H2Field::kAuthority).empty() ? value(H2Field::kHost) : value(H2Field::kAuthority);
  if (!AllHostChars(req.host)) return 400;
  req.range = value(H2Field::kRange);
  req.if_match = value(H2Field::kIfMatch);
  req.if_none_match = value(H2Field::kIfNoneMatch);
  req.if_modified_since = value(H2Field::kIfModifiedSince);
  req.if_unmodified_since = value(H2Field::kIfUnmodifiedSince);
  req.if_range = value(H2Field::kIfRange);
  req.accept_encoding = value(H2Field::kAcceptEncoding);
  if (std::string_view cl = value(H2Field::kContentLength); !cl.empty()) {
    if (!ParseDecimal(cl, &req.content_length)) return 400;  // nghttp2 checks it against DATA
    if (req.content_length > 0) req.body = BodyFraming::kContentLength;
  }
  size_t n = 0;
  if (!value(H2Field::kReferer).empty()) regular[n++] = Header{"referer", value(H2Field::kReferer)};
  if (!value(H2Field::kUserAgent).empty())
    regular[n++] = Header{"user-agent", value(H2Field::kUserAgent)};
  req.headers = regular;
  req.num_headers = n;
  return 0;
}

size_t H2ResponseFields(char* head, size_t len, H2ResponseField* out, size_t cap) {
  const std::string_view text(head, len);
  // "HTTP/1.1 200 OK\r\n": the status is the three digits after the first space.
  if (cap == 0 || len < 14 || text.substr(0, 9) != "HTTP/1.1 ") return 0;
  size_t n = 0;
  out[n++] = H2ResponseField{":status", text.substr(9, 3)};
  size_t p = text.find("\r\n");
  if (p == std::string_view::npos) return 0;
  p += 2;
  while (p < len) {
    const size_t eol = text.find("\r\n", p);
    if (eol == std::string_view::npos) return 0;
    if (eol == p) return n;  // the blank line: the head ends
    const size_t colon = text.find(':', p);
    if (colon == std::string_view::npos || colon > eol) return 0;
    for (size_t i = p; i < colon; ++i) head[i] = AsciiLower(head[i]);
    const std::string_view name(head + p, colon - p);
    const std::string_view value = TrimOws(text.substr(colon + 1, eol - colon - 1));
    p = eol + 2;
    if (name == "connection" || name == "keep-alive" || name == "transfer-encoding") continue;
    if (n == cap) return 0;
    out[n++] = H2ResponseField{name, value};
  }
  return 0;  // no blank line
}

}  // namespace ringd::http
