#include "server/tls/tls_memory.h"

#include <dlfcn.h>
#include <openssl/crypto.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "io/assert.h"

#ifndef RINGD_NO_MIMALLOC
#include "mimalloc.h"
#endif

namespace ringd::tls {

namespace {

// Threads are numbered on their first use of any StepSlabs; the number indexes each instance's
// table of per-thread lists. Trivially destructible, so a Free on a thread's way out (OpenSSL's
// own thread-exit handlers) still finds it.
constexpr size_t kNoThread = SIZE_MAX;
thread_local size_t thread_number = kNoThread;
std::atomic<size_t> threads_numbered{0};

// The live instances, for a thread's exit to hand its lists over (instances are made at
// start-up, or by tests: a few).
constexpr size_t kMaxInstances = 16;
std::mutex instances_mu;
StepSlabs* instances[kMaxInstances] = {};

struct ThreadExit {
  ~ThreadExit() {
    std::lock_guard<std::mutex> lock(instances_mu);
    for (StepSlabs* s : instances) {
      if (s != nullptr) s->AdoptThread(thread_number);
    }
  }
};
thread_local ThreadExit thread_exit;

size_t ThisThread() {
  if (thread_number == kNoThread) {
    thread_number = threads_numbered.fetch_add(1, std::memory_order_relaxed);
    (void)&thread_exit;  // its destructor runs at this thread's exit
  }
  return thread_number;
}

void* NextOf(void* block) {
  void* next;
  std::memcpy(&next, block, sizeof next);
  return next;
}
void SetNext(void* block, void* next) { std::memcpy(block, &next, sizeof next); }

}  // namespace

struct StepSlabs::Lists {
  void* free[kMaxBytes / kStep + 1] = {};  // by size in steps, linked through their first bytes
};

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
  threads_ = new std::atomic<Lists*>[kMaxThreads]();
  std::lock_guard<std::mutex> lock(instances_mu);
  for (StepSlabs*& s : instances) {
    if (s == nullptr) {
      s = this;
      break;
    }
  }
}

StepSlabs::~StepSlabs() {
  {
    std::lock_guard<std::mutex> lock(instances_mu);
    for (StepSlabs*& s : instances) {
      if (s == this) s = nullptr;
    }
  }
  if (threads_ != nullptr) {
    for (size_t i = 0; i < kMaxThreads; ++i) {
      Lists* l = threads_[i].load(std::memory_order_relaxed);
      if (l != Exited()) delete l;
    }
  }
  delete[] threads_;
  if (base_ != nullptr) ::munmap(base_, region_bytes_);
  delete[] run_step_;
}

// Made on a thread's first use (under the lock: counted); only that thread reads or writes it
// after, until its exit hands it over.
StepSlabs::Lists* StepSlabs::Mine() {
  const size_t t = ThisThread();
  if (t >= kMaxThreads) return nullptr;
  Lists* l = threads_[t].load(std::memory_order_relaxed);
  if (l == Exited()) return nullptr;
  if (l != nullptr) return l;
  l = new Lists();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++locks_taken_;
  }
  threads_[t].store(l, std::memory_order_relaxed);
  return l;
}

void StepSlabs::AdoptThread(size_t thread) {
  if (threads_ == nullptr || thread >= kMaxThreads) return;
  Lists* l = threads_[thread].exchange(Exited(), std::memory_order_relaxed);
  if (l == nullptr || l == Exited()) return;
  std::lock_guard<std::mutex> lock(mu_);
  ++locks_taken_;
  for (size_t steps = 0; steps <= kMaxBytes / kStep; ++steps) {
    while (void* p = l->free[steps]) {
      l->free[steps] = NextOf(p);
      SetNext(p, shared_free_[steps]);
      shared_free_[steps] = p;
    }
  }
  delete l;
}

