#include "server/core/h2_memory.h"

#include <malloc.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

#include "io/assert.h"

namespace ringd {
namespace {

constexpr size_t kPage = 4096;
// The frame buffer's block: whole pages.
constexpr size_t kFrameBufBlock = (H2Memory::kFrameBufBytes + kPage - 1) & ~(kPage - 1);

}  // namespace

H2Memory::H2Memory() : mem_{this, &Malloc, &Free, &Calloc, &Realloc} {}

void H2Memory::BeginSession() {
  RINGD_ASSERT(!creating_);
  creating_ = true;
  frame_buf_ = nullptr;
}

void* H2Memory::EndSession() {
  RINGD_ASSERT(creating_);
  creating_ = false;
  return frame_buf_;
}

void H2Memory::Quiet(void* frame_buf) {
  RINGD_ASSERT(reinterpret_cast<uintptr_t>(frame_buf) % kPage == 0);
  RINGD_ASSERT(madvise(frame_buf, kFrameBufBlock, MADV_DONTNEED) == 0);
}

// The frame buffer gets a block of whole pages, aligned to a page, so that Quiet releases all of
// it and nothing of its neighbours; everything else is an ordinary block.
void* H2Memory::Allocate(size_t size) {
  if (creating_ && size == kFrameBufBytes && frame_buf_ == nullptr) {
    frame_buf_ = std::aligned_alloc(kPage, kFrameBufBlock);
    return frame_buf_;
  }
  return std::malloc(size);
}

void H2Memory::Counted(void* ptr, int sign) {
  if (ptr == nullptr) return;
  const uint64_t n = malloc_usable_size(ptr);
  if (sign > 0) {
    live_bytes_ += n;
    ++live_allocs_;
  } else {
    RINGD_ASSERT(live_bytes_ >= n && live_allocs_ > 0);
    live_bytes_ -= n;
    --live_allocs_;
  }
}

void* H2Memory::Malloc(size_t size, void* self) {
  H2Memory* m = static_cast<H2Memory*>(self);
  void* p = m->Allocate(size);
  m->Counted(p, +1);
  return p;
}

void H2Memory::Free(void* ptr, void* self) {
  static_cast<H2Memory*>(self)->Counted(ptr, -1);
  std::free(ptr);
}

void* H2Memory::Calloc(size_t nmemb, size_t size, void* self) {
  H2Memory* m = static_cast<H2Memory*>(self);
  void* p = std::calloc(nmemb, size);
  m->Counted(p, +1);
  return p;
}

void* H2Memory::Realloc(void* ptr, size_t size, void* self) {
  H2Memory* m = static_cast<H2Memory*>(self);
  if (ptr == nullptr) return Malloc(size, self);  // nghttp2 makes its buffers this way
  m->Counted(ptr, -1);
  void* p = std::realloc(ptr, size);
  m->Counted(p != nullptr ? p : ptr, +1);  // a failed realloc leaves the block as it was
  return p;
}

}  // namespace ringd
