#include "server/http/request_parser.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ringd::http {
namespace {

using namespace std::string_literals;

struct Parsed {
  ParseResult result;
  Request req;
  Header headers[64];
};

Parsed Parse(std::string_view text, ParserLimits limits = {}) {
  Parsed p;
  p.result = ParseRequest(text, 0, limits, p.headers, 64, &p.req);
  return p;
}

int StatusOf(std::string_view text, ParserLimits limits = {}) {
  Parsed p = Parse(text, limits);
  if (p.result.status == ParseStatus::kDone) return 0;
  if (p.result.status == ParseStatus::kNeedMore) return -1;
  return p.result.error_status;
}

// RFC 9112 section 3: the request line.
TEST(RequestParser, ParsesASimpleGet) {
  Parsed p = Parse("GET /index.html HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t\r\n\r\n");
  ASSERT_EQ(p.result.status, ParseStatus::kDone);
  EXPECT_EQ(p.result.consumed, 62u);
  EXPECT_EQ(p.req.method, Method::kGet);
  EXPECT_EQ(p.req.target, "/index.html");
  EXPECT_EQ(p.req.version_minor, 1);
  EXPECT_EQ(p.req.host, "example.com");
  EXPECT_EQ(p.req.num_headers, 2u);
  EXPECT_EQ(p.req.Find("user-agent"), "t");
  EXPECT_TRUE(p.req.keep_alive);
  EXPECT_EQ(p.req.body, BodyFraming::kNone);
}

TEST(RequestParser, NeedsMoreUntilTheBlankLine) {
  EXPECT_EQ(StatusOf(""), -1);
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\nHost: a\r\n"), -1);
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\nHost: a\r\n\r"), -1);
}

// A byte no method can hold is a 400 at once, before the line ends: a TLS ClientHello sent to a
// plaintext port has no line end to wait for.
TEST(RequestParser, ABadMethodByteIsAnErrorBeforeTheLineEnds) {
  EXPECT_EQ(StatusOf("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"s), 400);
  EXPECT_EQ(std::string_view(Parse("\x16\x03\x01"s).result.error_reason), "bad method");
  EXPECT_EQ(StatusOf("GE\x16"s), 400);
  EXPECT_EQ(StatusOf("\r\nGET\t"), 400);
  EXPECT_EQ(StatusOf("\r\n\rX"), 400);  // a CR that begins no empty line
  // What may still become a request needs more.
  EXPECT_EQ(StatusOf("GE"), -1);
  EXPECT_EQ(StatusOf("GET"), -1);
  EXPECT_EQ(StatusOf("GET /\x16"s), -1);  // the target's bytes are judged with the line
  EXPECT_EQ(StatusOf("\r\n\r"), -1);      // maybe an empty line to skip
  EXPECT_EQ(StatusOf("\r"), -1);
}

// RFC 9112 section 2.2: bare LF line endings may be accepted; empty lines before the request
// line are ignored.
TEST(RequestParser, AcceptsBareLfAndLeadingEmptyLines) {
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\nHost: a\n\n"), 0);
  Parsed p = Parse("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n");
  ASSERT_EQ(p.result.status, ParseStatus::kDone);
  EXPECT_EQ(p.result.consumed, 31u);
}

// RFC 9110 section 9.1: methods are case-sensitive.
TEST(RequestParser, MethodsAreCaseSensitive) {
  EXPECT_EQ(Parse("GET / HTTP/1.1\r\nHost: a\r\n\r\n").req.method, Method::kGet);
  EXPECT_EQ(Parse("HEAD / HTTP/1.1\r\nHost: a\r\n\r\n").req.method, Method::kHead);
  EXPECT_EQ(Parse("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n").req.method, Method::kOptions);
  EXPECT_EQ(Parse("POST / HTTP/1.1\r\nHost: a\r\n\r\n").req.method, Method::kPost);
  EXPECT_EQ(Parse("get / HTTP/1.1\r\nHost: a\r\n\r\n").req.method, Method::kUnknown);
  EXPECT_EQ(Parse("BREW / HTTP/1.1\r\nHost: a\r\n\r\n").req.method, Method::kUnknown);
}

struct ErrorCase {
  const char* name;
  std::string text;
  int status;
};

// Each malformed head, with the status RFC 9110/9112 asks for. Every one closes the connection.
TEST(RequestParser, RejectsMalformedHeads) {
  const std::vector<ErrorCase> cases = {
      // RFC 9112 section 3: request-line syntax
      {"no target", "GET HTTP/1.1\r\nHost: a\r\n\r\n", 400},
      {"two spaces", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
      {"tab separator", "GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n", 400},
      {"lowercase version", "GET / http/1.1\r\nHost: a\r\n\r\n", 400},
      {"short version", "GET / HTTP/1\r\nHost: a\r\n\r\n", 400},
      {"junk after version", "GET / HTTP/1.1x\r\nHost: a\r\n\r\n", 400},
      {"empty method", " / HTTP/1.1\r\nHost: a\r\n\r\n", 400},
      {"NUL in target", "GET /a\0b HTTP/1.1\r\nHost: a\r\n\r\n"s, 400},
      // RFC 9110 section 6.2 / 15.6.6: a major version we do not speak
      {"HTTP/2.0", "GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505},
      {"HTTP/0.9", "GET / HTTP/0.9\r\n\r\n", 505},
      // RFC 9112 section 5: field syntax
      {"space before colon", "GET / HTTP/1.1\r\nHost : a\r\n\r\n", 400},
      {"tab before colon", "GET / HTTP/1.1\r\nHost\t: a\r\n\r\n", 400},
      {"empty field name", "GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n", 400},
      {"no colon", "GET / HTTP/1.1\r\nHost: a\r\nJunk\r\n\r\n", 400},
      // RFC 9112 section 5.2: obsolete line folding
      {"obs-fold", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n  c\r\n\r\n", 400},
      {"obs-fold tab", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\r\n\tc\r\n\r\n", 400},
      // RFC 9112 section 2.2: bare CR, NUL
      {"bare CR in value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\rc\r\n\r\n", 400},
      {"bare CR in line end", "GET / HTTP/1.1\rHost: a\r\n\r\n", 400},
      {"NUL in value", "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\0c\r\n\r\n"s, 400},
      {"control char in value",
       "GET / HTTP/1.1\r\nHost: a\r\nX-A: b\x01"
       "c\r\n\r\n",
       400},
      // RFC 9112 section 3.2: Host
      {"missing Host in 1.1", "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", 400},
      {"repeated Host", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"repeated Host in 1.0", "GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n", 400},
      {"bad Host", "GET / HTTP/1.1\r\nHost: a b/c\r\n\r\n", 400},
      // An empty Host names a target URI without an authority, which an http URI must have
      // (request_parser.cc says why this is 400 and not a default).
      {"empty Host", "GET / HTTP/1.1\r\nHost: \r\n\r\n", 400},
      {"empty Host, no space", "GET /a HTTP/1.1\r\nHost:\r\n\r\n", 400},
      {"empty Host in 1.0", "GET / HTTP/1.0\r\nHost:\r\n\r\n", 400},
      {"empty Host, asterisk-form", "OPTIONS * HTTP/1.1\r\nHost: \r\n\r\n", 400},
      // RFC 9112 section 6.3: message framing
      {"differing Content-Length",
       "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
      {"differing Content-Length list", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 2\r\n\r\n",
       400},
      {"negative Content-Length", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400},
      {"signed Content-Length", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n", 400},
      {"empty Content-Length", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: \r\n\r\n", 400},
      {"letter in Content-Length", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1O\r\n\r\n", 400},
      {"space in Content-Length", "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1 0\r\n\r\n", 400},
      {"2^64 Content-Length",
       "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 18446744073709551616\r\n\r\n", 400},
      {"huge Content-Length",
       "GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999999\r\n\r\n", 400},
      {"CL and TE",
       "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
       400},
      {"TE in 1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"chunked not last", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
       400},
      {"chunked twice", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
       400},
      {"gzip coding", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
      {"gzip then chunked",
       "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
  };
  for (const ErrorCase& c : cases) {
    Parsed p = Parse(c.text);
    EXPECT_EQ(p.result.status, ParseStatus::kError) << c.name;
    EXPECT_EQ(p.result.error_status, c.status) << c.name << ": " << p.result.error_reason;
  }
}

// RFC 9110 section 15.5.15 (414) and RFC 6585 section 5 (431).
TEST(RequestParser, EnforcesSizeLimits) {
  ParserLimits limits;
  limits.max_request_line = 100;
  limits.max_head_bytes = 300;
  limits.max_headers = 4;
  const std::string long_target = "GET /" + std::string(200, 'a') + " HTTP/1.1\r\nHost: a\r\n\r\n";
  EXPECT_EQ(StatusOf(long_target, limits), 414);
  // Not yet complete, but already past the line limit with no line end: 414 without waiting.
  EXPECT_EQ(StatusOf("GET /" + std::string(200, 'a'), limits), 414);
  EXPECT_EQ(StatusOf("GET /" + std::string(50, 'a'), limits), -1);
  std::string many = "GET / HTTP/1.1\r\nHost: a\r\n";
  for (int i = 0; i < 4; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(StatusOf(many + "\r\n", limits), 431);
  const std::string big =
      "GET / HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(400, 'b') + "\r\n\r\n";
  EXPECT_EQ(StatusOf(big, limits), 431);
  EXPECT_EQ(StatusOf(big.substr(0, 320), limits), 431);  // incomplete, already too large
  // Each limit at both of its sides: exactly the limit passes, one more does not.
  // A request line of n bytes, CRLF not counted.
  const auto line_of = [](size_t n) { return "GET /" + std::string(n - 14, 'a') + " HTTP/1.1"; };
  EXPECT_EQ(line_of(100).size(), 100u);
  EXPECT_EQ(StatusOf(line_of(100) + "\r\nHost: a\r\n\r\n", limits), 0);
  EXPECT_EQ(StatusOf(line_of(101) + "\r\nHost: a\r\n\r\n", limits), 414);
  EXPECT_EQ(StatusOf(line_of(100), limits), -1);  // not yet ended: the CR, the LF may follow
  EXPECT_EQ(StatusOf(line_of(100) + "\r", limits), -1);
  EXPECT_EQ(StatusOf(line_of(101), limits), 414);
  // A head of n bytes, its blank line included.
  const auto head_of = [](size_t n) {
    const std::string start = "GET / HTTP/1.1\r\nHost: a\r\nX-Pad: ";
    return start + std::string(n - start.size() - 4, 'p') + "\r\n\r\n";
  };
  EXPECT_EQ(head_of(300).size(), 300u);
  EXPECT_EQ(StatusOf(head_of(300), limits), 0);
  EXPECT_EQ(StatusOf(head_of(301), limits), 431);
  EXPECT_EQ(StatusOf(head_of(300).substr(0, 299), limits), -1);  // one byte short: waits
  // n header fields, Host the first.
  const auto fields = [](int n) {
    std::string s = "GET / HTTP/1.1\r\nHost: a\r\n";
    for (int i = 1; i < n; ++i) s += "X-" + std::to_string(i) + ": v\r\n";
    return s + "\r\n";
  };
  EXPECT_EQ(StatusOf(fields(4), limits), 0);
  EXPECT_EQ(StatusOf(fields(5), limits), 431);
  // And the defaults, what --help says: an 8,192-byte request line, a 16,384-byte head, 64 fields.
  const ParserLimits defaults;
  EXPECT_EQ(StatusOf(line_of(8192) + "\r\nHost: a\r\n\r\n", defaults), 0);
  EXPECT_EQ(StatusOf(line_of(8193) + "\r\nHost: a\r\n\r\n", defaults), 414);
  EXPECT_EQ(StatusOf(head_of(16384), defaults), 0);
  EXPECT_EQ(StatusOf(head_of(16385), defaults), 431);
  EXPECT_EQ(StatusOf(fields(64), defaults), 0);
  EXPECT_EQ(StatusOf(fields(65), defaults), 431);
  // The caller's header array is a limit too.
  Request req;
  Header two[2];
  ParseResult r = ParseRequest("GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n", 0,
                               ParserLimits{}, two, 2, &req);
  EXPECT_EQ(r.error_status, 431);
}

// RFC 9112 sections 3.2 and 3.2.2: Host. An empty value is 400 unless the target carries the
// authority itself (absolute-form, where Host is ignored); no Host at all is fine in HTTP/1.0.
TEST(RequestParser, AnEmptyHostOnlyBesideAnAbsoluteFormTarget) {
  EXPECT_EQ(StatusOf("GET http://example.com/a HTTP/1.1\r\nHost:\r\n\r\n"), 0);
  EXPECT_EQ(StatusOf("GET http://example.com/a HTTP/1.1\r\nHost: other\r\n\r\n"), 0);
  EXPECT_EQ(StatusOf("GET / HTTP/1.0\r\n\r\n"), 0);
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\nHost: a\r\n\r\n"), 0);
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\nHost:  \r\n\r\n"), 400);  // only whitespace: empty
}

// RFC 9112 section 9.3: persistence.
TEST(RequestParser, DerivesKeepAlive) {
  EXPECT_TRUE(Parse("GET / HTTP/1.1\r\nHost: a\r\n\r\n").req.keep_alive);
  EXPECT_FALSE(Parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n").req.keep_alive);
  EXPECT_FALSE(Parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, Close\r\n\r\n").req.keep_alive);
  EXPECT_FALSE(Parse("GET / HTTP/1.0\r\n\r\n").req.keep_alive);
  EXPECT_TRUE(Parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").req.keep_alive);
  EXPECT_EQ(Parse("GET / HTTP/1.0\r\n\r\n").req.version_minor, 0);
  // RFC 9110 section 6.2: a later 1.x minor version is answered as 1.1.
  EXPECT_EQ(Parse("GET / HTTP/1.7\r\nHost: a\r\n\r\n").req.version_minor, 1);
}

// RFC 9112 section 6.3: the body length, so that a body is never read as the next request.
TEST(RequestParser, DerivesBodyFraming) {
  Parsed p =
      Parse("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\nContent-Length: 5\r\n\r\n");
  ASSERT_EQ(p.result.status, ParseStatus::kDone);
  EXPECT_EQ(p.req.body, BodyFraming::kContentLength);
  EXPECT_EQ(p.req.content_length, 5u);
  p = Parse("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n");
  EXPECT_EQ(p.req.body, BodyFraming::kChunked);
  p = Parse("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(p.req.body, BodyFraming::kNone);
}

TEST(RequestParser, CollectsTheFieldsLaterStagesNeed) {
  Parsed p = Parse(
      "GET /f HTTP/1.1\r\nhost:a\r\nrange:bytes=0-1\r\nIf-Match: \"x\"\r\nIF-NONE-MATCH: \"y\"\r\n"
      "If-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\nIf-Unmodified-Since: z\r\n"
      "If-Range: \"r\"\r\nAccept-Encoding: gzip, br\r\nX-Trailing:   spaced \t \r\n\r\n");
  ASSERT_EQ(p.result.status, ParseStatus::kDone);
  EXPECT_EQ(p.req.range, "bytes=0-1");
  EXPECT_EQ(p.req.if_match, "\"x\"");
  EXPECT_EQ(p.req.if_none_match, "\"y\"");
  EXPECT_EQ(p.req.if_modified_since, "Sun, 06 Nov 1994 08:49:37 GMT");
  EXPECT_EQ(p.req.if_unmodified_since, "z");
  EXPECT_EQ(p.req.if_range, "\"r\"");
  EXPECT_EQ(p.req.accept_encoding, "gzip, br");
  EXPECT_EQ(p.req.Find("x-trailing"), "spaced");  // RFC 9112 section 5.1: OWS is trimmed
}

TEST(RequestParser, AcceptsObsTextInValues) {
  EXPECT_EQ(StatusOf("GET / HTTP/1.1\r\nHost: a\r\nX-A: caf\xc3\xa9\r\n\r\n"), 0);
}

// Feeds `stream` to the parser split into pieces at `cuts`, as a connection would, discarding
// each request's Content-Length body; returns a description of each parsed request or error.
std::vector<std::string> Drive(const std::string& stream, const std::vector<size_t>& cuts) {
  std::vector<std::string> out;
  std::string buf;
  size_t prev_len = 0;
  uint64_t body_left = 0;
  size_t fed = 0;
  auto feed = [&](size_t upto) {
    buf.append(stream, fed, upto - fed);
    fed = upto;
    while (true) {
      if (body_left > 0) {
        const size_t skip = std::min<uint64_t>(body_left, buf.size());
        buf.erase(0, skip);
        body_left -= skip;
        prev_len = 0;
        if (body_left > 0) return;
      }
      Request req;
      Header headers[64];
      ParseResult r = ParseRequest(buf, prev_len, ParserLimits{}, headers, 64, &req);
      if (r.status == ParseStatus::kNeedMore) {
        prev_len = buf.size();
        return;
      }
      if (r.status == ParseStatus::kError) {
        out.push_back("error " + std::to_string(r.error_status));
        buf.clear();
        return;
      }
      out.push_back(std::string(req.method_text) + " " + std::string(req.target) + " " +
                    std::to_string(req.num_headers) + " " + std::string(req.host));
      body_left = req.content_length;
      buf.erase(0, r.consumed);
      prev_len = 0;
    }
  };
  for (size_t c : cuts) feed(c);
  feed(stream.size());
  return out;
}

// Property: splitting a pipelined stream at any offset, or byte by byte, yields the same
// sequence of requests as parsing it whole.
TEST(RequestParser, SplittingAnywhereGivesTheSameRequests) {
  const std::string stream =
      "GET /a HTTP/1.1\r\nHost: one\r\nAccept: */*\r\n\r\n"
      "\r\n"
      "HEAD /b?x=1 HTTP/1.1\nHost: two\nRange: bytes=0-5\n\n"
      "POST /c HTTP/1.1\r\nHost: three\r\nContent-Length: 27\r\n\r\n"
      "GET /not-a-request HTTP/1.1"
      "GET /d HTTP/1.0\r\n\r\n"
      "OPTIONS * HTTP/1.1\r\nHost: five\r\nX-Long: " +
      std::string(300, 'z') + "\r\n\r\n";
  const std::vector<std::string> whole = Drive(stream, {});
  ASSERT_EQ(whole.size(), 5u);
  EXPECT_EQ(whole[2], "POST /c 2 three");
  EXPECT_EQ(whole[3], "GET /d 0 ");
  for (size_t cut = 1; cut < stream.size(); ++cut) {
    ASSERT_EQ(Drive(stream, {cut}), whole) << "split at " << cut;
  }
  std::vector<size_t> every;
  for (size_t i = 1; i < stream.size(); ++i) every.push_back(i);
  EXPECT_EQ(Drive(stream, every), whole);
  for (size_t a = 1; a < stream.size(); a += 7) {
    for (size_t b = a + 1; b < stream.size(); b += 13) {
      ASSERT_EQ(Drive(stream, {a, b}), whole) << "split at " << a << " and " << b;
    }
  }
}

TEST(RequestParser, ErrorsAreTheSameHoweverTheyArrive) {
  const std::string stream = "GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost : b\r\n\r\n";
  const std::vector<std::string> whole = Drive(stream, {});
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[1], "error 400");
  for (size_t cut = 1; cut < stream.size(); ++cut) ASSERT_EQ(Drive(stream, {cut}), whole);
}

}  // namespace
}  // namespace ringd::http
