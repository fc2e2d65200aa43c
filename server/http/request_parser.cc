#include "server/http/request_parser.h"

#include <array>
#include <cstring>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "server/http/decimal.h"
#include "server/http/text.h"

namespace ringd::http {
namespace {

// tchar (RFC 9110 section 5.6.2).
constexpr std::array<bool, 256> kToken = AlnumPlus("!#$%&'*+-.^_`|~");

// field-vchar, SP and HTAB: what a field value may hold (RFC 9110 section 5.5; obs-text allowed).
constexpr std::array<bool, 256> MakeValueTable() {
  std::array<bool, 256> t{};
  t['\t'] = true;
  for (int c = 0x20; c < 0x7f; ++c) t[c] = true;
  for (int c = 0x80; c < 0x100; ++c) t[c] = true;
  return t;
}
constexpr std::array<bool, 256> kValueChar = MakeValueTable();

inline unsigned char U(char c) { return static_cast<unsigned char>(c); }

// Returns the index of the first byte at or after `i` that may not appear in a field value
// (a control character other than HTAB, or DEL); a well-formed line stops at its CR or LF.
// Sixteen bytes at a time where the buffer allows: header values are most of a request's bytes.
size_t FindValueEnd(std::string_view s, size_t i) {
#ifdef __SSE2__
  const __m128i tab = _mm_set1_epi8('\t'), max_ctl = _mm_set1_epi8(0x1f), del = _mm_set1_epi8(0x7f);
  while (i + 16 <= s.size()) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.data() + i));
    const __m128i ctl = _mm_cmpeq_epi8(_mm_min_epu8(v, max_ctl), v);  // v <= 0x1f, unsigned
    const __m128i bad =
        _mm_or_si128(_mm_andnot_si128(_mm_cmpeq_epi8(v, tab), ctl), _mm_cmpeq_epi8(v, del));
    const int mask = _mm_movemask_epi8(bad);
    if (mask != 0) return i + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(mask)));
    i += 16;
  }
#endif
  while (i < s.size() && kValueChar[U(s[i])]) ++i;
  return i;
}

// Compares a field name with a lowercase literal made of letters and '-'. OR-ing 0x20 folds
// ASCII case; no other tchar folds onto a letter or '-', so this is exact for such literals.
inline bool NameIs(std::string_view name, std::string_view lower) {
  if (name.size() != lower.size()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if ((name[i] | 0x20) != lower[i]) return false;
  }
  return true;
}

ParseResult Error(int status, const char* reason) {
  ParseResult r;
  r.status = ParseStatus::kError;
  r.error_status = status;
  r.error_reason = reason;
  return r;
}

// Finds the end of the head: the index just past the blank line, or npos.
size_t FindHeadEnd(std::string_view buf, size_t from) {
  for (size_t i = from; i < buf.size(); ++i) {
    const void* nl = std::memchr(buf.data() + i, '\n', buf.size() - i);
    if (nl == nullptr) return std::string_view::npos;
    i = static_cast<size_t>(static_cast<const char*>(nl) - buf.data());
    if (i + 1 < buf.size() && buf[i + 1] == '\n') return i + 2;
    if (i + 2 < buf.size() && buf[i + 1] == '\r' && buf[i + 2] == '\n') return i + 3;
  }
  return std::string_view::npos;
}

// Consumes a line ending at `p` ("\r\n" or a bare "\n"). A bare CR is an error.
bool EatEol(std::string_view head, size_t& p) {
  if (p < head.size() && head[p] == '\r')
    ++p;
  else if (p < head.size() && head[p] != '\n')
    return false;
  if (p >= head.size() || head[p] != '\n') return false;
  ++p;
  return true;
}

}  // namespace

Method MethodFromText(std::string_view m) {
  switch (m.size()) {
    case 3:
      if (m == "GET") return Method::kGet;
      if (m == "PUT") return Method::kPut;
      break;
    case 4:
      if (m == "HEAD") return Method::kHead;
      if (m == "POST") return Method::kPost;
      break;
    case 5:
      if (m == "PATCH") return Method::kPatch;
      if (m == "TRACE") return Method::kTrace;
      break;
    case 6:
      if (m == "DELETE") return Method::kDelete;
      break;
    case 7:
      if (m == "OPTIONS") return Method::kOptions;
      if (m == "CONNECT") return Method::kConnect;
      break;
  }
  return Method::kUnknown;
}

