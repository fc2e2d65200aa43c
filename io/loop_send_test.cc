// The Loop contract for file bodies, on every backend: SendFile takes turns and arrives whole,
// splices without descriptors fail, bypass's body buffers and installed fds, a client that does
// not read never holds the loop, inline bodies leave in whole segments (across a body's pieces
// too), epoll warms exactly the chunk it sends, and a page-cache answer is not trusted past its
// file's close.
#include <errno.h>
#include <fcntl.h>
#include <linux/tcp.h>  // tcp_info with tcpi_data_segs_in (glibc's predates it)
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "io/loop_test_fixture.h"

namespace ringd::io::loop_test {
namespace {

int OpenFds() {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd) n += ::fcntl(fd, F_GETFD) >= 0 ? 1 : 0;
  return n;
}

// A SendFile larger than a turn's budget goes out in turns, resumed from the loop, and arrives
// whole and in order.
TEST_P(LoopTest, SendFileTakesTurnsAndArrivesWhole) {
  options_.send_turn_bytes = 64 << 10;
  options_.send_turn_share_bytes = 0;  // each turn send_turn_bytes, not a share
  SetUp();
  if (IsSkipped()) return;
  constexpr size_t kSize = 1 << 20;
  const std::string content = Pattern(kSize, 7, 4096);
  const int file = TempFile(content);
  ASSERT_GE(file, 0);
  auto [ours, theirs] = Pair();
  // With room for the whole file in the socket, only the budget can make SendFile wait for the
  // next Poll. Raising the buffer past net.core.wmem_max needs CAP_NET_ADMIN; without it the
  // socket fills up too, and only the bytes are checked.
  const int big = 8 << 20;
  const bool roomy = ::setsockopt(ours, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big) == 0;
  std::string got;
  std::thread reader = ReadInThread(theirs, kSize, &got);
  Receiver done;  // reused for its callback: one call with more == false
  loop_->SendFile(ours, file, 0, kSize, &done.c);
  int polls = 0;
  while (done.ends == 0 && polls < 20000) {
    loop_->Poll(10);
    ++polls;
  }
  reader.join();
  EXPECT_EQ(done.ends, 1);
  EXPECT_EQ(done.last_result, static_cast<int64_t>(kSize));
  EXPECT_TRUE(got == content) << "the bytes that arrived differ from the file";
  // 16 turns: the first inside SendFile itself, then one per Poll at most.
  if (roomy) {
    EXPECT_GE(polls, static_cast<int>(kSize / options_.send_turn_bytes) - 1)
        << "no more than a turn's budget goes out per Poll";
  }
}

// Socket buffers that hold a whole turn's 1 MiB on both ends (false without CAP_NET_ADMIN).
bool RoomForATurn(int sender, int receiver) {
  const int big = 8 << 20;
  return ::setsockopt(sender, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big) == 0 &&
         ::setsockopt(receiver, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) == 0;
}

// A lone download gets the turn's share (up to 1 MiB a turn, internal::SendTurns), not only
// send_turn_bytes: a 4 MiB body goes out in a few turns of large sendfiles.
TEST_P(LoopTest, ALoneDownloadSendsTheTurnsShare) {
  options_.send_turn_bytes = 64 << 10;
  options_.send_turn_share_bytes = 8 << 20;
  SetUp();
  if (IsSkipped()) return;
  constexpr size_t kSize = 4 << 20;
  const std::string content = Pattern(kSize, 3, 4096);
  const int file = TempFile(content);
  ASSERT_GE(file, 0);
  auto [ours, theirs] = Pair();
  if (!RoomForATurn(ours, theirs)) {
    GTEST_SKIP() << "no room for a turn's 1 MiB in the socket without CAP_NET_ADMIN";
  }
  Sender dl;
  loop_->SendFile(ours, file, 0, kSize, &dl.c);  // its first turn, inside the call
  int queued = 0;
  ASSERT_EQ(::ioctl(theirs, FIONREAD, &queued), 0);
  EXPECT_EQ(queued, 1 << 20) << "the first turn: 1 MiB, the most one connection gets";
  std::string got;
  std::thread reader = ReadInThread(theirs, kSize, &got);
  EXPECT_TRUE(PollUntil([&] { return dl.ends == 1; }));
  reader.join();
  EXPECT_EQ(dl.last_result, static_cast<int64_t>(kSize));
  EXPECT_TRUE(got == content);
}

// At the default options a download sends 1 MiB a turn however many pages and assets sent in
// the turn before (--send-turn-bytes). With 256 KiB turns the turn's share was divided among
// every connection that had sent, most of them small responses that needed little of it, so in a
// site's mix a download got 256 KiB a turn and took 16 turns (docs/PERFORMANCE.md, "Downloads
// in a mix").
TEST_P(LoopTest, ADownloadBesideManySmallResponsesSends1MiBATurn) {
  SetUp();  // the default send turns
  if (IsSkipped()) return;
  constexpr size_t kSize = 4 << 20, kSmall = 16 << 10;
  constexpr int kSmallResponses = 40;
  const std::string content = Pattern(kSize, 11, 4096);
  const int file = TempFile(content);
  ASSERT_GE(file, 0);
  auto [down, down_client] = Pair();
  if (!RoomForATurn(down, down_client)) {
    GTEST_SKIP() << "no room for a turn's 1 MiB in the socket without CAP_NET_ADMIN";
  }
  std::vector<std::pair<int, int>> smalls;
  std::vector<Sender> small_senders(kSmallResponses);
  for (int i = 0; i < kSmallResponses; ++i) smalls.push_back(Pair());
  loop_->Poll(0);  // past the loop's first turn, in which no connection counts as a sender
  // One turn (outside Poll): the download's first 1 MiB and 40 small responses, each whole.
  Sender dl;
  loop_->SendFile(down, file, 0, kSize, &dl.c);
  for (int i = 0; i < kSmallResponses; ++i) {
    loop_->SendFile(smalls[i].first, file, 0, kSmall, &small_senders[i].c);
  }
  int before = 0, after = 0;
  ASSERT_EQ(::ioctl(down_client, FIONREAD, &before), 0);
  loop_->Poll(0);  // the next turn: 41 connections sent in the turn before
  ASSERT_EQ(::ioctl(down_client, FIONREAD, &after), 0);
  EXPECT_EQ(before, 1 << 20);
  EXPECT_EQ(after - before, 1 << 20) << "the download's next turn: 1 MiB";
  std::string got;
  std::thread reader = ReadInThread(down_client, kSize, &got);
  EXPECT_TRUE(PollUntil([&] {
    int ended = dl.ends;
    for (const Sender& s : small_senders) ended += s.ends;
    return ended == kSmallResponses + 1;
  }));
  reader.join();
  EXPECT_TRUE(got == content);
  for (const Sender& s : small_senders) EXPECT_EQ(s.last_result, static_cast<int64_t>(kSmall));
}

// A request received in the same Poll as a download's next turn runs first: a page or an asset
// does not wait behind every download's next 256 KiB. (Before, the completions ran in the order
// the kernel posted them, and a writable socket's came first.)
TEST_P(LoopTest, ARequestRunsBeforeADownloadsNextTurn) {
  options_.send_turn_bytes = 16 << 10;
  options_.send_turn_share_bytes = 0;
  SetUp();
  if (IsSkipped()) return;
  constexpr size_t kSize = 1 << 20;
  const std::string content = Pattern(kSize, 5, 4096);
  const int file = TempFile(content);
  ASSERT_GE(file, 0);
  auto [down, down_client] = Pair();
  auto [req, req_client] = Pair();
  // The receive notes how much of the download its client could read when the request ran.
  struct Noting : Receiver {
    int watch = -1;
    int seen = -1;
    static void OnEvent(Completion* c) {
      Noting* self = static_cast<Noting*>(c->owner);
      Receiver::OnEvent(c);
      if (c->result > 0 && self->seen < 0) ::ioctl(self->watch, FIONREAD, &self->seen);
    }
    Noting() { c.callback = &OnEvent; }
  } r;
  r.watch = down_client;
  loop_->Recv(req, &r.c);
  loop_->Poll(0);
  Sender dl;
  loop_->SendFile(down, file, 0, kSize, &dl.c);  // its first turn, inside the call
  loop_->Poll(0);                                // its second
  int before = 0;
  ASSERT_EQ(::ioctl(down_client, FIONREAD, &before), 0);
  ASSERT_EQ(before, 2 * (16 << 10)) << "one turn per Poll";
  ASSERT_EQ(::write(req_client, "GET", 3), 3);
  loop_->Poll(0);  // the download's third turn and the request, both ready
  ASSERT_EQ(r.got, "GET");
  EXPECT_EQ(r.seen, before) << "the download took its turn before the request ran";
  int after = 0;
  ::ioctl(down_client, FIONREAD, &after);
  EXPECT_EQ(after, 3 * (16 << 10)) << "and took it in the same Poll";
  std::string got;
  std::thread reader = ReadInThread(down_client, kSize, &got);
  EXPECT_TRUE(PollUntil([&] { return dl.ends == 1; }));
  reader.join();
  EXPECT_EQ(dl.last_result, static_cast<int64_t>(kSize));
  EXPECT_TRUE(got == content);
  loop_->Cancel(&r.c);
  PollUntil([&] { return r.ends == 1; });
}

// uring: a SendFile that must splice (its pages are not cached) while no descriptor can be
// created arrives whole: the loop made its first pipe at start and keeps it.
TEST_P(LoopTest, SpliceWithoutDescriptorsUsesThePipeMadeAtStart) {
  if (GetParam() != "uring") GTEST_SKIP() << "only the uring backend splices through pipes";
  const char* dir = std::getenv("TEST_TMPDIR");  // not tmpfs: its pages can be evicted
  const std::string content = Pattern(1 << 20, 5, 89);
  const int file = TempFile(content, dir != nullptr ? dir : "/var/tmp");
  ASSERT_GE(file, 0);
  ::fsync(file);
  ::posix_fadvise(file, 0, 0, POSIX_FADV_DONTNEED);
  char probe;
  iovec v{&probe, 1};
  if (::preadv2(file, &v, 1, 0, RWF_NOWAIT) == 1) {
    GTEST_SKIP() << "cannot evict the file from the page cache here";
  }
  auto [ours, theirs] = Pair();
  // No descriptor can be created from here on.
  rlimit saved{};
  ::getrlimit(RLIMIT_NOFILE, &saved);
  const int next = ::dup(0);
  ASSERT_GE(next, 0);
  ::close(next);
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(next);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &tight), 0);
  Receiver done;
  std::string got;
  auto drain = [&, client = theirs] {
    char buf[1 << 16];
    ssize_t n;
    while ((n = ::read(client, buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  };
  loop_->SendFile(ours, file, 0, content.size(), &done.c);
  const bool ended = PollUntil([&] {
    drain();
    return done.ends > 0;
  });
  drain();
  ::setrlimit(RLIMIT_NOFILE, &saved);
  ASSERT_TRUE(ended);
  EXPECT_EQ(done.last_result, static_cast<int64_t>(content.size()));
  EXPECT_TRUE(got == content) << "got " << got.size() << " bytes";
  EXPECT_GE(loop_->Stats().splice_bytes, content.size());
}

// A pipe that comes back dirty (its transfer failed with bytes in it) is drained and kept, so
// the SendFile waiting for a pipe gets it even when no descriptor can be made (out of
// descriptors), and its body arrives whole.
TEST_P(LoopTest, ADirtyPipeIsDrainedAndServesTheWaiter) {
  if (GetParam() != "uring") GTEST_SKIP() << "only the uring backend splices through pipes";
  options_.uring.pipe_pool_size = 2;
  options_.uring.splice_min_bytes = 1;  // every body splices, cached or not
  SetUp();
  if (IsSkipped()) return;
  constexpr size_t kSize = 4 << 20;  // more than a socket and a pipe hold together
  const std::string content = Pattern(kSize, 7, 97);
  const int file = TempFile(content);
  ASSERT_GE(file, 0);
  // Three transfers to clients that do not read yet: two hold the pipes, the third waits.
  std::pair<int, int> socks[3] = {Pair(), Pair(), Pair()};
  Receiver done[3];
  for (int i = 0; i < 3; ++i) loop_->SendFile(socks[i].first, file, 0, kSize, &done[i].c);
  for (int i = 0; i < 50; ++i) loop_->Poll(1);
  ASSERT_EQ(done[0].ends + done[1].ends + done[2].ends, 0);
  ASSERT_EQ(loop_->Stats().pipes_in_use, 2u);
  // No descriptor can be made from here on (0, 1 and 2 are taken); then the first client goes
  // away, so its pipe comes back dirty, and the third client reads.
  rlimit saved{};
  ::getrlimit(RLIMIT_NOFILE, &saved);
  rlimit tight = saved;
  tight.rlim_cur = 3;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &tight), 0);
  ::shutdown(socks[0].second, SHUT_RDWR);
  std::string got;
  auto drain = [&] {
    char buf[1 << 16];
    ssize_t n;
    while ((n = ::read(socks[2].second, buf, sizeof buf)) > 0)
      got.append(buf, static_cast<size_t>(n));
  };
  const bool ended = PollUntil([&] {
    drain();
    return done[0].ends > 0 && done[2].ends > 0;
  });
  drain();
  const uint64_t pipes_in_use = loop_->Stats().pipes_in_use;
  ::setrlimit(RLIMIT_NOFILE, &saved);
  ASSERT_TRUE(ended) << "the third transfer did not get the first one's pipe";
  EXPECT_LT(done[0].last_result, 0);
  EXPECT_EQ(done[2].last_result, static_cast<int64_t>(kSize));
  EXPECT_TRUE(got == content) << "got " << got.size() << " bytes";
  EXPECT_EQ(pipes_in_use, 1u);  // the second transfer's
  ::shutdown(socks[1].second, SHUT_RDWR);
  EXPECT_TRUE(PollUntil([&] { return done[1].ends > 0; }));
}

