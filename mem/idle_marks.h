// Which free slots of a pool have sat unused for a whole period, for pools that keep their free
// slots on a stack of indices (the last put back on top) and hand idle slots' pages back to the
// kernel (BufferPool::ReleaseIdle, SlabPool::ReleaseIdle).
//
//   marks.Took(free_top);                              // after each pop
//   marks.ForIdle(free_top, [&](size_t i) { ... });    // once a period: stack positions to release
#pragma once

#include <cstddef>

namespace ringd::mem {

class IdleMarks {
 public:
  // `free_top`: the free slots on the stack at the start (0 for a pool that starts empty and
  // hands out never-used slots apart; `count` for one whose stack starts full of untouched ones).
  explicit IdleMarks(size_t free_top) : low_water_(free_top), clean_below_(free_top) {}

  // A Get popped the stack down to `free_top`.
  void Took(size_t free_top) {
    if (free_top < low_water_) low_water_ = free_top;
    if (free_top < clean_below_) clean_below_ = free_top;
  }

  // Calls release(i) for each stack position whose slot no Get has taken since the last call and
  // that was not released already; returns how many.
  template <typename Fn>
  size_t ForIdle(size_t free_top, Fn&& release) {
    size_t n = 0;
    for (size_t i = clean_below_; i < low_water_; ++i, ++n) release(i);
    if (low_water_ > clean_below_) clean_below_ = low_water_;
    low_water_ = free_top;
    return n;
  }

 private:
  size_t low_water_;    // the fewest free slots since the last ForIdle
  size_t clean_below_;  // stack positions below this hold no resident page (unused, or released)
};

}  // namespace ringd::mem