std::string_view Request::Find(std::string_view name) const {
  for (size_t i = 0; i < num_headers; ++i) {
    if (EqualsIgnoreCase(headers[i].name, name)) return headers[i].value;
  }
  return {};
}

namespace {

// What the header section says about framing and the connection, gathered field by field.
struct FieldScan {
  int host_count = 0;
  bool has_content_length = false, has_transfer_encoding = false, saw_chunked = false;
  bool te_unsupported = false, te_bad = false, cl_bad = false;
  bool conn_close = false, conn_keep_alive = false;
  uint64_t content_length = 0;
};

// request-line = method SP request-target SP HTTP-version (RFC 9112 section 3), from head[*p];
// *p ends past its line ending. False with *err set.
bool ParseRequestLine(std::string_view head, size_t* p, const ParserLimits& limits, Request* req,
                      ParseResult* err) {
  const auto fail = [err](int status, const char* reason) {
    *err = Error(status, reason);
    return false;
  };
  const size_t line_start = *p;
  size_t i = line_start;
  while (i < head.size() && kToken[U(head[i])]) ++i;
  if (i == line_start || i >= head.size() || head[i] != ' ') return fail(400, "bad method");
  req->method_text = head.substr(line_start, i - line_start);
  req->method = MethodFromText(req->method_text);
  const size_t target_start = ++i;
  while (i < head.size() && U(head[i]) > 0x20 && head[i] != 0x7f) ++i;
  if (i == target_start || i >= head.size() || head[i] != ' ') {
    return fail(400, "bad request target");
  }
  req->target = head.substr(target_start, i - target_start);
  ++i;
  if (head.substr(i, 5) != "HTTP/" || i + 8 > head.size() || head[i + 5] < '0' ||
      head[i + 5] > '9' || head[i + 6] != '.' || head[i + 7] < '0' || head[i + 7] > '9') {
    return fail(400, "bad HTTP version");
  }
  const int major = head[i + 5] - '0';
  req->version_minor = head[i + 7] - '0';
  i += 8;
  const size_t line_len = i - line_start;
  if (!EatEol(head, i)) return fail(400, "bad request line ending");
  if (line_len > limits.max_request_line) return fail(414, "request line too long");
  if (major != 1) return fail(505, "unsupported HTTP version");
  if (req->version_minor > 1) req->version_minor = 1;  // RFC 9110 section 6.2: answer as 1.1
  *p = i;
  return true;
}

// A field the server reads, into `req` or `scan`; only names whose length matches are compared,
// so most fields cost one switch. False with *err set (a bad Host).
bool NoteField(std::string_view name, std::string_view value, Request* req, FieldScan* scan,
               ParseResult* err) {
  switch (name.size()) {
    case 4:
      if (NameIs(name, "host")) {
        ++scan->host_count;
        req->host = value;
        if (!AllHostChars(value)) {
          *err = Error(400, "bad Host");
          return false;
        }
      }
      break;
    case 5:
      if (NameIs(name, "range") && req->range.empty()) req->range = value;
      break;
    case 8:
      if (NameIs(name, "if-match") && req->if_match.empty()) req->if_match = value;
      if (NameIs(name, "if-range") && req->if_range.empty()) req->if_range = value;
      break;
    case 10:
      if (NameIs(name, "connection")) {
        ForEachListElement(value, [&](std::string_view opt) {
          if (EqualsIgnoreCase(opt, "close")) scan->conn_close = true;
          if (EqualsIgnoreCase(opt, "keep-alive")) scan->conn_keep_alive = true;
        });
      }
      break;
    case 13:
      if (NameIs(name, "if-none-match") && req->if_none_match.empty()) {
        req->if_none_match = value;
      }
      break;
    case 14:
      if (NameIs(name, "content-length")) {
        // RFC 9112 section 6.3: a list of identical values is one value; differing is an error.
        bool any = false;
        ForEachListElement(value, [&](std::string_view v) {
          uint64_t x;
          if (!ParseDecimal(v, &x)) {  // RFC 9110 section 8.6: 1*DIGIT, no sign
            scan->cl_bad = true;
            return;
          }
          if (scan->has_content_length && x != scan->content_length) scan->cl_bad = true;
          scan->content_length = x;
          scan->has_content_length = true;
          any = true;
        });
        if (!any) scan->cl_bad = true;
      }
      break;
    case 15:
      if (NameIs(name, "accept-encoding") && req->accept_encoding.empty()) {
        req->accept_encoding = value;
      }
      break;
    case 17:
      if (NameIs(name, "transfer-encoding")) {
        scan->has_transfer_encoding = true;
        ForEachListElement(value, [&](std::string_view coding) {
          if (EqualsIgnoreCase(coding, "chunked")) {
            if (scan->saw_chunked) scan->te_bad = true;
            scan->saw_chunked = true;
          } else {
            if (scan->saw_chunked) scan->te_bad = true;  // chunked must be the final coding
            scan->te_unsupported = true;
          }
        });
        if (!scan->saw_chunked && !scan->te_unsupported) scan->te_bad = true;  // an empty value
      }
      if (NameIs(name, "if-modified-since") && req->if_modified_since.empty()) {
        req->if_modified_since = value;
      }
      break;
    case 19:
      if (NameIs(name, "if-unmodified-since") && req->if_unmodified_since.empty()) {
        req->if_unmodified_since = value;
      }
      break;
  }
  return true;
}

// Host and framing, once every field is in (RFC 9112 sections 3.2 and 6). False with *err set.
bool CheckHostAndFraming(const FieldScan& scan, Request* req, ParseResult* err) {
  // RFC 9112 section 3.2: exactly one Host in HTTP/1.1; never more than one.
  if (scan.host_count > 1) {
    *err = Error(400, "repeated Host");
    return false;
  }
  if (scan.host_count == 0 && req->version_minor == 1) {
    *err = Error(400, "missing Host");
    return false;
  }
  // An empty Host is what section 3.2 has a client send when the target URI has no authority.
  // The http and https URIs this server is asked for always have one (RFC 9110 section 4.2.1: a
  // sender MUST NOT generate an "http" URI with an empty host, and a recipient MUST reject one
  // as invalid), so an origin-form (or asterisk-form) request with an empty Host names an
  // invalid target URI. Section 3.3 lets a server reject it or substitute a configured default;
  // ringd has no default name (it never reads Host), and a proxy or cache in front that keys on
  // Host would file the response under an empty one, so it rejects: 400, as nginx does. In
  // absolute-form the target's authority is used and Host is ignored (section 3.2.2), so any
  // valid Host goes there, the empty one included.
  if (scan.host_count == 1 && req->host.empty() &&
      (req->target.front() == '/' || req->target == "*")) {
    *err = Error(400, "empty Host");
    return false;
  }
  // RFC 9112 section 6: framing. Anything ambiguous closes the connection.
  if (scan.cl_bad) {
    *err = Error(400, "bad Content-Length");
    return false;
  }
  if (scan.has_transfer_encoding) {
    if (scan.has_content_length) {
      *err = Error(400, "Content-Length with Transfer-Encoding");
      return false;
    }
    if (req->version_minor == 0) {
      *err = Error(400, "Transfer-Encoding in HTTP/1.0");
      return false;
    }
    if (scan.te_bad) {
      *err = Error(400, "bad Transfer-Encoding");
      return false;
    }
    if (scan.te_unsupported) {
      *err = Error(501, "unsupported transfer coding");
      return false;
    }
    req->body = BodyFraming::kChunked;
  } else if (scan.has_content_length && scan.content_length > 0) {
    req->body = BodyFraming::kContentLength;
    req->content_length = scan.content_length;
  }
  return true;
}

}  // namespace

