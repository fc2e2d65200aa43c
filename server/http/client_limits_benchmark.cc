// What a request pays for the limits per client: a bucket taken by a client the table holds,
// by a new client each time (a flood of addresses: every one a newcomer, most evicting), and
// the client an X-Forwarded-For list names.
#include <cstring>

#include "benchmark/benchmark.h"
#include "server/http/client_limits.h"

namespace ringd::http {
namespace {

ClientAddress V4(uint32_t n) {
  ClientAddress a;
  a.family = AF_INET;
  std::memcpy(a.addr, &n, sizeof n);
  return a;
}

void BM_RateTakeKnownClient(benchmark::State& state) {
  RateTable t(*ParseRateLimit("1000000r/s,burst=1000"), 16384, 1);
  const LimitKey k = KeyOf(V4(0x7f000001), 64);
  int64_t now = 0;
  for (auto _ : state) benchmark::DoNotOptimize(t.Take(k, ++now));
}

void BM_RateTakeNewClients(benchmark::State& state) {
  RateTable t(*ParseRateLimit("1r/s,burst=10"), 16384, 1);
  uint32_t n = 0;
  for (auto _ : state) benchmark::DoNotOptimize(t.Take(KeyOf(V4(++n), 64), 0));
  state.counters["evictions"] = static_cast<double>(t.evictions());
}

void BM_RealClientRecursive(benchmark::State& state) {
  ClientRules trusted;
  trusted.Add(true, *ParseCidr("10.0.0.0/8"));
  const std::string_view xff[1] = {"203.0.113.7, 10.1.2.3, 10.4.5.6"};
  const ClientAddress peer = V4(0x0100000a);  // 10.0.0.1
  for (auto _ : state) benchmark::DoNotOptimize(RealClient(peer, xff, 1, trusted, true));
}

BENCHMARK(BM_RateTakeKnownClient);
BENCHMARK(BM_RateTakeNewClients);
BENCHMARK(BM_RealClientRecursive);

}  // namespace
}  // namespace ringd::http
