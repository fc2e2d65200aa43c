// nghttp2's allocations for one shard (`nghttp2_mem`): counted, so that a shard knows what its
// HTTP/2 sessions hold and its exit can assert that they hold nothing; and each session's frame
// buffer placed on pages of its own, so that a connection that has been idle a while can hand
// those pages back to the kernel (`Quiet`).
//
// nghttp2 serializes every outgoing frame into one buffer per session (its `framebufs`: 16 KiB
// of payload, the frame header and a pad byte) that it allocates with the session and keeps for
// the session's life. Between frames its bytes are dead: nghttp2 writes a frame into it whole
// before handing it to the send callback, which copies it out (ringd's batches). An idle
// connection therefore holds up to 16 KiB that say nothing; released with MADV_DONTNEED, the
// pages come back zeroed on the next frame's first write.
#pragma once

#include <nghttp2/nghttp2.h>

#include <cstddef>
#include <cstdint>

namespace ringd {

class H2Memory {
 public:
  // The frame buffer's size in nghttp2 (NGHTTP2_FRAMEBUF_CHUNKLEN: a 9-byte frame header, a pad
  // length byte and the largest payload, 16,384 bytes).
  static constexpr size_t kFrameBufBytes = 9 + 1 + 16384;

  H2Memory();
  H2Memory(const H2Memory&) = delete;
  H2Memory& operator=(const H2Memory&) = delete;

  nghttp2_mem* mem() { return &mem_; }

  // Around the session's creation: the allocation of the frame buffer's size made in between is
  // the session's frame buffer. EndSession returns it (nullptr if none was made: a version of
  // nghttp2 that frames otherwise; then nothing is ever quieted).
  void BeginSession();
  void* EndSession();

  // Hands the whole pages of a frame buffer back to the kernel. Only while nghttp2 has nothing
  // framed and unsent (`nghttp2_session_want_write` is 0 and no send is in its buffer).
  static void Quiet(void* frame_buf);

  uint64_t live_bytes() const { return live_bytes_; }         // what nghttp2 holds now
  uint64_t live_allocations() const { return live_allocs_; }  // in how many blocks

 private:
  static void* Malloc(size_t size, void* self);
  static void Free(void* ptr, void* self);
  static void* Calloc(size_t nmemb, size_t size, void* self);
  static void* Realloc(void* ptr, size_t size, void* self);
  void* Allocate(size_t size);
  void Counted(void* ptr, int sign);

  nghttp2_mem mem_;
  uint64_t live_bytes_ = 0;
  uint64_t live_allocs_ = 0;
  bool creating_ = false;      // between BeginSession and EndSession
  void* frame_buf_ = nullptr;  // found while creating
};

}  // namespace ringd
