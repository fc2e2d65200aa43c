// The epoll backend's reads report the error of the read itself. Ending a read takes the socket
// out of the epoll set (an epoll_ctl) before the callback, and errno after that call is no longer
// the read's: this binary's epoll_ctl fails the way the kernel's may (ENOMEM) when told to.
#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "gtest/gtest.h"
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
  std::string error;
  std::unique_ptr<Loop> loop = MakeEpollLoop(LoopOptions{}, &error);
  ASSERT_NE(loop, nullptr) << error;
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

}  // namespace
}  // namespace ringd::io