void* StepSlabs::Alloc(size_t n, bool* carved) {
  RINGD_ASSERT(n >= 1 && n <= kMaxBytes);
  const size_t steps = (n + kStep - 1) / kStep;
  if (carved != nullptr) *carved = false;
  if (Lists* l = Mine(); l != nullptr && l->free[steps] != nullptr) {
    void* p = l->free[steps];
    l->free[steps] = NextOf(p);
    return p;
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++locks_taken_;
  if (void* p = shared_free_[steps]) {
    shared_free_[steps] = NextOf(p);
    return p;
  }
  return Carve(steps, carved);
}

void* StepSlabs::Carve(size_t steps, bool* carved) {
  const size_t bytes = steps * kStep;
  Run& r = runs_[steps];
  if (r.next == r.end) {
    if ((runs_carved_ + 1) * kRunBytes > region_bytes_) return nullptr;
    char* run = base_ + runs_carved_ * kRunBytes;
    if (::mprotect(run, kRunBytes, PROT_READ | PROT_WRITE) != 0) return nullptr;
    run_step_[runs_carved_++] = static_cast<uint16_t>(steps);
    r.next = run;
    r.end = run + kRunBytes / bytes * bytes;
  }
  void* p = r.next;
  r.next += bytes;
  if (carved != nullptr) *carved = true;
  return p;
}

void StepSlabs::Free(void* p) {
  RINGD_ASSERT(Owns(p));
  const size_t steps = run_step_[(static_cast<char*>(p) - base_) / kRunBytes];
  RINGD_ASSERT(steps != 0);
  if (Lists* l = Mine(); l != nullptr) {
    SetNext(p, l->free[steps]);
    l->free[steps] = p;
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++locks_taken_;
  SetNext(p, shared_free_[steps]);
  shared_free_[steps] = p;
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

uint64_t StepSlabs::locks_taken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return locks_taken_;
}

size_t StepBytes(size_t n) { return n == 0 ? StepSlabs::kStep : (n + 15) & ~size_t{15}; }

namespace {

#ifndef RINGD_NO_MIMALLOC
// 4 GiB of address space: about 350,000 idle TLS connections' worth of the library's blocks
// that go to slabs. Beyond it, allocations go to mimalloc.
constexpr size_t kRegionBytes = size_t{4} << 30;

StepSlabs* slabs = nullptr;  // set once, before OpenSSL's first allocation; never freed

// The zero-allocation test's counting shim (tests/alloc_counter.cc), where it is preloaded: the
// routed calls pass no malloc it could count, so each is told to it. Null otherwise.
void (*note_allocation)() = nullptr;

void Note() {
  if (note_allocation != nullptr) note_allocation();
}

// Counted as allocator calls: mimalloc's, and a slab block never used before (memory newly
// taken). A slab block reused from its free list, and a Free to the slabs, are a pool's.
void* Malloc(size_t n, const char*, int) {
  if (RoutedAllocator(n) == Allocator::kSlabs) {
    bool carved = false;
    if (void* p = slabs->Alloc(n, &carved)) {
      if (carved) Note();
      return p;
    }
  }
  Note();
  return mi_malloc(n);
}

void Free(void* p, const char*, int) {
  if (p == nullptr) return;
  if (slabs->Owns(p)) {
    slabs->Free(p);
  } else {
    Note();
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
  if (!slabs->Owns(p)) {
    Note();
    return mi_realloc(p, n);
  }
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
  return n >= 1 && n <= StepSlabs::kMaxBytes &&
                 (n <= kScratchBytes || StepBytes(n) < mi_good_size(n))
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
    note_allocation = reinterpret_cast<void (*)()>(dlsym(RTLD_DEFAULT, "ringd_alloc_counter_note"));
    if (CRYPTO_set_mem_functions(&Malloc, &Realloc, &Free) == 1) return true;
    slabs = nullptr;
    delete s;
    return false;
  }();
  return routed;
#endif
}

}  // namespace ringd::tls
