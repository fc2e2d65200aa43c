#include "server/http/origin_headers.h"

#include <string>

#include "gtest/gtest.h"

namespace ringd::http {
namespace {

TEST(GlobMatch, MatchesWholePathsLikeAShell) {
  EXPECT_TRUE(GlobMatch("*.css", "site.css"));
  EXPECT_TRUE(GlobMatch("*.css", "a/b/site.css"));  // '*' crosses '/', as nginx's ~ \.css$ does
  EXPECT_FALSE(GlobMatch("*.css", "site.css.map"));
  EXPECT_FALSE(GlobMatch("*.css", "site.CSS"));  // paths are case-sensitive
  EXPECT_TRUE(GlobMatch("assets/*", "assets/x/y.js"));
  EXPECT_FALSE(GlobMatch("assets/*", "other/assets/y.js"));
  EXPECT_TRUE(GlobMatch("*/index.html", "docs/index.html"));
  EXPECT_FALSE(GlobMatch("*/index.html", "index.html"));
  EXPECT_TRUE(GlobMatch("img/??.png", "img/ab.png"));
  EXPECT_FALSE(GlobMatch("img/??.png", "img/abc.png"));
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_TRUE(GlobMatch("a*b*c", "aXXbYYbZc"));
  EXPECT_FALSE(GlobMatch("a*b*c", "aXXbYYbZ"));
  EXPECT_TRUE(GlobMatch("exact.txt", "exact.txt"));
  EXPECT_FALSE(GlobMatch("exact.txt", "exact.txt2"));
}

TEST(FieldSyntax, TokensAndValues) {
  EXPECT_TRUE(IsToken("X-Frame-Options"));
  EXPECT_TRUE(IsToken("Access-Control-Allow-Origin"));
  EXPECT_FALSE(IsToken(""));
  EXPECT_FALSE(IsToken("Bad Name"));
  EXPECT_FALSE(IsToken("Bad:Name"));
  EXPECT_FALSE(
      IsToken("B\xc3\xa4"
              "d"));
  EXPECT_TRUE(IsFieldValue("public, max-age=60"));
  EXPECT_TRUE(IsFieldValue("a\tb"));
  EXPECT_FALSE(IsFieldValue(""));
  EXPECT_FALSE(IsFieldValue("x\r\nSet-Cookie: a=b"));  // header injection
  EXPECT_FALSE(IsFieldValue("x\ny"));
  EXPECT_FALSE(IsFieldValue(std::string("x\0y", 3)));
  EXPECT_FALSE(IsFieldValue(" leading"));
  EXPECT_FALSE(IsFieldValue("trailing "));
}

TEST(OriginHeaders, FirstMatchingRuleWinsThenTheDefault) {
  OriginHeaders o;
  std::string error;
  ASSERT_TRUE(o.AddCacheRule("*.css", "public, max-age=31536000, immutable", &error)) << error;
  ASSERT_TRUE(o.AddCacheRule("/assets/*", "public, max-age=3600", &error)) << error;
  ASSERT_TRUE(o.AddCacheRule("*.html", "no-cache", &error)) << error;
  EXPECT_EQ(o.CacheControlFor("assets/site.css"),
            "Cache-Control: public, max-age=31536000, immutable\r\n");
  EXPECT_EQ(o.CacheControlFor("assets/app.js"), "Cache-Control: public, max-age=3600\r\n");
  EXPECT_EQ(o.CacheControlFor("index.html"), "Cache-Control: no-cache\r\n");
  EXPECT_EQ(o.CacheControlFor("data.bin"), "");
  ASSERT_TRUE(o.SetDefaultCacheControl("public, max-age=60", &error)) << error;
  EXPECT_EQ(o.CacheControlFor("data.bin"), "Cache-Control: public, max-age=60\r\n");
  EXPECT_FALSE(o.empty());
}

TEST(OriginHeaders, AddedHeadersAreOneBlockInOrder) {
  OriginHeaders o;
  std::string error;
  EXPECT_TRUE(o.empty());
  ASSERT_TRUE(o.AddHeader("X-Content-Type-Options", "nosniff", &error)) << error;
  ASSERT_TRUE(o.AddHeader("Access-Control-Allow-Origin", "*", &error)) << error;
  ASSERT_TRUE(o.AddHeader("Vary", "Origin", &error)) << error;  // a list: may be added
  EXPECT_EQ(
      o.added(),
      "X-Content-Type-Options: nosniff\r\nAccess-Control-Allow-Origin: *\r\nVary: Origin\r\n");
}

TEST(OriginHeaders, RefusesWhatWouldBreakTheHead) {
  OriginHeaders o;
  std::string error;
  EXPECT_FALSE(o.AddHeader("Bad Name", "x", &error));
  EXPECT_NE(error.find("not a header name"), std::string::npos) << error;
  EXPECT_FALSE(o.AddHeader("X-Evil", "a\r\nSet-Cookie: b", &error));
  EXPECT_NE(error.find("not a header value"), std::string::npos) << error;
  EXPECT_FALSE(o.AddHeader("content-length", "5", &error));
  EXPECT_NE(error.find("writes content-length itself"), std::string::npos) << error;
  EXPECT_FALSE(o.AddHeader("Cache-Control", "no-store", &error));
  EXPECT_NE(error.find("--cache-control"), std::string::npos) << error;
  EXPECT_FALSE(o.AddCacheRule("", "no-cache", &error));
  EXPECT_FALSE(o.AddCacheRule("*.js", "", &error));
  EXPECT_FALSE(o.SetDefaultCacheControl("a\nb", &error));
  EXPECT_TRUE(o.empty());
  // Everything together stays within what a response head has room for.
  EXPECT_TRUE(o.AddHeader("X-Big", std::string(1500, 'a'), &error)) << error;
  EXPECT_FALSE(o.AddHeader("X-Big2", std::string(600, 'a'), &error));
  EXPECT_NE(error.find("2048 bytes"), std::string::npos) << error;
  EXPECT_FALSE(o.AddCacheRule("*", std::string(600, 'a'), &error));
  EXPECT_TRUE(o.AddCacheRule("*", std::string(400, 'a'), &error)) << error;
  EXPECT_FALSE(o.SetDefaultCacheControl(std::string(600, 'a'), &error));
}

TEST(OriginHeaders, ErrorPages) {
  OriginHeaders o;
  std::string error;
  ASSERT_TRUE(o.SetErrorPage(404, "errors/404.html", &error)) << error;
  ASSERT_TRUE(o.SetErrorPage(503, "busy.html", &error)) << error;
  ASSERT_TRUE(o.SetErrorPage(404, "404.html", &error)) << error;  // the last one wins
  EXPECT_EQ(o.ErrorPage(404), "404.html");
  EXPECT_EQ(o.ErrorPage(503), "busy.html");
  EXPECT_EQ(o.ErrorPage(403), "");
  EXPECT_FALSE(o.SetErrorPage(200, "ok.html", &error));
  EXPECT_FALSE(o.SetErrorPage(431, "big.html", &error));  // answered before a request is parsed
  EXPECT_FALSE(o.SetErrorPage(404, "../etc/passwd", &error));
  EXPECT_FALSE(o.SetErrorPage(404, "a//b.html", &error));
  EXPECT_FALSE(o.SetErrorPage(404, "a/./b.html", &error));
}

}  // namespace
}  // namespace ringd::http
