// Invariants checked in every build, the one that serves included (TigerBeetle's and Seastar's
// rule): NDEBUG does not remove them. A broken invariant prints the condition, file and line,
// then aborts; serving on with corrupt state is worse than a crash and a restart.
//
//   RINGD_ASSERT(!c->in_flight);                 // a Completion reused while in flight
//   RINGD_ASSERT_MSG(fd < max_fds_, "fd %d", fd);
#pragma once

#include <cstdio>
#include <cstdlib>

namespace ringd::internal {

[[noreturn, gnu::cold, gnu::noinline]] inline void AssertFailed(const char* condition,
                                                                const char* file, int line) {
  std::fprintf(stderr, "ringd: assertion failed: %s at %s:%d\n", condition, file, line);
  std::fflush(stderr);
  std::abort();
}

}  // namespace ringd::internal

#define RINGD_ASSERT(condition)                                        \
  do {                                                                 \
    if (__builtin_expect(!(condition), 0))                             \
      ::ringd::internal::AssertFailed(#condition, __FILE__, __LINE__); \
  } while (0)

// With a printf-style detail before the condition's report.
#define RINGD_ASSERT_MSG(condition, ...)                               \
  do {                                                                 \
    if (__builtin_expect(!(condition), 0)) {                           \
      std::fprintf(stderr, "ringd: " __VA_ARGS__);                     \
      std::fprintf(stderr, "\n");                                      \
      ::ringd::internal::AssertFailed(#condition, __FILE__, __LINE__); \
    }                                                                  \
  } while (0)
