#include "server/tls/tls_memory.h"

#include <openssl/crypto.h>

#ifndef RINGD_NO_MIMALLOC
#include <dlfcn.h>

#include "mimalloc.h"
#endif

namespace ringd::tls {

namespace {

// Allocations above this go to mimalloc whatever the sizes say: glibc maps them one by one.
constexpr size_t kLibcMaxBytes = 64 << 10;

#ifndef RINGD_NO_MIMALLOC
// glibc's own malloc. mimalloc, linked to replace malloc, also defines `__libc_malloc` and the
// rest, so they are looked up in libc.so.6 itself, which only searches libc and the loader.
struct Libc {
  void* (*malloc)(size_t) = nullptr;
  void* (*realloc)(void*, size_t) = nullptr;
  void (*free)(void*) = nullptr;
};
Libc libc;

bool FindLibc() {
  void* handle = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return false;
  libc.malloc = reinterpret_cast<void* (*)(size_t)>(dlsym(handle, "__libc_malloc"));
  libc.realloc = reinterpret_cast<void* (*)(void*, size_t)>(dlsym(handle, "__libc_realloc"));
  libc.free = reinterpret_cast<void (*)(void*)>(dlsym(handle, "__libc_free"));
  dlclose(handle);  // NOLOAD took a reference to what was loaded already
  // Were these mimalloc's, glibc would not be its own: checked once, here.
  if (libc.malloc == nullptr || libc.realloc == nullptr || libc.free == nullptr) return false;
  void* probe = libc.malloc(64);
  const bool own = probe != nullptr && !mi_is_in_heap_region(probe);
  if (probe != nullptr) own ? libc.free(probe) : mi_free(probe);
  return own;
}

void* Malloc(size_t n, const char*, int) {
  return RoutedAllocator(n) == Allocator::kLibc ? libc.malloc(n) : mi_malloc(n);
}

void Free(void* p, const char*, int) {
  if (p == nullptr) return;
  if (mi_is_in_heap_region(p)) {
    mi_free(p);
  } else {
    libc.free(p);
  }
}

// A block keeps its allocator when it grows or shrinks: the library resizes few (its stacks and
// buffers), and moving one between allocators would be a copy for a few bytes.
void* Realloc(void* p, size_t n, const char* file, int line) {
  if (p == nullptr) return Malloc(n, file, line);
  return mi_is_in_heap_region(p) ? mi_realloc(p, n) : libc.realloc(p, n);
}
#endif

}  // namespace

size_t LibcChunkBytes(size_t n) {
  const size_t chunk = (n + 8 + 15) & ~size_t{15};
  return chunk < 32 ? 32 : chunk;
}

Allocator RoutedAllocator(size_t n) {
#ifdef RINGD_NO_MIMALLOC
  (void)n;
  return Allocator::kLibc;
#else
  return n <= kLibcMaxBytes && LibcChunkBytes(n) < mi_good_size(n) ? Allocator::kLibc
                                                                   : Allocator::kMimalloc;
#endif
}

size_t RoutedBytes(size_t n) {
#ifdef RINGD_NO_MIMALLOC
  return LibcChunkBytes(n);
#else
  return RoutedAllocator(n) == Allocator::kLibc ? LibcChunkBytes(n) : mi_good_size(n);
#endif
}

bool RouteOpenSslAllocations() {
#ifdef RINGD_NO_MIMALLOC
  return false;
#else
  static const bool routed = FindLibc() && CRYPTO_set_mem_functions(&Malloc, &Realloc, &Free) == 1;
  return routed;
#endif
}

}  // namespace ringd::tls
