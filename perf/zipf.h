// Picks request paths the way a site's visitors do: a Zipf distribution over ranks (rank 0 the
// most popular), P(rank i) proportional to 1 / (i + 1)^s, from a seeded generator, so that a run
// is reproducible and every load generator thread draws its own sequence.
//
//   ZipfSampler zipf(paths.size(), 0.8);  SplitMix64 rng(seed);
//   const size_t i = zipf.Sample(rng.Next());
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ringd::perf {

// A small, fast, seedable 64-bit generator (Steele, Lea and Flood's SplitMix64).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

class ZipfSampler {
 public:
  // n >= 1 ranks; s >= 0 (s = 0 is uniform). The cumulative distribution is built once (n
  // doubles), and each sample is one binary search in it.
  ZipfSampler(size_t n, double s) : cdf_(std::max<size_t>(n, 1)) {
    double sum = 0;
    for (size_t i = 0; i < cdf_.size(); ++i) {
      sum += 1.0 / std::pow(static_cast<double>(i + 1), s);
      cdf_[i] = sum;
    }
    for (double& c : cdf_) c /= sum;
    cdf_.back() = 1.0;
  }

  size_t size() const { return cdf_.size(); }

  // The probability of rank i, for tests and reports.
  double Probability(size_t i) const { return i == 0 ? cdf_[0] : cdf_[i] - cdf_[i - 1]; }

  // A rank, from 64 uniformly random bits.
  size_t Sample(uint64_t random_bits) const {
    const double u = static_cast<double>(random_bits >> 11) * 0x1.0p-53;  // [0, 1)
    const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
    return std::min(static_cast<size_t>(it - cdf_.begin()), cdf_.size() - 1);
  }

 private:
  std::vector<double> cdf_;
};

}  // namespace ringd::perf
