// TlsLoop over a scripted inner loop and a stand-in session: what it holds and what it does per
// connection, counted (never timed), where the shard simulator's random orderings would take
// thousands of connections to show it.
#include "server/tls/tls_loop.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ringd::tls {
namespace {

// An inner loop whose sockets the test fills: a receive delivers everything its socket holds,
// a buffer at a time, in the Poll after it arrived (unless paused); sends complete in the next
// Poll, unless the socket stalls them (a client that takes nothing) until it is shut down.
class ScriptedLoop final : public io::Loop {
 public:
  static constexpr size_t kRecvBuffer = 16384;

  struct Socket {
    std::string to_server;  // what the client sent, not yet received
    io::Completion* rx = nullptr;
    io::Completion* tx = nullptr;
    uint64_t tx_bytes = 0;
    bool stall_sends = false;
    bool shut = false;
    bool closed = false;
  };
  std::map<int, Socket> sockets;
  std::vector<int> backlog;  // connections to accept, in order
  int64_t now_ms = 1000;
  uint64_t closes = 0;

  const char* Name() const override { return "scripted"; }
  void Accept(int listen_fd, io::Completion* c) override {
    c->op = io::Op::kAccept;
    c->fd = listen_fd;
    c->in_flight = true;
    accept_ = c;
  }
  void Recv(int fd, io::Completion* c) override {
    c->op = io::Op::kRecv;
    c->fd = fd;
    c->in_flight = true;
    c->paused = c->cancelled = false;
    Socket& s = sockets.at(fd);
    EXPECT_EQ(s.rx, nullptr);
    s.rx = c;
  }
  void Send(int fd, iovec* iov, int iovcnt, io::Completion* c, bool) override {
    c->op = io::Op::kSend;
    c->fd = fd;
    c->in_flight = true;
    Socket& s = sockets.at(fd);
    EXPECT_EQ(s.tx, nullptr);
    s.tx = c;
    s.tx_bytes = 0;
    for (int i = 0; i < iovcnt; ++i) s.tx_bytes += iov[i].iov_len;
  }
  void SendFile(int, int, uint64_t, uint64_t, io::Completion*, bool) override { std::abort(); }
  void Open(int, const char*, io::FileStat*, io::Completion*) override { std::abort(); }
  void Read(int, char*, uint64_t, uint64_t, io::Completion*) override { std::abort(); }
  void Cancel(io::Completion* c) override { c->cancelled = true; }
  void PauseRecv(io::Completion* c) override { c->paused = true; }
  void ResumeRecv(io::Completion* c) override { c->paused = false; }
  void Shutdown(int fd, int) override { sockets.at(fd).shut = true; }
  void Close(int fd) override {
    Socket& s = sockets.at(fd);
    EXPECT_TRUE(s.rx == nullptr && s.tx == nullptr)
        << "fd " << fd << " closed with an operation in flight";
    s.closed = true;
    ++closes;
  }
  int64_t MonotonicMs() const override { return now_ms; }
  int64_t RealtimeSec() const override { return 1700000000; }
  void Poll(int) override {
    while (accept_ != nullptr && !backlog.empty()) {
      const int fd = backlog.front();
      backlog.erase(backlog.begin());
      sockets[fd];
      accept_->result = fd;
      accept_->more = true;
      accept_->callback(accept_);
    }
    for (auto& [fd, s] : sockets) {
      if (s.tx != nullptr && (!s.stall_sends || s.shut)) {
        io::Completion* c = std::exchange(s.tx, nullptr);
        c->in_flight = false;
        c->result = s.shut ? -EPIPE : static_cast<int64_t>(s.tx_bytes);
        c->callback(c);
      }
      if (s.rx != nullptr && s.rx->cancelled) {
        io::Completion* c = std::exchange(s.rx, nullptr);
        c->in_flight = false;
        c->more = false;
        c->result = -ECANCELED;
        c->callback(c);
      }
      while (s.rx != nullptr && !s.rx->paused && !s.rx->cancelled && !s.to_server.empty()) {
        const size_t n = std::min(kRecvBuffer, s.to_server.size());
        std::memcpy(buffer_, s.to_server.data(), n);
        s.to_server.erase(0, n);
        s.rx->data = buffer_;
        s.rx->result = static_cast<int64_t>(n);
        s.rx->more = true;
        s.rx->callback(s.rx);
      }
    }
  }
  void Wake() override {}
  io::LoopStats Stats() const override { return {}; }

