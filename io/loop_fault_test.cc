// The backends' own state machines under injected faults (io/fault.h), on the bypass, uring and
// epoll tiers: for each seed, a real loop over loopback TCP connections runs a scripted mix of
// receives (paused, resumed and cancelled, from the test and from their own callbacks), sends of
// buffers and file bodies (cached and evicted, inline, spliced and through body buffers, as the
// seed's options choose), with faults injected where the backend's system calls and completions
// return. Every seed checks the io::Loop contract: each operation ends with exactly one last
// callback; what reaches the peer is exactly what the operations report sent (all of it on
// success, `done` bytes on failure), in order; a receive delivers bytes in order, never twice,
// none while paused, and every byte the peer wrote by end of stream (bytes kept for a paused
// receive may go only with a Cancel); ends are only those the contract allows (never the
// backend's own ENOBUFS, EAGAIN or EINTR); nothing is left in flight (Stats: operations, pipes,
// slots, body buffers, kept receive chunks), and no descriptor leaks.
//
// A failing seed prints itself and the faults injected. Replay one, or run many:
//   bazel test //io:loop_fault_test --test_env=RINGD_FAULT_SEED=17 --test_filter='*/uring'
//   bazel-bin/io/loop_fault_test --gtest_filter='*/epoll' --seed=17    (the log, pass or fail)
//   bazel test //io:loop_fault_test --test_env=RINGD_FAULT_SEEDS=2000 --test_timeout=3600
// The kernel's timing is not replayed: a seed replays the same script and the same decisions
// at each point, and a run whose kernel completes things in another order may diverge.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "io/fault.h"
#include "io/loop.h"
#include "io/probe.h"
#include "io/registry.h"

