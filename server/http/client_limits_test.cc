#include "server/http/client_limits.h"

#include <arpa/inet.h>

#include <string>

#include "gtest/gtest.h"

namespace ringd::http {
namespace {

LimitKey Key(const char* text, int ipv6_bits = 128) {
  const std::optional<ClientAddress> a = ParseAddress(text);
  EXPECT_TRUE(a.has_value()) << text;
  return KeyOf(a.value_or(ClientAddress{}), ipv6_bits);
}

RateLimit Rate(const char* text) {
  const std::optional<RateLimit> r = ParseRateLimit(text);
  EXPECT_TRUE(r.has_value()) << text;
  return r.value_or(RateLimit{1000, 0});
}

TEST(ParseRateLimit, RatesAndBursts) {
  EXPECT_EQ(Rate("10r/s").microrequests_per_s, 10000000u);
  EXPECT_EQ(Rate("10r/s").burst, 0u);
  EXPECT_EQ(Rate("30r/m").microrequests_per_s, 500000u);
  EXPECT_EQ(Rate("1r/m").microrequests_per_s, 16666u);
  EXPECT_EQ(Rate("1000000r/s").microrequests_per_s, 1000000000000u);
  EXPECT_EQ(Rate("10r/s,burst=20").burst, 20u);
  for (const char* bad : {"", "10", "10r/h", "0r/s", "r/s", "-1r/s", "10r/s,", "10r/s,burst",
                          "10r/s,burst=", "10r/s,burst=x", "10r/s,nodelay", "2000000r/s"}) {
    EXPECT_FALSE(ParseRateLimit(bad).has_value()) << bad;
  }
}

TEST(KeyOf, MappedIpv4AndIpv6Prefixes) {
  EXPECT_EQ(Key("::ffff:192.0.2.1"), Key("192.0.2.1"));
  EXPECT_EQ(Key("2001:db8:1:2:aaaa::1", 64), Key("2001:db8:1:2:bbbb::9", 64));
  EXPECT_FALSE(Key("2001:db8:1:2:aaaa::1", 128) == Key("2001:db8:1:2:bbbb::9", 128));
  EXPECT_FALSE(Key("2001:db8:1:2::1", 64) == Key("2001:db8:1:3::1", 64));
  EXPECT_EQ(Key("2001:db8:1:ff::", 60), Key("2001:db8:1:f0::", 60));
  EXPECT_FALSE(Key("127.0.0.1") == Key("127.0.0.2"));
}

// 10r/s, burst 5: the first request and five more at once are served, the seventh refused
// with the seconds until one fits; after 100 ms one more fits, and after the bucket drains the
// whole burst again.
TEST(RateTable, BurstThenRefusalThenRecovery) {
  RateTable t(Rate("10r/s,burst=5"), 64, 1);
  const LimitKey a = Key("127.0.0.2");
  int64_t now = 1000;
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(t.Take(a, now).allowed) << i;
  const RateTable::Verdict refused = t.Take(a, now);
  EXPECT_FALSE(refused.allowed);
  EXPECT_EQ(refused.retry_after_s, 1u);
  EXPECT_FALSE(t.Take(a, now + 99).allowed);  // a refusal adds nothing
  EXPECT_TRUE(t.Take(a, now + 100).allowed);
  EXPECT_FALSE(t.Take(a, now + 100).allowed);
  now += 100 + 600;  // drained: the burst again
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(t.Take(a, now).allowed) << i;
  EXPECT_FALSE(t.Take(a, now).allowed);
  // Another client has its own bucket.
  EXPECT_TRUE(t.Take(Key("127.0.0.3"), now).allowed);
  EXPECT_EQ(t.used(), 2u);
}

TEST(RateTable, NoBurstIsOneRequestPerInterval) {
  RateTable t(Rate("2r/s"), 16, 7);
  const LimitKey a = Key("10.0.0.1");
  EXPECT_TRUE(t.Take(a, 0).allowed);
  EXPECT_FALSE(t.Take(a, 0).allowed);
  EXPECT_FALSE(t.Take(a, 499).allowed);
  EXPECT_TRUE(t.Take(a, 500).allowed);
  // Slow rates: Retry-After counts whole seconds, rounded up.
  RateTable slow(Rate("6r/m"), 16, 7);
  EXPECT_TRUE(slow.Take(a, 0).allowed);
  const RateTable::Verdict v = slow.Take(a, 2500);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.retry_after_s, 8u);  // 7.5 s to go
  EXPECT_TRUE(slow.Take(a, 10000).allowed);
  // A clock that steps back drains nothing and breaks nothing.
  EXPECT_FALSE(slow.Take(a, 9000).allowed);
  // A rate per minute keeps its precision: 1r/m serves one in 60.0024 s, not in 62.5 s.
  RateTable minute(Rate("1r/m"), 16, 7);
  EXPECT_TRUE(minute.Take(a, 0).allowed);
  EXPECT_FALSE(minute.Take(a, 59999).allowed);
  EXPECT_TRUE(minute.Take(a, 60003).allowed);  // 16666 micro-requests a second
  EXPECT_EQ(minute.Take(a, 60003).retry_after_s, 61u);
  // The fastest rate over the longest gap: no overflow.
  RateTable fast(Rate("1000000r/s,burst=1000000"), 16, 7);
  for (int i = 0; i < 1000; ++i) EXPECT_TRUE(fast.Take(a, 0).allowed);
  EXPECT_TRUE(fast.Take(a, int64_t{1} << 60).allowed);
}

// The table never holds more than its capacity: a flood of addresses takes free places, then
// drained ones, then evicts the least recently seen, each counted.
TEST(RateTable, BoundedUnderAFloodOfAddresses) {
  RateTable t(Rate("1r/s,burst=3"), RateTable::kWindow, 42);  // one window: the whole table
  char text[32];
  for (int i = 0; i < 8; ++i) {
    std::snprintf(text, sizeof text, "10.0.0.%d", i);
    EXPECT_TRUE(t.Take(Key(text), 0).allowed);
    EXPECT_TRUE(t.Take(Key(text), i).allowed);  // each has something in its bucket
  }
  EXPECT_EQ(t.used(), 8u);
  EXPECT_EQ(t.evictions(), 0u);
  // 10.0.0.0 was seen least recently: the newcomer evicts it, and it starts afresh.
  EXPECT_TRUE(t.Take(Key("10.1.0.0"), 10).allowed);
  EXPECT_EQ(t.evictions(), 1u);
  EXPECT_EQ(t.used(), 8u);
  // Once buckets have drained, newcomers reuse those places without evicting anyone.
  for (int i = 0; i < 100; ++i) {
    std::snprintf(text, sizeof text, "10.2.%d.%d", i / 256, i % 256);
    EXPECT_TRUE(t.Take(Key(text), 5000 + i * 2000).allowed);
  }
  EXPECT_EQ(t.evictions(), 1u);
  EXPECT_EQ(t.used(), 8u);
  // A large table under a million addresses: used never passes capacity.
  RateTable big(Rate("1r/s,burst=1"), 1024, 9);
  for (uint32_t i = 0; i < 100000; ++i) {
    ClientAddress a;
    a.family = AF_INET6;
    a.addr[0] = 0x20;
    std::memcpy(a.addr + 4, &i, sizeof i);  // a different /64 each
    big.Take(KeyOf(a, 64), 0);
    big.Take(KeyOf(a, 64), 0);
  }
  EXPECT_EQ(big.used(), 1024u);
  EXPECT_GT(big.evictions(), 90000u);
}

TEST(ConnTable, CountsUpToTheLimitAndFreesSlots) {
  ConnTable t(2, 16);
  const LimitKey a = Key("127.0.0.2");
  const LimitKey b = Key("127.0.0.3");
  EXPECT_TRUE(t.Acquire(a));
  EXPECT_TRUE(t.Acquire(a));
  EXPECT_FALSE(t.Acquire(a));
  EXPECT_EQ(t.Count(a), 2u);
  EXPECT_TRUE(t.Acquire(b));
  t.Release(a);
  EXPECT_TRUE(t.Acquire(a));
  t.Release(a);
  t.Release(a);
  t.Release(b);
  EXPECT_EQ(t.clients(), 0u);
  // Churn through many clients: the table never grows (Acquire asserts it).
  for (uint32_t round = 0; round < 200; ++round) {
    LimitKey keys[16];
    for (uint32_t i = 0; i < 16; ++i) {
      keys[i].family = AF_INET;
      keys[i].addr[0] = 10;
      std::memcpy(keys[i].addr + 1, &round, 2);
      keys[i].addr[3] = static_cast<uint8_t>(i);
      EXPECT_TRUE(t.Acquire(keys[i]));
    }
    for (const LimitKey& k : keys) t.Release(k);
  }
  EXPECT_EQ(t.clients(), 0u);
}

TEST(ConnTableDeathTest, ReleasingWhatWasNotAcquiredAborts) {
  ConnTable t(2, 4);
  EXPECT_DEATH(t.Release(Key("127.0.0.9")), "assertion failed");
}

}  // namespace
}  // namespace ringd::http
