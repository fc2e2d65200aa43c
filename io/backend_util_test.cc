// PagesCached: cachestat where the kernel lets us ask, else RWF_NOWAIT reads; both must tell a
// file written (so in the page cache) from one evicted, and a range half in the cache from one
// wholly in it. Also ColdTransfers, ResidentFiles and the cork's end (EndCork).
#include "io/backend_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace ringd::io::internal {
namespace {

class PagesCachedTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("TEST_TMPDIR");
    path_ = std::string(dir != nullptr ? dir : "/tmp") + "/pages-cached-XXXXXX";
    fd_ = ::mkstemp(path_.data());
    ASSERT_GE(fd_, 0);
    const std::string block(1 << 20, 'x');
    for (int i = 0; i < 4; ++i)
      ASSERT_EQ(::write(fd_, block.data(), block.size()), static_cast<ssize_t>(block.size()));
    ASSERT_EQ(::fdatasync(fd_), 0);
  }
  void TearDown() override {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  bool Cached(uint64_t offset, uint64_t length) {
    return GetParam() ? PagesCachedByReading(fd_, offset, length)
                      : PagesCached(fd_, offset, length);
  }
  // Drops the file's clean pages from the page cache; false where the file system keeps them
  // (tmpfs: its pages are the file).
  bool Evict() {
    ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
    return !PagesCached(fd_, 0, 4096);
  }
  std::string path_;
  int fd_ = -1;
};

TEST_P(PagesCachedTest, WrittenIsCachedEvictedIsNot) {
  EXPECT_TRUE(Cached(0, 4 << 20));
  EXPECT_TRUE(Cached(12345, 1 << 20));
  if (!Evict()) GTEST_SKIP() << "this file system keeps a file's pages (tmpfs?)";
  EXPECT_FALSE(Cached(0, 4 << 20));
  EXPECT_FALSE(Cached(3 << 20, 1 << 20));
}

TEST_P(PagesCachedTest, ARangeOnlyPartlyCachedIsNot) {
  if (!Evict()) GTEST_SKIP() << "this file system keeps a file's pages (tmpfs?)";
  char buf[4096];
  ASSERT_EQ(::pread(fd_, buf, sizeof buf, 0), static_cast<ssize_t>(sizeof buf));  // one page
  EXPECT_TRUE(Cached(0, 4096));
  EXPECT_FALSE(Cached(0, 4 << 20)) << "the range's end was never read";
}

INSTANTIATE_TEST_SUITE_P(Probes, PagesCachedTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("reading") : std::string("cachestat");
                         });

}  // namespace
}  // namespace ringd::io::internal

namespace ringd::io::internal {
namespace {

TEST(ColdTransfers, ANotedTransferIsTakenOnceAtItsNextOffset) {
  ColdTransfers cold;
  EXPECT_FALSE(cold.Take(7, 1 << 20));
  cold.Note(7, 1 << 20);
  EXPECT_FALSE(cold.Take(7, 2 << 20)) << "another offset of the same file";
  EXPECT_FALSE(cold.Take(8, 1 << 20)) << "the same offset of another file";
  EXPECT_TRUE(cold.Take(7, 1 << 20));
  EXPECT_FALSE(cold.Take(7, 1 << 20)) << "taken once";
}

TEST(ColdTransfers, ManyTransfersAtOnceMostlyKeepTheirNotes) {
  ColdTransfers cold;
  for (int fd = 0; fd < 256; ++fd) cold.Note(fd, uint64_t{3} << 20);
  int kept = 0;
  for (int fd = 0; fd < 256; ++fd) kept += cold.Take(fd, uint64_t{3} << 20);
  // 256 notes in 1,024 slots: a few collide and are lost (the next chunk then asks PagesCached).
  EXPECT_GT(kept, 200);
  EXPECT_LE(kept, 256);
}

}  // namespace
}  // namespace ringd::io::internal

namespace ringd::io::internal {
namespace {

// ResidentFiles against a scripted page cache: what it answers, and how often it was asked.
PageCacheAnswer scripted_answer{true, true};
int scripted_asks = 0;
PageCacheAnswer Scripted(int, uint64_t, uint64_t) {
  ++scripted_asks;
  return scripted_answer;
}

class ResidentFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    scripted_answer = {true, true};
    scripted_asks = 0;
  }
  ResidentFiles resident_{100, &Scripted};
};

