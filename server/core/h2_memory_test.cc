#include "server/core/h2_memory.h"

#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <string>

namespace ringd {
namespace {

constexpr size_t kPage = 4096;

// What the session sends, gathered.
ssize_t Gather(nghttp2_session*, const uint8_t* data, size_t len, int, void* user) {
  static_cast<std::string*>(user)->append(reinterpret_cast<const char*>(data), len);
  return static_cast<ssize_t>(len);
}

struct Session {
  explicit Session(H2Memory* memory) {
    nghttp2_session_callbacks* cb;
    EXPECT_EQ(nghttp2_session_callbacks_new(&cb), 0);
    nghttp2_session_callbacks_set_send_callback(cb, &Gather);
    memory->BeginSession();
    EXPECT_EQ(nghttp2_session_server_new3(&session, cb, &sent, nullptr, memory->mem()), 0);
    frame_buf = memory->EndSession();
    nghttp2_session_callbacks_del(cb);
  }
  ~Session() { nghttp2_session_del(session); }
  nghttp2_session* session = nullptr;
  void* frame_buf = nullptr;
  std::string sent;
};

// Pages of the frame buffer resident now.
size_t ResidentPages(void* frame_buf) {
  unsigned char vec[8];
  const size_t pages = (H2Memory::kFrameBufBytes + kPage - 1) / kPage;
  EXPECT_EQ(mincore(frame_buf, pages * kPage, vec), 0);
  size_t n = 0;
  for (size_t i = 0; i < pages; ++i) n += vec[i] & 1;
  return n;
}

TEST(H2Memory, CountsWhatNghttp2HoldsAndNothingAfterTheSession) {
  H2Memory memory;
  {
    Session s(&memory);
    EXPECT_GT(memory.live_bytes(), H2Memory::kFrameBufBytes);
    EXPECT_GT(memory.live_allocations(), 1u);
  }
  EXPECT_EQ(memory.live_bytes(), 0u);
  EXPECT_EQ(memory.live_allocations(), 0u);
}

// The nghttp2 ringd links makes its frame buffer with the session, of the size H2Memory looks
// for: if a version frames otherwise, this fails rather than idle connections silently keeping it.
TEST(H2Memory, FindsTheSessionsFrameBufferOnPagesOfItsOwn) {
  H2Memory memory;
  Session s(&memory);
  ASSERT_NE(s.frame_buf, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(s.frame_buf) % kPage, 0u);
  Session t(&memory);
  EXPECT_NE(t.frame_buf, s.frame_buf);
}

TEST(H2Memory, QuietHandsThePagesBackAndTheSessionFramesAsBefore) {
  H2Memory memory;
  Session s(&memory);
  ASSERT_NE(s.frame_buf, nullptr);
  std::memset(s.frame_buf, 0xab, H2Memory::kFrameBufBytes);  // as a session's frames would
  EXPECT_EQ(ResidentPages(s.frame_buf), 5u);

  const uint8_t opaque[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_EQ(nghttp2_submit_ping(s.session, NGHTTP2_FLAG_NONE, opaque), 0);
  ASSERT_EQ(nghttp2_session_send(s.session), 0);
  const std::string before = s.sent;
  ASSERT_EQ(nghttp2_session_want_write(s.session), 0);

  H2Memory::Quiet(s.frame_buf);
  EXPECT_EQ(ResidentPages(s.frame_buf), 0u);

  s.sent.clear();
  ASSERT_EQ(nghttp2_submit_ping(s.session, NGHTTP2_FLAG_NONE, opaque), 0);
  ASSERT_EQ(nghttp2_session_send(s.session), 0);
  EXPECT_EQ(s.sent, before.substr(before.size() - 17));  // the same 17-byte PING frame
  EXPECT_EQ(s.sent.substr(0, 5), std::string("\x00\x00\x08\x06\x00", 5));
  EXPECT_LE(ResidentPages(s.frame_buf), 1u);  // only what the frame touched
}

}  // namespace
}  // namespace ringd
