// The shard simulator's TLS: a deterministic stand-in for the TLS session (tls_session.h) and
// the client's side of it, speaking a trivial record framing instead of TLS, so that the real
// TlsLoop (server/tls/tls_loop.h) runs under the real shard with every record boundary, split
// and fault drawn from the seed. A record is a 1-byte type, a 2-byte big-endian length and its
// payload; the handshake is a client hello answered by a server hello; then application data,
// an alert (the server's answer to bad input), and close_notify.
//
//   SimTlsFactory sessions(&world, &tls_rng, &counters);       // one session per TLS accept
//   TlsLoop loop(std::move(sim_loop), &sessions, tls_listeners, recv_max, max_connections);
//   SimTlsClient client;  client.Hello(&world.sockets[i]);     // the client's side
//   client.Write(rng, "GET / HTTP/1.1\r\n\r\n", &socket);       // plaintext in, records out
//   client.Take(wire, &plaintext, &why);                        // records in, plaintext out
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "io/loop.h"
#include "server/tls/tls_session.h"
#include "tests/sim/sim_loop.h"

namespace ringd::sim {

enum RecordType : uint8_t {
  kClientHello = 1,
  kServerHello = 2,
  kAppData = 3,
  kAlert = 4,
  kCloseNotify = 5,
};
constexpr size_t kRecordHeader = 3;
constexpr size_t kMaxRecordPayload = 16384;
std::string MakeRecord(uint8_t type, std::string_view payload);

// What the TLS stand-in did over a seed (coverage).
struct SimTlsCounters {
  uint64_t sessions = 0, live_sessions = 0, handshakes = 0;
  uint64_t one_byte_feeds = 0;   // ciphertext arriving a byte at a time: a record split to a byte
  uint64_t coalesced_feeds = 0;  // one delivery that ends two records or more
  uint64_t bad_input = 0, renegotiations = 0, alerts_seen = 0;
  uint64_t close_notify_queued = 0, close_notify_seen = 0;
  uint64_t client_close_notify = 0, client_no_close_notify = 0;
  uint64_t stalled_handshakes = 0, stalled_closed = 0;
};

// The server's sessions. Each learns its socket from the accept that makes it
// (SimWorld::accepting) and reports what the checks need into it.
class SimTlsFactory final : public tls::TlsSessionFactory {
 public:
  SimTlsFactory(SimWorld* world, Rng* rng, SimTlsCounters* counters)
      : world_(world), rng_(rng), counters_(counters) {}
  std::unique_ptr<tls::TlsSession> Make() override;

 private:
  SimWorld* world_;
  Rng* rng_;
  SimTlsCounters* counters_;
};

// The client's end of one TLS connection: its records go into the socket's to_server (and
// its record map); what it reads from to_client comes back as plaintext.
class SimTlsClient {
 public:
  // The client hello, whole, or only its first `bytes` (a handshake the client never finishes).
  void Hello(SimSocket* s, size_t bytes = SIZE_MAX);
  // `n` bytes went before every record sent so far (a PROXY protocol header put in front).
  void Precede(SimSocket* s, size_t n);
  // Plaintext to send: records of random sizes, several in one write; held until the server's
  // hello has come.
  void Write(Rng& rng, std::string_view plain, SimSocket* s);
  // A record the server must refuse: an unknown type, or (`renegotiate`) a second hello.
  void Garbage(Rng& rng, bool renegotiate, SimSocket* s);
  void CloseNotify(SimSocket* s);
  // Record bytes read from the server: plaintext appended to `plain`. False, with `why`, when
  // the server broke the protocol (bytes after its alert or close_notify, data before its
  // hello, an unknown record).
  bool Take(Rng& rng, std::string_view wire, SimSocket* s, std::string* plain, std::string* why);

  bool server_hello() const { return server_hello_; }
  bool alert() const { return alert_; }
  bool close_notify() const { return close_notify_; }
  bool hello_sent() const { return hello_sent_; }
  // Bytes of a record not yet whole: at the end of the stream, a record cut short.
  bool partial() const { return !partial_.empty(); }
  bool broke = false;  // sent a record the server must refuse (then sends nothing more)

 private:
  void Put(uint8_t type, std::string_view payload, uint64_t plain_end, SimSocket* s);

  bool hello_sent_ = false;
  bool server_hello_ = false;
  bool alert_ = false;
  bool close_notify_ = false;
  uint64_t plain_out_ = 0;  // plaintext framed so far
  uint64_t wire_out_ = 0;   // record bytes written to the socket so far
  std::string held_;        // plaintext written before the server's hello
  std::string partial_;     // record bytes read, not yet a whole record
};

// An io::Loop around another that checks the contract's first rule from the caller's side:
// every callback runs from Poll, never from inside a submit call (or any other call) of the
// loop. The owner's callbacks pass through a trampoline that asserts it.
class CallbackCheckLoop final : public io::Loop {
 public:
  explicit CallbackCheckLoop(std::unique_ptr<io::Loop> inner);
  ~CallbackCheckLoop() override;

  const char* Name() const override { return inner_->Name(); }
  void Accept(int listen_fd, io::Completion* c) override;
  void Recv(int fd, io::Completion* c) override;
  void Send(int fd, iovec* iov, int iovcnt, io::Completion* c, bool more) override;
  void SendFile(int sock_fd, int file_fd, uint64_t offset, uint64_t length, io::Completion* c,
                bool more) override;
  void Open(int dir_fd, const char* path, io::FileStat* stat, io::Completion* c) override;
  void Read(int fd, char* buf, uint64_t length, uint64_t offset, io::Completion* c) override;
  void Cancel(io::Completion* c) override;
  void PauseRecv(io::Completion* c) override;
  void ResumeRecv(io::Completion* c) override;
  void Shutdown(int fd, int how) override;
  void Close(int fd) override;
  int64_t MonotonicMs() const override { return inner_->MonotonicMs(); }
  int64_t RealtimeSec() const override { return inner_->RealtimeSec(); }
  void Poll(int timeout_ms) override;
  void Wake() override { inner_->Wake(); }
  void Quiesce() override { inner_->Quiesce(); }
  io::LoopStats Stats() const override { return inner_->Stats(); }

 private:
  struct Call;
  void Wrap(io::Completion* c);
  static void Trampoline(io::Completion* c);

  std::unique_ptr<io::Loop> inner_;
  int in_call_ = 0;  // calls into the loop other than Poll, nested
  bool in_poll_ = false;
};

}  // namespace ringd::sim