TEST_F(ResidentFilesTest, AYesIsTrustedForItsRangeUntilItExpires) {
  EXPECT_TRUE(resident_.Cached(5, 0, 256 << 10, 1000));
  EXPECT_EQ(scripted_asks, 1);
  scripted_answer = {false, true};  // evicted since: the window's price
  EXPECT_TRUE(resident_.Cached(5, 4096, 8192, 1099));
  EXPECT_EQ(scripted_asks, 1);
  EXPECT_FALSE(resident_.Cached(5, 0, 256 << 10, 1100)) << "trusted past its window";
  EXPECT_EQ(scripted_asks, 2);
  EXPECT_EQ(resident_.asks(), 2u);
}

TEST_F(ResidentFilesTest, AdjacentChunksGrowOneRangeUnderTheFirstDeadline) {
  constexpr uint64_t kChunk = 256 << 10;
  for (uint64_t i = 0; i < 16; ++i) EXPECT_TRUE(resident_.Cached(5, i * kChunk, kChunk, 1000 + i));
  EXPECT_EQ(scripted_asks, 16);
  EXPECT_TRUE(resident_.Cached(5, 0, 16 * kChunk, 1050)) << "the next request of the whole file";
  EXPECT_EQ(scripted_asks, 16);
  EXPECT_TRUE(resident_.Cached(5, 0, kChunk, 1100));
  EXPECT_EQ(scripted_asks, 17) << "the grown range kept the first answer's deadline";
  EXPECT_TRUE(resident_.Cached(6, 0, kChunk, 1100));
  EXPECT_EQ(scripted_asks, 18) << "another fd asks for itself";
}

TEST_F(ResidentFilesTest, ARangeBeyondTheTrustedOneAsks) {
  EXPECT_TRUE(resident_.Cached(5, 0, 4096, 1000));
  scripted_answer = {false, true};
  EXPECT_FALSE(resident_.Cached(5, 0, 8192, 1001));
  EXPECT_FALSE(resident_.Cached(5, 1 << 20, 4096, 1001));
  EXPECT_TRUE(resident_.Cached(5, 0, 4096, 1001)) << "a no does not undo the earlier yes";
  EXPECT_EQ(scripted_asks, 3);
}

TEST_F(ResidentFilesTest, ASiteOfThousandsOfOpenFilesKeepsEveryAnswer) {
  constexpr int kFiles = 4000;  // a shard's cache holds a few thousand fds, numbered densely
  for (int fd = 10; fd < 10 + kFiles; ++fd) EXPECT_TRUE(resident_.Cached(fd, 0, 4096, 1000));
  EXPECT_EQ(scripted_asks, kFiles);
  for (int fd = 10; fd < 10 + kFiles; ++fd) EXPECT_TRUE(resident_.Cached(fd, 0, 4096, 1050));
  EXPECT_EQ(scripted_asks, kFiles) << "each file's answer kept its own slot";
}

TEST_F(ResidentFilesTest, AForgottenFdAsksAgain) {
  EXPECT_TRUE(resident_.Cached(5, 0, 4096, 1000));
  // The same slot, another fd: nothing of 5's is forgotten.
  resident_.Forget(5 + ResidentFiles::kSlots);
  EXPECT_TRUE(resident_.Cached(5, 0, 4096, 1000));
  EXPECT_EQ(scripted_asks, 1);
  resident_.Forget(5);
  scripted_answer = {false, true};  // the number names another file now
  EXPECT_FALSE(resident_.Cached(5, 0, 4096, 1000));
}

TEST_F(ResidentFilesTest, AYesThatCannotTellAPageStillBeingReadIsNotKept) {
  scripted_answer = {true, false};  // cachestat's yes where RWF_NOWAIT is refused (FUSE)
  EXPECT_TRUE(resident_.Cached(5, 0, 4096, 1000));
  EXPECT_TRUE(resident_.Cached(5, 0, 4096, 1000));
  EXPECT_EQ(scripted_asks, 2);
}

TEST_F(ResidentFilesTest, NoTrustAsksEveryTime) {
  ResidentFiles ask_always(0, &Scripted);
  EXPECT_TRUE(ask_always.Cached(5, 0, 4096, 1000));
  EXPECT_TRUE(ask_always.Cached(5, 0, 4096, 1000));
  EXPECT_EQ(scripted_asks, 2);
}

