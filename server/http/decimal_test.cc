#include "server/http/decimal.h"

#include <gtest/gtest.h>

#include <string>

namespace ringd::http {
namespace {

constexpr uint64_t kUntouched = 12345;

uint64_t Parse(std::string_view text, bool* ok) {
  uint64_t v = kUntouched;
  *ok = ParseDecimal(text, &v);
  return v;
}

TEST(ParseDecimal, Digits) {
  bool ok;
  EXPECT_EQ(Parse("0", &ok), 0u);
  EXPECT_TRUE(ok);
  EXPECT_EQ(Parse("1", &ok), 1u);
  EXPECT_TRUE(ok);
  EXPECT_EQ(Parse("007", &ok), 7u);
  EXPECT_TRUE(ok);
  EXPECT_EQ(Parse("1024", &ok), 1024u);
  EXPECT_TRUE(ok);
}

TEST(ParseDecimal, Uint64Bound) {
  bool ok;
  EXPECT_EQ(Parse("18446744073709551615", &ok), UINT64_MAX);  // 2^64 - 1, 20 digits
  EXPECT_TRUE(ok);
  EXPECT_EQ(Parse("18446744073709551616", &ok), kUntouched);  // 2^64
  EXPECT_FALSE(ok);
  EXPECT_EQ(Parse("99999999999999999999", &ok), kUntouched);  // 20 digits, over
  EXPECT_FALSE(ok);
  EXPECT_EQ(Parse("100000000000000000000", &ok), kUntouched);  // 21 digits
  EXPECT_FALSE(ok);
  EXPECT_EQ(Parse("00000000000000000000001", &ok), 1u);  // leading zeros do not overflow
  EXPECT_TRUE(ok);
}

TEST(ParseDecimal, RefusesAnythingButDigits) {
  for (const char* text : {"", "1O", "O1", "+1", "-1", "-0", " 1", "1 ", "\t1", "1\t", "0x10",
                           "1.0", "1e3", "1,2", "+", "-", " "}) {
    bool ok;
    EXPECT_EQ(Parse(text, &ok), kUntouched) << "'" << text << "'";
    EXPECT_FALSE(ok) << "'" << text << "'";
  }
  bool ok;
  EXPECT_EQ(Parse(std::string_view("1\0", 2), &ok), kUntouched);
  EXPECT_FALSE(ok);
}

TEST(ParseDecimal, ReadsOnlyTheView) {
  const std::string text = "123456";
  uint64_t v = 0;
  EXPECT_TRUE(ParseDecimal(std::string_view(text).substr(1, 3), &v));
  EXPECT_EQ(v, 234u);
}

TEST(ParseDecimal, Max) {
  uint64_t v = kUntouched;
  EXPECT_TRUE(ParseDecimal("65535", 65535, &v));
  EXPECT_EQ(v, 65535u);
  v = kUntouched;
  EXPECT_FALSE(ParseDecimal("65536", 65535, &v));
  EXPECT_EQ(v, kUntouched);
  EXPECT_TRUE(ParseDecimal("0", 0, &v));
  EXPECT_EQ(v, 0u);
  EXPECT_FALSE(ParseDecimal("1", 0, &v));
  EXPECT_TRUE(ParseDecimal("18446744073709551615", UINT64_MAX, &v));
  EXPECT_EQ(v, UINT64_MAX);
  EXPECT_FALSE(ParseDecimal("+1", UINT64_MAX, &v));
}

}  // namespace
}  // namespace ringd::http
