// Small pieces the perf tools share: pinning the calling process to a CPU, and a monotonic clock
// in seconds.
#pragma once

#include <sched.h>
#include <time.h>

namespace ringd::perf {

// Runs the calling process on `cpu` only (best effort; a negative cpu leaves it where it is).
inline void Pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

// CLOCK_MONOTONIC, in seconds.
inline double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace ringd::perf
