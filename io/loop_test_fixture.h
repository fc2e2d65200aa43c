// The fixture of the io::Loop contract tests (loop_test.cc: receives, cancels, pauses, the
// file table, Open, Poll; loop_send_test.cc: file bodies), run once per backend:
//
//   TEST_P(LoopTest, Something) { auto [ours, theirs] = Pair(); loop_->Recv(ours, ...); }
//   INSTANTIATE_TEST_SUITE_P(Backends, LoopTest, ::testing::ValuesIn(kBackends), BackendName);
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "io/loop.h"
#include "io/probe.h"
#include "io/registry.h"

namespace ringd::io::loop_test {

// Every backend, and the bypass and uring tiers again with incremental receive buffers and
// batched waits; one that this kernel cannot run skips with the reason.
inline const std::vector<std::string> kBackends = {"bypass", "bypass-inc", "uring", "uring-batch",
                                                   "epoll"};
// Whether RINGD_REQUIRED_TIERS (comma-separated; tools/test sets it in CI) names `tier`: a test
// that would skip for want of a required tier fails instead, so a green run means every tier ran.
inline bool TierRequired(const std::string& tier) {
  const char* env = std::getenv("RINGD_REQUIRED_TIERS");
  const std::string list = "," + std::string(env != nullptr ? env : "") + ",";
  return list.find("," + tier + ",") != std::string::npos;
}

inline std::string BackendName(const ::testing::TestParamInfo<std::string>& p) {
  std::string name = p.param;
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

// Records what a receive's callbacks delivered.
struct Receiver {
  Completion c;
  std::string got;
  int ends = 0;  // callbacks with more == false: exactly one is the contract
  int64_t last_result = 0;

  static void OnEvent(Completion* c) {
    Receiver* self = static_cast<Receiver*>(c->owner);
    if (c->result > 0) self->got.append(c->data, static_cast<size_t>(c->result));
    if (!c->more) {
      ++self->ends;
      self->last_result = c->result;
    }
  }
  Receiver() {
    c.callback = &OnEvent;
    c.owner = this;
  }
};

// Records how a send (Send or SendFile) ended; reusable for one operation after another.
struct Sender {
  Completion c;
  int ends = 0;  // callbacks with more == false
  int64_t last_result = 0;

  static void OnEvent(Completion* c) {
    Sender* self = static_cast<Sender*>(c->owner);
    if (!c->more) ++self->ends, self->last_result = c->result;
  }
  Sender() {
    c.callback = &OnEvent;
    c.owner = this;
  }
};

// A receive whose callback pauses it after every delivery, as the server does when its input
// buffer has no room for another.
struct PausingReceiver : Receiver {
  Loop* loop = nullptr;
  int deliveries = 0;
  static void OnEvent(Completion* c) {
    PausingReceiver* self = static_cast<PausingReceiver*>(c->owner);
    Receiver::OnEvent(c);
    if (c->result > 0) {
      ++self->deliveries;
      self->loop->PauseRecv(c);
    }
  }
  PausingReceiver() { c.callback = &OnEvent; }
};

// A SendFile whose callback cancels another operation: a callback that runs after a batch of
// completions, as the server's callbacks do when they end a connection.
struct CancelOnDone {
  Completion c;
  Loop* loop = nullptr;
  Completion* target = nullptr;
  bool done = false;

  static void OnDone(Completion* c) {
    CancelOnDone* self = static_cast<CancelOnDone*>(c->owner);
    self->done = true;
    self->loop->Cancel(self->target);
  }
  CancelOnDone() {
    c.callback = &OnDone;
    c.owner = this;
  }
};

class LoopTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string error;
    std::string backend = GetParam();
    LoopOptions o = options_;
    if (backend == "bypass-inc") {
      // The bypass tier with incremental receive buffers: a few large buffers, each receive
      // capped at what a buffer held before.
      static const bool usable = ProbeUring().recv_incremental;
      if (!usable) GTEST_SKIP() << "incremental receive is missing here (ringd --probe says why)";
      backend = "bypass";
      o.uring.recv_incremental = true;
      o.recv_max_bytes = o.recv_buffer_size;
      o.recv_buffer_size = 64 << 10;
      o.recv_buffer_count = std::max<uint32_t>(2, options_.recv_buffer_count / 64);
    }
    if (backend == "uring-batch") {
      // Every wait bounded by min_wait_usec (--batch-wait-us), with the ring's deferred
      // completions run each time; the wait's own io_uring_enter goes by the ring's registered
      // index where the kernel has one (as the bypass tier's do).
      static const bool usable = ProbeUring().batch_wait;
      if (!usable) GTEST_SKIP() << "batched waits are missing here (ringd --probe says why)";
      backend = "uring";
      o.uring.batch_wait_us = 50;
      o.uring.register_ring_fd = true;
    }
    // The tiers as ringd runs them: bypass's ring registered, and on both uring tiers the
    // closes and cancels without completions, where the kernel can.
    if (backend == "bypass") o.uring.register_ring_fd = true;
    static const bool cqe_skip = ProbeUring().cqe_skip;
    if (backend != "epoll") o.uring.skip_unread_cqes = o.uring.skip_unread_cqes || cqe_skip;
    absl::StatusOr<std::unique_ptr<Loop>> made = BuiltinTiers().Find(backend)->make(o);
    if (made.ok()) {
      loop_ = *std::move(made);
    } else {
      error = std::string(made.status().message());
    }
    if (loop_ == nullptr && backend != "epoll") {
      if (TierRequired(backend)) {
        FAIL() << "the " << backend << " tier is required here (RINGD_REQUIRED_TIERS) but "
               << GetParam() << " cannot run: " << error;
      }
      GTEST_SKIP() << GetParam() << " is not usable here: " << error;
    }
    ASSERT_NE(loop_, nullptr) << error;
  }
  void TearDown() override {
    loop_.reset();
    for (int fd : fds_) ::close(fd);
  }

