// A fixed-capacity pool of T for one shard: O(1) Get and Put, a hard bound, no allocation after
// construction. Get() returns nullptr when the pool is empty; the caller applies backpressure
// (stops accepting, delays work) rather than allocating. Under ASan a slot is poisoned while it
// is not handed out, so touching an object after Put() is reported (mem/asan_poison.h).
//
//   mem::SlabPool<Connection> conns(10000);
//   Connection* c = conns.Get();     // default-initialised in place; nullptr when full
//   conns.Put(c);                    // destroyed, slot back on the free list
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>

#include "io/assert.h"
#include "mem/asan_poison.h"
#include "mem/pool_stats.h"

namespace ringd::mem {

template <typename T>
class SlabPool {
 public:
  // The slots are reserved here but touched only when first handed out, so a large bound costs
  // address space, not resident memory.
  explicit SlabPool(size_t capacity) : slots_(new Slot[capacity]), capacity_(capacity) {
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
    Slot* s = free_;
    if (s != nullptr) {
      UnpoisonForAsan(s, sizeof(Slot));  // handed out: the link is read from it first
      free_ = s->next_free;
    } else if (fresh_ < capacity_) {
      s = &slots_[fresh_++];  // never used yet
      UnpoisonForAsan(s, sizeof(Slot));
    } else {
      ++stats_.exhausted;
      return nullptr;
    }
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
    RINGD_ASSERT(Owns(object) && stats_.in_use > 0);
    object->~T();
    Slot* s = reinterpret_cast<Slot*>(object);
    s->next_free = free_;
    free_ = s;
    PoisonForAsan(s, sizeof(Slot));  // link included: only Get reads it, after unpoisoning
    --stats_.in_use;
  }

  bool Owns(const T* object) const {
    const auto* p = reinterpret_cast<const Slot*>(object);
    return p >= slots_.get() && p < slots_.get() + capacity_;
  }
  // A stable small index for an object of this pool (for ids and tables).
  size_t IndexOf(const T* object) const {
    return static_cast<size_t>(reinterpret_cast<const Slot*>(object) - slots_.get());
  }
  bool Empty() const { return free_ == nullptr && fresh_ == capacity_; }
  // For an owner that is going away with objects still out, on purpose (a shard that gave up,
  // at exit, on connections whose last callback never came): they are forgotten, their
  // destructors never run, and the pool may be destroyed.
  void Abandon() { stats_.in_use = 0; }
  size_t InUse() const { return stats_.in_use; }
  const PoolStats& Stats() const { return stats_; }

 private:
  union Slot {
    Slot() {}
    ~Slot() {}
    Slot* next_free;
    alignas(T) unsigned char storage[sizeof(T)];
  };

  std::unique_ptr<Slot[]> slots_;
  size_t capacity_;
  Slot* free_ = nullptr;  // slots returned by Put
  size_t fresh_ = 0;      // slots [fresh_, capacity_) have never been handed out
  PoolStats stats_;
};

}  // namespace ringd::mem