 private:
  io::Completion* accept_ = nullptr;
  char buffer_[kRecvBuffer];
};

// A session whose handshake is its first kHello bytes (answered with one record), then
// plaintext as it came; it says how much input it ever held at once.
constexpr size_t kHello = 512;
struct SessionCounts {
  size_t held_most = 0;
  int trims = 0;  // Trim calls: the connection gave its buffers back
};

class ScriptedSession final : public TlsSession {
 public:
  ScriptedSession(SessionCounts* counts, bool established) : counts_(counts), done_(established) {}
  void Feed(const char* data, size_t len) override {
    in_.append(data, len);
    counts_->held_most = std::max(counts_->held_most, in_.size());
  }
  size_t ReadPlain(char* out, size_t cap) override {
    if (!done_) {
      if (in_.size() < kHello) return 0;
      in_.erase(0, kHello);
      done_ = true;
      out_ += "server hello";
    }
    const size_t n = std::min(cap, in_.size());
    std::memcpy(out, in_.data(), n);
    in_.erase(0, n);
    return n;
  }
  bool WritePlain(const char* data, size_t len) override {
    if (!done_) return false;
    out_.append(data, len);
    return true;
  }
  size_t PendingOutput() const override { return lent_.size() + out_.size(); }
  size_t PeekOutput(const char** data) override {
    if (lent_.empty()) std::swap(lent_, out_);
    *data = lent_.data();
    return lent_.size();
  }
  void ConsumeOutput(size_t n) override { lent_.erase(0, n); }
  void Close() override {
    if (done_ && !closed_) out_ += "close_notify";
    closed_ = true;
  }
  void Trim() override { ++counts_->trims; }
  size_t BufferBytes() const override { return in_.size(); }
  bool HasBufferedInput() const override { return !in_.empty(); }
  bool HandshakeDone() const override { return done_; }
  TlsEnd Ended() const override { return TlsEnd::kNone; }
  std::string_view Version() const override { return ""; }
  std::string_view Cipher() const override { return ""; }
  std::string_view ServerName() const override { return ""; }
  bool Resumed() const override { return false; }

 private:
  SessionCounts* counts_;
  bool done_;
  bool closed_ = false;
  std::string in_, out_, lent_;
};

class ScriptedSessions final : public TlsSessionFactory {
 public:
  explicit ScriptedSessions(bool established) : established_(established) {}
  std::unique_ptr<TlsSession> Make() override {
    counts.push_back(std::make_unique<SessionCounts>());
    return std::make_unique<ScriptedSession>(counts.back().get(), established_);
  }
  std::vector<std::unique_ptr<SessionCounts>> counts;  // in accept order

