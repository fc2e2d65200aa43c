#include "perf/zipf.h"

#include <vector>

#include "gtest/gtest.h"

namespace ringd::perf {
namespace {

TEST(ZipfSampler, ProbabilitiesFollowThePowerLawAndSumToOne) {
  const ZipfSampler z(1000, 1.0);
  double sum = 0;
  for (size_t i = 0; i < z.size(); ++i) sum += z.Probability(i);
  EXPECT_NEAR(sum, 1.0, 1e-9);
  EXPECT_NEAR(z.Probability(0) / z.Probability(1), 2.0, 1e-9);
  EXPECT_NEAR(z.Probability(0) / z.Probability(9), 10.0, 1e-9);
}

TEST(ZipfSampler, SampleFrequenciesMatchProbabilities) {
  const ZipfSampler z(100, 0.8);
  SplitMix64 rng(42);
  std::vector<int> seen(z.size());
  constexpr int kDraws = 1000000;
  for (int i = 0; i < kDraws; ++i) ++seen[z.Sample(rng.Next())];
  for (size_t i : {0, 1, 10, 99}) {
    const double expected = z.Probability(i) * kDraws;
    EXPECT_NEAR(seen[i], expected, 5 * std::sqrt(expected) + 1) << "rank " << i;
  }
}

TEST(ZipfSampler, ZeroExponentIsUniformAndEdgesStayInRange) {
  const ZipfSampler z(4, 0.0);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(z.Probability(i), 0.25, 1e-12);
  EXPECT_EQ(z.Sample(0), 0u);
  EXPECT_EQ(z.Sample(~uint64_t{0}), 3u);
  const ZipfSampler one(1, 1.2);
  EXPECT_EQ(one.Sample(12345), 0u);
}

TEST(SplitMix64, SameSeedSameSequence) {
  SplitMix64 a(7), b(7), c(8);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.Next(), b.Next());
  EXPECT_NE(SplitMix64(7).Next(), c.Next());
}

}  // namespace
}  // namespace ringd::perf
