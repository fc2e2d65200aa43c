// Host normalisation and site choice as nginx's server_name does them.
#include "server/http/site_table.h"

#include <gtest/gtest.h>

#include <string>

namespace ringd::http {
namespace {

std::string Norm(std::string_view host) {
  char buf[kMaxHostName + 1];
  return std::string(NormalizeHost(host, buf));
}

TEST(NormalizeHost, LowercasesAndDropsPortAndOneTrailingDot) {
  EXPECT_EQ(Norm("Example.ORG"), "example.org");
  EXPECT_EQ(Norm("example.org:8080"), "example.org");
  EXPECT_EQ(Norm("example.org."), "example.org");
  EXPECT_EQ(Norm("example.org.:443"), "example.org");
  EXPECT_EQ(Norm("example.org.."), "example.org.");  // one dot only
  EXPECT_EQ(Norm("[::1]:8080"), "[::1]");
  EXPECT_EQ(Norm("[2001:DB8::1]"), "[2001:db8::1]");
  EXPECT_EQ(Norm("127.0.0.1:80"), "127.0.0.1");
}

TEST(NormalizeHost, EmptyForNoHost) {
  EXPECT_EQ(Norm(""), "");
  EXPECT_EQ(Norm(":8080"), "");
  EXPECT_EQ(Norm("."), "");
  EXPECT_EQ(Norm("[::1"), "");
  EXPECT_EQ(Norm(std::string(kMaxHostName + 1, 'a')), "");
  EXPECT_EQ(Norm(std::string(kMaxHostName, 'a')), std::string(kMaxHostName, 'a'));
}

TEST(RequestHost, AbsoluteFormTargetOverridesHost) {
  EXPECT_EQ(RequestHost("example.org", "/index.html"), "example.org");
  EXPECT_EQ(RequestHost("example.org", "http://example.net:8080/x"), "example.net:8080");
  EXPECT_EQ(RequestHost("example.org", "https://EXAMPLE.net"), "EXAMPLE.net");
  EXPECT_EQ(RequestHost("", "*"), "");
}

TEST(SiteTable, ExactNamesAndAliases) {
  SiteTable t;
  std::string error;
  ASSERT_TRUE(t.Add({"example.org", "WWW.example.org"}, &error)) << error;
  ASSERT_TRUE(t.Add({"example.net"}, &error)) << error;
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.Match("example.org"), 0);
  EXPECT_EQ(t.Match("www.example.org"), 0);
  EXPECT_EQ(t.Match("example.net"), 1);
  EXPECT_EQ(t.Match("other.example.org"), SiteTable::kNoSite);
  EXPECT_EQ(t.Match(""), SiteTable::kNoSite);
}

TEST(SiteTable, ExactBeforeWildcardAndLongestWildcardFirst) {
  SiteTable t;
  std::string error;
  ASSERT_TRUE(t.Add({"*.example.org"}, &error)) << error;
  ASSERT_TRUE(t.Add({"*.static.example.org"}, &error)) << error;
  ASSERT_TRUE(t.Add({"api.static.example.org"}, &error)) << error;
  EXPECT_EQ(t.Match("www.example.org"), 0);
  EXPECT_EQ(t.Match("a.b.example.org"), 0);
  EXPECT_EQ(t.Match("img.static.example.org"), 1);
  EXPECT_EQ(t.Match("api.static.example.org"), 2);
  EXPECT_EQ(t.Match("example.org"), SiteTable::kNoSite);  // as nginx: *.x is not x
  EXPECT_EQ(t.Match("badexample.org"), SiteTable::kNoSite);
}

TEST(SiteTable, NormalisedHostFindsTheSite) {
  SiteTable t;
  std::string error;
  ASSERT_TRUE(t.Add({"example.org"}, &error)) << error;
  ASSERT_TRUE(t.Add({"[::1]", "127.0.0.1"}, &error)) << error;
  char buf[kMaxHostName + 1];
  EXPECT_EQ(t.Match(NormalizeHost("EXAMPLE.org.:8443", buf)), 0);
  EXPECT_EQ(t.Match(NormalizeHost("[::1]:8080", buf)), 1);
  EXPECT_EQ(t.Match(NormalizeHost("127.0.0.1", buf)), 1);
}

TEST(SiteTable, RefusesBadAndRepeatedNames) {
  SiteTable t;
  std::string error;
  EXPECT_FALSE(t.Add({}, &error));
  for (const char* bad : {"", "*.", "*", "a..b", ".example.org", "exa mple.org", "ex/ample",
                          "example.org:80", "*.*.example.org", "www.*.org", "[::1", "[x::1]"}) {
    error.clear();
    EXPECT_FALSE(t.Add({bad}, &error)) << bad;
    EXPECT_FALSE(error.empty()) << bad;
  }
  ASSERT_TRUE(t.Add({"example.org"}, &error));
  EXPECT_FALSE(t.Add({"Example.org"}, &error));
  EXPECT_NE(error.find("given twice"), std::string::npos) << error;
  EXPECT_EQ(t.size(), 1u);
}

}  // namespace
}  // namespace ringd::http
