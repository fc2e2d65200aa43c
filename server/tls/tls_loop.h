// TLS as an io::Loop around another: connections accepted on the TLS listeners speak TLS, the
// rest pass straight through. The shard's state machine runs unchanged on top: its Recv gets
// plaintext, its Send and SendFile hand over plaintext, and this loop drives each connection's
// TlsSession (tls_session.h) with the inner loop's operations: a multishot receive of
// ciphertext, sends of the records from the connection's own buffer, and for file bodies reads
// into a buffer of the connection's, encrypted chunk by chunk (no kernel TLS on this kernel, so
// no sendfile or splice of TLS bodies). Every operation keeps the io::Loop contract (loop.h): the
// last callback of a receive, pauses, cancels, and callbacks only from Poll.
//
//   auto loop = std::make_unique<TlsLoop>(std::move(inner), &factory, tls_listen_fds, options);
//   shard uses `loop` as any other io::Loop.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "io/loop.h"
#include "mem/intrusive_list.h"
#include "server/http/client_address.h"
#include "server/tls/tls_session.h"

namespace ringd::tls {

struct TlsLoopStats {
  uint64_t handshakes = 0;          // completed
  uint64_t resumed = 0;             // of which resumed a session (a ticket)
  uint64_t handshake_failures = 0;  // bad input before the handshake completed
  uint64_t bad_records = 0;         // bad input after it
  uint64_t close_notify_sent = 0;
  uint64_t plain_http = 0;
  uint64_t handshakes_refused = 0;  // closed at accept: max_handshakes were under way
  uint64_t hellos_deferred = 0;     // ClientHellos that waited for a later turn (kHellosPerTurn)
  // ReadProxyHeaders' listeners: connections closed for their PROXY protocol header (none, or
  // malformed) or for the client it named.
  uint64_t proxy_missing = 0, proxy_malformed = 0, clients_denied = 0;
  // Closing connections Poll has looked at for their close_notify deadline: one a turn (the
  // soonest), and each one past its deadline once; never all of them each turn.
  uint64_t closing_checked = 0;
};

class TlsLoop final : public io::Loop {
 public:
  // `recv_max_bytes`: the most plaintext one receive callback carries (the shard sizes its input
  // buffers for it). `max_connections`: the connection table's size, reserved up front.
  // `max_handshakes`: TLS connections still in their handshake at once; a connection accepted
  // beyond it is closed at once, before its ClientHello costs anything (a flood of handshakes
  // cannot take the shard from the connections it serves).
  TlsLoop(std::unique_ptr<io::Loop> inner, TlsSessionFactory* sessions,
          std::vector<int> tls_listeners, uint32_t recv_max_bytes, uint32_t max_connections,
          uint32_t max_handshakes);
  ~TlsLoop() override;
  // Before the first Accept: the TLS listeners (of tls_listeners) whose connections begin with
  // a PROXY protocol header, read and stripped here before the session sees a byte; the client
  // it names is judged by `client_rules` (null: everyone) and is Transport's `client`. A
  // connection without a header, with a malformed one, or whose client is refused has its
  // receive end with -ECONNREFUSED, before any handshake. (Which peers may send a header is the
  // shard's to judge, at accept.)
  void ReadProxyHeaders(const std::vector<int>& listeners, const http::ClientRules* client_rules);

  const char* Name() const override { return inner_->Name(); }
  void Accept(int listen_fd, io::Completion* c) override;
  void Recv(int fd, io::Completion* c) override;
  void Send(int fd, iovec* iov, int iovcnt, io::Completion* c, bool more) override;
  void SendFile(int sock_fd, int file_fd, uint64_t offset, uint64_t length, io::Completion* c,
                bool more) override;
  void Open(int dir_fd, const char* path, io::FileStat* stat, io::Completion* c) override {
    inner_->Open(dir_fd, path, stat, c);
  }
  void Read(int fd, char* buf, uint64_t length, uint64_t offset, io::Completion* c) override {
    inner_->Read(fd, buf, length, offset, c);
  }
  void Cancel(io::Completion* c) override;
  void PauseRecv(io::Completion* c) override;
  void ResumeRecv(io::Completion* c) override;
  void Shutdown(int fd, int how) override;
  void Close(int fd) override;
  int64_t MonotonicMs() const override { return inner_->MonotonicMs(); }
  int64_t RealtimeSec() const override { return inner_->RealtimeSec(); }
  void Poll(int timeout_ms) override;
  void Wake() override { inner_->Wake(); }
  void Quiesce() override;
  io::LoopStats Stats() const override;
  io::TransportInfo Transport(int fd) const override;
  int RingFd() const override { return inner_->RingFd(); }

  const TlsLoopStats& tls_stats() const { return stats_; }
  // TLS connections this loop holds (open, or sending close_notify before their close).
  size_t connections() const { return live_conns_; }