 private:
  bool established_;
};

constexpr int kListener = 3;

// The shard's side: every connection accepted is received from (when `receive`), its plaintext
// kept by descriptor.
struct Shard {
  explicit Shard(TlsLoop* loop, bool receive) : loop(loop), receive(receive) {
    accept.owner = this;
    accept.callback = [](io::Completion* c) {
      auto* self = static_cast<Shard*>(c->owner);
      ASSERT_GE(c->result, 0);
      const int fd = static_cast<int>(c->result);
      self->fds.push_back(fd);
      if (!self->receive) return;
      io::Completion& rx = self->rx[fd];
      rx.owner = self;
      rx.callback = [](io::Completion* r) {
        auto* shard = static_cast<Shard*>(r->owner);
        if (r->result > 0) shard->plain[r->fd].append(r->data, static_cast<size_t>(r->result));
        if (!r->more) shard->ended[r->fd] = r->result;
      };
      self->loop->Recv(fd, &rx);
    };
    loop->Accept(kListener, &accept);
  }
  TlsLoop* loop;
  bool receive;
  io::Completion accept;
  std::map<int, io::Completion> rx;
  std::map<int, std::string> plain;
  std::map<int, int64_t> ended;  // the last result of each receive that ended
  std::vector<int> fds;
};

// The shard's receives cancelled and every connection closed, until the loop holds none.
void Teardown(TlsLoop* loop, Shard* shard, ScriptedLoop* inner) {
  for (auto& [fd, rx] : shard->rx) {
    if (rx.in_flight) loop->Cancel(&rx);
  }
  for (int turn = 0; turn < 4; ++turn) loop->Poll(0);
  for (auto& [fd, rx] : shard->rx) ASSERT_FALSE(rx.in_flight) << fd;
  for (int fd : shard->fds) loop->Close(fd);
  for (auto& [fd, s] : inner->sockets) s.stall_sends = false;
  for (int turn = 0; turn < 4 && loop->connections() > 0; ++turn) loop->Poll(0);
  EXPECT_EQ(loop->connections(), 0u);
}

TEST(TlsLoop, AClientHelloWaitingItsTurnHoldsOneReceiveAtMost) {
  auto scripted = std::make_unique<ScriptedLoop>();
  ScriptedLoop* inner = scripted.get();
  ScriptedSessions sessions(/*established=*/false);
  TlsLoop loop(std::move(scripted), &sessions, {kListener}, ScriptedLoop::kRecvBuffer,
               /*max_connections=*/64, /*max_handshakes=*/256);
  Shard shard(&loop, /*receive=*/true);
  // One more ClientHello than a turn answers: the last waits for the next turn, and its client
  // goes on sending 10 MiB meanwhile.
  const int last = 10 + static_cast<int>(TlsLoop::kHellosPerTurn);
  for (int fd = 10; fd <= last; ++fd) inner->backlog.push_back(fd);
  loop.Poll(0);
  ASSERT_EQ(shard.fds.size(), TlsLoop::kHellosPerTurn + 1);
  const std::string body(10 << 20, 'x');
  for (int fd : shard.fds) inner->sockets.at(fd).to_server = std::string(kHello, 'h');
  inner->sockets.at(last).to_server += body;
  loop.Poll(0);
  ASSERT_EQ(loop.tls_stats().hellos_deferred, 1u);
  // The waiting connection holds the receive that brought its hello; the socket the rest.
  EXPECT_LE(sessions.counts.back()->held_most, ScriptedLoop::kRecvBuffer);
  EXPECT_GE(inner->sockets.at(last).to_server.size(),
            body.size() + kHello - ScriptedLoop::kRecvBuffer);
  // Its turn comes: the receive resumes and every byte arrives, in order.
  for (int turn = 0; turn < 4 && shard.plain[last].size() < body.size(); ++turn) loop.Poll(0);
  EXPECT_EQ(shard.plain[last].size(), body.size());
  EXPECT_TRUE(shard.plain[last] == body);
  EXPECT_LE(sessions.counts.back()->held_most, ScriptedLoop::kRecvBuffer);
  Teardown(&loop, &shard, inner);
}

// A burst of closes costs work in proportion to it: a turn looks at the one closing connection
// whose deadline comes first, not at every one, and a release takes its connection off in one
// step wherever it stands (the newer half here, the far end from the soonest deadlines).
TEST(TlsLoop, ABurstOfTenThousandClosesCostsWorkInProportion) {
  constexpr int kConns = 10000;
  auto scripted = std::make_unique<ScriptedLoop>();
  ScriptedLoop* inner = scripted.get();
  ScriptedSessions sessions(/*established=*/true);
  TlsLoop loop(std::move(scripted), &sessions, {kListener}, ScriptedLoop::kRecvBuffer, kConns,
               /*max_handshakes=*/kConns);
  Shard shard(&loop, /*receive=*/false);
  for (int fd = 10; fd < 10 + kConns; ++fd) inner->backlog.push_back(fd);
  loop.Poll(0);
  ASSERT_EQ(shard.fds.size(), static_cast<size_t>(kConns));
  // Every client takes nothing for now: each close_notify stays in flight.
  for (int fd : shard.fds) inner->sockets.at(fd).stall_sends = true;
  for (int fd : shard.fds) loop.Close(fd);
  constexpr int kTurns = 100;
  for (int turn = 0; turn < kTurns; ++turn) {
    inner->now_ms += TlsLoop::kCloseNotifyMs / (2 * kTurns);
    loop.Poll(0);
  }
  EXPECT_EQ(loop.connections(), static_cast<size_t>(kConns));
  EXPECT_LE(loop.tls_stats().closing_checked, static_cast<uint64_t>(kTurns));
  // The newer half takes its close_notify: each is released.
  for (int i = kConns / 2; i < kConns; ++i)
    inner->sockets.at(shard.fds[static_cast<size_t>(i)]).stall_sends = false;
  loop.Poll(0);
  EXPECT_EQ(loop.connections(), static_cast<size_t>(kConns / 2));
  EXPECT_EQ(inner->closes, static_cast<uint64_t>(kConns / 2));
  // The older half never does: past the deadline, each is looked at once more and cut.
  const uint64_t checked = loop.tls_stats().closing_checked;
  inner->now_ms += TlsLoop::kCloseNotifyMs;
  for (int turn = 0; turn < 3; ++turn) loop.Poll(0);
  EXPECT_EQ(loop.connections(), 0u);
  EXPECT_EQ(inner->closes, static_cast<uint64_t>(kConns));
  EXPECT_LE(loop.tls_stats().closing_checked - checked, static_cast<uint64_t>(kConns / 2 + 3));
}

// A ",proxy" listener's connections: the PROXY header, even a byte per receive, never reaches
// the session, and the client it names is Transport's; without a header, or naming a client the
// rules refuse, the shard's receive ends with -ECONNREFUSED before any ClientHello is answered.
TEST(TlsLoop, AProxyHeaderIsReadBeforeTheSessionSeesAByte) {
  auto scripted = std::make_unique<ScriptedLoop>();
  ScriptedLoop* inner = scripted.get();
  ScriptedSessions sessions(/*established=*/false);
  TlsLoop loop(std::move(scripted), &sessions, {kListener}, ScriptedLoop::kRecvBuffer,
               /*max_connections=*/64, /*max_handshakes=*/256);
  http::ClientRules rules;
  rules.Add(false, *http::ParseCidr("203.0.113.0/24"));
  loop.ReadProxyHeaders({kListener}, &rules);
  Shard shard(&loop, /*receive=*/true);
  for (int fd : {10, 11, 12}) inner->backlog.push_back(fd);
  loop.Poll(0);
  ASSERT_EQ(shard.fds.size(), 3u);
  const std::string header = "PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\r\n";
  for (char c : header) {
    inner->sockets.at(10).to_server = std::string(1, c);
    loop.Poll(0);
  }
  EXPECT_EQ(sessions.counts[0]->held_most, 0u) << "the session saw header bytes";
  inner->sockets.at(10).to_server = std::string(kHello, 'h') + "GET / HTTP/1.1\r\n";
  inner->sockets.at(11).to_server = std::string(kHello, 'h');  // no header
  inner->sockets.at(12).to_server = "PROXY TCP4 203.0.113.5 198.51.100.1 1 443\r\n" +
                                    std::string(kHello, 'h');  // a refused client
  for (int turn = 0; turn < 4; ++turn) loop.Poll(0);
  EXPECT_EQ(shard.plain[10], "GET / HTTP/1.1\r\n");
  EXPECT_EQ(loop.Transport(10).client, "192.0.2.7");
  EXPECT_EQ(shard.ended.count(10), 0u);
  EXPECT_EQ(shard.ended.at(11), -ECONNREFUSED);
  EXPECT_EQ(shard.ended.at(12), -ECONNREFUSED);
  EXPECT_EQ(sessions.counts[1]->held_most, 0u);
  EXPECT_EQ(sessions.counts[2]->held_most, 0u);
  EXPECT_EQ(loop.tls_stats().proxy_missing, 1u);
  EXPECT_EQ(loop.tls_stats().clients_denied, 1u);
  EXPECT_EQ(loop.tls_stats().proxy_malformed, 0u);
  Teardown(&loop, &shard, inner);
}

// What the shard hears of one send: its callbacks, and the last result.
struct SendSeen {
  int calls = 0;
  int64_t result = 0;
  io::Completion c;
  SendSeen() {
    c.owner = this;
    c.callback = [](io::Completion* done) {
      auto* self = static_cast<SendSeen*>(done->owner);
      ++self->calls;
      self->result = done->result;
    };
  }
};

// A keep-alive connection serving responses back to back keeps its sending state and buffers
// (no allocator call for the next response); idle kTrimIdleMs, it gives them back, once.
TEST(TlsLoop, AConnectionKeepsItsBuffersWhileItServesAndTrimsThemIdle) {
  auto scripted = std::make_unique<ScriptedLoop>();
  ScriptedLoop* inner = scripted.get();
  ScriptedSessions sessions(/*established=*/true);
  TlsLoop loop(std::move(scripted), &sessions, {kListener}, ScriptedLoop::kRecvBuffer,
               /*max_connections=*/64, /*max_handshakes=*/64);
  Shard shard(&loop, /*receive=*/false);
  inner->backlog.push_back(10);
  loop.Poll(0);
  ASSERT_EQ(shard.fds.size(), 1u);
  char body[] = "HTTP/1.1 200 OK\r\n\r\n";
  for (int response = 0; response < 5; ++response) {
    SendSeen seen;
    iovec iov{body, sizeof body - 1};
    loop.Send(10, &iov, 1, &seen.c, false);
    for (int turn = 0; turn < 4 && seen.calls == 0; ++turn) loop.Poll(0);
    ASSERT_EQ(seen.calls, 1);
    EXPECT_EQ(seen.result, static_cast<int64_t>(sizeof body - 1));
    inner->now_ms += TlsLoop::kTrimIdleMs / 2;
    loop.Poll(0);
  }
  EXPECT_EQ(sessions.counts[0]->trims, 0);
  inner->now_ms += TlsLoop::kTrimIdleMs;
  loop.Poll(0);
  EXPECT_EQ(sessions.counts[0]->trims, 1);
  inner->now_ms += TlsLoop::kTrimIdleMs;
  loop.Poll(0);
  EXPECT_EQ(sessions.counts[0]->trims, 1);  // trimmed once, until it sends again
  Teardown(&loop, &shard, inner);
}

// Callbacks come only from Poll (loop.h): a SendFile on a connection whose socket refused an
// earlier send, or a SendFile of nothing, completes in the next Poll, not inside the call.
TEST(TlsLoop, ASendFileThatCannotGoCompletesFromPoll) {
  auto scripted = std::make_unique<ScriptedLoop>();
  ScriptedLoop* inner = scripted.get();
  ScriptedSessions sessions(/*established=*/true);
  TlsLoop loop(std::move(scripted), &sessions, {kListener}, ScriptedLoop::kRecvBuffer,
               /*max_connections=*/8, /*max_handshakes=*/8);
  Shard shard(&loop, /*receive=*/false);
  inner->backlog = {10, 11};
  loop.Poll(0);
  ASSERT_EQ(shard.fds.size(), 2u);
  // The client of 10 is gone: the socket refuses the first send.
  inner->sockets.at(10).shut = true;
  SendSeen seen;
  char hello[] = "hello";
  iovec iov{hello, 5};
  loop.Send(10, &iov, 1, &seen.c, false);
  loop.Poll(0);
  ASSERT_EQ(seen.calls, 1);
  EXPECT_EQ(seen.result, -EPIPE);
  loop.SendFile(10, /*file_fd=*/99, 0, 1000, &seen.c, false);
  EXPECT_EQ(seen.calls, 1) << "the callback ran inside SendFile";
  loop.Poll(0);
  EXPECT_EQ(seen.calls, 2);
  EXPECT_EQ(seen.result, -EPIPE);
  // Nothing to send: done, from Poll too.
  SendSeen empty;
  loop.SendFile(11, /*file_fd=*/99, 0, 0, &empty.c, false);
  EXPECT_EQ(empty.calls, 0) << "the callback ran inside SendFile";
  loop.Poll(0);
  EXPECT_EQ(empty.calls, 1);
  EXPECT_EQ(empty.result, 0);
  Teardown(&loop, &shard, inner);
}

// After Quiesce a Close frees its connection at once: taken off the connections a Poll would
// pump (a Shutdown scheduled these), so that nothing the loop keeps points at a freed one (its
// destructor checks).
TEST(TlsLoop, AQuiescedCloseLeavesNothingScheduled) {
  auto scripted = std::make_unique<ScriptedLoop>();
  ScriptedLoop* inner = scripted.get();
  ScriptedSessions sessions(/*established=*/true);
  auto loop = std::make_unique<TlsLoop>(std::move(scripted), &sessions, std::vector<int>{kListener},
                                        ScriptedLoop::kRecvBuffer, /*max_connections=*/8,
                                        /*max_handshakes=*/8);
  Shard shard(loop.get(), /*receive=*/false);
  inner->backlog = {10, 11, 12};
  loop->Poll(0);
  ASSERT_EQ(shard.fds.size(), 3u);
  for (int fd : shard.fds) loop->Shutdown(fd, SHUT_WR);
  loop->Quiesce();
  loop->Close(11);  // the middle of the list
  loop->Close(12);  // its head
  EXPECT_EQ(loop->connections(), 1u);
  EXPECT_EQ(inner->closes, 2u);
  loop.reset();  // 10 is still scheduled, and still there: the destructor closes it
}

}  // namespace
}  // namespace ringd::tls
