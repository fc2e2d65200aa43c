// Per-client limits, each in a fixed-size table a shard owns: a request rate with a burst
// (`RateTable`, nginx's `limit_req ... burst=N nodelay`) and a count of concurrent connections
// (`ConnTable`, nginx's `limit_conn`). Pure: the caller hands in the client's address and the
// time; nothing here reads a clock or a socket, and nothing allocates after construction.
//
//   http::RateTable rates(*http::ParseRateLimit("10r/s,burst=20"), 16384, seed);
//   const http::RateTable::Verdict v = rates.Take(http::KeyOf(client, 64), now_ms);
//   if (!v.allowed) answer 503 with "Retry-After: " << v.retry_after_s;
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "server/http/client_address.h"

namespace ringd::http {

// Who a limit counts: an address, IPv4-mapped IPv6 as the IPv4 address it is, IPv6 cut to its
// first `ipv6_prefix_bits` (a /64 is what one subscriber is given: keyed by /64, a client with
// a whole /64 is one client). An unknown address (family 0) is one key of its own.
struct LimitKey {
  uint8_t family = 0;
  uint8_t addr[16] = {};
  bool operator==(const LimitKey& o) const {
    return family == o.family && std::memcmp(addr, o.addr, sizeof addr) == 0;
  }
  template <typename H>
  friend H AbslHashValue(H h, const LimitKey& k) {
    return H::combine(H::combine_contiguous(std::move(h), k.addr, sizeof k.addr), k.family);
  }
};
LimitKey KeyOf(const ClientAddress& a, int ipv6_prefix_bits);

// A rate as nginx writes it ("10r/s", "600r/m") and a burst ("10r/s,burst=20"): the requests a
// client may make at once beyond the one the rate allows now. Rates from 1r/m to 1000000r/s.
struct RateLimit {
  uint64_t microrequests_per_s = 0;  // 10r/s: 10000000; 30r/m: 500000; 1r/m: 16666
  uint32_t burst = 0;
};
std::optional<RateLimit> ParseRateLimit(std::string_view text);

// nginx's leaky bucket: each client's `excess` is what it asked beyond the rate, drained at the
// rate; a request that would take it above `burst` is refused (and leaves it as it was), any
// other is served at once (nodelay) and adds one. A client's first request finds an empty
// bucket; with no burst, one request per 1/rate seconds is served. Measured in nano-requests (a
// rate in micro-requests a second times milliseconds), so draining over whole milliseconds is
// exact, and a rate per minute is kept to a millionth of a request a second.
//
// Bound: `capacity` entries, made at construction. An entry's place is found by a keyed hash
// (seeded per process: a client cannot choose whose entries it lands on) within a window of
// kWindow places; a newcomer takes a free place, else one whose bucket has drained (an entry
// with nothing in its bucket is the same as none), else the window's least recently seen
// entry, which is evicted (its client starts afresh: counted in evictions()). So a flood of
// addresses costs the table nothing but forgetting; it never grows.
class RateTable {
 public:
  static constexpr uint32_t kWindow = 8;
  RateTable(RateLimit limit, uint32_t capacity, uint64_t seed);

  struct Verdict {
    bool allowed = true;
    uint32_t retry_after_s = 0;  // refused: whole seconds until a request would be served
  };
  Verdict Take(const LimitKey& key, int64_t now_ms);

  uint32_t capacity() const { return capacity_; }
  uint32_t used() const { return used_; }
  uint64_t evictions() const { return evictions_; }

 private:
  static constexpr int64_t kOne = 1000000000;  // one request, in nano-requests
  struct Entry {
    LimitKey key;
    bool used = false;
    int64_t excess = 0;  // nano-requests, at last_ms; never above the burst
    int64_t last_ms = 0;
  };
  static_assert(sizeof(Entry) <= 40);  // docs/OPERATIONS.md: 40 bytes a client
  int64_t Level(const Entry& e, int64_t now_ms) const;

  RateLimit limit_;
  uint32_t capacity_;
  uint64_t seed_;
  uint32_t used_ = 0;
  uint64_t evictions_ = 0;
  std::unique_ptr<Entry[]> entries_;
};

// How many connections each client holds (nginx's limit_conn). Bound: at most `capacity`
// clients at once, which the caller makes its connection slots (a client with no connection
// has no entry), so the table never fills: reserved at construction for twice that, it
// never grows nor allocates (asserted).
class ConnTable {
 public:
  ConnTable(uint32_t limit, uint32_t capacity);
  // Counts one more connection of `key`; false (and nothing counted) when it holds `limit`.
  bool Acquire(const LimitKey& key);
  void Release(const LimitKey& key);
  uint32_t Count(const LimitKey& key) const;
  size_t clients() const { return counts_.size(); }

 private:
  uint32_t limit_;
  uint32_t capacity_;
  size_t reserved_buckets_;
  absl::flat_hash_map<LimitKey, uint32_t> counts_;
};

}  // namespace ringd::http
