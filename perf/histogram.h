// A log-linear latency histogram (HdrHistogram-style, 64 sub-buckets per power of two: about 1.6%
// relative error), fixed size, no allocation while recording.
//
//   LatencyHistogram h;  h.Record(latency_us);  h.Percentile(99.0);
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

namespace ringd::perf {

class LatencyHistogram {
 public:
  static constexpr int kSubBits = 6;
  static constexpr int kBuckets = (64 - kSubBits + 1) << kSubBits;

  void Record(uint64_t v) {
    ++counts_[Index(v)];
    ++count_;
    sum_ += v;
    max_ = std::max(max_, v);
  }
  void Merge(const LatencyHistogram& o) {
    for (int i = 0; i < kBuckets; ++i) counts_[i] += o.counts_[i];
    count_ += o.count_;
    sum_ += o.sum_;
    max_ = std::max(max_, o.max_);
  }
  uint64_t count() const { return count_; }
  uint64_t max() const { return max_; }
  double mean() const { return count_ ? static_cast<double>(sum_) / count_ : 0; }

  // The smallest recorded value v with at least p% of values <= v (bucket upper bound).
  uint64_t Percentile(double p) const {
    if (count_ == 0) return 0;
    const uint64_t target = static_cast<uint64_t>(p / 100.0 * static_cast<double>(count_) + 0.5);
    uint64_t seen = 0;
    for (int i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= std::max<uint64_t>(target, 1)) return std::min(UpperBound(i), max_);
    }
    return max_;
  }

 private:
  static int Index(uint64_t v) {
    if (v < (1u << kSubBits)) return static_cast<int>(v);
    const int msb = 63 - __builtin_clzll(v);
    const int shift = msb - kSubBits;
    return ((shift + 1) << kSubBits) + static_cast<int>((v >> shift) & ((1u << kSubBits) - 1));
  }
  static uint64_t UpperBound(int i) {
    if (i < (1 << kSubBits)) return static_cast<uint64_t>(i);
    const int shift = (i >> kSubBits) - 1;
    const uint64_t sub = static_cast<uint64_t>(i & ((1 << kSubBits) - 1));
    return (((uint64_t{1} << kSubBits) | sub) << shift) + ((uint64_t{1} << shift) - 1);
  }

  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0, sum_ = 0, max_ = 0;
};

}  // namespace ringd::perf
