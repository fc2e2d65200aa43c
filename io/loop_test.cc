// The Loop contract on every backend: multishot receives deliver bytes and end exactly once, a
// cancelled receive always gets its last callback wherever the backend had it at the time, and
// pauses, the bypass file table, Open and Poll behave alike. File bodies: loop_send_test.cc.
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "io/backend_util.h"
#include "io/fault.h"
#include "io/loop_test_fixture.h"

namespace ringd::io::loop_test {
namespace {

TEST_P(LoopTest, ReceiveDeliversBytesThenEndsOnceAtEndOfStream) {
  auto [ours, theirs] = Pair();
  Receiver r;
  loop_->Recv(ours, &r.c);
  ASSERT_EQ(::write(theirs, "hello ", 6), 6);
  ASSERT_TRUE(PollUntil([&] { return r.got.size() == 6; }));
  ASSERT_EQ(::write(theirs, "world", 5), 5);
  ::shutdown(theirs, SHUT_WR);
  ASSERT_TRUE(PollUntil([&] { return r.ends > 0; }));
  EXPECT_EQ(r.got, "hello world");
  EXPECT_EQ(r.last_result, 0);  // end of stream
  loop_->Poll(10);
  EXPECT_EQ(r.ends, 1);
}

// Stats().in_flight (/debug/shards' io_operations_in_flight) counts operations started and not
// yet ended: a multishot receive once however many deliveries it makes, and back where it was
// once every operation has ended.
TEST_P(LoopTest, OperationsInFlightAreThoseStartedAndNotEnded) {
  auto [ours, theirs] = Pair();
  const uint64_t idle = loop_->Stats().in_flight;
  Receiver r;
  loop_->Recv(ours, &r.c);
  EXPECT_EQ(loop_->Stats().in_flight, idle + 1);
  for (size_t i = 1; i <= 3; ++i) {
    ASSERT_EQ(::write(theirs, "abc", 3), 3);
    ASSERT_TRUE(PollUntil([&] { return r.got.size() == 3 * i; }));
  }
  EXPECT_EQ(loop_->Stats().in_flight, idle + 1) << "a receive's deliveries do not end it";
  Sender s;
  char text[] = "reply";
  iovec v{text, 5};
  loop_->Send(ours, &v, 1, &s.c);
  EXPECT_EQ(loop_->Stats().in_flight, idle + 2);
  ASSERT_TRUE(PollUntil([&] { return s.ends == 1; }));
  EXPECT_EQ(loop_->Stats().in_flight, idle + 1);
  ::shutdown(theirs, SHUT_WR);
  ASSERT_TRUE(PollUntil([&] { return r.ends == 1; }));
  EXPECT_EQ(loop_->Stats().in_flight, idle);
}

// The bypass tier (and, here, the batched waits) enter their ring by its index in the thread's
// table of registered rings where the kernel has one: no fd-table lookup per io_uring_enter.
// The rest of this suite runs through it on those backends; this checks that it is on, and
// that waits through it wake for completions.
TEST_P(LoopTest, TheBypassRingIsEnteredByItsRegisteredIndex) {
  const bool registered = loop_->Stats().ring_fd_registered;
  if (GetParam() == "uring" || GetParam() == "epoll") {
    EXPECT_FALSE(registered);  // the plain tiers enter by fd
    return;
  }
  if (!ProbeUring().registered_ring) {
    GTEST_SKIP() << "no registered ring fds here (ringd --probe says why)";
  }
  EXPECT_TRUE(registered);
  auto [ours, theirs] = Pair();
  Receiver r;
  loop_->Recv(ours, &r.c);
  loop_->Poll(0);  // the receive is armed; the next wait must block until the bytes come
  std::thread writer([fd = theirs] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(::write(fd, "ping", 4), 4);
  });
  ASSERT_TRUE(PollUntil([&] { return r.got.size() == 4; }));
  writer.join();
  EXPECT_EQ(r.got, "ping");
}

// A close, whose completion nothing reads, asks the kernel for none where it can
// (LoopOptions::skip_unread_cqes): a waiting shard is not woken for it. The descriptor is closed
// all the same (its peer sees the end of stream).
TEST_P(LoopTest, AClosePostsNoCompletionWhereTheKernelCanSkipIt) {
  if (GetParam() == "epoll") GTEST_SKIP() << "epoll closes with close(2)";
  if (!ProbeUring().cqe_skip) GTEST_SKIP() << "no IOSQE_CQE_SKIP_SUCCESS here (ringd --probe)";
  options_.uring.skip_unread_cqes = true;
  SetUp();
  if (IsSkipped()) return;
  auto [ours, theirs] = Pair();
  const int fd = ::dup(ours);  // the loop closes this one; the fixture closes `ours`
  ASSERT_GE(fd, 0);
  ::close(ours);
  fds_.erase(std::find(fds_.begin(), fds_.end(), ours));
  loop_->Poll(0);
  const uint64_t before = loop_->Stats().cqes;
  loop_->Close(fd);
  for (int i = 0; i < 5; ++i) loop_->Poll(1);
  EXPECT_EQ(loop_->Stats().cqes, before) << "the close posted a completion";
  char c;
  EXPECT_EQ(::read(theirs, &c, 1), 0) << "the descriptor is still open";
}

TEST_P(LoopTest, CancelEndsAnArmedReceiveOnce) {
  auto [ours, theirs] = Pair();
  (void)theirs;
  Receiver r;
  loop_->Recv(ours, &r.c);
  loop_->Poll(0);
  loop_->Cancel(&r.c);
  ASSERT_TRUE(PollUntil([&] { return r.ends > 0; }));
  EXPECT_LT(r.last_result, 0);
  loop_->Poll(10);
  EXPECT_EQ(r.ends, 1);
}

// With one receive buffer, the second of two receives with data ready runs out of buffers; the
// uring backend parks it until the batch's callbacks have returned the buffer. A callback that
// cancels it while it is parked (after the batch, as here, or from its own data callback) must
// still see its last callback: the server frees a connection only then, and a shard that waits
// for it never finishes draining.
TEST_P(LoopTest, CancelWhileParkedForBuffersStillEnds) {
  options_.recv_buffer_count = 1;
  options_.recv_buffer_size = 4096;
  SetUp();
  if (IsSkipped()) return;
  auto [a, a_peer] = Pair();
  auto [b, b_peer] = Pair();
  auto [out, out_peer] = Pair();
  (void)out_peer;
  Receiver ra, rb;
  loop_->Recv(a, &ra.c);
  loop_->Recv(b, &rb.c);
  loop_->Poll(0);
  // b's bytes arrive first and take the only buffer; a's find none.
  ASSERT_EQ(::write(b_peer, "x", 1), 1);
  ASSERT_EQ(::write(a_peer, "y", 1), 1);

  // A file whose bytes are in the page cache: SendFile finishes inline, and its callback runs
  // after the next batch of completions.
  const int file = TempFile("0123456789");
  ASSERT_GE(file, 0);
  CancelOnDone sender;
  sender.loop = loop_.get();
  sender.target = &ra.c;
  loop_->SendFile(out, file, 0, 10, &sender.c);

  ASSERT_TRUE(PollUntil([&] { return sender.done && ra.ends > 0; }))
      << "the cancelled receive never got its last callback";
  EXPECT_EQ(rb.got, "x");
  loop_->Poll(10);
  EXPECT_EQ(ra.ends, 1);
}

// A receive's Completion alone on a page, whose owner frees it (makes the page inaccessible) in
// its last callback, as the server frees a connection there: a read of it by the loop after that
// callback faults, in every build.
struct FreedOnLastCallback {
  void* page = nullptr;
  size_t page_size = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  Completion* c = nullptr;
  Loop* loop = nullptr;
  bool pause_on_data = false;
  int deliveries = 0;
  int ends = 0;
  int64_t last_result = 0;