// SendTurns: a turn's share is divided among the connections that sent in the turn before (up
// to kMaxBytes each, at least the per-connection budget); a spent share holds everyone to it.
TEST(SendTurns, ATurnsShareIsDividedAmongTheLastTurnsSenders) {
  constexpr uint64_t kPer = 256 << 10, kShare = 8 << 20;
  SendTurns turns;
  Completion c[20];
  // Turn 1: no turn before it, so a lone sender may take the most one connection gets.
  EXPECT_EQ(turns.Budget(&c[0], 1, kPer, kShare), SendTurns::kMaxBytes);
  turns.Sent(&c[0], 1 << 20);
  EXPECT_EQ(turns.Budget(&c[0], 1, kPer, kShare), 0u) << "its turn is over";
  // Turn 2: one sender before, still capped at kMaxBytes; 16 connections send.
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(turns.Budget(&c[i], 2, kPer, kShare), i < 8 ? SendTurns::kMaxBytes : kPer)
        << "connection " << i << ": the share is spent after 8 MiB";
    turns.Sent(&c[i], i < 8 ? 1 << 20 : kPer);
  }
  // Turn 3: 16 senders before: 8 MiB / 16 = 512 KiB each.
  EXPECT_EQ(turns.Budget(&c[0], 3, kPer, kShare), 512u << 10);
  turns.Sent(&c[0], 100 << 10);
  EXPECT_EQ(turns.Budget(&c[0], 3, kPer, kShare), 412u << 10) << "what is left of it";
  turns.Sent(&c[0], 412 << 10);
  // Turn 4: one sender before; no share: every connection its own budget.
  EXPECT_EQ(turns.Budget(&c[1], 4, kPer, 0), kPer);
  // Turn 5: a budget above kMaxBytes stands.
  EXPECT_EQ(turns.Budget(&c[1], 5, 2 << 20, kShare), 2u << 20);
}

TEST(SendTurns, ManySendersGetThePerConnectionBudget) {
  constexpr uint64_t kPer = 256 << 10, kShare = 8 << 20;
  SendTurns turns;
  Completion c[64];
  for (uint64_t turn = 1; turn <= 2; ++turn) {
    for (Completion& k : c) turns.Sent(&k, turns.Budget(&k, turn, kPer, kShare));
  }
  // 64 senders before: 8 MiB / 64 = 128 KiB, below the per-connection budget, which stands.
  EXPECT_EQ(turns.Budget(&c[0], 3, kPer, kShare), kPer);
}

// EndCork, at a SendFile's end: the cork stays on only for a piece that asked (SendFile's
// `more`, kept as MSG_MORE in send_flags) and sent every byte; an error, a truncated file and a
// body's last piece uncork. Checked on a real TCP socket (loopback), where TCP_CORK applies.
TEST(EndCork, KeepsTheCorkOnlyForAWholePieceWhoseNextPieceFollows) {
  const int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(l, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t alen = sizeof a;
  ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(l, 1), 0);
  ASSERT_EQ(::getsockname(l, reinterpret_cast<sockaddr*>(&a), &alen), 0);
  const int client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const int sock = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(sock, 0);
  const auto corked = [&] {
    int on = -1;
    socklen_t size = sizeof on;
    EXPECT_EQ(::getsockopt(sock, IPPROTO_TCP, TCP_CORK, &on, &size), 0);
    return on != 0;
  };
  struct Case {
    const char* what;
    int send_flags;
    int64_t result;
    uint64_t remaining;
    bool stays;
  };
  const Case cases[] = {
      {"a whole piece, the next follows", MSG_MORE, 1 << 20, 0, true},
      {"the body's last piece", 0, 1 << 20, 0, false},
      {"an error", MSG_MORE, -ECONNRESET, 1 << 19, false},
      {"a truncated file", MSG_MORE, 1 << 19, 1 << 19, false},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    Completion c;
    BeginOp(&c, Op::kSendFile, sock);
    c.send_flags = k.send_flags;
    c.remaining = 1 << 20;
    CorkBody(&c, sock);
    ASSERT_TRUE(c.corked && corked());
    c.remaining = k.remaining;
    c.in_flight = false;
    EndCork(&c, sock, k.result);
    EXPECT_EQ(c.corked, k.stays);
    EXPECT_EQ(corked(), k.stays);
    UncorkBody(&c, sock);
    EXPECT_FALSE(corked());
  }
  ::close(sock);
  ::close(client);
  ::close(l);
}

}  // namespace
}  // namespace ringd::io::internal
