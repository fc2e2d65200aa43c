#include "mem/shard_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "mem/asan_poison.h"

namespace ringd::mem {

ShardMemory::ShardMemory(std::initializer_list<size_t> sizes) {
  for (size_t s : sizes) {
    sizes_.push_back((s + 4095) / 4096 * 4096);
    total_ += sizes_.back();
  }
  if (total_ == 0) return;
  void* p = ::mmap(nullptr, total_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    error_ =
        "shard memory: mmap of " + std::to_string(total_) + " bytes failed: " + strerror(errno);
    return;
  }
  base_ = static_cast<char*>(p);
  char* next = base_;
  for (size_t s : sizes_) {
    regions_.push_back(s > 0 ? next : nullptr);
    next += s;
  }
}

ShardMemory::~ShardMemory() {
  if (base_ == nullptr) return;
  // Pools carved from it poison what they hold (mem/asan_poison.h); the address range may be
  // mapped again, so it leaves addressable.
  UnpoisonForAsan(base_, total_);
  ::munmap(base_, total_);
}

}  // namespace ringd::mem