// bypass: a file body goes to a direct socket through a registered body buffer (read, then
// send) while one is free, and splices when none is; both arrive whole, and a file that is
// shorter than asked (truncated under the sender) ends the transfer early with what it had.
TEST_P(LoopTest, BypassBodiesGoThroughBodyBuffersThenSplice) {
  if (GetParam().rfind("bypass", 0) != 0)
    GTEST_SKIP() << "only the bypass tier reads bodies into body buffers";
  options_.uring.body_buffers = 1;
  options_.uring.body_buffer_size = 64 << 10;
  SetUp();
  if (IsSkipped()) return;
  constexpr int kConns = 3;
  std::vector<int> clients;
  const std::vector<int> handles = Accepted(kConns, &clients);
  ASSERT_EQ(handles.size(), static_cast<size_t>(kConns));

  constexpr size_t kSize = (1 << 20) + 123;
  const std::string content = Pattern(kSize, 13, 999);
  const int file = TempFile(content);
  ASSERT_GE(file, 0);
  // The third asks for more than the file has: it ends early, with the whole file sent.
  const size_t want[kConns] = {kSize, kSize, kSize + 5000};
  std::string got[kConns];
  std::vector<std::thread> readers;
  for (int i = 0; i < kConns; ++i) {
    readers.emplace_back([&, i] {
      char buf[65536];
      while (got[i].size() < kSize) {
        const ssize_t n = ::read(clients[i], buf, sizeof buf);
        if (n <= 0) break;
        got[i].append(buf, static_cast<size_t>(n));
      }
    });
  }
  Receiver done[kConns];
  for (int i = 0; i < kConns; ++i) loop_->SendFile(handles[i], file, 0, want[i], &done[i].c);
  EXPECT_TRUE(PollUntil([&] {
    for (const Receiver& d : done)
      if (d.ends == 0) return false;
    return true;
  }));
  for (std::thread& t : readers) t.join();
  for (int i = 0; i < kConns; ++i) {
    EXPECT_EQ(done[i].ends, 1) << i;
    EXPECT_EQ(done[i].last_result, static_cast<int64_t>(kSize)) << i;
    EXPECT_TRUE(got[i] == content) << "connection " << i << ": the bytes differ from the file";
  }
  const LoopStats st = loop_->Stats();
  EXPECT_GE(st.read_send_bytes, kSize) << "no body went through the body buffer";
  EXPECT_GE(st.splice_bytes, kSize) << "a body that found the buffer busy did not splice";
  EXPECT_EQ(st.read_send_bytes + st.splice_bytes, 3 * kSize);
  for (int h : handles) loop_->Close(h);
  loop_->Poll(10);
}

