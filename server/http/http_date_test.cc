#include "server/http/http_date.h"

#include <string>

#include "gtest/gtest.h"

namespace ringd::http {
namespace {

std::string Format(int64_t t) {
  char buf[kHttpDateLen];
  FormatHttpDate(t, buf);
  return std::string(buf, kHttpDateLen);
}

// RFC 9110 section 5.6.7: the preferred format.
TEST(HttpDate, FormatsImfFixdate) {
  EXPECT_EQ(Format(0), "Thu, 01 Jan 1970 00:00:00 GMT");
  EXPECT_EQ(Format(784111777), "Sun, 06 Nov 1994 08:49:37 GMT");
  EXPECT_EQ(Format(951782400), "Tue, 29 Feb 2000 00:00:00 GMT");
  EXPECT_EQ(Format(1445412480), "Wed, 21 Oct 2015 07:28:00 GMT");
}

// RFC 9110 section 5.6.7: recipients accept all three formats.
TEST(HttpDate, ParsesAllThreeForms) {
  EXPECT_EQ(ParseHttpDate("Sun, 06 Nov 1994 08:49:37 GMT"), 784111777);
  EXPECT_EQ(ParseHttpDate("Sunday, 06-Nov-94 08:49:37 GMT"), 784111777);
  EXPECT_EQ(ParseHttpDate("Sun Nov  6 08:49:37 1994"), 784111777);
  EXPECT_EQ(ParseHttpDate("Thu, 01 Jan 2037 00:00:00 GMT"), 2114380800);
}

TEST(HttpDate, RoundTripsEveryDayForDecades) {
  for (int64_t t = 0; t < 4102444800; t += 86400 * 7 + 3671) {
    ASSERT_EQ(ParseHttpDate(Format(t)), t) << Format(t);
  }
}

TEST(HttpDate, RejectsInvalidDates) {
  for (const char* bad :
       {"", "yesterday", "Sun, 06 Nov 1994 08:49:37", "Sun, 6 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMT ", "Sun, 32 Jan 1994 08:49:37 GMT",
        "Sun, 29 Feb 1995 08:49:37 GMT", "Sun, 06 Foo 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 1994 08:49:37 UTC"}) {
    EXPECT_EQ(ParseHttpDate(bad), std::nullopt) << bad;
  }
}

}  // namespace
}  // namespace ringd::http
