// What every pool reports: capacity, in use, and the high-water mark (metrics read these).
#pragma once

#include <cstdint>

namespace ringd::mem {

struct PoolStats {
  uint64_t capacity = 0;
  uint64_t in_use = 0;
  uint64_t high_water = 0;
  uint64_t exhausted = 0;  // Get() calls that found the pool empty
};

}  // namespace ringd::mem
