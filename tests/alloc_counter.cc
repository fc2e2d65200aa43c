// An LD_PRELOAD shim that counts calls into the allocator (malloc, calloc, realloc, free,
// aligned allocation, and operator new/delete, which mimalloc overrides itself) and forwards them
// to the next allocator in line (mimalloc for ringd). On SIGRTMIN+5 (a signal ringd neither
// blocks nor handles) it writes the running count, in decimal, to the file named by
// $RINGD_ALLOC_COUNT_FILE. Used by the zero-allocation test. OpenSSL's allocations bypass malloc
// (routed to mimalloc and StepSlabs, server/tls/tls_memory.h): ringd finds this shim's
// ringd_alloc_counter_note with dlsym and calls it for each of them, so they count too.
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>

namespace {

std::atomic<unsigned long long> g_calls{0};
int g_fd = -1;

using MallocFn = void* (*)(size_t);
using CallocFn = void* (*)(size_t, size_t);
using ReallocFn = void* (*)(void*, size_t);
using FreeFn = void (*)(void*);
using MemalignFn = int (*)(void**, size_t, size_t);
using AlignedAllocFn = void* (*)(size_t, size_t);

MallocFn real_malloc;
CallocFn real_calloc;
ReallocFn real_realloc;
FreeFn real_free;
MemalignFn real_posix_memalign;
AlignedAllocFn real_aligned_alloc;

// dlsym may itself call calloc before real_calloc is known: serve that from a static buffer.
alignas(16) char g_bootstrap[4096];
size_t g_bootstrap_used = 0;

void Resolve() {
  if (real_malloc != nullptr) return;
  real_calloc = reinterpret_cast<CallocFn>(dlsym(RTLD_NEXT, "calloc"));
  real_malloc = reinterpret_cast<MallocFn>(dlsym(RTLD_NEXT, "malloc"));
  real_realloc = reinterpret_cast<ReallocFn>(dlsym(RTLD_NEXT, "realloc"));
  real_free = reinterpret_cast<FreeFn>(dlsym(RTLD_NEXT, "free"));
  real_posix_memalign = reinterpret_cast<MemalignFn>(dlsym(RTLD_NEXT, "posix_memalign"));
  real_aligned_alloc = reinterpret_cast<AlignedAllocFn>(dlsym(RTLD_NEXT, "aligned_alloc"));
}

bool FromBootstrap(void* p) { return p >= g_bootstrap && p < g_bootstrap + sizeof g_bootstrap; }

void Dump(int) {
  char buf[32];
  unsigned long long v = g_calls.load();
  int n = 0;
  char tmp[32];
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (int i = 0; i < n; ++i) buf[i] = tmp[n - 1 - i];
  buf[n++] = '\n';
  if (g_fd >= 0) {
    ssize_t r = pwrite(g_fd, buf, static_cast<size_t>(n), 0);
    (void)r;
    r = ftruncate(g_fd, n);
    (void)r;
  }
}

__attribute__((constructor)) void Init() {
  Resolve();
  const char* path = getenv("RINGD_ALLOC_COUNT_FILE");
  if (path != nullptr) g_fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = Dump;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGRTMIN + 5, &sa, nullptr);
}

}  // namespace

extern "C" {

void ringd_alloc_counter_note() { g_calls.fetch_add(1, std::memory_order_relaxed); }

void* malloc(size_t n) {
  if (real_malloc == nullptr) Resolve();
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return real_malloc(n);
}

void* calloc(size_t a, size_t b) {
  if (real_calloc == nullptr) {  // inside dlsym during Resolve
    void* p = g_bootstrap + g_bootstrap_used;
    g_bootstrap_used += (a * b + 15) & ~static_cast<size_t>(15);
    return p;
  }
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return real_calloc(a, b);
}

void* realloc(void* p, size_t n) {
  if (real_realloc == nullptr) Resolve();
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return real_realloc(p, n);
}

void free(void* p) {
  if (p == nullptr || FromBootstrap(p)) return;
  if (real_free == nullptr) Resolve();
  g_calls.fetch_add(1, std::memory_order_relaxed);
  real_free(p);
}

int posix_memalign(void** out, size_t align, size_t n) {
  if (real_posix_memalign == nullptr) Resolve();
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return real_posix_memalign(out, align, n);
}

void* aligned_alloc(size_t align, size_t n) {
  if (real_aligned_alloc == nullptr) Resolve();
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return real_aligned_alloc(align, n);
}

}  // extern "C"

// operator new and delete: mimalloc defines its own, so they do not pass through malloc. Each is
// counted and forwarded to the next definition in line, looked up by its mangled name.
#include <new>

namespace {
template <typename Fn>
Fn Next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}
}  // namespace

void* operator new(size_t n) {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  static auto next = Next<void* (*)(size_t)>("_Znwm");
  return next(n);
}
void* operator new[](size_t n) {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  static auto next = Next<void* (*)(size_t)>("_Znam");
  return next(n);
}
void* operator new(size_t n, const std::nothrow_t& t) noexcept {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  static auto next = Next<void* (*)(size_t, const std::nothrow_t&)>("_ZnwmRKSt9nothrow_t");
  return next(n, t);
}
void* operator new(size_t n, std::align_val_t a) {
  g_calls.fetch_add(1, std::memory_order_relaxed);
  static auto next = Next<void* (*)(size_t, std::align_val_t)>("_ZnwmSt11align_val_t");
  return next(n, a);
}
void operator delete(void* p) noexcept {
  if (p == nullptr) return;
  g_calls.fetch_add(1, std::memory_order_relaxed);
  static auto next = Next<void (*)(void*)>("_ZdlPv");
  next(p);
}
void operator delete[](void* p) noexcept {
  if (p == nullptr) return;
  g_calls.fetch_add(1, std::memory_order_relaxed);
  static auto next = Next<void (*)(void*)>("_ZdaPv");
  next(p);
}
void operator delete(void* p, size_t n) noexcept {
  if (p == nullptr) return;
  g_calls.fetch_add(1, std::memory_order_relaxed);
  static auto next = Next<void (*)(void*, size_t)>("_ZdlPvm");
  next(p, n);
}
void operator delete[](void* p, size_t n) noexcept {
  if (p == nullptr) return;
  g_calls.fetch_add(1, std::memory_order_relaxed);
  static auto next = Next<void (*)(void*, size_t)>("_ZdaPvm");
  next(p, n);
}
void operator delete(void* p, std::align_val_t a) noexcept {
  if (p == nullptr) return;
  g_calls.fetch_add(1, std::memory_order_relaxed);
  static auto next = Next<void (*)(void*, std::align_val_t)>("_ZdlPvSt11align_val_t");
  next(p, a);
}
