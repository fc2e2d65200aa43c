#include "server/http/client_limits.h"

#include <sys/socket.h>

#include <algorithm>
#include <utility>

#include "absl/hash/hash.h"
#include "io/assert.h"
#include "server/http/decimal.h"

namespace ringd::http {

LimitKey KeyOf(const ClientAddress& address, int ipv6_prefix_bits) {
  const ClientAddress a = Unmapped(address);
  LimitKey k;
  k.family = a.family;
  if (a.family == AF_INET) {
    std::memcpy(k.addr, a.addr, 4);
  } else if (a.family == AF_INET6) {
    const int bits = std::clamp(ipv6_prefix_bits, 0, 128);
    std::memcpy(k.addr, a.addr, static_cast<size_t>(bits / 8));
    if (bits % 8 != 0)
      k.addr[bits / 8] = a.addr[bits / 8] & static_cast<uint8_t>(0xff00 >> (bits % 8));
  }
  return k;
}

std::optional<RateLimit> ParseRateLimit(std::string_view text) {
  const size_t comma = text.find(',');
  std::string_view rate = text.substr(0, comma);
  uint64_t per_s_unit = 0;  // 1 for r/s, 60 for r/m
  if (rate.ends_with("r/s")) {
    per_s_unit = 1;
  } else if (rate.ends_with("r/m")) {
    per_s_unit = 60;
  } else {
    return std::nullopt;
  }
  uint64_t n = 0;
  if (!ParseDecimal(rate.substr(0, rate.size() - 3), 1000000, &n) || n == 0) return std::nullopt;
  RateLimit limit;
  limit.microrequests_per_s = n * 1000000 / per_s_unit;
  if (limit.microrequests_per_s == 0) return std::nullopt;
  if (comma != std::string_view::npos) {
    const std::string_view burst = text.substr(comma + 1);
    uint64_t b = 0;
    if (!burst.starts_with("burst=") || !ParseDecimal(burst.substr(6), 1000000, &b)) {
      return std::nullopt;
    }
    limit.burst = static_cast<uint32_t>(b);
  }
  return limit;
}

RateTable::RateTable(RateLimit limit, uint32_t capacity, uint64_t seed)
    : limit_(limit), capacity_(capacity), seed_(seed), entries_(new Entry[capacity]) {
  RINGD_ASSERT(capacity_ > 0 && limit_.microrequests_per_s > 0);
}

// The bucket of `e` at `now_ms`, as nginx keeps it: what it held when last seen less what the
// rate has drained since, which may go below zero (a request adds one, then it is clamped at
// zero). Micro-requests per second times milliseconds is nano-requests. A clock that went back
// drains nothing; once the bucket is empty enough that a request starts from nothing, longer
// makes no difference (and is not multiplied: no overflow).
int64_t RateTable::Level(const Entry& e, int64_t now_ms) const {
  const int64_t rate = static_cast<int64_t>(limit_.microrequests_per_s);
  const int64_t elapsed = std::max<int64_t>(0, now_ms - e.last_ms);
  if (elapsed > (e.excess + kOne) / rate) return -kOne;
  return e.excess - rate * elapsed;
}

RateTable::Verdict RateTable::Take(const LimitKey& key, int64_t now_ms) {
  const uint64_t h = absl::Hash<std::pair<uint64_t, LimitKey>>{}({seed_, key});
  const uint32_t window = std::min(kWindow, capacity_);
  const int64_t burst = int64_t{limit_.burst} * kOne;
  Entry* free = nullptr;
  Entry* drained = nullptr;
  Entry* oldest = nullptr;
  for (uint32_t i = 0; i < window; ++i) {
    Entry& e = entries_[(h + i) % capacity_];
    if (!e.used) {
      if (free == nullptr) free = &e;
      continue;
    }
    if (e.key == key) {
      const int64_t excess = std::max<int64_t>(0, Level(e, now_ms) + kOne);
      if (excess > burst) {
        // Served again once the bucket has drained to where one more fits: in whole seconds,
        // at least one (a Retry-After of 0 invites an immediate retry).
        const uint64_t wait_ms =
            static_cast<uint64_t>(excess - burst + limit_.microrequests_per_s - 1) /
            limit_.microrequests_per_s;
        return Verdict{false, static_cast<uint32_t>(std::max<uint64_t>(1, (wait_ms + 999) / 1000))};
      }
      e.excess = excess;
      e.last_ms = now_ms;
      RINGD_ASSERT(e.excess <= burst);
      return Verdict{};
    }
    // Drained so far that its next request would start from nothing, as a new entry does.
    if (drained == nullptr && Level(e, now_ms) <= -kOne) drained = &e;
    if (oldest == nullptr || e.last_ms < oldest->last_ms) oldest = &e;
  }
  // A newcomer (or one forgotten): its first request is served and its bucket starts empty,
  // as nginx's first request makes a node with no excess.
  Entry* place = free != nullptr ? free : drained != nullptr ? drained : oldest;
  RINGD_ASSERT(place != nullptr);
  if (place == free) {
    ++used_;
    RINGD_ASSERT(used_ <= capacity_);
  } else if (place != drained) {
    ++evictions_;
  }
  *place = Entry{key, true, 0, now_ms};
  return Verdict{};
}

ConnTable::ConnTable(uint32_t limit, uint32_t capacity) : limit_(limit), capacity_(capacity) {
  RINGD_ASSERT(limit_ > 0 && capacity_ > 0);
  // Twice the most clients there can be: erasing leaves tombstones, and a table this empty
  // drops them in place rather than growing.
  counts_.reserve(size_t{capacity_} * 2);
  reserved_buckets_ = counts_.bucket_count();
}

bool ConnTable::Acquire(const LimitKey& key) {
  auto [it, inserted] = counts_.try_emplace(key, 0);
  if (it->second >= limit_) return false;
  ++it->second;
  RINGD_ASSERT(counts_.size() <= capacity_);
  RINGD_ASSERT(counts_.bucket_count() == reserved_buckets_);  // never grew: no allocation
  return true;
}

void ConnTable::Release(const LimitKey& key) {
  auto it = counts_.find(key);
  RINGD_ASSERT(it != counts_.end() && it->second > 0);  // released only what was acquired
  if (--it->second == 0) counts_.erase(it);
}

uint32_t ConnTable::Count(const LimitKey& key) const {
  auto it = counts_.find(key);
  return it == counts_.end() ? 0 : it->second;
}

}  // namespace ringd::http
