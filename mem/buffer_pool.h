// A shard's fixed-size I/O buffers: one mmap'd region, carved into `count` buffers of `size`
// bytes, allocated once. The region can be registered with io_uring as fixed buffers. Used for
// request input that spans reads, response heads, and the small-file cache's contents. Under
// ASan a buffer is poisoned while it is not handed out (mem/asan_poison.h); the kernel's own
// reads and writes into registered buffers are not checked.
//
//   mem::BufferPool pool(16384, 4096);        // 64 MiB
//   char* b = pool.Get();                     // nullptr when every buffer is out
//   pool.Put(b);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mem/idle_marks.h"
#include "mem/pool_stats.h"

namespace ringd::mem {

class BufferPool {
 public:
  // Maps size * count bytes; `ok()` is false (with `error()`) when that fails.
  BufferPool(size_t buffer_size, uint32_t count);
  // Uses `memory` (at least buffer_size * count bytes, owned by the caller, e.g. a ShardMemory
  // region) for the buffers.
  BufferPool(size_t buffer_size, uint32_t count, char* memory);
  // Every buffer goes back before its pool does (or is given up with Abandon).
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  bool ok() const { return base_ != nullptr; }
  const std::string& error() const { return error_; }

  char* Get();
  void Put(char* buffer);
  // For an owner that is going away with buffers still out, on purpose (a shard that gave up on
  // connections at exit): they are forgotten, and the pool may be destroyed.
  void Abandon() { stats_.in_use = 0; }

  // Hands the pages of the free buffers that no Get has taken since the last call back to the
  // kernel (MADV_DONTNEED: their bytes are dead; the next Get of one finds zeroed pages), so
  // a burst's high-water mark does not stay resident. Called periodically, it releases only
  // buffers idle for a whole period: the top of the free stack, which Get takes first, stays.
  // Never for memory that an io_uring registration pins (a page dropped there would leave the
  // kernel writing to the old one). Returns the buffers released.
  uint32_t ReleaseIdle();
  uint64_t released() const { return released_; }  // buffers released so far

  size_t buffer_size() const { return size_; }
  uint32_t count() const { return count_; }
  const char* base() const { return base_; }
  size_t Available() const { return free_top_; }
  const PoolStats& Stats() const { return stats_; }

 private:
  char* base_ = nullptr;
  size_t size_;
  uint32_t count_;
  uint32_t* free_ = nullptr;  // a stack of free buffer indices
  bool owns_memory_ = true;
  size_t free_top_ = 0;
  IdleMarks idle_{0};  // ReleaseIdle's: which free buffers sat unused a whole period
  uint64_t released_ = 0;
  PoolStats stats_;
  std::string error_;
};

}  // namespace ringd::mem