// bypass with bypass_sendfile: a connection's first body installs a process fd for its socket
// (once), cached pages go out with sendfile on it, and Close closes it. Bodies from
// splice_min_bytes splice; a connection whose install is refused (EMFILE) splices too.
TEST_P(LoopTest, BypassCachedBodiesGoOutWithSendfileOnAnInstalledFd) {
  if (GetParam().rfind("bypass", 0) != 0)
    GTEST_SKIP() << "only the bypass tier installs fds for its sockets";
  static const bool usable = ProbeUring().fd_install;
  if (!usable) GTEST_SKIP() << "IORING_OP_FIXED_FD_INSTALL is missing here (ringd --probe)";
  options_.uring.bypass_sendfile = true;
  options_.uring.splice_min_bytes = 2 << 20;
  SetUp();
  if (IsSkipped()) return;
  std::vector<int> clients;
  const std::vector<int> handles = Accepted(2, &clients);
  ASSERT_EQ(handles.size(), 2u);

  const std::string small = Pattern((1 << 20) + 123, 7, 991);  // under splice_min_bytes
  const std::string big = Pattern((3 << 20) + 5, 11, 997);     // over it
  const int small_fd = TempFile(small);
  const int big_fd = TempFile(big);
  ASSERT_GE(small_fd, 0);
  ASSERT_GE(big_fd, 0);
  const auto send = [&](int conn, int file, const std::string& content) {
    return SendWhole(handles[conn], clients[conn], file, content);
  };

  const int fds_before = OpenFds();
  LoopStats st = loop_->Stats();
  ASSERT_TRUE(send(0, small_fd, small));
  EXPECT_EQ(loop_->Stats().sendfile_bytes - st.sendfile_bytes, small.size());
  EXPECT_EQ(loop_->Stats().splice_bytes, st.splice_bytes);
  EXPECT_EQ(OpenFds(), fds_before + 1) << "no process fd was installed for the socket";
  // The same connection again: its fd is reused, not installed twice.
  ASSERT_TRUE(send(0, small_fd, small));
  EXPECT_EQ(OpenFds(), fds_before + 1);
  // A body from splice_min_bytes splices, cached or not (and leaves a pipe in the pool).
  st = loop_->Stats();
  ASSERT_TRUE(send(0, big_fd, big));
  EXPECT_EQ(loop_->Stats().splice_bytes - st.splice_bytes, big.size());

  // No fd to spare (RLIMIT_NOFILE at the lowest free fd number): the install is refused, and
  // the body splices through the pipe the pool already has.
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  const int open_now = OpenFds();
  const int lowest_free = ::fcntl(small_fd, F_DUPFD_CLOEXEC, 0);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(lowest_free);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &tight), 0);
  st = loop_->Stats();
  const bool refused_ok = send(1, small_fd, small);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_TRUE(refused_ok);
  EXPECT_EQ(loop_->Stats().splice_bytes - st.splice_bytes, small.size());
  EXPECT_EQ(OpenFds(), open_now);

  // Closing the connections closes the installed fd with them (the pool keeps its pipe).
  for (int h : handles) loop_->Close(h);
  ASSERT_TRUE(PollUntil([&] { return OpenFds() == open_now - 1; }));
}

