// Faults the backends inject where a system call or a completion returns, for tests only
// (io/loop_fault_test.cc): each is one the kernel can produce at that point, and the backend's
// real path handles it (a retry, a re-arm, a poll, an error for the owner). Seeded, so a seed
// that fails replays the same decisions, and logged, so a failure shows what was injected.
// In production LoopOptions::faults is null: one predictable branch at each site, nothing else.
//
//   FaultPlan plan(seed);
//   plan.Set(Fault::kShort, 0.2);   // a fifth of the transfers move only a prefix
//   options.faults = &plan;         // then make the loop; the plan outlives it
//   ... on a failure: std::cerr << plan.Log();
#pragma once

#include <array>
#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

namespace ringd::io {

enum class Fault : uint8_t {
  kShort,         // a send, sendfile, splice or read moves only a prefix of what it was asked
  kEagain,        // the socket is full, or had nothing after all (readiness gone by the read)
  kEintr,         // a system call interrupted by a signal
  kEnomem,        // the operation fails at once, having moved nothing
  kEbusy,         // io_uring_enter refuses (its completion queue overflowing); epoll: the
                  // worker queue is full
  kEnobufs,       // uring: a receive buffer is withheld from the ring for a Poll (receives run
                  // out of buffers: ENOBUFS from the kernel itself)
  kEmfile,        // a descriptor cannot be made (pipe2, FIXED_FD_INSTALL)
  kEndMultishot,  // uring: the kernel ends a multishot receive early (its last bytes without
                  // IORING_CQE_F_MORE)
  kHoldBack,      // uring: a completion (and those after it for the same operation) reaches
                  // the loop a Poll later, as an overflowing completion queue's do
  kNotCached,     // the page cache says no (the pages were reclaimed): the cold path
  kCount,
};

const char* FaultName(Fault f);

class FaultPlan {
 public:
  explicit FaultPlan(uint64_t seed) : seed_(seed), state_(seed) {}

  // The chance of `f` at each site that can inject it, 0 to 1.
  void Set(Fault f, double probability);
  void Clear() { chance_.fill(0); }

  // Whether to inject `f` at `site` now (logged when so).
  bool Inject(Fault f, const char* site) {
    const uint32_t chance = chance_[static_cast<size_t>(f)];
    if (chance == 0 || (Next() & 0xffff) >= chance) return false;
    Note(f, site, 0);
    return true;
  }
  // `n`, or (a kShort injected at `site`) a length in [1, n).
  uint64_t Shorten(const char* site, uint64_t n) {
    const uint32_t chance = chance_[static_cast<size_t>(Fault::kShort)];
    if (n < 2 || chance == 0 || (Next() & 0xffff) >= chance) return n;
    const uint64_t prefix = 1 + Next() % (n - 1);
    Note(Fault::kShort, site, prefix);
    return prefix;
  }

  // For a system call that can fail so before doing anything: EAGAIN, EINTR or ENOMEM when one
  // is injected at `site`, else 0.
  int Errno(const char* site) {
    if (Inject(Fault::kEagain, site)) return EAGAIN;
    if (Inject(Fault::kEintr, site)) return EINTR;
    if (Inject(Fault::kEnomem, site)) return ENOMEM;
    return 0;
  }

  uint64_t injected(Fault f) const { return counts_[static_cast<size_t>(f)]; }
  uint64_t injected_total() const { return total_; }
  // How many of each fault each site injected (a long run's account of what it reached).
  struct SiteCount {
    Fault fault;
    const char* site;
    uint64_t count;
  };
  const std::vector<SiteCount>& sites() const { return sites_; }
  // The seed, what was injected per kind, then the last kLogLines injections in order.
  std::string Log() const;

 private:
  static constexpr size_t kLogLines = 400;
  struct Entry {
    uint64_t seq;
    const char* site;
    Fault fault;
    uint64_t detail;  // kShort: the length kept
  };
  uint64_t Next() {  // splitmix64
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  void Note(Fault f, const char* site, uint64_t detail);

  uint64_t seed_;
  uint64_t state_;
  std::array<uint32_t, static_cast<size_t>(Fault::kCount)> chance_{};  // of 65536
  std::array<uint64_t, static_cast<size_t>(Fault::kCount)> counts_{};
  uint64_t total_ = 0;
  std::vector<Entry> log_;  // a ring of the last kLogLines
  std::vector<SiteCount> sites_;
};

}  // namespace ringd::io
