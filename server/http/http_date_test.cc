#include "server/http/http_date.h"

#include <cstdint>
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

// A file's modification time is whatever int64_t its file system holds (tmpfs takes them all):
// the far ends still give a time of day within the day, the year held at 0000 or 9999.
TEST(HttpDate, FormatsTheFarEndsOfTime) {
  EXPECT_EQ(Format(-1), "Wed, 31 Dec 1969 23:59:59 GMT");
  const std::string min = Format(INT64_MIN);  // INT64_MIN = -106751991167301 days + 30592 s
  EXPECT_EQ(min.substr(12), "0000 08:29:52 GMT") << min;
  const std::string max = Format(INT64_MAX);  // INT64_MAX = 106751991167300 days + 55807 s
  EXPECT_EQ(max.substr(12), "9999 15:30:07 GMT") << max;
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
