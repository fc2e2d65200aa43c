#include "mem/buffer_pool.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "io/assert.h"
#include "mem/asan_poison.h"

namespace ringd::mem {

BufferPool::BufferPool(size_t buffer_size, uint32_t count) : size_(buffer_size), count_(count) {
  const size_t data_bytes = buffer_size * count;
  const size_t index_bytes = sizeof(uint32_t) * count;
  void* p = ::mmap(nullptr, data_bytes + index_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED || count == 0 || buffer_size == 0) {
    error_ = std::string("buffer pool: mmap of ") + std::to_string(data_bytes) +
             " bytes failed: " + strerror(errno);
    if (p != MAP_FAILED) ::munmap(p, data_bytes + index_bytes);
    return;
  }
  base_ = static_cast<char*>(p);
  free_ = reinterpret_cast<uint32_t*>(base_ + data_bytes);
  // Lowest addresses on top of the stack: a lightly loaded shard touches few pages.
  for (uint32_t i = 0; i < count; ++i) free_[i] = count - 1 - i;
  free_top_ = count;
  idle_ = IdleMarks(count);
  stats_.capacity = count;
  PoisonForAsan(base_, data_bytes);  // the index stack after it stays addressable
}

BufferPool::BufferPool(size_t buffer_size, uint32_t count, char* memory)
    : base_(memory), size_(buffer_size), count_(count), owns_memory_(false) {
  if (memory == nullptr || count == 0 || buffer_size == 0) {
    base_ = nullptr;
    error_ = "buffer pool: no memory given";
    return;
  }
  free_ = new uint32_t[count];  // start-up only
  for (uint32_t i = 0; i < count; ++i) free_[i] = count - 1 - i;
  free_top_ = count;
  idle_ = IdleMarks(count);
  stats_.capacity = count;
  PoisonForAsan(base_, size_ * count_);
}

BufferPool::~BufferPool() {
  if (base_ == nullptr) return;
  RINGD_ASSERT_MSG(stats_.in_use == 0, "%llu buffers still out of the pool",
                   static_cast<unsigned long long>(stats_.in_use));
  // The memory outlives the pool's view of it (unmapped, or the caller's again): addressable.
  UnpoisonForAsan(base_, size_ * count_);
  if (owns_memory_) {
    ::munmap(base_, size_ * count_ + sizeof(uint32_t) * count_);
  } else {
    delete[] free_;
  }
}

char* BufferPool::Get() {
  if (free_top_ == 0) {
    ++stats_.exhausted;
    return nullptr;
  }
  const uint32_t index = free_[--free_top_];
  idle_.Took(free_top_);
  if (++stats_.in_use > stats_.high_water) stats_.high_water = stats_.in_use;
  char* buffer = base_ + static_cast<size_t>(index) * size_;
  UnpoisonForAsan(buffer, size_);
  return buffer;
}

void BufferPool::Put(char* buffer) {
  RINGD_ASSERT(buffer >= base_ && buffer < base_ + size_ * count_);
  RINGD_ASSERT((buffer - base_) % size_ == 0);
  RINGD_ASSERT(free_top_ < count_);  // a buffer returned twice
  free_[free_top_++] = static_cast<uint32_t>((buffer - base_) / size_);
  --stats_.in_use;
  PoisonForAsan(buffer, size_);
}

uint32_t BufferPool::ReleaseIdle() {
  // madvise works on whole pages: buffers must be whole pages, or a neighbour's would go too.
  RINGD_ASSERT(size_ % 4096 == 0 && reinterpret_cast<uintptr_t>(base_) % 4096 == 0);
  const uint32_t n = static_cast<uint32_t>(idle_.ForIdle(free_top_, [&](size_t i) {
    char* buffer = base_ + static_cast<size_t>(free_[i]) * size_;
    RINGD_ASSERT(::madvise(buffer, size_, MADV_DONTNEED) == 0);
  }));
  released_ += n;
  return n;
}

}  // namespace ringd::mem
