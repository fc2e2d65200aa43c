// The shard simulator's driver: one seed builds a configuration, a file tree and a crowd of
// clients from its PRNG, runs the real ringd::Shard on a SimLoop step by step, and checks after
// every step that what each client received is right for what it asked (status, headers, body
// bytes, order, when the connection may close). A seed that fails replays exactly:
//
//   SeedResult r = RunSeed(42, SimOptions{});
//   if (!r.ok) { puts(r.failure.c_str()); for (auto& l : r.trace) puts(l.c_str()); }
//
// What is simulated, the invariants checked and how to run it: tests/sim/README.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ringd::sim {

struct SimOptions {
  bool quick = false;    // smaller runs: the cc_test's thousands of seeds
  bool verbose = false;  // print the whole trace as it happens
};

struct SeedResult {
  bool ok = true;
  std::string failure;             // the invariant that broke, with details
  std::vector<std::string> trace;  // the last events before it broke
  uint64_t requests = 0;           // requests the clients sent
  uint64_t responses = 0;          // complete responses they checked
  uint64_t steps = 0;
  uint64_t connections = 0;
  int64_t simulated_ms = 0;
  // How often each interesting thing happened (shard stats, faults injected): coverage.
  std::map<std::string, uint64_t> coverage;
};

SeedResult RunSeed(uint64_t seed, const SimOptions& options);

// The one command that replays a seed (run with SimOptions::quick or not).
std::string ReplayCommand(uint64_t seed, const SimOptions& options);

// Prints the seed being run, its replay command and its recent trace if a server assertion
// aborts the process mid-seed.
void InstallCrashReporter();

}  // namespace ringd::sim