namespace ringd::io {
namespace {

constexpr int kConns = 3;
constexpr int kSteps = 150;
constexpr uint64_t kDefaultSeeds = 40;  // per tier: a few seconds

int OpenFds() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.' ? 1 : 0;
  ::closedir(d);
  return n - 1;  // the directory's own
}

// Byte `i` of what connection `conn`'s peer writes: a hash, so a chunk shows where it belongs.
char InByte(int conn, uint64_t i) {
  uint64_t z = i * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(conn) * 0xbf58476d1ce4e5b9ull;
  z ^= z >> 31;
  z *= 0x94d049bb133111ebull;
  return static_cast<char>(z >> 56);
}

// What a command line or the environment asks for: one seed, or how many.
uint64_t Setting(const char* flag, const char* env, uint64_t fallback) {
  for (const std::string& arg : ::testing::internal::GetArgvs()) {
    if (arg.rfind(flag, 0) == 0) return std::strtoull(arg.c_str() + std::strlen(flag), nullptr, 10);
  }
  const char* v = std::getenv(env);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

struct Harness;

struct Conn {
  Harness* h = nullptr;
  int index = 0;
  int handle = -1;  // the loop's (a direct descriptor on bypass)
  int peer = -1;    // the client's end, non-blocking

  // Peer -> loop.
  uint64_t written = 0;  // bytes of the stream the peer has written
  uint64_t next = 0;     // the stream's next byte a receive should deliver
  bool peer_shut = false;
  Completion rc;
  bool recv_on = false;
  bool paused = false;     // PauseRecv called, ResumeRecv not yet
  bool cancelled = false;  // Cancel called on the receive in flight
  // A receive ended kRecvCancelledWithInput, and nothing was delivered since: the bytes it
  // dropped (kept while paused, or on their way when it was cancelled paused) are gone.
  bool gap_ok = false;
  bool eof = false;

  // Loop -> peer.
  Completion sc;
  bool send_on = false;
  bool sending_file = false;
  std::string op_bytes;  // what the operation in flight was asked to send
  std::string expected;  // what the ended operations sent, in order
  std::string arrived;   // what the peer read
  std::string bufs[3];
  iovec iov[3];
};

struct Harness {
  std::string tier;
  uint64_t seed = 0;
  std::mt19937_64 rng;
  FaultPlan plan;
  std::unique_ptr<Loop> loop;
  Conn conns[kConns];
  std::string files[2];  // contents: [0] cached, [1] evicted before each send
  int file_fds[2] = {-1, -1};
  bool ending = false;  // the drain: callbacks neither pause nor cancel
  std::string failure;
  std::vector<std::string> trace;  // the script's last steps and callbacks, shown on a failure
  size_t trace_next = 0;
  // What the seed covered, for the long run's summary.
  uint64_t recv_ends[6] = {};  // eof, cancelled, cancelled with input, bytes, ENOMEM, other
  uint64_t send_fails = 0;
  LoopStats stats;      // the loop's, at the end
  std::string options;  // what the seed chose, for its failure

  Harness(std::string t, uint64_t s) : tier(std::move(t)), seed(s), rng(s * 7919 + 1), plan(s) {}

  void Fail(const std::string& what) {
    if (failure.empty()) failure = what;
  }
  void Trace(const Conn* k, const std::string& what) {
    static constexpr size_t kLines = 80;
    if (!failure.empty()) return;  // what led to the failure stays
    std::string line = "  " + std::to_string(k->index) + ": " + what;
    if (trace.size() < kLines) {
      trace.push_back(std::move(line));
    } else {
      trace[trace_next++ % kLines] = std::move(line);
    }
  }
  std::string Traced() const {
    std::string out = "the last steps (connection: what):\n";
    for (size_t i = 0; i < trace.size(); ++i) out += trace[(trace_next + i) % trace.size()] + "\n";
    return out;
  }
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : rng() % n; }
  std::string Who(const Conn* k) const { return "connection " + std::to_string(k->index) + ": "; }

  static void OnRecv(Completion* c) {
    Conn* k = static_cast<Conn*>(c->owner);
    Harness* h = k->h;
    if (!k->recv_on) return h->Fail(h->Who(k) + "a receive callback after its last");
    if (c->result > 0) {
      if (k->paused) h->Fail(h->Who(k) + "bytes delivered while paused");
      h->Trace(k, "recv " + std::to_string(c->result) + (c->more ? "" : " (last)"));
      h->Delivered(k, c->data, static_cast<uint64_t>(c->result));
      if (c->more && !h->ending && !k->cancelled) {
        if (!k->paused && h->Chance(0.15)) {
          k->paused = true;  // as the server does when its input buffer is full
          h->Trace(k, "pause (in its callback)");
          h->loop->PauseRecv(c);
        } else if (h->Chance(0.03)) {
          k->cancelled = true;
          h->Trace(k, "cancel (in its callback)");
          h->loop->Cancel(c);
        }
      }
    }
    if (c->more) return;
    if (c->result <= 0) h->Trace(k, "recv ended " + std::to_string(c->result));
    k->recv_on = false;
    k->paused = false;
    const int64_t r = c->result;
    if (r == 0) {
      ++h->recv_ends[0];
      k->eof = true;
      if (!k->peer_shut) h->Fail(h->Who(k) + "end of stream before the peer shut its side");
      if (k->next != k->written && !k->gap_ok) {  // (gap_ok: the cancel dropped the last ones)
        h->Fail(h->Who(k) + "end of stream with " + std::to_string(k->written - k->next) +
                " bytes the peer wrote never delivered");
      }
    } else if (r == -ECANCELED || r == kRecvCancelledWithInput || r > 0) {
      ++h->recv_ends[r == -ECANCELED ? 1 : r > 0 ? 3 : 2];
      if (!k->cancelled) {
        h->Fail(h->Who(k) + "a receive nobody cancelled ended as cancelled (" + std::to_string(r) +
                ")");
      }
    } else if (r == -ENOMEM) {  // injected, or epoll_ctl's
      ++h->recv_ends[4];
    } else {
      ++h->recv_ends[5];
      h->Fail(h->Who(k) + "a receive ended with " + std::strerror(static_cast<int>(-r)));
    }
    if (r == kRecvCancelledWithInput) k->gap_ok = true;
  }

  void Delivered(Conn* k, const char* data, uint64_t n) {
    uint64_t at = k->next;
    const auto matches = [&](uint64_t p) {
      if (p + n > k->written) return false;
      for (uint64_t i = 0; i < n; ++i)
        if (data[i] != InByte(k->index, p + i)) return false;
      return true;
    };
    if (!matches(at) && k->gap_ok) {  // after a cancel that dropped bytes: the next come later
      while (at + n <= k->written && !matches(at)) ++at;
    }
    if (!matches(at)) {
      return Fail(Who(k) + std::to_string(n) + " bytes delivered that are not the stream's next (" +
                  std::to_string(k->next) + " of " + std::to_string(k->written) + " written)");
    }
    k->next = at + n;
    k->gap_ok = false;
  }

  static void OnSend(Completion* c) {
    Conn* k = static_cast<Conn*>(c->owner);
    Harness* h = k->h;
    if (!k->send_on) return h->Fail(h->Who(k) + "a send callback after its last");
    if (c->more) return h->Fail(h->Who(k) + "a send callback with more");
    k->send_on = false;
    const int64_t r = c->result;
    h->Trace(k, std::string(k->sending_file ? "SendFile" : "Send") + " ended " + std::to_string(r) +
                    " of " + std::to_string(k->op_bytes.size()));
    const char* what = k->sending_file ? "SendFile" : "Send";
    if (r >= 0) {
      if (static_cast<uint64_t>(r) != k->op_bytes.size()) {
        h->Fail(h->Who(k) + what + " reported " + std::to_string(r) + " bytes of " +
                std::to_string(k->op_bytes.size()));
      }
      k->expected += k->op_bytes.substr(0, static_cast<size_t>(r));
      return;
    }
    ++h->send_fails;
    // Only injected failures: the sockets themselves stay healthy.
    if (r != -ENOMEM) h->Fail(h->Who(k) + what + " failed: " + std::strerror(static_cast<int>(-r)));
    if (c->done > k->op_bytes.size()) return h->Fail(h->Who(k) + what + " done past its length");
    k->expected += k->op_bytes.substr(0, c->done);
  }

  LoopOptions Options() {
    LoopOptions o;
    const auto pick = [&](std::initializer_list<uint64_t> v) { return v.begin()[Below(v.size())]; };
    // 64 x 8 KiB: more than the pool's first 128 KiB, so it grows under the faults too.
    o.recv_buffer_count = static_cast<uint32_t>(pick({2, 4, 8, 64}));
    o.recv_buffer_size = static_cast<uint32_t>(pick({512, 2048, 8192}));
    o.send_turn_bytes = pick({8 << 10, 64 << 10, 256 << 10});
    o.page_cache_trust_ms = static_cast<uint32_t>(pick({0, 100}));
    o.tcp_nopush = Chance(0.5);
    o.uring.ring_entries = static_cast<uint32_t>(pick({2, 8, 32, 256}));  // 2: a queue full at once
    o.uring.pipe_pool_size = static_cast<uint32_t>(pick({1, 2, 4}));
    o.uring.pipe_size = static_cast<uint32_t>(pick({16 << 10, 64 << 10}));
    o.uring.splice_min_bytes = pick({0, 0, 1, 64 << 10});
    o.uring.send_zc = Chance(0.25);
    o.uring.send_zc_min_bytes = 4096;
    static const ProbeReport probe = ProbeUring();
    o.uring.skip_unread_cqes = probe.cqe_skip && Chance(0.5);
    if (tier == "bypass") {
      o.uring.bypass_sendfile = probe.fd_install && Chance(0.6);
      o.uring.body_buffers = static_cast<uint32_t>(pick({0, 0, 1, 2}));
      o.uring.body_buffer_size = 16 << 10;
      o.uring.register_ring_fd = Chance(0.5);
    }
    if (tier != "epoll" && probe.recv_incremental && Chance(0.3)) {
      o.uring.recv_incremental = true;
      o.recv_max_bytes = o.recv_buffer_size;
      o.recv_buffer_size = 16 << 10;
      o.recv_buffer_count = static_cast<uint32_t>(pick({2, 2, 16}));  // 16: a pool that grows
    }
    o.epoll.worker_threads = 2;
    o.epoll.worker_queue = static_cast<uint32_t>(pick({1, 16}));
    o.faults = &plan;
    options = "options: ring_entries " + std::to_string(o.uring.ring_entries) +
              ", receive buffers " + std::to_string(o.recv_buffer_count) + " x " +
              std::to_string(o.recv_buffer_size) +
              (o.uring.recv_incremental ? " incremental" : "") + ", pipes " +
              std::to_string(o.uring.pipe_pool_size) + " x " + std::to_string(o.uring.pipe_size) +
              ", splice_min_bytes " + std::to_string(o.uring.splice_min_bytes) +
              ", send_turn_bytes " + std::to_string(o.send_turn_bytes) +
              (o.uring.send_zc ? ", send_zc" : "") + (o.tcp_nopush ? ", tcp_nopush" : "") +
              (o.uring.bypass_sendfile ? ", bypass_sendfile" : "") + ", body_buffers " +
              std::to_string(o.uring.body_buffers) + ", worker_queue " +
              std::to_string(o.epoll.worker_queue);
    return o;
  }

  void SetChances() {
    const double levels[] = {0, 0.02, 0.1, 0.3};
    for (int f = 0; f < static_cast<int>(Fault::kCount); ++f) {
      plan.Set(static_cast<Fault>(f), levels[Below(4)]);
    }
  }

  // Connections accepted through the loop (direct descriptors on bypass). False on failure.
  bool Connect(int listener, sockaddr_in a) {
    struct Acceptor {
      Completion c;
      std::vector<int> handles;
      int ends = 0;
      static void On(Completion* c) {
        Acceptor* self = static_cast<Acceptor*>(c->owner);
        if (c->result >= 0 && c->more) self->handles.push_back(static_cast<int>(c->result));
        if (!c->more) ++self->ends;
      }
    } acc;
    acc.c.owner = &acc;
    acc.c.callback = &Acceptor::On;
    loop->Accept(listener, &acc.c);
    // The peers keep the default receive buffer: one smaller than a loopback segment (64 KiB)
    // never announces room for one, and the sender then waits on its zero-window probes, whose
    // interval doubles up to seconds. Sockets fill anyway while a peer does not read.
    for (Conn& k : conns) {
      k.peer = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (::connect(k.peer, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return false;
      ::fcntl(k.peer, F_SETFL, O_NONBLOCK);
    }
    for (int i = 0; i < 200 && acc.handles.size() < kConns; ++i) loop->Poll(5);
    loop->Cancel(&acc.c);
    for (int i = 0; i < 200 && acc.ends == 0; ++i) loop->Poll(5);
    if (acc.handles.size() != kConns || acc.ends != 1) return false;
    for (int i = 0; i < kConns; ++i) conns[i].handle = acc.handles[static_cast<size_t>(i)];
    return true;
  }

  void PeerWrite(Conn* k) {
    if (k->peer_shut) return;
    char buf[4096];
    const uint64_t n = 16 + Below(sizeof buf - 16);
    for (uint64_t i = 0; i < n; ++i) buf[i] = InByte(k->index, k->written + i);
    const ssize_t w = ::send(k->peer, buf, n, MSG_NOSIGNAL);
    if (w > 0) k->written += static_cast<uint64_t>(w);
    if (w > 0)
      Trace(k, "peer wrote " + std::to_string(w) + ", " + std::to_string(k->written) + " in all");
  }

  void PeerRead(Conn* k, uint64_t budget) {
    char buf[16384];
    while (budget > 0) {
      const ssize_t n = ::recv(k->peer, buf, std::min<uint64_t>(budget, sizeof buf), 0);
      if (n <= 0) return;
      k->arrived.append(buf, static_cast<size_t>(n));
      budget -= static_cast<uint64_t>(n);
    }
  }

  void StartRecv(Conn* k) {
    k->recv_on = true;
    k->cancelled = false;
    k->paused = false;
    Trace(k, "Recv");
    loop->Recv(k->handle, &k->rc);
  }

  void StartSend(Conn* k) {
    const int count = 1 + static_cast<int>(Below(3));
    k->op_bytes.clear();
    for (int i = 0; i < count; ++i) {
      std::string& b = k->bufs[i];
      b.resize(1 + Below(Chance(0.3) ? 100000 : 3000));
      for (char& ch : b) ch = static_cast<char>(rng());
      k->iov[i] = iovec{b.data(), b.size()};
      k->op_bytes += b;
    }
    k->send_on = true;
    k->sending_file = false;
    Trace(k, "Send " + std::to_string(k->op_bytes.size()));
    loop->Send(k->handle, k->iov, count, &k->sc);
  }

  void StartSendFile(Conn* k) {
    const int which = static_cast<int>(Below(2));
    const std::string& content = files[which];
    if (which == 1) ::posix_fadvise(file_fds[1], 0, 0, POSIX_FADV_DONTNEED);
    const uint64_t offset = Below(content.size());
    // Sometimes past the end: the file "ended early", and the result says how much there was.
    const uint64_t length = 1 + Below(content.size() - offset + (Chance(0.2) ? 5000 : 0));
    k->op_bytes = content.substr(offset, length);
    k->send_on = true;
    k->sending_file = true;
    Trace(k, std::string(which == 1 ? "SendFile (evicted) " : "SendFile ") +
                 std::to_string(offset) + "+" + std::to_string(length));
    loop->SendFile(k->handle, file_fds[which], offset, length, &k->sc);
  }

  void Step() {
    Conn* k = &conns[Below(kConns)];
    switch (Below(10)) {
      case 0:
      case 1:
        PeerWrite(k);
        break;
      case 2:
        if (!k->recv_on && !k->eof) StartRecv(k);
        break;
      case 3:
        if (k->recv_on && !k->cancelled) {
          if (!k->paused) {
            k->paused = true;
            Trace(k, "pause");
            loop->PauseRecv(&k->rc);
          } else {
            k->paused = false;
            Trace(k, "resume");
            loop->ResumeRecv(&k->rc);
          }
        }
        break;
      case 4:
        if (k->recv_on && !k->cancelled && Chance(0.3)) {
          k->cancelled = true;
          Trace(k, "cancel");
          loop->Cancel(&k->rc);
        }
        break;
      case 5:
        if (!k->send_on) StartSend(k);
        break;
      case 6:
        if (!k->send_on) StartSendFile(k);
        break;
      default:
        PeerRead(k, Below(3) == 0 ? 1 << 20 : Below(20000));
        break;
    }
    loop->Poll(Chance(0.1) ? 1 : 0);
  }

  // Everything ends: sends read to their end, receives resumed and brought to end of stream.
  // Bounded by time, not by Polls: a Poll may return at once every time (an epoll_ctl that
  // failed leaves a finished socket's old interest, readable for ever, until it is closed),
  // while a sender with a small buffer on loopback waits for each ACK (Nagle: every segment is
  // smaller than the 64 KiB a loopback segment may be).
  bool Drain() {
    ending = true;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      bool done = true;
      for (Conn& k : conns) {
        PeerRead(&k, 1 << 20);
        if (k.send_on) done = false;
        if (k.recv_on && k.paused) {
          k.paused = false;
          Trace(&k, "resume (drain)");
          loop->ResumeRecv(&k.rc);
        }
        if (!k.recv_on && !k.eof) StartRecv(&k);  // ended early (cancelled, an error): again
        if (!k.send_on && !k.peer_shut) {
          k.peer_shut = true;
          ::shutdown(k.peer, SHUT_WR);
        }
        if (!k.eof) done = false;
      }
      if (done) return true;
      loop->Poll(1);
    }
    return false;
  }

  std::string InFlight() {
    std::string out;
    for (const Conn& k : conns) {
      out += " [" + std::to_string(k.index) + ": recv_on=" + std::to_string(k.recv_on) +
             " paused=" + std::to_string(k.paused) + " cancelled=" + std::to_string(k.cancelled) +
             " eof=" + std::to_string(k.eof) + " next=" + std::to_string(k.next) + "/" +
             std::to_string(k.written) + " send_on=" + std::to_string(k.send_on) +
             " file=" + std::to_string(k.sending_file) + "]";
    }
    return out;
  }

  // The whole seed; false with `failure` set (or a skip: `skip` set).
  void Run(std::string* skip) {
    const int fds_before = OpenFds();
    const char* tmp = std::getenv("TEST_TMPDIR");
    for (int i = 0; i < 2; ++i) {
      files[i].resize(64 * 1024 + Below(400 * 1024));
      for (char& ch : files[i]) ch = static_cast<char>(rng());
      std::string path = std::string(tmp != nullptr ? tmp : "/var/tmp") + "/fault-XXXXXX";
      file_fds[i] = ::mkstemp(path.data());
      if (file_fds[i] < 0) return Fail("mkstemp: " + std::string(std::strerror(errno)));
      ::unlink(path.c_str());
      if (::write(file_fds[i], files[i].data(), files[i].size()) !=
          static_cast<ssize_t>(files[i].size()))
        return Fail("write of a test file failed");
      ::fsync(file_fds[i]);
    }
    std::string error;
    const LoopOptions o = Options();
    absl::StatusOr<std::unique_ptr<Loop>> made = BuiltinTiers().Find(tier)->make(o);
    if (made.ok()) {
      loop = *std::move(made);
    } else {
      error = std::string(made.status().message());
    }
    if (loop == nullptr) {
      *skip = tier + " is not usable here: " + error;
      if (tier == "epoll") Fail(error);
      return CloseAll();
    }
    for (Conn& k : conns) {
      k.h = this;
      k.index = static_cast<int>(&k - conns);
      k.rc.owner = k.sc.owner = &k;
      k.rc.callback = &OnRecv;
      k.sc.callback = &OnSend;
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    // Small send buffers fill at once (EAGAIN, polls, short splices); not under TCP_CORK, which
    // sends only whole segments, and a loopback segment (64 KiB) never fits: every one would
    // wait for the cork's 200 ms timer.
    const int sndbuf = !o.tcp_nopush && Chance(0.5) ? 16 << 10 : 0;
    if (sndbuf != 0) options += ", SO_SNDBUF 16 KiB";
    if (sndbuf != 0) ::setsockopt(listener, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    if (::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listener, 16) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0 ||
        !Connect(listener, a)) {
      ::close(listener);
      Fail("could not connect the peers");
      return CloseAll();
    }
    ::close(listener);

    SetChances();
    for (int i = 0; i < kSteps && failure.empty(); ++i) Step();
    if (!Drain()) Fail("operations still in flight after the drain:" + InFlight());
    for (Conn& k : conns) {  // what the sends queued in the socket reaches the peer
      for (int i = 0; i < 400 && k.arrived.size() < k.expected.size(); ++i) {
        PeerRead(&k, 1 << 20);
        if (k.arrived.size() < k.expected.size()) ::usleep(5000);
      }
    }
    plan.Clear();  // the checks and the close below see the loop as it is
    for (Conn& k : conns) {
      if (failure.empty() && k.arrived != k.expected) {
        size_t at = 0;
        while (at < k.arrived.size() && at < k.expected.size() && k.arrived[at] == k.expected[at])
          ++at;
        Fail(Who(&k) + "the peer read " + std::to_string(k.arrived.size()) +
             " bytes where the sends report " + std::to_string(k.expected.size()) +
             "; they differ from byte " + std::to_string(at));
      }
    }
    const LoopStats st = loop->Stats();
    stats = st;
    if (failure.empty() && (st.in_flight != 0 || st.pipes_in_use != 0 || st.op_slots_in_use != 0 ||
                            st.body_buffers_in_use != 0 || st.recv_held_in_use != 0)) {
      Fail("left in use after every operation ended: in_flight " + std::to_string(st.in_flight) +
           ", pipes " + std::to_string(st.pipes_in_use) + ", slots " +
           std::to_string(st.op_slots_in_use) + ", body buffers " +
           std::to_string(st.body_buffers_in_use) + ", kept receive chunks " +
           std::to_string(st.recv_held_in_use));
    }
    CloseAll();
    const int fds_after = OpenFds();
    if (failure.empty() && fds_after != fds_before) {
      Fail("descriptors open before the seed: " + std::to_string(fds_before) +
           ", after: " + std::to_string(fds_after));
    }
  }

  void CloseAll() {
    if (loop != nullptr) {
      for (Conn& k : conns) {
        if (k.handle >= 0 && !k.recv_on && !k.send_on) loop->Close(k.handle);
      }
      for (int i = 0; i < 5; ++i) loop->Poll(1);
      // Operations still in flight (a failed seed) point into this harness: the loop goes first.
      loop.reset();
    }
    for (Conn& k : conns) {
      if (k.peer >= 0) ::close(k.peer);
      k.peer = -1;
    }
    for (int& fd : file_fds) {
      if (fd >= 0) ::close(fd);
      fd = -1;
    }
  }
};

const Harness* g_running = nullptr;  // for the abort handler: which seed died

void OnAbort(int) {
  if (g_running != nullptr) {
    std::fprintf(stderr,
                 "\nloop_fault_test: aborted on tier %s, seed %llu (replay with --seed=%llu)\n%s",
                 g_running->tier.c_str(), static_cast<unsigned long long>(g_running->seed),
                 static_cast<unsigned long long>(g_running->seed), g_running->plan.Log().c_str());
  }
  std::signal(SIGABRT, SIG_DFL);
  std::raise(SIGABRT);
}

class LoopFaultTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LoopFaultTest, TheContractHoldsUnderInjectedFaults) {
  const uint64_t only = Setting("--seed=", "RINGD_FAULT_SEED", 0);
  const uint64_t count = only != 0 ? 1 : Setting("--seeds=", "RINGD_FAULT_SEEDS", kDefaultSeeds);
  const uint64_t first = only != 0 ? only : Setting("--first-seed=", "RINGD_FAULT_FIRST_SEED", 1);
  std::signal(SIGABRT, &OnAbort);
  uint64_t injected = 0, send_fails = 0, recv_ends[6] = {};
  LoopStats paths;
  std::map<std::string, uint64_t> sites;
  for (uint64_t seed = first; seed < first + count; ++seed) {
    Harness h(GetParam(), seed);
    g_running = &h;
    std::string skip;
    h.Run(&skip);
    g_running = nullptr;
    if (!skip.empty() && h.failure.empty()) {
      // RINGD_REQUIRED_TIERS (as in loop_test): a tier CI requires fails rather than skips.
      const char* env = std::getenv("RINGD_REQUIRED_TIERS");
      const std::string required = "," + std::string(env != nullptr ? env : "") + ",";
      if (required.find("," + GetParam() + ",") != std::string::npos) FAIL() << skip;
      GTEST_SKIP() << skip;
    }
    if (!h.failure.empty()) {
      ADD_FAILURE() << GetParam() << ", seed " << seed << ": " << h.failure
                    << "\nreplay: bazel-bin/io/loop_fault_test --gtest_filter='*/" << GetParam()
                    << "' --seed=" << seed << "\n"
                    << h.options << "\n"
                    << h.Traced() << h.plan.Log();
      return;
    }
    if (only != 0) std::printf("%s", h.plan.Log().c_str());
    injected += h.plan.injected_total();
    send_fails += h.send_fails;
    for (int i = 0; i < 6; ++i) recv_ends[i] += h.recv_ends[i];
    paths.sendfile_bytes += h.stats.sendfile_bytes;
    paths.splice_bytes += h.stats.splice_bytes;
    paths.read_send_bytes += h.stats.read_send_bytes;
    paths.recv_nobufs += h.stats.recv_nobufs;
    paths.recv_held += h.stats.recv_held;
    for (const FaultPlan::SiteCount& sc : h.plan.sites())
      sites[std::string(FaultName(sc.fault)) + " at " + sc.site] += sc.count;
  }
  std::printf(
      "%s: %llu seeds, %llu faults injected; receives ended: %llu end of stream, %llu cancelled, "
      "%llu cancelled with input, %llu with bytes, %llu ENOMEM; %llu sends failed\n",
      GetParam().c_str(), static_cast<unsigned long long>(count),
      static_cast<unsigned long long>(injected), static_cast<unsigned long long>(recv_ends[0]),
      static_cast<unsigned long long>(recv_ends[1]), static_cast<unsigned long long>(recv_ends[2]),
      static_cast<unsigned long long>(recv_ends[3]), static_cast<unsigned long long>(recv_ends[4]),
      static_cast<unsigned long long>(send_fails));
  std::printf(
      "  body bytes: %llu by sendfile, %llu spliced, %llu through body buffers; receives out of "
      "buffers %llu times, %llu kept while paused\n  faults by site:",
      static_cast<unsigned long long>(paths.sendfile_bytes),
      static_cast<unsigned long long>(paths.splice_bytes),
      static_cast<unsigned long long>(paths.read_send_bytes),
      static_cast<unsigned long long>(paths.recv_nobufs),
      static_cast<unsigned long long>(paths.recv_held));
  for (const auto& [site, n] : sites)
    std::printf(" %s %llu;", site.c_str(), static_cast<unsigned long long>(n));
  std::printf("\n");
}

INSTANTIATE_TEST_SUITE_P(Tiers, LoopFaultTest, ::testing::Values("bypass", "uring", "epoll"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace ringd::io
