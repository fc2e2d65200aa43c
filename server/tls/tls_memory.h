// Where OpenSSL's allocations live. An idle TLS connection keeps about 40 of the library's
// allocations (13,741 bytes asked, `perf/tls_live`): its SSL object, the AES-GCM contexts, the
// session, the certificate set, locks. mimalloc has four size classes per power of two, so some
// of them are rounded up by hundreds of bytes (the 7,608-byte SSL object takes an 8 KiB class,
// the one below being 7 KiB). Routed, an allocation that a 16-byte step holds in fewer bytes, and
// any of kScratchBytes or less, goes to `StepSlabs`, slabs of 16-byte size steps carved from one
// reserved region (no header per block, so a block's owner is known from its address alone;
// free lists per thread); the rest go to mimalloc.
//
//   int main() { tls::RouteOpenSslAllocations(); ... }   // before anything calls OpenSSL
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace ringd::tls {

// Blocks in steps of 16 bytes, up to kMaxBytes, from one region reserved at construction
// (MAP_NORESERVE: a page costs memory once a block on it is used). The region is cut into 1 MiB
// runs, each holding blocks of one size, carved in address order. Freed blocks are kept for the
// next allocation of their size, never returned to the system: what the slabs hold is bounded by
// the peak of TLS connections open at once.
//
// Shards share nothing here on the hot path: each thread keeps its own free list per size, so an
// Alloc that finds a block freed on its thread, and every Free, take no lock and touch no shared
// line. Only carving a new block (a thread's list of that size is empty), taking the blocks of a
// thread that has exited, and a thread's first use take the one lock (locks_taken counts them).
// A block freed on another thread than the one that took it joins that thread's list: blocks are
// told by their address, so any thread may reuse any block of the size.
class StepSlabs {
 public:
  static constexpr size_t kStep = 16;
  static constexpr size_t kMaxBytes = 16 << 10;
  static constexpr size_t kRunBytes = 1 << 20;
  // Threads with lists of their own; any beyond share one list per size under the lock.
  static constexpr size_t kMaxThreads = 1024;

  explicit StepSlabs(size_t region_bytes);
  ~StepSlabs();
  StepSlabs(const StepSlabs&) = delete;
  StepSlabs& operator=(const StepSlabs&) = delete;

  bool ok() const { return base_ != nullptr; }
  bool Owns(const void* p) const {
    const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(base_);
    return a >= b && a - b < region_bytes_;
  }
  // A block of at least n bytes (1 <= n <= kMaxBytes), or null when the region is spent.
  // `*carved` (if given): whether it is a block never used before (memory newly taken), rather
  // than one freed before.
  void* Alloc(size_t n, bool* carved = nullptr);
  void Free(void* p);                      // p: Owns(p)
  size_t BlockBytes(const void* p) const;  // p: Owns(p)
  size_t runs_used() const;
  uint64_t locks_taken() const;

  // A thread's exit hands its lists to the shared ones (tls_memory.cc).
  void AdoptThread(size_t thread);

 private:
  struct Run {
    char* next = nullptr;  // the next never-used block of the size's current run
    char* end = nullptr;   // the end of that run's last whole block
  };
  struct Lists;   // one thread's free lists, one per size
  Lists* Mine();  // the calling thread's, or null where it shares the locked ones
  // A thread's entry once it has exited: its lists went to the shared ones.
  static Lists* Exited() { return reinterpret_cast<Lists*>(alignof(void*)); }
  void* Carve(size_t steps, bool* carved);  // under mu_

  char* base_ = nullptr;
  size_t region_bytes_ = 0;
  uint16_t* run_step_ = nullptr;            // per run: its blocks' size in steps (0: not carved)
  std::atomic<Lists*>* threads_ = nullptr;  // kMaxThreads, by thread index
  mutable std::mutex mu_;
  size_t runs_carved_ = 0;                         // under mu_
  uint64_t locks_taken_ = 0;                       // under mu_
  Run runs_[kMaxBytes / kStep + 1];                // under mu_
  void* shared_free_[kMaxBytes / kStep + 1] = {};  // under mu_: exited threads' blocks
};

enum class Allocator { kMimalloc, kSlabs };

// Installs the routing with CRYPTO_set_mem_functions. False, changing nothing, where the library
// has allocated already, where the region cannot be reserved, or in a build without mimalloc
// (the sanitizers bring their own allocator): OpenSSL then uses plain malloc.
bool RouteOpenSslAllocations();
bool RoutingBuiltIn();  // false in a build without mimalloc

// Whether p is a block of the routing's slabs (false before routing).
bool InRoutedSlabs(const void* p);

// Where an allocation of `n` bytes goes once routed, and what it takes there: to the slabs where
// 16-byte steps hold it in fewer bytes than mimalloc, and whatever mimalloc would take when it is
// kScratchBytes or less. The library allocates and frees small scratch for every record it
// writes or reads (OpenSSL 3.0's WPACKET_SUB, 40 bytes): from the slabs, that is a block reused
// from the thread's free list, not an allocator call (up to 15 bytes more than mimalloc's class
// for small blocks that live long).
constexpr size_t kScratchBytes = 64;
size_t StepBytes(size_t n);  // n rounded up to 16
Allocator RoutedAllocator(size_t n);
size_t RoutedBytes(size_t n);

}  // namespace ringd::tls
