// Runs the shard simulator: one seed, a range of seeds, or random seeds for a while.
//
//   bazel run //tests/sim:shard_sim -- --seed=42            # replay one seed, exactly
//   bazel run //tests/sim:shard_sim -- --seeds=10000        # seeds 1..10000
//   bazel run -c opt //tests/sim:shard_sim -- --minutes=30  # random seeds until time is up
//
// --quick runs the cc_test's smaller seeds.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>

#include "absl/flags/flag.h"
#include "perf/tool_flags.h"
#include "tests/sim/shard_sim.h"

ABSL_FLAG(uint64_t, seed, 0, "replay this one seed");
ABSL_FLAG(uint64_t, seeds, 0, "run this many seeds, from --first on");
ABSL_FLAG(uint64_t, first, 1, "the first of --seeds");
ABSL_FLAG(double, minutes, 0, "run random seeds for this long");
ABSL_FLAG(bool, quick, false, "the cc_test's smaller seeds");
ABSL_FLAG(bool, verbose, false, "trace every seed");

namespace {

int Report(uint64_t seed, const ringd::sim::SeedResult& r, const ringd::sim::SimOptions& options) {
  std::printf("seed %llu FAILED: %s\n", static_cast<unsigned long long>(seed), r.failure.c_str());
  std::printf("last events:\n");
  for (const std::string& line : r.trace) std::printf("  %s\n", line.c_str());
  std::printf("replay: %s\n", ringd::sim::ReplayCommand(seed, options).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr char kUsage[] =
      "usage: shard_sim [--seed=N | --seeds=N [--first=K] | --minutes=M] [--quick] [--verbose]";
  if (ringd::ParseToolFlags(argc, argv, kUsage).size() > 1) {
    std::fprintf(stderr, "%s\n", kUsage);
    return 2;
  }
  const uint64_t seed = absl::GetFlag(FLAGS_seed), first = absl::GetFlag(FLAGS_first);
  uint64_t seeds = absl::GetFlag(FLAGS_seeds);
  const double minutes = absl::GetFlag(FLAGS_minutes);
  ringd::sim::SimOptions options;
  options.quick = absl::GetFlag(FLAGS_quick);
  options.verbose = absl::GetFlag(FLAGS_verbose);
  ringd::sim::InstallCrashReporter();
  if (seed != 0) {
    const ringd::sim::SeedResult r = ringd::sim::RunSeed(seed, options);
    if (!r.ok) return Report(seed, r, options);
    std::printf(
        "seed %llu ok: %llu requests, %llu responses, %llu connections, %llu steps, "
        "%lld simulated ms\n",
        static_cast<unsigned long long>(seed), static_cast<unsigned long long>(r.requests),
        static_cast<unsigned long long>(r.responses),
        static_cast<unsigned long long>(r.connections), static_cast<unsigned long long>(r.steps),
        static_cast<long long>(r.simulated_ms));
    return 0;
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed_s = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  // The long mode draws its seeds from the OS: a failure prints the seed, which replays exactly.
  std::random_device device;
  uint64_t random_base = (static_cast<uint64_t>(device()) << 32) | device();
  uint64_t run = 0, requests = 0, responses = 0;
  std::map<std::string, uint64_t> coverage;
  double last_print = 0;
  if (seeds == 0 && minutes == 0) seeds = 1000;
  for (uint64_t i = 0;; ++i) {
    if (minutes > 0 ? elapsed_s() >= minutes * 60 : i >= seeds) break;
    const uint64_t s = minutes > 0 ? (random_base + i) % 0x7fffffffffffffffull + 1 : first + i;
    const ringd::sim::SeedResult r = ringd::sim::RunSeed(s, options);
    ++run;
    requests += r.requests;
    responses += r.responses;
    for (const auto& [name, n] : r.coverage) coverage[name] += n;
    if (!r.ok) return Report(s, r, options);
    if (elapsed_s() - last_print >= 10) {
      last_print = elapsed_s();
      std::printf("%llu seeds, %.1f seeds/s, %llu requests, %llu responses\n",
                  static_cast<unsigned long long>(run), run / elapsed_s(),
                  static_cast<unsigned long long>(requests),
                  static_cast<unsigned long long>(responses));
      std::fflush(stdout);
    }
  }
  std::printf(
      "ok: %llu seeds in %.1f s (%.1f seeds/s), %llu simulated requests, %llu responses "
      "checked\n",
      static_cast<unsigned long long>(run), elapsed_s(), run / elapsed_s(),
      static_cast<unsigned long long>(requests), static_cast<unsigned long long>(responses));
  std::printf("coverage (events over all seeds):\n");
  for (const auto& [name, n] : coverage) {
    std::printf("  %-24s %llu\n", name.c_str(), static_cast<unsigned long long>(n));
  }
  return 0;
}
