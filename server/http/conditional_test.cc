#include "server/http/conditional.h"

#include <string>

#include "gtest/gtest.h"
#include "server/http/accept_encoding.h"

namespace ringd::http {
namespace {

constexpr int64_t kMtime = 784111777;  // Sun, 06 Nov 1994 08:49:37 GMT
constexpr const char* kDate = "Sun, 06 Nov 1994 08:49:37 GMT";
constexpr const char* kEarlier = "Sun, 06 Nov 1994 08:49:36 GMT";
constexpr const char* kLater = "Sun, 06 Nov 1994 08:49:38 GMT";

Request Get() {
  Request r;
  r.method = Method::kGet;
  return r;
}

TEST(Conditional, FormatsETagsLikeNginx) {
  char buf[kMaxETag];
  EXPECT_EQ(std::string(buf, FormatETag(0x5f3e1a2b, 0x264, buf)), "\"5f3e1a2b-264\"");
  EXPECT_EQ(std::string(buf, FormatETag(0, 0, buf)), "\"0-0\"");
}

// RFC 9110 section 8.8.3.2: strong and weak comparison.
TEST(Conditional, ComparesEntityTags) {
  EXPECT_TRUE(ETagListMatches("\"a\"", "\"a\"", false));
  EXPECT_TRUE(ETagListMatches("W/\"a\"", "\"a\"", true));
  EXPECT_FALSE(ETagListMatches("W/\"a\"", "\"a\"", false));
  EXPECT_TRUE(ETagListMatches("\"x\", \"a\"", "\"a\"", false));
  EXPECT_TRUE(ETagListMatches("\"x,y\",\"a\"", "\"a\"", false));  // commas inside quotes
  EXPECT_FALSE(ETagListMatches("\"x,\"a\"\"", "\"b\"", true));
  EXPECT_TRUE(ETagListMatches(" * ", "\"a\"", false));
  EXPECT_FALSE(ETagListMatches("a", "\"a\"", true));  // unquoted: malformed
  EXPECT_FALSE(ETagListMatches("\"ab\"", "\"a\"", true));
}

struct PreCase {
  const char* name;
  const char* if_match;
  const char* if_unmodified_since;
  const char* if_none_match;
  const char* if_modified_since;
  Method method;
  Precondition expected;
};

// RFC 9110 section 13.2.2: the order of evaluation, and each field's rule (13.1.1-13.1.4).
TEST(Conditional, EvaluatesPreconditionsInOrder) {
  const auto kGo = Precondition::kProceed;
  const auto k304 = Precondition::kNotModified;
  const auto k412 = Precondition::kFailed;
  const PreCase cases[] = {
      {"none", "", "", "", "", Method::kGet, kGo},
      // 13.1.1 If-Match
      {"If-Match hit", "\"e\"", "", "", "", Method::kGet, kGo},
      {"If-Match miss", "\"x\"", "", "", "", Method::kGet, k412},
      {"If-Match star", "*", "", "", "", Method::kGet, kGo},
      {"If-Match weak never matches", "W/\"e\"", "", "", "", Method::kGet, k412},
      // 13.1.4 If-Unmodified-Since, only without If-Match
      {"IUS same", "", kDate, "", "", Method::kGet, kGo},
      {"IUS earlier", "", kEarlier, "", "", Method::kGet, k412},
      {"IUS invalid ignored", "", "garbage", "", "", Method::kGet, kGo},
      {"If-Match wins over IUS", "\"e\"", kEarlier, "", "", Method::kGet, kGo},
      // 13.1.2 If-None-Match (weak comparison)
      {"INM hit", "", "", "\"e\"", "", Method::kGet, k304},
      {"INM weak hit", "", "", "W/\"e\"", "", Method::kHead, k304},
      {"INM list hit", "", "", "\"a\", \"e\"", "", Method::kGet, k304},
      {"INM star", "", "", "*", "", Method::kGet, k304},
      {"INM miss", "", "", "\"x\"", "", Method::kGet, kGo},
      // 13.1.3 If-Modified-Since
      {"IMS same", "", "", "", kDate, Method::kGet, k304},
      {"IMS later", "", "", "", kLater, Method::kGet, k304},
      {"IMS earlier", "", "", "", kEarlier, Method::kGet, kGo},
      {"IMS invalid ignored", "", "", "", "yesterday", Method::kGet, kGo},
      {"IMS asctime", "", "", "", "Sun Nov  6 08:49:37 1994", Method::kGet, k304},
      // If-None-Match takes precedence over If-Modified-Since (13.1.3)
      {"INM miss beats IMS", "", "", "\"x\"", kDate, Method::kGet, kGo},
      {"INM hit with old IMS", "", "", "\"e\"", kEarlier, Method::kGet, k304},
      // step order: a failed If-Match is 412 even when If-None-Match would say 304
      {"If-Match before INM", "\"x\"", "", "\"e\"", "", Method::kGet, k412},
  };
  for (const PreCase& c : cases) {
    Request r = Get();
    r.method = c.method;
    r.if_match = c.if_match;
    r.if_unmodified_since = c.if_unmodified_since;
    r.if_none_match = c.if_none_match;
    r.if_modified_since = c.if_modified_since;
    EXPECT_EQ(EvaluatePreconditions(r, Validators{"\"e\"", kMtime}), c.expected) << c.name;
  }
}

// RFC 9110 section 13.1.5: If-Range.
TEST(Conditional, IfRangeNeedsAnExactStrongValidator) {
  const Validators v{"\"e\"", kMtime};
  EXPECT_TRUE(IfRangeAllows("", v));
  EXPECT_TRUE(IfRangeAllows("\"e\"", v));
  EXPECT_FALSE(IfRangeAllows("\"x\"", v));
  EXPECT_FALSE(IfRangeAllows("W/\"e\"", v));
  EXPECT_TRUE(IfRangeAllows(kDate, v));
  EXPECT_FALSE(IfRangeAllows(kLater, v));  // a date must match exactly
  EXPECT_FALSE(IfRangeAllows(kEarlier, v));
  EXPECT_FALSE(IfRangeAllows("garbage", v));
}

// RFC 9110 section 12.5.3: Accept-Encoding.
TEST(AcceptEncoding, ReadsQValues) {
  AcceptedCodings a = ParseAcceptEncoding("gzip, deflate, br");
  EXPECT_EQ(a.gzip, 1000);
  EXPECT_EQ(a.br, 1000);
  a = ParseAcceptEncoding("gzip;q=0.5, br;q=0.25");
  EXPECT_EQ(a.gzip, 500);
  EXPECT_EQ(a.br, 250);
  a = ParseAcceptEncoding("gzip;q=0, br");
  EXPECT_EQ(a.gzip, 0);
  EXPECT_EQ(a.br, 1000);
  a = ParseAcceptEncoding("*;q=0.3, gzip;q=0");
  EXPECT_EQ(a.gzip, 0);
  EXPECT_EQ(a.br, 300);
  a = ParseAcceptEncoding("identity");
  EXPECT_EQ(a.gzip, 0);
  EXPECT_EQ(a.br, 0);
  a = ParseAcceptEncoding("");
  EXPECT_EQ(a.gzip, 0);
  a = ParseAcceptEncoding("x-gzip; q=1.0");
  EXPECT_EQ(a.gzip, 1000);
  a = ParseAcceptEncoding("gzip;q=2, br;q=0.x");  // malformed q-values are not acceptance
  EXPECT_EQ(a.gzip, 0);
  EXPECT_EQ(a.br, 0);
  a = ParseAcceptEncoding("GZIP;Q=0.8");
  EXPECT_EQ(a.gzip, 800);
}

}  // namespace
}  // namespace ringd::http
