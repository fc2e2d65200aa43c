// Small pieces the perf tools share: pinning the calling process to a CPU, and a monotonic clock
// in seconds.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <time.h>

#include <cstdint>

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

// A TCP socket listening on 127.0.0.1 at a port the kernel chose (*port); -1 if it cannot be made.
inline int ListenLoopback(uint16_t* port) {
  const int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  if (l < 0 || bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(l, 1) != 0 ||
      getsockname(l, reinterpret_cast<sockaddr*>(&a), &alen) != 0) {
    return -1;
  }
  *port = ntohs(a.sin_port);
  return l;
}

}  // namespace ringd::perf