  // A connected stream socket pair: [0] for the loop, [1] for the test.
  std::pair<int, int> Pair() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    fds_.push_back(sv[0]);
    fds_.push_back(sv[1]);
    return {sv[0], sv[1]};
  }

  // Polls until `done` holds or about a second has passed.
  template <typename F>
  bool PollUntil(F done) {
    for (int i = 0; i < 100 && !done(); ++i) loop_->Poll(10);
    return done();
  }

  // Opens `path` beneath `dir_fd` through the loop and polls until it is done: its result (an
  // fd, or -errno; -ETIMEDOUT if it never finished).
  int64_t OpenAndWait(int dir_fd, const char* path, FileStat* stat) {
    struct Opener {
      Completion c;
      bool done = false;
      static void On(Completion* c) { static_cast<Opener*>(c->owner)->done = true; }
    } o;
    o.c.owner = &o;
    o.c.callback = &Opener::On;
    loop_->Open(dir_fd, path, stat, &o.c);
    if (!PollUntil([&] { return o.done; })) return -ETIMEDOUT;
    return o.c.result;
  }

  // An unlinked file holding `content` (closed at TearDown), in `dir` (default /tmp); -1 on
  // failure.
  int TempFile(const std::string& content, const char* dir = "/tmp") {
    std::string path = std::string(dir) + "/ringd-loop-test-XXXXXX";
    const int file = ::mkstemp(path.data());
    if (file < 0) return -1;
    ::unlink(path.c_str());
    fds_.push_back(file);
    if (::write(file, content.data(), content.size()) != static_cast<ssize_t>(content.size()))
      return -1;
    return file;
  }

  // A burst of receives: `conns` connections' `bytes` each, all written before the loop looks.
  // Every byte must arrive, in order, on the right connection (each one's bytes start with its
  // number); then the receives are cancelled and end.
  void ReceiveBurst(int conns, size_t bytes) {
    std::vector<std::unique_ptr<Receiver>> receivers;
    std::vector<std::string> sent(conns);
    for (int i = 0; i < conns; ++i) {
      auto [ours, theirs] = Pair();
      receivers.push_back(std::make_unique<Receiver>());
      loop_->Recv(ours, &receivers.back()->c);
      sent[i] = std::to_string(i) + ":";
      for (size_t k = sent[i].size(); k < bytes; ++k)
        sent[i].push_back(static_cast<char>('A' + (i + k) % 57));
      EXPECT_EQ(::write(theirs, sent[i].data(), bytes), static_cast<ssize_t>(bytes));
    }
    EXPECT_TRUE(PollUntil([&] {
      for (auto& r : receivers)
        if (r->got.size() < bytes) return false;
      return true;
    }));
    for (int i = 0; i < conns; ++i) EXPECT_EQ(receivers[i]->got, sent[i]) << "connection " << i;
    for (auto& r : receivers) loop_->Cancel(&r->c);
    EXPECT_TRUE(PollUntil([&] {
      for (auto& r : receivers)
        if (r->ends == 0) return false;
      return true;
    }));
  }

  // Bytes 'a'..'z' in a pattern that repeats only after `period` blocks (a reordering shows).
  static std::string Pattern(size_t size, size_t mul, size_t period) {
    std::string content(size, '\0');
    for (size_t i = 0; i < size; ++i)
      content[i] = static_cast<char>('a' + (i * mul + i / period) % 26);
    return content;
  }

  // A listening TCP socket on 127.0.0.1 (closed at TearDown), its address in `a`; -1 on failure.
  int Listener(sockaddr_in* a) {
    const int l = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (l < 0) return -1;
    fds_.push_back(l);
    *a = sockaddr_in{};
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof *a;
    if (::bind(l, reinterpret_cast<sockaddr*>(a), sizeof *a) != 0 || ::listen(l, 8) != 0 ||
        ::getsockname(l, reinterpret_cast<sockaddr*>(a), &len) != 0)
      return -1;
    return l;
  }

  // `n` TCP connections to a listener of the loop's own, accepted through Loop::Accept (so on
  // bypass they are file table slots); their handles, with the client ends in `clients` (each
  // with a 5 s receive timeout). `buffers`, when not 0: the clients' receive buffers and the
  // accepted sockets' send buffers (set on the listener, which they inherit), in bytes. Empty
  // on failure.
  std::vector<int> Accepted(int n, std::vector<int>* clients, int buffers = 0) {
    sockaddr_in a{};
    const int l = Listener(&a);
    if (l < 0) return {};
    if (buffers != 0) ::setsockopt(l, SOL_SOCKET, SO_SNDBUF, &buffers, sizeof buffers);
    struct Acceptor {
      Completion c;
      std::vector<int> handles;
      static void On(Completion* c) {
        if (c->result >= 0)
          static_cast<Acceptor*>(c->owner)->handles.push_back(static_cast<int>(c->result));
      }
    } acceptor;
    acceptor.c.owner = &acceptor;
    acceptor.c.callback = &Acceptor::On;
    loop_->Accept(l, &acceptor.c);
    for (int i = 0; i < n; ++i) {
      const int client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (client < 0) break;
      fds_.push_back(client);
      clients->push_back(client);
      timeval tv{5, 0};
      ::setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      if (buffers != 0) ::setsockopt(client, SOL_SOCKET, SO_RCVBUF, &buffers, sizeof buffers);
      if (::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) break;
    }
    const bool all = PollUntil([&] { return acceptor.handles.size() == static_cast<size_t>(n); });
    loop_->Cancel(&acceptor.c);
    PollUntil([&] { return !acceptor.c.in_flight; });
    return all ? acceptor.handles : std::vector<int>{};
  }

  // A thread that reads `size` bytes (or to the end) from `fd`, made blocking, into `got`.
  static std::thread ReadInThread(int fd, size_t size, std::string* got) {
    return std::thread([fd, size, got] {
      char buf[65536];
      const int flags = ::fcntl(fd, F_GETFL);
      ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
      while (got->size() < size) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n <= 0) break;
        got->append(buf, static_cast<size_t>(n));
      }
    });
  }

  // A whole file (`content`) sent on the connection `handle` while `client` reads it; true when
  // it arrived whole, in order.
  bool SendWhole(int handle, int client, int file, const std::string& content) {
    std::string got;
    std::thread reader([&] {
      char buf[65536];
      while (got.size() < content.size()) {
        const ssize_t n = ::read(client, buf, sizeof buf);
        if (n <= 0) break;
        got.append(buf, static_cast<size_t>(n));
      }
    });
    Receiver done;
    loop_->SendFile(handle, file, 0, content.size(), &done.c);
    const bool finished = PollUntil([&] { return done.ends == 1; });
    reader.join();
    return finished && done.last_result == static_cast<int64_t>(content.size()) && got == content;
  }

  // Whether this backend sends cached bodies inline with sendfile (bypass only through an fd
  // installed for the socket: then it turns that on for the next SetUp).
  static constexpr const char* kNoInlineSends =
      "bypass sends inline only through an installed fd (IORING_OP_FIXED_FD_INSTALL)";
  bool SendsInline() {
    options_.uring.bypass_sendfile = ProbeUring().fd_install;
    return GetParam().rfind("bypass", 0) != 0 || options_.uring.bypass_sendfile;
  }

  // Arms `r` on `ours`; "one" arrives and pauses it; then "two" is written behind the pause.
  bool PausedAfterOneThenTwo(int ours, int theirs, PausingReceiver* r) {
    r->loop = loop_.get();
    loop_->Recv(ours, &r->c);
    loop_->Poll(0);
    if (::write(theirs, "one", 3) != 3 || !PollUntil([&] { return r->deliveries == 1; })) {
      return false;
    }
    return ::write(theirs, "two", 3) == 3;
  }

  LoopOptions options_;
  std::unique_ptr<Loop> loop_;
  std::vector<int> fds_;
};

}  // namespace ringd::io::loop_test