  // How long a closed connection may take to send its close_notify before it is cut.
  static constexpr int64_t kCloseNotifyMs = 1000;
  // Plaintext of a file body read and encrypted at a time.
  static constexpr uint32_t kFileChunk = 64 << 10;
  // Where in its buffer a file chunk is read: half a page past a page boundary. The library
  // copies each record's plaintext into its record buffer a few bytes past that buffer's start,
  // which lands on a page boundary (a block of about 17 KB from mimalloc); a source on a page
  // boundary too sits a few bytes from its destination modulo 4096, and the copy's loads then
  // wait on the stores they alias (4K aliasing), which makes that copy several times slower.
  static constexpr uint32_t kFileChunkAt = 2048;
  // Plaintext handed to the session at a time: one TLS record's most (RFC 8446, 5.1), so that a
  // send's progress counts the records that left whole.
  static constexpr uint32_t kRecordPlain = 16384;
  // ClientHellos answered in one turn of the loop at most (TakeHelloTurn).
  static constexpr uint32_t kHellosPerTurn = 8;
  // How long a connection with nothing to send keeps its sending state and record buffers (its
  // Out, the session's queues, OpenSSL's record buffers): a keep-alive connection serving
  // requests back to back reuses them with no allocator call; one idle this long gives them back
  // (Trim), so an idle connection is its Conn and the session's state alone.
  static constexpr int64_t kTrimIdleMs = 2000;

 private:
  struct Conn;
  struct Out;
  struct Proxied;
  struct AcceptTap;
  // A connection's place in hellos_, closing_ or warm_, never two of them (a closed connection's
  // ClientHello is never answered; one waiting for its ClientHello's turn or closed has nothing
  // to keep warm): every Conn begins with it.
  struct Linked {
    mem::ListLink<Linked> link;
  };
  using ConnList = mem::IntrusiveList<Linked, &Linked::link>;
  static Conn* ConnOf(Linked* linked);

  Conn* Find(int fd) const;
  void AddConn(Conn* conn);
  void RemoveConn(Conn* conn);
  Conn* Owner(io::Completion* c) const;  // the TLS connection whose receive `c` is, if any
  static void OnAccept(io::Completion* inner);
  static void OnRx(io::Completion* inner);
  static void OnTx(io::Completion* inner);
  static void OnFileRead(io::Completion* inner);
  Proxied* ProxiedOf(const Conn* conn) const;
  bool TakeProxyHeader(Conn* conn, Proxied* proxied, const char** data, size_t* n);
  bool ProxyRefused(const Conn* conn) const;
  void Pump(Conn* conn);
  void Deliver(Conn* conn);
  void FinishRecvIfEnded(Conn* conn);
  void Flush(Conn* conn);
  void AfterOutput(Conn* conn);
  void ReadFileChunk(Conn* conn);
  Out* OutOf(Conn* conn);  // the connection's sending state, made if it has none
  void BeginSend(Conn* conn, io::Completion* c, io::Op op);
  void FinishSend(Conn* conn, int64_t result);
  bool WritePlainMarked(Conn* conn, const char* data, size_t len);
  void UpdateProgress(Conn* conn);
  void Schedule(Conn* conn);
  void Unschedule(Conn* conn);
  void Release(Conn* conn);   // the inner close, once nothing of the connection is in flight
  void KeepWarm(Conn* conn);  // it has nothing to send: trimmed kTrimIdleMs from now
  void StopKeepingWarm(Conn* conn);
  void TrimIdle();  // trims the connections idle since kTrimIdleMs ago
  void Enter(Conn* conn);
  void Leave(Conn* conn);
  bool TakeHelloTurn();
  void WaitForHelloTurn(Conn* conn);
  void StopWaitingForHelloTurn(Conn* conn);
  void AnswerWaitingHellos();

  std::unique_ptr<io::Loop> inner_;
  TlsSessionFactory* sessions_;
  std::vector<int> tls_listeners_;
  std::vector<std::unique_ptr<AcceptTap>> taps_;
  const http::ClientRules* client_rules_ = nullptr;
  uint32_t recv_max_bytes_;
  uint32_t max_handshakes_;
  uint32_t handshaking_ = 0;  // connections accepted whose handshake has not completed
  uint32_t hello_budget_ = kHellosPerTurn;  // ClientHellos this turn may still answer
  ConnList hellos_;                         // ClientHellos waiting for a turn, oldest first
  std::vector<Conn*> conns_;  // by the handle's slot (SlotOf: small and dense), null for none
  // ReadProxyHeaders' connections' header state, by slot as conns_ (null for none).
  std::vector<std::unique_ptr<Proxied>> proxied_;
  size_t live_conns_ = 0;
  Conn* ready_ = nullptr;  // connections to pump from Poll, newest first
  // Closed by the shard, sending their last records within their deadline, the soonest first
  // (each is its Close's time plus kCloseNotifyMs).
  ConnList closing_;
  // Open connections with nothing to send that still hold their sending state and buffers, in
  // the order they went idle (each is its time plus kTrimIdleMs, its deadline_ms).
  ConnList warm_;
  std::vector<Conn*> sending_;  // with a Send or SendFile of the shard's in flight
  bool quiesced_ = false;
  std::unique_ptr<char[]> plain_;  // one delivery of plaintext (valid during its callback)
  TlsLoopStats stats_;
};

}  // namespace ringd::tls
