#include "server/http/compression.h"

#include <string>

#include "gtest/gtest.h"
#include "server/http/accept_encoding.h"

namespace ringd::http {
namespace {

Coding Choose(std::string_view header) { return ChooseCoding(ParseAcceptEncoding(header)); }

TEST(ChooseCoding, TakesTheHighestQValueAndBreaksTiesBySize) {
  EXPECT_EQ(Choose("gzip, deflate, br, zstd"), Coding::kBr);
  EXPECT_EQ(Choose("gzip, zstd"), Coding::kZstd);
  EXPECT_EQ(Choose("gzip"), Coding::kGzip);
  EXPECT_EQ(Choose("x-gzip"), Coding::kGzip);
  EXPECT_EQ(Choose("gzip;q=0.5, br;q=0.4"), Coding::kGzip);
  EXPECT_EQ(Choose("zstd;q=1, br;q=0.999"), Coding::kZstd);
  EXPECT_EQ(Choose("br;q=0, gzip"), Coding::kGzip);
  EXPECT_EQ(Choose("*"), Coding::kBr);
  EXPECT_EQ(Choose("*;q=0.2, br;q=0"), Coding::kZstd);
  EXPECT_EQ(Choose("*;q=0.5, gzip"), Coding::kGzip);
  EXPECT_EQ(Choose("*;q=0"), Coding::kIdentity);
  EXPECT_EQ(Choose("identity"), Coding::kIdentity);
  EXPECT_EQ(Choose(""), Coding::kIdentity);
  EXPECT_EQ(Choose("deflate, compress"), Coding::kIdentity);
  EXPECT_EQ(Choose("gzip;q=0, br;q=0, zstd;q=0"), Coding::kIdentity);
  EXPECT_EQ(Choose("ZSTD;Q=0.3"), Coding::kZstd);
  EXPECT_EQ(Choose("zstd;q=2"), Coding::kIdentity);  // malformed: not acceptance
}

TEST(AcceptEncoding, ReadsIdentityAndZstd) {
  EXPECT_EQ(ParseAcceptEncoding("zstd;q=0.7").zstd, 700);
  EXPECT_EQ(ParseAcceptEncoding("gzip").identity, 1000);
  EXPECT_EQ(ParseAcceptEncoding("identity;q=0, gzip").identity, 0);
  EXPECT_EQ(ParseAcceptEncoding("*;q=0").identity, 0);
  EXPECT_EQ(ParseAcceptEncoding("*;q=0, identity").identity, 1000);
  EXPECT_EQ(ParseAcceptEncoding("*;q=0.5").identity, 1000);
  EXPECT_EQ(ParseAcceptEncoding("*;q=0.5").zstd, 500);
}

TEST(CompressPolicy, MatchesTypesAndSizes) {
  CompressPolicy p;
  std::string error;
  ASSERT_TRUE(p.ParseTypes(kDefaultCompressTypes, &error)) << error;
  p.min_bytes = 10;
  p.max_bytes = 100;
  EXPECT_TRUE(p.Compressible("text/html; charset=utf-8", 50));
  EXPECT_TRUE(p.Compressible("text/css", 10));
  EXPECT_TRUE(p.Compressible("TEXT/Plain", 100));
  EXPECT_TRUE(p.Compressible("application/javascript; charset=utf-8", 50));
  EXPECT_TRUE(p.Compressible("image/svg+xml", 50));
  EXPECT_FALSE(p.Compressible("text/css", 9));
  EXPECT_FALSE(p.Compressible("text/css", 101));
  EXPECT_FALSE(p.Compressible("image/png", 50));
  EXPECT_FALSE(p.Compressible("application/octet-stream", 50));
  EXPECT_FALSE(p.Compressible("textual/x", 50));
  EXPECT_FALSE(p.Compressible("text", 50));
  EXPECT_FALSE(p.Compressible("", 50));

  ASSERT_TRUE(p.ParseTypes("Image/PNG, application/*", &error));
  EXPECT_TRUE(p.Compressible("image/png", 50));
  EXPECT_TRUE(p.Compressible("application/wasm", 50));
  EXPECT_FALSE(p.Compressible("text/css", 50));

  for (const char* bad : {"text", "/css", "text/", "text/css;q=1", "text/ css", ""}) {
    EXPECT_FALSE(p.ParseTypes(bad, &error)) << bad;
    EXPECT_FALSE(error.empty());
  }
}

TEST(FormatVariantETag, IsWeakAndNamesTheCoding) {
  char buf[kMaxVariantETag];
  EXPECT_EQ(std::string(buf, FormatVariantETag(0x56273e80, 0x1388, Coding::kGzip, buf)),
            "W/\"56273e80-1388-gzip\"");
  EXPECT_EQ(std::string(buf, FormatVariantETag(0x56273e80, 0x1388, Coding::kBr, buf)),
            "W/\"56273e80-1388-br\"");
  const size_t n = FormatVariantETag(INT64_MAX, UINT64_MAX, Coding::kZstd, buf);
  EXPECT_LE(n, kMaxVariantETag);
  EXPECT_EQ(std::string(buf, n), "W/\"7fffffffffffffff-ffffffffffffffff-zstd\"");
}

}  // namespace
}  // namespace ringd::http