// A client that does not read never holds the loop: a body bigger than the socket's buffers
// waits for room (POLL_ADD), whatever the path (inline sendfile, on bypass through an installed
// fd; splice; epoll's sendfile), while Poll keeps returning; once the client reads, it all
// arrives. (A blocking socket would hold the first Poll until the client's reader gives up.)
TEST_P(LoopTest, SendFileToAClientThatDoesNotReadNeverHoldsTheLoop) {
  options_.uring.bypass_sendfile = ProbeUring().fd_install;
  SetUp();
  if (IsSkipped()) return;
  std::vector<int> clients;
  // Send buffers far below a turn's 256 KiB: a send waits for room within every turn.
  const std::vector<int> handles = Accepted(1, &clients, 16 << 10);
  ASSERT_EQ(handles.size(), 1u);
  const std::string content = Pattern(8 << 20, 3, 1013);
  const int file = TempFile(content);
  ASSERT_GE(file, 0);
  std::atomic<bool> drain{false};
  std::string got;
  std::thread reader([&] {
    // Reads only when told to, or after 5 s (so that a loop held by a blocking send fails this
    // test instead of hanging it).
    for (int i = 0; i < 500 && !drain; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    char buf[65536];
    while (got.size() < content.size()) {
      const ssize_t n = ::read(clients[0], buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
  });
  Receiver done;
  const auto start = std::chrono::steady_clock::now();
  loop_->SendFile(handles[0], file, 0, content.size(), &done.c);
  for (int i = 0; i < 100; ++i) loop_->Poll(1);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::seconds(3)) << "a send waited for the client inside the loop";
  EXPECT_EQ(done.ends, 0) << "8 MiB cannot have fit in the socket's buffers";
  drain = true;
  for (int i = 0; i < 1000 && done.ends == 0; ++i) loop_->Poll(10);
  reader.join();
  EXPECT_EQ(done.ends, 1);
  EXPECT_EQ(done.last_result, static_cast<int64_t>(content.size()));
  EXPECT_TRUE(got == content) << "the bytes differ from the file";
  loop_->Close(handles[0]);
  loop_->Poll(10);
}

// A body sent inline goes out in whole segments (TCP_CORK while its sendfiles run): a sendfile
// that stops short on a full socket would otherwise push its partial last segment, and the
// client counts every segment it receives. And the cork ends with the body: the socket is not
// corked once the SendFile has ended, so a small response sent next leaves at once.
TEST_P(LoopTest, AnInlineBodyGoesOutInWholeSegments) {
  if (!SendsInline()) GTEST_SKIP() << kNoInlineSends;
  SetUp();
  if (IsSkipped()) return;
  const std::string content = Pattern(4 << 20, 7, 1021);
  const int file = TempFile(content);  // just written: in the page cache, so sent inline
  ASSERT_GE(file, 0);
  // On a loaded machine a page-cache ask now and then answers "not cached" for a page of it, and
  // the rest of the body then splices (as it must where a page may be missing): such a try says
  // nothing of the cork, so the send is tried again on a new connection, up to 5 times.
  for (int attempt = 1;; ++attempt) {
    std::vector<int> clients;
    // Buffers far below the body: the socket fills again and again while it goes out.
    const std::vector<int> handles = Accepted(1, &clients, 64 << 10);
    ASSERT_EQ(handles.size(), 1u);
    std::string got;
    // A segment held back by TCP_CORK leaves alone once the kernel's 200 ms ceiling passes: where
    // the sender waits that long (a loaded machine: either side off the CPU), the bytes stop
    // arriving for as long. Each such pause may add one partial segment.
    int pauses = 0;
    std::thread reader([&] {
      char buf[16384];  // a reader smaller than a segment, as a client often is
      std::chrono::steady_clock::time_point last{};
      while (got.size() < content.size() + 5) {
        const ssize_t n = ::read(clients[0], buf, sizeof buf);
        if (n <= 0) break;
        const auto now = std::chrono::steady_clock::now();
        if (!got.empty() && now - last >= std::chrono::milliseconds(150)) ++pauses;
        last = now;
        got.append(buf, static_cast<size_t>(n));
      }
    });
    const LoopStats before = loop_->Stats();
    Receiver done;
    loop_->SendFile(handles[0], file, 0, content.size(), &done.c);
    ASSERT_TRUE(PollUntil([&] { return done.ends == 1; }));
    EXPECT_EQ(done.last_result, static_cast<int64_t>(content.size()));
    const uint64_t sent_inline = loop_->Stats().sendfile_bytes - before.sendfile_bytes;
    char tail[] = "tail.";
    iovec v{tail, 5};
    if ((handles[0] & kDirectHandle) == 0) {  // a direct descriptor has no fd to ask
      int corked = -1;
      socklen_t size = sizeof corked;
      ASSERT_EQ(::getsockopt(handles[0], IPPROTO_TCP, TCP_CORK, &corked, &size), 0);
      EXPECT_EQ(corked, 0) << "the socket stayed corked after the body";
    }
    Sender sent;
    loop_->Send(handles[0], &v, 1, &sent.c);
    ASSERT_TRUE(PollUntil([&] { return sent.ends == 1; }));
    reader.join();
    ASSERT_TRUE(got == content + "tail.") << "the bytes differ";
    struct tcp_info info {};
    socklen_t len = sizeof info;
    ASSERT_EQ(::getsockopt(clients[0], IPPROTO_TCP, TCP_INFO, &info, &len), 0);
    loop_->Close(handles[0]);
    loop_->Poll(10);
    if (sent_inline != content.size() && attempt < 5) continue;
    ASSERT_EQ(sent_inline, content.size()) << "the body did not go out inline in 5 tries";
    // Every segment full but the last of the body and the tail: a few more for the handshake's
    // and window updates' odd ones, and one for each pause of the cork's ceiling (above).
    const uint64_t whole = (content.size() + info.tcpi_rcv_mss - 1) / info.tcpi_rcv_mss;
    EXPECT_LE(info.tcpi_data_segs_in, whole + whole / 20 + 4 + static_cast<uint64_t>(pauses))
        << "segments of " << info.tcpi_rcv_mss << " bytes: " << whole << " would do; " << pauses
        << " pauses of 150 ms or more";
    break;
  }
}

// A head sent with `more`, then a body in SendFile pieces that each say the next one follows
// (as the shard sends a 4 MiB file in 1 MiB chunks): the socket stays corked from piece to
// piece (TCP_CORK reads back on, where the handle is an fd), so a piece's partly filled last
// segment waits to be filled by the next piece: the client cannot read a piece's last bytes
// until the next piece starts. The body's last piece uncorks. Without `more` every piece
// arrives whole as soon as it is sent, and the socket is never left corked.
TEST_P(LoopTest, ABodyInPiecesStaysCorkedFromPieceToPiece) {
  if (!SendsInline()) GTEST_SKIP() << kNoInlineSends;
  SetUp();
  if (IsSkipped()) return;
  constexpr size_t kPiece = 1 << 20;  // not a multiple of loopback's segment
  constexpr int kPieces = 3;
  const std::string content = Pattern(kPieces * kPiece, 7, 1021);
  const int file = TempFile(content);  // just written: in the page cache, so sent inline
  ASSERT_GE(file, 0);
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 3145728\r\n\r\n";
  using Clock = std::chrono::steady_clock;
  for (const bool more : {false, true}) {
    SCOPED_TRACE(more ? "pieces with more" : "pieces without more");
    std::vector<int> clients;
    const std::vector<int> handles = Accepted(1, &clients);
    ASSERT_EQ(handles.size(), 1u);
    std::mutex mu;
    std::string got;
    std::thread reader([&] {
      char buf[65536];
      for (;;) {
        const ssize_t n = ::read(clients[0], buf, sizeof buf);
        if (n <= 0) break;
        std::lock_guard<std::mutex> lock(mu);
        got.append(buf, static_cast<size_t>(n));
        if (got.size() == head.size() + content.size()) break;
      }
    });
    struct Join {  // a failed ASSERT below must not leave the reader joinable
      std::thread* t;
      int fd;
      ~Join() {
        if (t->joinable()) ::shutdown(fd, SHUT_RDWR), t->join();
      }
    } join{&reader, clients[0]};
    const auto received = [&] {
      std::lock_guard<std::mutex> lock(mu);
      return got.size();
    };
    // Whether the client gets more than `least` bytes within 2 s (what must arrive).
    const auto arrives = [&](size_t least) {
      const Clock::time_point give_up = Clock::now() + std::chrono::seconds(2);
      while (received() <= least && Clock::now() < give_up) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return received() > least;
    };
    // What the client has once nothing more arrived for 30 ms (what may not arrive).
    const auto settled = [&] {
      size_t last = received();
      Clock::time_point moved = Clock::now();
      while (Clock::now() - moved < std::chrono::milliseconds(30)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        const size_t now = received();
        if (now != last) last = now, moved = Clock::now();
      }
      return last;
    };
    Sender done;
    std::string head_copy = head;
    iovec v{head_copy.data(), head_copy.size()};
    loop_->Send(handles[0], &v, 1, &done.c, more);
    ASSERT_TRUE(PollUntil([&] { return done.ends == 1; }));
    size_t held_before = 0;  // the end of the last piece that promised the next
    for (int i = 0; i < kPieces; ++i) {
      const bool next_follows = more && i + 1 < kPieces;
      const uint64_t inline_before = loop_->Stats().sendfile_bytes;
      loop_->SendFile(handles[0], file, i * kPiece, kPiece, &done.c, next_follows);
      ASSERT_TRUE(PollUntil([&] { return done.ends == i + 2; }));
      const Clock::time_point ended = Clock::now();
      ASSERT_EQ(done.last_result, static_cast<int64_t>(kPiece));
      ASSERT_EQ(loop_->Stats().sendfile_bytes - inline_before, kPiece)
          << "piece " << i << " did not go out inline (only inline sends cork)";
      if ((handles[0] & kDirectHandle) == 0) {  // a direct descriptor has no fd to ask
        int corked = -1;
        socklen_t size = sizeof corked;
        ASSERT_EQ(::getsockopt(handles[0], IPPROTO_TCP, TCP_CORK, &corked, &size), 0);
        EXPECT_EQ(corked != 0, next_follows) << "piece " << i;
      }
      const size_t sent = head.size() + (i + 1) * kPiece;
      EXPECT_TRUE(arrives(held_before)) << "piece " << i << " did not push out what was held";
      if (!next_follows) {
        EXPECT_TRUE(arrives(sent - 1)) << "piece " << i << " did not arrive whole";
        continue;
      }
      const size_t arrived = settled();
      // (Later than this the kernel may send what a cork holds on its own: 200 ms at most.)
      if (Clock::now() - ended < std::chrono::milliseconds(150)) {
        EXPECT_LT(arrived, sent) << "piece " << i << " pushed out its last partial segment";
      }
      held_before = sent - 1;  // the next piece must push out the rest
    }
    reader.join();
    EXPECT_TRUE(got == head + content) << "the bytes differ";
    loop_->Close(handles[0]);
    loop_->Poll(10);
  }
}

// Open stats the file it opened into the FileStat its caller passed (the Completion carries
// none), and fails with -errno, never reaching outside the directory it opens beneath.
// epoll: a cold chunk is warmed by a worker that reads exactly that chunk (readahead(2) of it,
// the kernel's own read-ahead off for files the loop opened), so that nothing past it is read
// that a tight page cache could drop before it is sent, to be read again.
TEST_P(LoopTest, EpollWarmsExactlyTheChunkItSends) {
  if (GetParam() != "epoll") GTEST_SKIP() << "only epoll warms chunks on its workers";
  char dir[] = "/var/tmp/ringd-loop-test-XXXXXX";  // a disk, not tmpfs: pages can be dropped
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/cold";
  constexpr size_t kSize = 4 << 20;
  const std::string content = Pattern(kSize, 5, 4093);
  const int w = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(w, 0);
  ASSERT_EQ(::write(w, content.data(), kSize), static_cast<ssize_t>(kSize));
  ASSERT_EQ(::fdatasync(w), 0);
  ASSERT_EQ(::posix_fadvise(w, 0, 0, POSIX_FADV_DONTNEED), 0);  // out of the page cache
  ::close(w);
  const int dir_fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir_fd, 0);
  fds_.push_back(dir_fd);
  // Pages of [from, to) in the page cache.
  const auto cached = [&](int fd, size_t from, size_t to) {
    void* map = ::mmap(nullptr, kSize, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return size_t{0};
    std::vector<unsigned char> vec(kSize / 4096);
    ::mincore(map, kSize, vec.data());
    ::munmap(map, kSize);
    size_t n = 0;
    for (size_t i = from / 4096; i < to / 4096; ++i) n += vec[i] & 1;
    return n;
  };

  FileStat st;
  const int64_t opened = OpenAndWait(dir_fd, "cold", &st);
  ASSERT_GE(opened, 0);
  const int file = static_cast<int>(opened);
  fds_.push_back(file);
  if (cached(file, 0, kSize) != 0) GTEST_SKIP() << "/var/tmp cannot drop a file's pages here";

  // The first 1 MiB (one warmed chunk) to a client that reads it.
  auto [ours, theirs] = Pair();
  std::string got;
  std::thread reader([&, theirs = theirs] {
    char buf[65536];
    while (got.size() < (1u << 20)) {
      pollfd p{theirs, POLLIN, 0};
      if (::poll(&p, 1, 5000) <= 0) break;
      const ssize_t n = ::read(theirs, buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
  });
  Receiver done;
  loop_->SendFile(ours, file, 0, 1 << 20, &done.c);
  const bool finished = PollUntil([&] { return done.ends == 1; });
  reader.join();
  ASSERT_TRUE(finished);
  EXPECT_EQ(done.last_result, 1 << 20);
  EXPECT_TRUE(got == content.substr(0, 1 << 20));
  EXPECT_EQ(cached(file, 1 << 20, kSize), 0u) << "pages past the chunk were read ahead";
  ::unlink(path.c_str());
  ::rmdir(dir);
}

// A file range found in the page cache is trusted (LoopOptions::page_cache_trust_ms) for its
// next sends, but not past the file's close through the loop: the fd's number may name another
// file next, one whose pages are not cached, and sending that inline would read the disk on the
// shard's thread. Every backend that sends inline asks the page cache (LoopStats counts it).
TEST_P(LoopTest, AFileFoundCachedIsNotTrustedPastItsClose) {
  if (!SendsInline()) GTEST_SKIP() << kNoInlineSends;
  options_.page_cache_trust_ms = 600000;  // never expires within the test
  SetUp();
  if (IsSkipped()) return;
  char dir[] = "/var/tmp/ringd-loop-test-XXXXXX";  // a disk, not tmpfs: pages can be dropped
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string content = Pattern(300 << 10, 3, 4091);
  // Two files of the same bytes: "hot" stays in the page cache, "cold" is dropped from it.
  const std::string hot = std::string(dir) + "/hot", cold = std::string(dir) + "/cold";
  for (const std::string* path : {&hot, &cold}) {
    const int w = ::open(path->c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    ASSERT_GE(w, 0);
    ASSERT_EQ(::write(w, content.data(), content.size()), static_cast<ssize_t>(content.size()));
    ASSERT_EQ(::fdatasync(w), 0);
    if (path == &cold) ::posix_fadvise(w, 0, 0, POSIX_FADV_DONTNEED);
    ::close(w);
  }
  std::vector<int> clients;
  const std::vector<int> handles = Accepted(1, &clients);
  ASSERT_EQ(handles.size(), 1u);
  const auto send = [&](int file) { return SendWhole(handles[0], clients[0], file, content); };

  const int file = ::open(hot.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(file, 0);
  const uint64_t asked = loop_->Stats().page_cache_asks;
  ASSERT_TRUE(send(file));
  EXPECT_GT(loop_->Stats().page_cache_asks, asked) << "the first send did not ask";
  EXPECT_GE(loop_->Stats().sendfile_bytes, content.size()) << "a cached file was not sent inline";
  const uint64_t asked_once = loop_->Stats().page_cache_asks;
  ASSERT_TRUE(send(file));
  EXPECT_EQ(loop_->Stats().page_cache_asks, asked_once) << "a trusted range was asked again";

  // Closed through the loop; the cold file opened next most likely gets the same number.
  loop_->Close(file);
  for (int i = 0; i < 3; ++i) loop_->Poll(10);  // the uring tiers close through the ring
  const int again = ::open(cold.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(again, 0);
  fds_.push_back(again);
  ::unlink(hot.c_str());
  ::unlink(cold.c_str());
  ::rmdir(dir);
  if (again != file) GTEST_SKIP() << "the fd number was not reused (" << again << ")";
  ASSERT_TRUE(send(again));
  EXPECT_GT(loop_->Stats().page_cache_asks, asked_once)
      << "a closed fd's answer was trusted for the file its number names now";
}

INSTANTIATE_TEST_SUITE_P(Backends, LoopTest, ::testing::ValuesIn(kBackends), BackendName);

}  // namespace
}  // namespace ringd::io::loop_test
