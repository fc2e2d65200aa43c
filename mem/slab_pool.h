// A fixed-capacity pool of T for one shard: O(1) Get and Put, a hard bound, no allocation after
// construction. Get() returns nullptr when the pool is empty; the caller applies backpressure
// (stops accepting, delays work) rather than allocating. Under ASan a slot is poisoned while it
// is not handed out, so touching an object after Put() is reported (mem/asan_poison.h).
//
//   mem::SlabPool<Connection> conns(10000);
//   Connection* c = conns.Get();     // default-initialised in place; nullptr when full
//   conns.Put(c);                    // destroyed, slot back on the free list
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>

#include "io/assert.h"
#include "mem/asan_poison.h"
#include "mem/idle_marks.h"
#include "mem/pool_stats.h"

namespace ringd::mem {

template <typename T>
class SlabPool {
 public:
  // The slots are reserved here but touched only when first handed out, so a large bound costs
  // address space, not resident memory.
  explicit SlabPool(size_t capacity)
      : slots_(new Slot[capacity]), free_(new uint32_t[capacity]), capacity_(capacity) {
    RINGD_ASSERT(capacity <= UINT32_MAX);
    stats_.capacity = capacity;
    PoisonForAsan(slots_.get(), sizeof(Slot) * capacity_);
  }
  SlabPool(const SlabPool&) = delete;
  SlabPool& operator=(const SlabPool&) = delete;
  // Every object goes back before its pool does: one still out would point into freed slots.
  ~SlabPool() {
    RINGD_ASSERT_MSG(stats_.in_use == 0, "%llu objects still out of the pool",
                     static_cast<unsigned long long>(stats_.in_use));
    UnpoisonForAsan(slots_.get(), sizeof(Slot) * capacity_);
  }

  template <typename... Args>
  T* Get(Args&&... args) {
    Slot* s;
    if (free_top_ > 0) {
      s = &slots_[free_[--free_top_]];
      idle_.Took(free_top_);
    } else if (fresh_ < capacity_) {
      s = &slots_[fresh_++];  // never used yet
    } else {
      ++stats_.exhausted;
      return nullptr;
    }
    UnpoisonForAsan(s, sizeof(Slot));
    if (++stats_.in_use > stats_.high_water) stats_.high_water = stats_.in_use;
    // Default-initialised when no arguments are given: member initialisers run, but a plain
    // struct is not zeroed first (as with malloc).
    if constexpr (sizeof...(Args) == 0) {
      return new (s->storage) T;
    } else {
      return new (s->storage) T(std::forward<Args>(args)...);
    }
  }

  void Put(T* object) {
    RINGD_ASSERT(Owns(object) && stats_.in_use > 0 && free_top_ < capacity_);
    // Read before anything else: under ASan an object put back already is poisoned, and the
    // second Put is reported here.
    static_cast<void>(*reinterpret_cast<volatile const unsigned char*>(object));
    object->~T();
    free_[free_top_++] = static_cast<uint32_t>(IndexOf(object));
    PoisonForAsan(object, sizeof(Slot));
    --stats_.in_use;
  }

  // For objects of a page or more (each slot whole pages): hands the pages of the free slots
  // that no Get has taken since the last call back to the kernel (MADV_DONTNEED: an object's
  // bytes are dead once Put; a slot taken again finds zeroed pages, and Get constructs the object
  // there). Called periodically, it releases only slots idle for a whole period: the top of the
  // free stack, which Get takes first, stays. Returns the slots released.
  uint32_t ReleaseIdle() {
    static_assert(sizeof(Slot) % kPage == 0, "slots of whole pages only");
    const uint32_t n = static_cast<uint32_t>(idle_.ForIdle(free_top_, [&](size_t i) {
      RINGD_ASSERT(::madvise(&slots_[free_[i]], sizeof(Slot), MADV_DONTNEED) == 0);
    }));
    released_ += n;
    return n;
  }
  uint64_t released() const { return released_; }  // slots released so far

  bool Owns(const T* object) const {
    const auto* p = reinterpret_cast<const Slot*>(object);
    return p >= slots_.get() && p < slots_.get() + capacity_;
  }
  // A stable small index for an object of this pool (for ids and tables).
  size_t IndexOf(const T* object) const {
    return static_cast<size_t>(reinterpret_cast<const Slot*>(object) - slots_.get());
  }
  bool Empty() const { return free_top_ == 0 && fresh_ == capacity_; }
  // For an owner that is going away with objects still out, on purpose (a shard that gave up,
  // at exit, on connections whose last callback never came): they are forgotten, their
  // destructors never run, and the pool may be destroyed.
  void Abandon() { stats_.in_use = 0; }
  size_t InUse() const { return stats_.in_use; }
  const PoolStats& Stats() const { return stats_; }

 private:
  static constexpr size_t kPage = 4096;
  // An object of a page or more gets a slot of whole pages, aligned to a page, so that an idle
  // slot's pages can go back whole (ReleaseIdle); smaller ones pack as their type aligns.
  static constexpr size_t kSlotAlign = sizeof(T) >= kPage ? kPage : alignof(T);
  struct alignas(kSlotAlign) Slot {
    alignas(T) unsigned char storage[sizeof(T)];
  };

  std::unique_ptr<Slot[]> slots_;
  // The free slots, a stack of indices (the last Put on top): no link lives in a free slot, so
  // nothing in one needs its pages.
  std::unique_ptr<uint32_t[]> free_;
  size_t capacity_;
  size_t free_top_ = 0;
  size_t fresh_ = 0;   // slots [fresh_, capacity_) have never been handed out
  IdleMarks idle_{0};  // ReleaseIdle's: which free slots sat unused a whole period
  uint64_t released_ = 0;
  PoolStats stats_;
};

}  // namespace ringd::mem
