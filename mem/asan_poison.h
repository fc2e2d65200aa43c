// What the pools tell AddressSanitizer: memory that is not handed out (a slot or buffer after
// Put, or never handed out yet) is poisoned, so a use after Put is reported ("use-after-poison")
// instead of reading whatever the next owner wrote. Without ASan these are empty inline
// functions: normal builds are unchanged and pay nothing.
//
//   mem::PoisonForAsan(buffer, size);    // back in the pool
//   mem::UnpoisonForAsan(buffer, size);  // handed out
#pragma once

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)  // gcc
#define RINGD_ASAN 1
#elif defined(__has_feature)  // clang
#if __has_feature(address_sanitizer)
#define RINGD_ASAN 1
#endif
#endif
#ifndef RINGD_ASAN
#define RINGD_ASAN 0
#endif

#if RINGD_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace ringd::mem {

// True when this build poisons what is returned to the pools.
inline constexpr bool kPoolsPoisonForAsan = RINGD_ASAN;

// ASan tracks addressability in 8-byte granules. Where a region shares a granule with its
// neighbour, ASan errs towards addressable: a use after Put in that granule may go unreported,
// a legitimate access to the neighbour never is. Pool slots of 8-byte multiples share none.
inline void PoisonForAsan([[maybe_unused]] const void* p, [[maybe_unused]] size_t bytes) {
#if RINGD_ASAN
  ASAN_POISON_MEMORY_REGION(p, bytes);
#endif
}

inline void UnpoisonForAsan([[maybe_unused]] const void* p, [[maybe_unused]] size_t bytes) {
#if RINGD_ASAN
  ASAN_UNPOISON_MEMORY_REGION(p, bytes);
#endif
}

}  // namespace ringd::mem
