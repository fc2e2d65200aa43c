// The epoll backend's own paths. Its reads report the error of the read itself: ending a read
// takes the socket out of the epoll set (an epoll_ctl) before the callback, and errno after that
// call is no longer the read's: this binary's epoll_ctl fails the way the kernel's may (ENOMEM)
// when told to. Jobs held back while the worker queue is full reach the workers one by one.
#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "io/fault.h"
#include "io/loop.h"

namespace {

bool fail_modify = false;  // EPOLL_CTL_MOD fails with ENOMEM
int modify_failures = 0;

}  // namespace

// Preempts the C library's: the kernel's epoll_ctl, but for the failures the test asks for.
extern "C" int epoll_ctl(int epfd, int op, int fd, epoll_event* event) {
  if (fail_modify && op == EPOLL_CTL_MOD) {
    ++modify_failures;
    errno = ENOMEM;
    return -1;
  }
  return static_cast<int>(::syscall(SYS_epoll_ctl, epfd, op, fd, event));
}

namespace ringd::io {
namespace {

TEST(EpollLoopTest, AReadErrorIsTheReadsEvenWhenTheEpollSetCannotBeChanged) {
  absl::StatusOr<std::unique_ptr<Loop>> made = MakeEpollLoop(LoopOptions{});
  ASSERT_TRUE(made.ok()) << made.status();
  std::unique_ptr<Loop> loop = *std::move(made);
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
  struct Receiver {
    Completion c;
    int ends = 0;
    int64_t last_result = 0;
    static void OnEvent(Completion* c) {
      Receiver* self = static_cast<Receiver*>(c->owner);
      if (!c->more) ++self->ends, self->last_result = c->result;
    }
  } r;
  r.c.owner = &r;
  r.c.callback = &Receiver::OnEvent;
  loop->Recv(sv[0], &r.c);
  loop->Poll(0);
  // The peer closes with bytes it never read: a stream socket's next read is ECONNRESET.
  ASSERT_EQ(::write(sv[0], "unread", 6), 6);
  ASSERT_EQ(::close(sv[1]), 0);
  fail_modify = true;
  for (int i = 0; i < 100 && r.ends == 0; ++i) loop->Poll(10);
  fail_modify = false;
  ASSERT_EQ(r.ends, 1);
  EXPECT_GT(modify_failures, 0) << "the read's end changed no epoll interest";
  EXPECT_EQ(r.last_result, -ECONNRESET);
  loop->Close(sv[0]);
}

// File jobs held back while the worker queue was full (two or more of them) go to the workers
// once it has room, in order, and their bodies arrive whole. (Each went to the worker queue while
// still linked into the held list, which the queue's own push refused: an abort under load.)
TEST(EpollLoopTest, JobsHeldBackForAFullWorkerQueueAllReachTheWorkers) {
  FaultPlan plan(1);
  plan.Set(Fault::kNotCached, 1);  // every body goes to a worker first
  plan.Set(Fault::kEbusy, 1);      // whose queue is full: each is held back
  LoopOptions o;
  o.faults = &plan;
  absl::StatusOr<std::unique_ptr<Loop>> made = MakeEpollLoop(o);
  ASSERT_TRUE(made.ok()) << made.status();
  std::unique_ptr<Loop> loop = *std::move(made);
  char path[] = "/tmp/ringd-epoll-test-XXXXXX";
  const int file = ::mkstemp(path);
  ASSERT_GE(file, 0);
  ::unlink(path);
  const std::string content(10000, 'x');
  ASSERT_EQ(::write(file, content.data(), content.size()), static_cast<ssize_t>(content.size()));
  struct Sender {
    Completion c;
    int ends = 0;
    int64_t last_result = 0;
    static void OnEvent(Completion* c) {
      Sender* self = static_cast<Sender*>(c->owner);
      if (!c->more) ++self->ends, self->last_result = c->result;
    }
  } senders[3];
  int socks[3][2];
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, socks[i]), 0);
    senders[i].c.owner = &senders[i];
    senders[i].c.callback = &Sender::OnEvent;
    loop->SendFile(socks[i][0], file, 0, content.size(), &senders[i].c);
  }
  EXPECT_EQ(plan.injected(Fault::kEbusy), 3u);
  plan.Clear();  // the queue has room from here on
  for (int i = 0; i < 200 && senders[0].ends + senders[1].ends + senders[2].ends < 3; ++i)
    loop->Poll(10);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(senders[i].ends, 1) << i;
    EXPECT_EQ(senders[i].last_result, static_cast<int64_t>(content.size())) << i;
    std::string got(content.size() + 1, '\0');
    EXPECT_EQ(::read(socks[i][1], got.data(), got.size()), static_cast<ssize_t>(content.size()));
    loop->Close(socks[i][0]);
    ::close(socks[i][1]);
  }
  ::close(file);
}

}  // namespace
}  // namespace ringd::io
