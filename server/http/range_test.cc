#include "server/http/range.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ringd::http {
namespace {

std::string Describe(const RangeSet& s) {
  std::string out;
  for (size_t i = 0; i < s.count; ++i) {
    if (i) out += ",";
    out += std::to_string(s.ranges[i].first) + "-" + std::to_string(s.ranges[i].last);
  }
  return out;
}

struct Case {
  const char* header;
  uint64_t length;
  RangeOutcome outcome;
  const char* ranges;
};

// RFC 9110 sections 14.1.1 (syntax), 14.1.2 (satisfiability), 14.2 (Range), 14.6 (coalescing).
TEST(Range, ParsesAndClampsRanges) {
  constexpr auto kOk = RangeOutcome::kSatisfiable;
  constexpr auto kIgnore = RangeOutcome::kIgnore;
  constexpr auto k416 = RangeOutcome::kUnsatisfiable;
  const std::vector<Case> cases = {
      {"bytes=0-499", 10000, kOk, "0-499"},
      {"bytes=500-999", 10000, kOk, "500-999"},
      {"bytes=-500", 10000, kOk, "9500-9999"},   // suffix
      {"bytes=9500-", 10000, kOk, "9500-9999"},  // open
      {"bytes=0-0,-1", 10000, kOk, "0-0,9999-9999"},
      {"bytes=0-99999", 100, kOk, "0-99"},  // last clamped to the length
      {"bytes=-99999", 100, kOk, "0-99"},   // suffix longer than the file
      {"BYTES = 0-1", 100, kIgnore, ""},    // not the syntax: ignored
      {"Bytes=0-1", 100, kOk, "0-1"},       // the unit is case-insensitive
      {"bytes= 0-1 , 5-6 ", 100, kOk, "0-1,5-6"},
      {"bytes=0-1,,5-6", 100, kOk, "0-1,5-6"},
      // coalescing: overlapping and adjacent ranges merge, order does not matter
      {"bytes=0-10,5-20", 100, kOk, "0-20"},
      {"bytes=20-29,0-9,10-19", 100, kOk, "0-29"},
      {"bytes=50-59,0-9", 100, kOk, "0-9,50-59"},
      // unsatisfiable: every range starts past the end
      {"bytes=100-", 100, k416, ""},
      {"bytes=100-200,300-400", 100, k416, ""},
      {"bytes=-0", 100, k416, ""},
      {"bytes=0-", 0, kIgnore, ""},  // an empty representation: 200, whatever the ranges
      {"bytes=-5", 0, kIgnore, ""},
      {"bytes=0-0", 0, kIgnore, ""},
      {"bytes=18446744073709551615-", 100, k416, ""},  // 2^64 - 1: a number, past the end
      {"bytes=100-200,0-1", 100, kOk, "0-1"},          // unsatisfiable parts are dropped
      // invalid syntax is ignored (200)
      {"", 100, kIgnore, ""},
      {"items=0-1", 100, kIgnore, ""},
      {"bytes=", 100, kIgnore, ""},
      {"bytes=5", 100, kIgnore, ""},
      {"bytes=5-1", 100, kIgnore, ""},  // last < first
      {"bytes=a-b", 100, kIgnore, ""},
      {"bytes=+1-2", 100, kIgnore, ""},  // 1*DIGIT: no sign
      {"bytes=1-+2", 100, kIgnore, ""},
      {"bytes=--2", 100, kIgnore, ""},
      {"bytes=1 -2", 100, kIgnore, ""},  // no space inside a spec
      {"bytes=1O-20", 100, kIgnore, ""},
      {"bytes=18446744073709551616-", 100, kIgnore, ""},  // 2^64: not a number we can hold
      {"bytes=-", 100, kIgnore, ""},
      {"bytes=1-2-3", 100, kIgnore, ""},
      {"bytes=0x10-20", 100, kIgnore, ""},
      {"bytes=99999999999999999999-", 100, kIgnore, ""},
  };
  for (const Case& c : cases) {
    RangeSet set;
    EXPECT_EQ(ParseRange(c.header, c.length, 16, &set), c.outcome) << c.header;
    if (c.outcome == kOk) {
      EXPECT_EQ(Describe(set), c.ranges) << c.header;
    }
  }
}

// Amplification: many ranges, or ranges adding up to more than the file, get the whole file.
TEST(Range, RefusesAmplification) {
  RangeSet set;
  std::string many = "bytes=";
  for (int i = 0; i < 17; ++i)
    many += std::to_string(i * 10) + "-" + std::to_string(i * 10 + 1) + ",";
  EXPECT_EQ(ParseRange(many, 1000, 16, &set), RangeOutcome::kIgnore);
  EXPECT_EQ(ParseRange(many, 1000, 17, &set), RangeOutcome::kSatisfiable);
  EXPECT_EQ(set.count, 17u);
  EXPECT_EQ(ParseRange("bytes=0-,0-,0-", 1000, 16, &set), RangeOutcome::kIgnore);
  EXPECT_EQ(ParseRange("bytes=0-499,250-749", 1000, 16, &set), RangeOutcome::kSatisfiable);
  EXPECT_EQ(ParseRange("bytes=0-599,400-999", 1000, 16, &set), RangeOutcome::kIgnore);
  // The lengths' sum is not held in 64 bits: three whole copies of the largest file Linux can
  // have (2^63 - 1 bytes, on XFS) add up to more than 2^64.
  EXPECT_EQ(ParseRange("bytes=0-,0-,0-", INT64_MAX, 16, &set), RangeOutcome::kIgnore);
  EXPECT_EQ(ParseRange("bytes=-18446744073709551615,0-0", UINT64_MAX, 16, &set),
            RangeOutcome::kIgnore);
  // The configured limit is itself capped by the set's capacity.
  EXPECT_EQ(ParseRange(many, 1000, 1000000, &set), RangeOutcome::kSatisfiable);
}

// RFC 9110 section 14.6: multipart/byteranges framing.
TEST(Range, LaysOutMultipartBodies) {
  RangeSet set;
  ASSERT_EQ(ParseRange("bytes=0-1,-2", 10, 16, &set), RangeOutcome::kSatisfiable);
  MultipartLayout m(set, "text/plain", 10, "BOUND");
  char buf[MultipartLayout::kMaxPartHead];
  std::string body;
  const std::string file = "0123456789";
  for (size_t i = 0; i < set.count; ++i) {
    body.append(buf, m.PartHead(i, buf));
    body += file.substr(set.ranges[i].first, set.ranges[i].Length());
  }
  body.append(buf, m.Tail(buf));
  EXPECT_EQ(body,
            "\r\n--BOUND\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/10\r\n\r\n01"
            "\r\n--BOUND\r\nContent-Type: text/plain\r\nContent-Range: bytes 8-9/10\r\n\r\n89"
            "\r\n--BOUND--\r\n");
  EXPECT_EQ(m.ContentLength(), body.size());
}

// PartHead's buffer fits the longest part head: a 70-byte boundary, a content type cut at 128
// bytes and three 20-digit numbers.
TEST(Range, TheLongestPartHeadFitsItsBuffer) {
  RangeSet set;
  set.ranges[0] = ByteRange{UINT64_MAX - 2, UINT64_MAX - 1};
  set.ranges[1] = ByteRange{UINT64_MAX - 1, UINT64_MAX - 1};
  set.count = 2;
  const std::string boundary(MultipartLayout::kMaxBoundary, 'B');
  const std::string type(200, 't');
  MultipartLayout m(set, type, UINT64_MAX, boundary);
  char buf[2 * MultipartLayout::kMaxPartHead];
  EXPECT_EQ(m.PartHead(0, buf), MultipartLayout::kMaxPartHead);
  EXPECT_EQ(m.Tail(buf), MultipartLayout::kMaxBoundary + 8);
}

TEST(Range, FormatsIntegers) {
  char buf[20];
  EXPECT_EQ(std::string(buf, FormatUint(0, buf)), "0");
  EXPECT_EQ(std::string(buf, FormatUint(18446744073709551615ull, buf)), "18446744073709551615");
}

}  // namespace
}  // namespace ringd::http
