#include "server/http/h2_fields.h"

#include <cstring>
#include <string>

#include "gtest/gtest.h"
#include "server/http/response_plan.h"

namespace ringd::http {
namespace {

struct Fields {
  std::string_view values[kH2FieldCount];
  Header regular[kH2FieldCount];
  Request req;
  Fields& Set(std::string_view name, std::string_view value) {
    const H2Field f = H2FieldOf(name);
    EXPECT_NE(f, H2Field::kNone) << name;
    values[static_cast<size_t>(f)] = value;
    return *this;
  }
  int Build() { return BuildH2Request(values, regular, &req); }
};

Fields Get(std::string_view path) {
  Fields f;
  f.Set(":method", "GET").Set(":scheme", "https").Set(":path", path).Set(":authority", "a.example");
  return f;
}

TEST(H2FieldsTest, NamesTheFieldsThePlannerReads) {
  EXPECT_EQ(H2FieldOf(":method"), H2Field::kMethod);
  EXPECT_EQ(H2FieldOf("if-unmodified-since"), H2Field::kIfUnmodifiedSince);
  EXPECT_EQ(H2FieldOf("accept"), H2Field::kNone);
  EXPECT_EQ(H2FieldOf("cookie"), H2Field::kNone);
}

TEST(H2FieldsTest, ARequestAsHttp11WouldParseIt) {
  Fields f = Get("/a%20b?q=1");
  f.Set("range", "bytes=0-1").Set("if-none-match", "\"x\"").Set("accept-encoding", "br");
  f.Set("user-agent", "ua").Set("referer", "http://r/");
  ASSERT_EQ(f.Build(), 0);
  EXPECT_EQ(f.req.method, Method::kGet);
  EXPECT_EQ(f.req.target, "/a%20b?q=1");
  EXPECT_EQ(f.req.host, "a.example");
  EXPECT_EQ(f.req.range, "bytes=0-1");
  EXPECT_EQ(f.req.if_none_match, "\"x\"");
  EXPECT_EQ(f.req.accept_encoding, "br");
  EXPECT_TRUE(f.req.keep_alive);
  EXPECT_EQ(f.req.body, BodyFraming::kNone);
  EXPECT_EQ(f.req.Find("User-Agent"), "ua");
  EXPECT_EQ(f.req.Find("Referer"), "http://r/");
}

TEST(H2FieldsTest, HostStandsInForAMissingAuthority) {
  Fields f;
  f.Set(":method", "HEAD").Set(":scheme", "http").Set(":path", "/").Set("host", "h.example");
  ASSERT_EQ(f.Build(), 0);
  EXPECT_EQ(f.req.method, Method::kHead);
  EXPECT_EQ(f.req.host, "h.example");
  Fields both = Get("/");
  both.Set("host", "other.example");
  ASSERT_EQ(both.Build(), 0);
  EXPECT_EQ(both.req.host, "a.example");  // RFC 9113 8.3.1: :authority wins
}

TEST(H2FieldsTest, MalformedRequestsAreRefused) {
  EXPECT_EQ(Get("a/relative").Build(), 400);
  EXPECT_EQ(Get("http://absolute/").Build(), 400);
  Fields host = Get("/");
  host.Set(":authority", "bad host");
  EXPECT_EQ(host.Build(), 400);
  Fields cl = Get("/");
  cl.Set("content-length", "-1");
  EXPECT_EQ(cl.Build(), 400);
  Fields body = Get("/");
  body.Set(":method", "POST").Set("content-length", "12");
  ASSERT_EQ(body.Build(), 0);
  EXPECT_EQ(body.req.method, Method::kPost);
  EXPECT_EQ(body.req.body, BodyFraming::kContentLength);
  EXPECT_EQ(body.req.content_length, 12u);
  Fields star = Get("*");
  star.Set(":method", "OPTIONS");
  EXPECT_EQ(star.Build(), 0);
}

TEST(H2FieldsTest, AResponseHeadBecomesFieldsWithoutConnectionOnes) {
  std::string head =
      "HTTP/1.1 206 Partial Content\r\nServer: ringd\r\nDate: x\r\nContent-Type: text/html\r\n"
      "Content-Length: 2\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n"
      "Transfer-Encoding: chunked\r\nX-Custom:  v  \r\n\r\n";
  H2ResponseField out[kMaxH2ResponseFields];
  const size_t n = H2ResponseFields(head.data(), head.size(), out, kMaxH2ResponseFields);
  ASSERT_EQ(n, 6u);
  EXPECT_EQ(out[0].name, ":status");
  EXPECT_EQ(out[0].value, "206");
  EXPECT_EQ(out[1].name, "server");
  EXPECT_EQ(out[3].name, "content-type");
  EXPECT_EQ(out[3].value, "text/html");
  EXPECT_EQ(out[4].name, "content-length");
  EXPECT_EQ(out[5].name, "x-custom");
  EXPECT_EQ(out[5].value, "v");
}

TEST(H2FieldsTest, WhatWriteResponseHeadWritesConverts) {
  ResponsePlan plan;
  PlanError(404, true, &plan);
  char head[4096];
  const size_t len =
      WriteResponseHead(plan, "Mon, 07 Dec 2026 12:00:00 GMT", "ringd", head, sizeof head);
  ASSERT_GT(len, 0u);
  H2ResponseField out[kMaxH2ResponseFields];
  const size_t n = H2ResponseFields(head, len, out, kMaxH2ResponseFields);
  ASSERT_GT(n, 2u);
  EXPECT_EQ(out[0].value, "404");
  for (size_t i = 1; i < n; ++i) {
    for (char c : out[i].name) EXPECT_FALSE(c >= 'A' && c <= 'Z') << out[i].name;
    EXPECT_NE(out[i].name, "connection");
  }
}

TEST(H2FieldsTest, NotAHeadIsRefused) {
  H2ResponseField out[4];
  std::string junk = "HTTP/1.1 200 OK\r\nno colon here\r\n\r\n";
  EXPECT_EQ(H2ResponseFields(junk.data(), junk.size(), out, 4), 0u);
  std::string unended = "HTTP/1.1 200 OK\r\nA: b\r\n";
  EXPECT_EQ(H2ResponseFields(unended.data(), unended.size(), out, 4), 0u);
  std::string many = "HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n";
  EXPECT_EQ(H2ResponseFields(many.data(), many.size(), out, 4), 0u);
}

}  // namespace
}  // namespace ringd::http
