#include "server/tls/tls_memory.h"

#include <openssl/crypto.h>
#include <sys/mman.h>

#include <cstring>

#include "io/assert.h"

#ifndef RINGD_NO_MIMALLOC
#include "mimalloc.h"
#endif

namespace ringd::tls {

StepSlabs::StepSlabs(size_t region_bytes) {
  const size_t runs = region_bytes / kRunBytes;
  if (runs == 0) return;
  // Reserved without access (no commit charge); each run is opened as it is carved.
  void* p = ::mmap(nullptr, runs * kRunBytes, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return;
  base_ = static_cast<char*>(p);
  region_bytes_ = runs * kRunBytes;
  run_step_ = new uint16_t[runs]();
}

StepSlabs::~StepSlabs() {
  if (base_ != nullptr) ::munmap(base_, region_bytes_);
  delete[] run_step_;
}

void* StepSlabs::Alloc(size_t n) {
  RINGD_ASSERT(n >= 1 && n <= kMaxBytes);
  const size_t steps = (n + kStep - 1) / kStep;
  const size_t bytes = steps * kStep;
  std::lock_guard<std::mutex> lock(mu_);
  Size& s = sizes_[steps];
  if (s.free != nullptr) {
    void* p = s.free;
    std::memcpy(&s.free, p, sizeof(void*));
    return p;
  }
  if (s.next == s.end) {
    if ((runs_carved_ + 1) * kRunBytes > region_bytes_) return nullptr;
    char* run = base_ + runs_carved_ * kRunBytes;
    if (::mprotect(run, kRunBytes, PROT_READ | PROT_WRITE) != 0) return nullptr;
    run_step_[runs_carved_++] = static_cast<uint16_t>(steps);
    s.next = run;
    s.end = run + kRunBytes / bytes * bytes;
  }
  void* p = s.next;
  s.next += bytes;
  return p;
}

void StepSlabs::Free(void* p) {
  RINGD_ASSERT(Owns(p));
  const size_t steps = run_step_[(static_cast<char*>(p) - base_) / kRunBytes];
  RINGD_ASSERT(steps != 0);
  std::lock_guard<std::mutex> lock(mu_);
  Size& s = sizes_[steps];
  std::memcpy(p, &s.free, sizeof(void*));
  s.free = p;
}

size_t StepSlabs::BlockBytes(const void* p) const {
  RINGD_ASSERT(Owns(p));
  // A run's size is written once, before any of its blocks is handed out.
  return run_step_[(static_cast<const char*>(p) - base_) / kRunBytes] * kStep;
}

size_t StepSlabs::runs_used() const {
  std::lock_guard<std::mutex> lock(mu_);
  return runs_carved_;
}

size_t StepBytes(size_t n) { return n == 0 ? StepSlabs::kStep : (n + 15) & ~size_t{15}; }

namespace {

#ifndef RINGD_NO_MIMALLOC
// 4 GiB of address space: about 350,000 idle TLS connections' worth of the library's blocks
// that go to slabs. Beyond it, allocations go to mimalloc.
constexpr size_t kRegionBytes = size_t{4} << 30;

StepSlabs* slabs = nullptr;  // set once, before OpenSSL's first allocation; never freed

void* Malloc(size_t n, const char*, int) {
  if (RoutedAllocator(n) == Allocator::kSlabs) {
    if (void* p = slabs->Alloc(n)) return p;
  }
  return mi_malloc(n);
}

void Free(void* p, const char*, int) {
  if (p == nullptr) return;
  if (slabs->Owns(p)) {
    slabs->Free(p);
  } else {
    mi_free(p);
  }
}

// As OpenSSL's own: a size of 0 frees the block. A slab block that still holds n bytes stays;
// otherwise the bytes move to a block routed for n.
void* Realloc(void* p, size_t n, const char* file, int line) {
  if (p == nullptr) return Malloc(n, file, line);
  if (n == 0) {
    Free(p, file, line);
    return nullptr;
  }
  if (!slabs->Owns(p)) return mi_realloc(p, n);
  const size_t have = slabs->BlockBytes(p);
  if (n <= have) return p;
  void* q = Malloc(n, file, line);
  if (q == nullptr) return nullptr;
  std::memcpy(q, p, have);
  slabs->Free(p);
  return q;
}
#endif

}  // namespace

Allocator RoutedAllocator(size_t n) {
#ifdef RINGD_NO_MIMALLOC
  (void)n;
  return Allocator::kMimalloc;
#else
  return n >= 1 && n <= StepSlabs::kMaxBytes && StepBytes(n) < mi_good_size(n)
             ? Allocator::kSlabs
             : Allocator::kMimalloc;
#endif
}

size_t RoutedBytes(size_t n) {
#ifdef RINGD_NO_MIMALLOC
  return n;
#else
  return RoutedAllocator(n) == Allocator::kSlabs ? StepBytes(n) : mi_good_size(n);
#endif
}

bool RoutingBuiltIn() {
#ifdef RINGD_NO_MIMALLOC
  return false;
#else
  return true;
#endif
}

bool InRoutedSlabs(const void* p) {
#ifdef RINGD_NO_MIMALLOC
  (void)p;
  return false;
#else
  return slabs != nullptr && slabs->Owns(p);
#endif
}

bool RouteOpenSslAllocations() {
#ifdef RINGD_NO_MIMALLOC
  return false;
#else
  static const bool routed = [] {
    auto* s = new StepSlabs(kRegionBytes);
    if (!s->ok()) {
      delete s;
      return false;
    }
    slabs = s;
    if (CRYPTO_set_mem_functions(&Malloc, &Realloc, &Free) == 1) return true;
    slabs = nullptr;
    delete s;
    return false;
  }();
  return routed;
#endif
}

}  // namespace ringd::tls