  FreedOnLastCallback() {
    page = ::mmap(nullptr, page_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    c = new (page) Completion;
    c->callback = &OnEvent;
    c->owner = this;
  }
  ~FreedOnLastCallback() { ::munmap(page, page_size); }
  static void OnEvent(Completion* c) {
    FreedOnLastCallback* self = static_cast<FreedOnLastCallback*>(c->owner);
    if (c->more) {
      ++self->deliveries;
      if (self->pause_on_data) self->loop->PauseRecv(c);
      return;
    }
    ++self->ends;
    self->last_result = c->result;
    ASSERT_EQ(::mprotect(self->page, self->page_size, PROT_NONE), 0);
  }
};

// Parked for lack of buffers, then cancelled: the receive has two reasons to wait for Poll (the
// park, then the cancel), its last callback comes from there, and nothing may find it after.
TEST_P(LoopTest, NothingReadsAParkedReceiveAfterItsLastCallback) {
  options_.recv_buffer_count = 1;
  options_.recv_buffer_size = 4096;
  SetUp();
  if (IsSkipped()) return;
  FreedOnLastCallback ra;
  auto [a, a_peer] = Pair();
  auto [b, b_peer] = Pair();
  auto [out, out_peer] = Pair();
  (void)out_peer;
  Receiver rb;
  loop_->Recv(a, ra.c);
  loop_->Recv(b, &rb.c);
  loop_->Poll(0);
  ASSERT_EQ(::write(b_peer, "x", 1), 1);  // takes the only buffer
  ASSERT_EQ(::write(a_peer, "y", 1), 1);  // finds none: parked
  const int file = TempFile("0123456789");
  ASSERT_GE(file, 0);
  CancelOnDone sender;  // cancels the parked receive after the batch
  sender.loop = loop_.get();
  sender.target = ra.c;
  loop_->SendFile(out, file, 0, 10, &sender.c);

  ASSERT_TRUE(PollUntil([&] { return sender.done && ra.ends > 0; }));
  loop_->Poll(10);
  EXPECT_EQ(ra.ends, 1);
  EXPECT_LT(ra.last_result, 0);
}

// Resumed (so waiting for Poll to hand over what the pause kept), then cancelled while the
// pause's own cancellation is still in the kernel: the kernel's answer ends the receive, and
// nothing may find it after.
TEST_P(LoopTest, NothingReadsAResumedReceiveAfterItsLastCallback) {
  FreedOnLastCallback r;
  r.loop = loop_.get();
  r.pause_on_data = true;
  auto [ours, theirs] = Pair();
  loop_->Recv(ours, r.c);
  loop_->Poll(0);
  ASSERT_EQ(::write(theirs, "one", 3), 3);
  ASSERT_TRUE(PollUntil([&] { return r.deliveries == 1; }));  // and paused
  loop_->ResumeRecv(r.c);
  loop_->Cancel(r.c);
  ASSERT_TRUE(PollUntil([&] { return r.ends > 0; }));
  loop_->Poll(10);
  EXPECT_EQ(r.ends, 1);
  EXPECT_LT(r.last_result, 0);
}

// A receive its owner cancels from a data callback, while the kernel, with bytes still coming
// and no buffer left, has already ended it for lack of buffers (-ENOBUFS, the next completion of
// the same batch): its owner hears of the cancellation, not of an error, and (uring tiers) that
// bytes were left in the socket. (The shard cancels a receive beside a last response: an
// -ENOBUFS there read as a socket error would cut the response, and read as a plain
// cancellation would close on a client still sending.)
TEST_P(LoopTest, ACancelledReceiveThatRunsOutOfBuffersEndsCancelled) {
  if (GetParam() == "bypass-inc") GTEST_SKIP() << "incremental buffers take any size";
  options_.recv_buffer_count = 1;
  options_.recv_buffer_size = 16;
  SetUp();
  if (IsSkipped()) return;
  struct CancelOnData : Receiver {
    Loop* loop = nullptr;
    static void OnEvent(Completion* c) {
      CancelOnData* self = static_cast<CancelOnData*>(c->owner);
      Receiver::OnEvent(c);
      if (c->result > 0 && c->more) self->loop->Cancel(c);
    }
    CancelOnData() { c.callback = &OnEvent; }
  } r;
  r.loop = loop_.get();
  auto [ours, theirs] = Pair();
  loop_->Recv(ours, &r.c);
  loop_->Poll(0);
  // More than the one 16-byte buffer holds: the kernel fills it, then finds no other.
  ASSERT_EQ(::write(theirs, "0123456789abcdef0123456789abcdef", 32), 32);
  ASSERT_TRUE(PollUntil([&] { return r.ends > 0; }));
  // epoll does not read the socket again once the receive is cancelled: it cannot tell.
  EXPECT_EQ(r.last_result, GetParam() == "epoll" ? -ECANCELED : kRecvCancelledWithInput);
  EXPECT_EQ(r.got.substr(0, 16), "0123456789abcdef");
  loop_->Poll(10);
  EXPECT_EQ(r.ends, 1);
}

// A paused receive delivers nothing, however much arrives (the uring backend keeps what the
// kernel had already received); resumed, everything arrives in order, one delivery at a time
// while the callback keeps pausing. Before PauseRecv existed, backpressure cancelled the
// receive, and bytes the kernel had already received still arrived after the cancel.
TEST_P(LoopTest, PausedReceiveDeliversNothingThenEverythingInOrder) {
  options_.recv_buffer_size = 1024;
  options_.recv_buffer_count = 64;
  SetUp();
  if (IsSkipped()) return;
  auto [ours, theirs] = Pair();
  PausingReceiver r;
  r.loop = loop_.get();
  loop_->Recv(ours, &r.c);
  loop_->Poll(0);
  std::string sent;
  for (int i = 0; i < 20000; ++i) sent.push_back(static_cast<char>('a' + i % 23));
  ASSERT_EQ(::write(theirs, sent.data(), sent.size()), static_cast<ssize_t>(sent.size()));
  ASSERT_TRUE(PollUntil([&] { return r.deliveries == 1; }));
  for (int i = 0; i < 5; ++i) loop_->Poll(10);
  EXPECT_EQ(r.deliveries, 1) << "a paused receive delivered bytes";
  while (r.got.size() < sent.size()) {
    const int before = r.deliveries;
    loop_->ResumeRecv(&r.c);
    ASSERT_TRUE(PollUntil([&] { return r.deliveries > before; })) << r.got.size();
    ASSERT_EQ(r.deliveries, before + 1) << "more than one delivery after a pause";
  }
  EXPECT_TRUE(r.got == sent) << "bytes lost or reordered across pauses";
  EXPECT_EQ(r.ends, 0);
}

// The end of stream that comes while paused is delivered after the bytes before it.
// A Poll that finds completions already waiting still runs the ring's deferred work, where a
// receive's bytes wait (DEFER_TASKRUN: the kernel runs it only when asked for completions).
// Completions wait before a Poll when the loop queued more SQEs than the ring has entries since
// the last one: the full queue was submitted then, and what finished at once was posted. Each
// turn here does that, and the receive must still see its bytes.
TEST_P(LoopTest, CompletionsWaitingBeforePollDoNotStarveTheRest) {
  options_.uring.ring_entries = 8;
  SetUp();
  if (IsSkipped()) return;
  auto [ours, theirs] = Pair();
  Receiver r;
  loop_->Recv(ours, &r.c);
  loop_->Poll(0);
  ASSERT_EQ(::write(theirs, "ping", 4), 4);
  auto [out, sink] = Pair();
  constexpr int kSends = 12;  // more than the submission queue holds
  Sender senders[kSends];
  char byte = 'x';
  iovec iov[kSends];
  for (int turn = 0; turn < 50 && r.got.empty(); ++turn) {
    for (int i = 0; i < kSends; ++i) {
      if (senders[i].c.in_flight) continue;
      iov[i] = {&byte, 1};
      loop_->Send(out, &iov[i], 1, &senders[i].c);
    }
    loop_->Poll(1);
    char drain[256];
    while (::read(sink, drain, sizeof drain) > 0) {
    }
  }
  EXPECT_EQ(r.got, "ping") << "the receive's completion never ran";
  for (Sender& s : senders) PollUntil([&] { return !s.c.in_flight; });
  loop_->Cancel(&r.c);
  PollUntil([&] { return r.ends > 0; });
}

// A receive paused, then cancelled, delivers nothing more: bytes already on their way (their
// completion reaped late, as a busy ring's are) go with those it kept, since delivering them would
// break the pause and skip the kept ones; and its end says the client sent bytes nobody read.
TEST_P(LoopTest, ACancelledPausedReceiveDeliversNothingMore) {
  FaultPlan plan(1);
  options_.faults = &plan;
  SetUp();
  if (IsSkipped()) return;
  auto [ours, theirs] = Pair();
  Receiver r;
  loop_->Recv(ours, &r.c);
  loop_->Poll(0);
  ASSERT_EQ(::write(theirs, "one", 3), 3);
  plan.Set(Fault::kHoldBack, 1);  // uring: the bytes' completion reaches the loop a Poll late
  loop_->Poll(10);
  plan.Clear();
  const std::string before = r.got;  // epoll has read them by now; the uring tiers hold them
  loop_->PauseRecv(&r.c);
  loop_->Cancel(&r.c);
  ASSERT_TRUE(PollUntil([&] { return r.ends > 0; }));
  EXPECT_EQ(r.got, before) << "bytes delivered after the pause";
  EXPECT_TRUE(r.last_result == -ECANCELED || r.last_result == kRecvCancelledWithInput)
      << r.last_result;
  if (plan.injected(Fault::kHoldBack) > 0) {
    EXPECT_EQ(r.last_result, kRecvCancelledWithInput) << "the bytes dropped went unsaid";
  }
  loop_->Poll(10);
  EXPECT_EQ(r.ends, 1);
}

TEST_P(LoopTest, EndOfStreamWhilePausedComesAfterTheBytes) {
  auto [ours, theirs] = Pair();
  PausingReceiver r;
  ASSERT_TRUE(PausedAfterOneThenTwo(ours, theirs, &r));
  ::shutdown(theirs, SHUT_WR);
  for (int i = 0; i < 5; ++i) loop_->Poll(10);
  EXPECT_EQ(r.ends, 0);
  loop_->ResumeRecv(&r.c);
  ASSERT_TRUE(PollUntil([&] { return r.deliveries == 2; }));
  loop_->ResumeRecv(&r.c);
  ASSERT_TRUE(PollUntil([&] { return r.ends == 1; }));
  EXPECT_EQ(r.got, "onetwo");
  EXPECT_EQ(r.last_result, 0);
  loop_->Poll(10);
  EXPECT_EQ(r.ends, 1);
}

// Cancel ends a paused receive with one last callback and no more bytes.
TEST_P(LoopTest, CancelEndsAPausedReceiveOnce) {
  auto [ours, theirs] = Pair();
  PausingReceiver r;
  ASSERT_TRUE(PausedAfterOneThenTwo(ours, theirs, &r));
  for (int i = 0; i < 3; ++i) loop_->Poll(10);
  loop_->Cancel(&r.c);
  ASSERT_TRUE(PollUntil([&] { return r.ends == 1; }));
  EXPECT_EQ(r.got, "one");
  EXPECT_LT(r.last_result, 0);
  loop_->Poll(10);
  EXPECT_EQ(r.ends, 1);
}

// bypass: an accepted connection is a slot of the ring's file table, not a process descriptor;
// receive, send, shutdown and close all work through the handle.
TEST_P(LoopTest, BypassConnectionsLiveInTheFileTable) {
  if (GetParam().rfind("bypass", 0) != 0)
    GTEST_SKIP() << "only the bypass tier uses direct descriptors";
  sockaddr_in a{};
  const int l = Listener(&a);
  ASSERT_GE(l, 0);
  struct Acceptor {
    Completion c;
    int handle = -1;
    static void On(Completion* c) {
      if (c->result >= 0) static_cast<Acceptor*>(c->owner)->handle = static_cast<int>(c->result);
    }
  } acceptor;
  acceptor.c.owner = &acceptor;
  acceptor.c.callback = &Acceptor::On;
  loop_->Accept(l, &acceptor.c);
  const int client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(client, 0);
  fds_.push_back(client);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_TRUE(PollUntil([&] { return acceptor.handle >= 0; }));
  EXPECT_NE(acceptor.handle & kDirectHandle, 0) << "not a file table slot";
  const int before = ::dup(0);  // no process descriptor was used for the connection
  ::close(before);

  Receiver r;
  loop_->Recv(acceptor.handle, &r.c);
  ASSERT_EQ(::write(client, "ping", 4), 4);
  ASSERT_TRUE(PollUntil([&] { return r.got == "ping"; }));
  char pong[] = "pong";
  iovec v{pong, 4};
  Sender sent;
  loop_->Send(acceptor.handle, &v, 1, &sent.c);
  ASSERT_TRUE(PollUntil([&] { return sent.ends == 1; }));
  EXPECT_EQ(sent.last_result, 4);
  char buf[8] = {};
  ASSERT_EQ(::read(client, buf, sizeof buf), 4);
  EXPECT_STREQ(buf, "pong");
  loop_->Shutdown(acceptor.handle, SHUT_WR);  // the client sees the end of the stream
  loop_->Poll(0);
  ASSERT_EQ(::read(client, buf, sizeof buf), 0);
  loop_->Cancel(&r.c);
  ASSERT_TRUE(PollUntil([&] { return r.ends == 1; }));
  loop_->Cancel(&acceptor.c);
  loop_->Close(acceptor.handle);
  loop_->Poll(10);
}

// Many connections' small receives share a receive pool far smaller than a buffer each: with
// incremental consumption they pack into the same buffers, which go back to the kernel only once
// full and delivered. Every byte arrives, in order, on the right connection.
TEST_P(LoopTest, ManySmallReceivesShareASmallPool) {
  options_.recv_buffer_size = 1024;
  options_.recv_buffer_count = 128;  // bypass-inc: 2 buffers of 64 KiB for 150 KB of receives
  SetUp();
  if (IsSkipped()) return;
  ReceiveBurst(300, 500);
}

// The kernel is given the receive pool's first 128 KiB only: it fills the buffers it has in
// ring order, so a pool given whole has every page touched by a stream of small requests. A
// burst that runs them dry gets more, up to the whole pool, and loses nothing.
TEST_P(LoopTest, TheReceivePoolIsGivenToTheKernelAsReceivesNeedIt) {
  constexpr size_t kRegion = 1 << 20;
  void* region = ::mmap(nullptr, kRegion, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(region, MAP_FAILED);
  ::madvise(region, kRegion, MADV_NOHUGEPAGE);  // mincore counts the pages written, no more
  options_.recv_buffer_size = 4096;
  options_.recv_buffer_count = 256;  // 1 MiB; bypass-inc: 4 buffers of 64 KiB
  options_.recv_region = static_cast<char*>(region);
  SetUp();
  if (IsSkipped()) {
    ::munmap(region, kRegion);
    return;
  }
  const auto resident_pages = [&] {
    std::vector<unsigned char> vec(kRegion / 4096);
    EXPECT_EQ(::mincore(region, kRegion, vec.data()), 0);
    return std::count_if(vec.begin(), vec.end(), [](unsigned char v) { return v & 1; });
  };
  const bool epoll = GetParam() == "epoll";
  const uint64_t first = epoll ? 4096 : 128 << 10;
  EXPECT_EQ(loop_->Stats().recv_pool_bytes, first);

  {  // 400 requests of 400 bytes, one at a time: 160 KB through the first buffers, again and again.
    auto [ours, theirs] = Pair();
    Receiver r;
    loop_->Recv(ours, &r.c);
    std::string sent;
    for (int i = 0; i < 400; ++i) {
      const std::string request = Pattern(400, i, 31);
      ASSERT_EQ(::write(theirs, request.data(), request.size()), 400);
      sent += request;
      ASSERT_TRUE(PollUntil([&] { return r.got.size() == sent.size(); }));
    }
    EXPECT_EQ(r.got, sent);
    EXPECT_EQ(loop_->Stats().recv_pool_bytes, first);
    EXPECT_LE(resident_pages(), static_cast<long>(first / 4096));
    loop_->Cancel(&r.c);
    ASSERT_TRUE(PollUntil([&] { return r.ends == 1; }));
  }

  // Bursts of receives of 3,000 bytes each, more than the first buffers hold.
  // 60 receives: 60 buffers of 4 KiB, or 180 KB of 64 KiB buffers. The ring runs dry once, and
  // every receive it reaches ends with ENOBUFS; the pool doubles once for all of them, to what
  // the burst needs, and was never all in use.
  ReceiveBurst(60, 3000);
  if (!epoll) {
    EXPECT_EQ(loop_->Stats().recv_pool_bytes, 2 * first) << "the pool grew, once";
  }
  EXPECT_EQ(loop_->Stats().recv_nobufs, 0u);
  // 300 receives: more than 256 buffers of 4 KiB (the whole pool, and then some), or 900 KB.
  ReceiveBurst(300, 3000);
  EXPECT_LE(loop_->Stats().recv_pool_bytes, kRegion);
  loop_.reset();
  ::munmap(region, kRegion);
}

TEST_P(LoopTest, OpenStatsIntoTheCallersFileStat) {
  char dir[] = "/tmp/ringd-loop-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string file = std::string(dir) + "/file";
  const std::string sub = std::string(dir) + "/sub";
  const int w = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(w, 0);
  ASSERT_EQ(::write(w, "12345", 5), 5);
  ::close(w);
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  const int dir_fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir_fd, 0);
  fds_.push_back(dir_fd);
  struct stat want;
  ASSERT_EQ(::stat(file.c_str(), &want), 0);

  auto open = [&](const char* path, FileStat* st) {
    const int64_t r = OpenAndWait(dir_fd, path, st);
    EXPECT_NE(r, -ETIMEDOUT) << path;
    return r;
  };
  FileStat st;
  const int64_t fd = open("file", &st);
  ASSERT_GE(fd, 0);
  fds_.push_back(static_cast<int>(fd));
  EXPECT_EQ(st.size, 5u);
  EXPECT_EQ(st.inode, want.st_ino);
  EXPECT_EQ(st.mtime_sec, want.st_mtim.tv_sec);
  EXPECT_EQ(st.mtime_nsec, want.st_mtim.tv_nsec);  // --compress tells versions apart by it
  EXPECT_EQ(st.dev, want.st_dev);
  EXPECT_TRUE(S_ISREG(st.mode));
  FileStat dst;
  const int64_t dfd = open("sub", &dst);
  ASSERT_GE(dfd, 0);
  fds_.push_back(static_cast<int>(dfd));
  EXPECT_TRUE(S_ISDIR(dst.mode));
  FileStat unused;
  EXPECT_EQ(open("missing", &unused), -ENOENT);
  EXPECT_EQ(open("../etc", &unused), -EXDEV);  // RESOLVE_BENEATH
  if (GetParam() == "epoll" && internal::LocalFileSystem(dir_fd)) {
    // The file and the directory, just made, resolve from the kernel's caches: opened on the
    // loop's thread (RESOLVE_CACHED), not by a worker (on a local file system only).
    EXPECT_GE(loop_->Stats().opens_inline, 2u);
  }
  if (GetParam() != "epoll" && internal::LocalFileSystem(dir_fd)) {
    // On a local file system the ring's opens are statx-ed on the shard, not on an io-wq worker.
    EXPECT_EQ(loop_->Stats().stats_on_shard, 2u);
  }

  ::unlink(file.c_str());
  ::rmdir(sub.c_str());
  ::rmdir(dir);
}

// Reads into the registered region arrive whole, and on the uring tiers each buffer of it is
// registered (and its pages pinned) only when a read first uses it: a loop that has read nothing
// holds none of the region resident.
TEST_P(LoopTest, RegisteredBuffersArePinnedOnFirstUse) {
  constexpr size_t kBuf = 64 << 10;
  constexpr uint32_t kCount = 4;
  void* region = ::mmap(nullptr, kBuf * kCount, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(region, MAP_FAILED);
  char* base = static_cast<char*>(region);
  options_.uring.registered_region = base;
  options_.uring.registered_buffer_size = kBuf;
  options_.uring.registered_buffer_count = kCount;
  SetUp();
  if (IsSkipped()) {
    ::munmap(region, kBuf * kCount);
    return;
  }
  const auto resident_pages = [&] {
    std::vector<unsigned char> vec(kBuf * kCount / 4096);
    EXPECT_EQ(::mincore(region, kBuf * kCount, vec.data()), 0);
    return std::count_if(vec.begin(), vec.end(), [](unsigned char v) { return v & 1; });
  };
  EXPECT_EQ(loop_->Stats().fixed_buffers_registered, 0u);
  EXPECT_EQ(resident_pages(), 0) << "the region is resident before any read";

  const std::string content = Pattern(kBuf - 100, 7, 31);
  const int file = TempFile(content);
  ASSERT_GE(file, 0);
  const auto read = [&](char* buf, uint64_t length) {
    Sender done;
    loop_->Read(file, buf, length, 0, &done.c);
    EXPECT_TRUE(PollUntil([&] { return done.ends == 1; }));
    return done.last_result;
  };
  ASSERT_EQ(read(base + 2 * kBuf, content.size()), static_cast<int64_t>(content.size()));
  EXPECT_EQ(std::string(base + 2 * kBuf, content.size()), content);
  const uint64_t want = GetParam() == "epoll" ? 0 : 1;
  EXPECT_EQ(loop_->Stats().fixed_buffers_registered, want);
  // The same buffer again, and a read that spans two buffers (never a fixed read): no more.
  ASSERT_EQ(read(base + 2 * kBuf + 50, 40), 40);
  EXPECT_EQ(std::string(base + 2 * kBuf + 50, 40), content.substr(0, 40));
  ASSERT_EQ(read(base + kBuf - 10, 40), 40);
  EXPECT_EQ(std::string(base + kBuf - 10, 40), content.substr(0, 40));
  EXPECT_EQ(loop_->Stats().fixed_buffers_registered, want);
  EXPECT_LE(resident_pages(), static_cast<long>(kBuf / 4096 + 2));
  loop_.reset();
  ::munmap(region, kBuf * kCount);
}

// A path that crosses a mount point beneath the root is opened by a worker on epoll, not on the
// loop's thread: the root's file system being local says nothing of the one mounted there (an
// NFS or FUSE mount's open may wait for a server). A tmpfs stands in for it.
TEST_P(LoopTest, AnOpenAcrossAMountPointIsNotOpenedInline) {
  char dir[] = "/tmp/ringd-loop-test-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string sub = std::string(dir) + "/mnt";
  ASSERT_EQ(::mkdir(sub.c_str(), 0755), 0);
  if (::mount("ringd-test", sub.c_str(), "tmpfs", 0, "size=1m") != 0) {
    const int err = errno;
    ::rmdir(sub.c_str());
    ::rmdir(dir);
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(err) << ")";
  }
  const std::string file = sub + "/file";
  // No ASSERT from here to the unmount: a failure must not leave the mount behind.
  const int w = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  EXPECT_GE(w, 0);
  if (w >= 0) ::close(w);
  const int dir_fd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  EXPECT_GE(dir_fd, 0);
  fds_.push_back(dir_fd);
  FileStat st;
  const uint64_t inline_before = loop_->Stats().opens_inline;
  const int64_t fd = OpenAndWait(dir_fd, "mnt/file", &st);
  EXPECT_GE(fd, 0) << "opened, by a worker";
  if (fd >= 0) fds_.push_back(static_cast<int>(fd));
  EXPECT_EQ(loop_->Stats().opens_inline, inline_before);
  ::umount2(sub.c_str(), MNT_DETACH);
  ::rmdir(sub.c_str());
  ::rmdir(dir);
}

// With nothing in flight, Poll sleeps until its timeout, and Poll(-1) until Wake: it may
// return early for the backend's own wake-ups, but a few times at most, never spinning. (A wait
// bounded by min_wait_usec needs a timeout of its own, or the kernel ends every wait at
// min_wait_usec and an idle shard spins.)
TEST_P(LoopTest, PollSleepsUntilItsTimeoutOrAWake) {
  using Clock = std::chrono::steady_clock;
  loop_->Poll(0);
  Clock::time_point start = Clock::now();
  int polls = 0;
  while (Clock::now() - start < std::chrono::milliseconds(60) && polls < 1000) {
    loop_->Poll(60);
    ++polls;
  }
  EXPECT_LE(polls, 3);

  std::atomic<bool> woken{false};
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    woken = true;
    loop_->Wake();
  });
  polls = 0;
  while (!woken && polls < 1000) {
    loop_->Poll(-1);
    ++polls;
  }
  waker.join();
  EXPECT_LE(polls, 3);
}

INSTANTIATE_TEST_SUITE_P(Backends, LoopTest, ::testing::ValuesIn(kBackends), BackendName);

}  // namespace
}  // namespace ringd::io::loop_test
