// Where OpenSSL's allocations live. An idle TLS connection keeps about 41 of the library's
// allocations (13,753 bytes asked, `perf/tls_live`): its SSL object, the AES-GCM contexts, the
// session, the certificate set, locks. mimalloc has four size classes per power of two, so some
// of them are rounded up by hundreds of bytes (the 7,608-byte SSL object takes an 8 KiB class,
// the one below being 7 KiB). Routed, an allocation that a 16-byte step holds in fewer bytes goes
// to `StepSlabs`, slabs of 16-byte size steps carved from one reserved region (no header per
// block, so a block's owner is known from its address alone); the rest go to mimalloc.
//
//   int main() { tls::RouteOpenSslAllocations(); ... }   // before anything calls OpenSSL
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

namespace ringd::tls {

// Blocks in steps of 16 bytes, up to kMaxBytes, from one region reserved at construction
// (MAP_NORESERVE: a page costs memory once a block on it is used). The region is cut into 1 MiB
// runs, each holding blocks of one size, handed out in address order and then from the size's
// free list; a run's untouched tail costs nothing. Freed blocks are kept for the next allocation
// of their size, never returned to the system: what the slabs hold is bounded by the peak of TLS
// connections open at once. Thread-safe (one lock: OpenSSL allocates a few dozen times per
// handshake).
class StepSlabs {
 public:
  static constexpr size_t kStep = 16;
  static constexpr size_t kMaxBytes = 16 << 10;
  static constexpr size_t kRunBytes = 1 << 20;

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
  void* Alloc(size_t n);
  void Free(void* p);                      // p: Owns(p)
  size_t BlockBytes(const void* p) const;  // p: Owns(p)
  size_t runs_used() const;

 private:
  struct Size {
    void* free = nullptr;  // freed blocks, linked through their first bytes
    char* next = nullptr;  // the next never-used block of the current run
    char* end = nullptr;   // the end of the current run's last whole block
  };
  char* base_ = nullptr;
  size_t region_bytes_ = 0;
  uint16_t* run_step_ = nullptr;  // per run: its blocks' size in steps (0: not carved)
  mutable std::mutex mu_;
  size_t runs_carved_ = 0;
  Size sizes_[kMaxBytes / kStep + 1];
};

enum class Allocator { kMimalloc, kSlabs };

// Installs the routing with CRYPTO_set_mem_functions. False, changing nothing, where the library
// has allocated already, where the region cannot be reserved, or in a build without mimalloc
// (the sanitizers bring their own allocator): OpenSSL then uses plain malloc.
bool RouteOpenSslAllocations();
bool RoutingBuiltIn();  // false in a build without mimalloc

// Whether p is a block of the routing's slabs (false before routing).
bool InRoutedSlabs(const void* p);

// Where an allocation of `n` bytes goes once routed, and what it takes there.
size_t StepBytes(size_t n);  // n rounded up to 16
Allocator RoutedAllocator(size_t n);
size_t RoutedBytes(size_t n);

}  // namespace ringd::tls
