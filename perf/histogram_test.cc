#include "perf/histogram.h"

#include "gtest/gtest.h"

namespace ringd::perf {
namespace {

TEST(LatencyHistogram, PercentilesWithinTwoPercent) {
  LatencyHistogram h;
  for (uint64_t v = 1; v <= 100000; ++v) h.Record(v);
  EXPECT_EQ(h.count(), 100000u);
  EXPECT_EQ(h.max(), 100000u);
  for (double p : {50.0, 90.0, 99.0, 99.9}) {
    const double exact = p / 100.0 * 100000;
    EXPECT_NEAR(static_cast<double>(h.Percentile(p)), exact, exact * 0.02) << p;
  }
  EXPECT_EQ(h.Percentile(100), 100000u);
  EXPECT_NEAR(h.mean(), 50000.5, 0.01);
}

TEST(LatencyHistogram, SmallValuesAreExactAndMergeAdds) {
  LatencyHistogram a, b;
  a.Record(3);
  b.Record(7);
  b.Record(7);
  a.Merge(b);
  EXPECT_EQ(a.count(), 3u);
  EXPECT_EQ(a.Percentile(10), 3u);
  EXPECT_EQ(a.Percentile(90), 7u);
  LatencyHistogram empty;
  EXPECT_EQ(empty.Percentile(50), 0u);
}

}  // namespace
}  // namespace ringd::perf