ParseResult ParseRequest(std::string_view buf, size_t prev_len, const ParserLimits& limits,
                         Header* headers, size_t headers_cap, Request* out) {
  // RFC 9112 section 2.2: ignore empty lines before the request line.
  size_t start = 0;
  while (start < buf.size() &&
         (buf[start] == '\n' ||
          (buf[start] == '\r' && start + 1 < buf.size() && buf[start + 1] == '\n'))) {
    start += buf[start] == '\r' ? 2 : 1;
  }
  if (start > kMaxLeadingEmptyBytes) {
    return Error(400, "too many empty lines before the request line");
  }

  size_t from = prev_len >= 3 ? prev_len - 3 : 0;
  if (from < start) from = start;
  const size_t head_end = FindHeadEnd(buf, from);
  if (head_end == std::string_view::npos) {
    // The method is a token ending in a space (RFC 9112 section 3): a byte that cannot be in it
    // makes the request line bad however the line goes on, so say so now, not at a line end
    // that another protocol may never send (a TLS ClientHello to a plaintext port would wait
    // for --header-timeout-ms). A lone CR at the end may begin an empty line to skip.
    size_t m = start;
    while (m < buf.size() && kToken[U(buf[m])]) ++m;
    if (m < buf.size() && buf[m] != ' ' && !(m == start && m + 1 == buf.size() && buf[m] == '\r'))
      return Error(400, "bad method");
    const void* first_nl = std::memchr(buf.data() + start, '\n', buf.size() - start);
    // A line not yet ended is too long once it is longer than the limit without the CR that may
    // be its end (a line of exactly the limit whose LF comes in the next delivery is fine).
    const size_t line_so_far = buf.size() - start - (buf.back() == '\r' ? 1 : 0);
    if (first_nl == nullptr && line_so_far > limits.max_request_line) {
      return Error(414, "request line too long");
    }
    if (buf.size() - start > limits.max_head_bytes) return Error(431, "request head too large");
    return ParseResult{};  // need more
  }
  if (head_end - start > limits.max_head_bytes) return Error(431, "request head too large");

  const std::string_view head = buf.substr(0, head_end);
  size_t p = start;
  Request req;

  ParseResult err;
  if (!ParseRequestLine(head, &p, limits, &req, &err)) return err;

  // field-line = field-name ":" OWS field-value OWS (RFC 9112 section 5)
  const size_t cap = headers_cap < limits.max_headers ? headers_cap : limits.max_headers;
  size_t n = 0;
  FieldScan scan;
  while (true) {
    if (head[p] == '\r' || head[p] == '\n') {
      if (!EatEol(head, p)) return Error(400, "bare CR in header section");
      break;
    }
    if (head[p] == ' ' || head[p] == '\t') return Error(400, "obsolete line folding");
    // Find the colon first (memchr is vectorised), then check the name's bytes without an early
    // exit: a space before the colon, or a colon on a later line, leaves a non-tchar in between.
    const size_t name_start = p;
    const void* colon = std::memchr(head.data() + p, ':', head.size() - p);
    if (colon == nullptr) return Error(400, "bad header field name");
    p = static_cast<size_t>(static_cast<const char*>(colon) - head.data());
    bool name_ok = p > name_start;
    for (size_t k = name_start; k < p; ++k) name_ok &= kToken[U(head[k])];
    if (!name_ok) return Error(400, "bad header field name");
    const std::string_view name(head.data() + name_start, p - name_start);
    ++p;
    const size_t value_start = p;
    p = FindValueEnd(head, p);
    if (head[p] != '\r' && head[p] != '\n') return Error(400, "control character in header");
    const std::string_view value =
        TrimOws(std::string_view(head.data() + value_start, p - value_start));
    if (!EatEol(head, p)) return Error(400, "bare CR in header section");
    if (n == cap) return Error(431, "too many header fields");
    headers[n++] = Header{name, value};
    if (!NoteField(name, value, &req, &scan, &err)) return err;
  }
  if (!CheckHostAndFraming(scan, &req, &err)) return err;

  req.keep_alive =
      req.version_minor == 1 ? !scan.conn_close : (scan.conn_keep_alive && !scan.conn_close);
  req.headers = headers;
  req.num_headers = n;
  *out = req;
  ParseResult r;
  r.status = ParseStatus::kDone;
  r.consumed = head_end;
  return r;
}

}  // namespace ringd::http
