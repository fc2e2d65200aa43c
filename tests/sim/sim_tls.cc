#include "tests/sim/sim_tls.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "io/assert.h"

namespace ringd::sim {

std::string MakeRecord(uint8_t type, std::string_view payload) {
  RINGD_ASSERT(payload.size() <= 0xffff);
  std::string r(kRecordHeader, '\0');
  r[0] = static_cast<char>(type);
  r[1] = static_cast<char>(payload.size() >> 8);
  r[2] = static_cast<char>(payload.size() & 0xff);
  r.append(payload);
  return r;
}

namespace {

size_t PayloadLength(std::string_view header) {
  return (static_cast<size_t>(static_cast<uint8_t>(header[1])) << 8) |
         static_cast<uint8_t>(header[2]);
}

// A record size for `left` bytes of plaintext: mostly whole records, sometimes small ones.
size_t RecordSize(Rng& rng, size_t left) {
  const size_t most = std::min(left, kMaxRecordPayload);
  return rng.Chance(700) ? most : 1 + rng.Below(most);
}

// The server's session: records in (Feed), plaintext out (ReadPlain), plaintext in
// (WritePlain), records out (PeekOutput, ConsumeOutput). Input is parsed in ReadPlain, as OpenSSL
// does (SSL_read advances the handshake), so a paused receive parses nothing.
class SimTlsSession final : public tls::TlsSession {
 public:
  SimTlsSession(SimWorld* world, Rng* rng, SimTlsCounters* counters, size_t socket)
      : w_(world), rng_(rng), k_(counters), sock_(socket) {
    ++k_->sessions;
    ++k_->live_sessions;
  }
  ~SimTlsSession() override { --k_->live_sessions; }

  void Feed(const char* data, size_t len) override {
    RINGD_ASSERT(len > 0);
    in_.append(data, len);
    k_->one_byte_feeds += len == 1;
    // Count the record ends this delivery holds (several: records coalesced).
    int ends = 0;
    for (size_t left = len; left > 0;) {
      if (scan_header_ < kRecordHeader) {
        const size_t take = std::min(left, kRecordHeader - scan_header_);
        std::memcpy(scan_buf_ + scan_header_, data + (len - left), take);
        scan_header_ += take;
        left -= take;
        if (scan_header_ < kRecordHeader) break;
        scan_payload_ = PayloadLength(std::string_view(scan_buf_, kRecordHeader));
      }
      const size_t take = std::min(left, scan_payload_);
      scan_payload_ -= take;
      left -= take;
      if (scan_payload_ == 0) {
        ++ends;
        scan_header_ = 0;
      }
    }
    k_->coalesced_feeds += ends >= 2;
  }

  size_t ReadPlain(char* out, size_t cap) override {
    while (ended_ == tls::TlsEnd::kNone) {
      if (!plain_.empty()) {
        size_t n = std::min(cap, plain_.size());
        if (rng_->Chance(300)) n = 1 + rng_->Below(n);
        std::memcpy(out, plain_.data(), n);
        plain_.erase(0, n);
        Socket().received += n;  // what the server has read, in plaintext
        w_->Trace("tls fd %d: %zu plaintext bytes read", Socket().fd, n);
        return n;
      }
      if (in_.size() < kRecordHeader) return 0;
      const uint8_t type = static_cast<uint8_t>(in_[0]);
      const size_t len = PayloadLength(in_);
      // Judged whole: a bad record is refused once all of it is in, so that the client's bytes
      // are all read and the close is no reset that would take the alert with it.
      if (in_.size() < kRecordHeader + len) return 0;
      const std::string payload = in_.substr(kRecordHeader, len);
      in_.erase(0, kRecordHeader + len);
      if (type == kClientHello && !handshake_done_) {
        handshake_done_ = true;
        Socket().tls_handshake_done = true;
        ++k_->handshakes;
        Queue(MakeRecord(kServerHello, "sim"));
      } else if (type == kAppData && handshake_done_ && len <= kMaxRecordPayload) {
        plain_ += payload;
      } else if (type == kCloseNotify && handshake_done_ && len == 0) {
        ended_ = tls::TlsEnd::kCloseNotify;
      } else {
        if (type == kClientHello) ++k_->renegotiations;  // refused, as OpenSSL is told to
        Refuse();
      }
    }
    return 0;
  }

  bool WritePlain(const char* data, size_t len) override {
    if (!handshake_done_ || ended_ == tls::TlsEnd::kBadInput || closed_) return false;
    for (size_t at = 0; at < len;) {
      const size_t n = RecordSize(*rng_, len - at);
      Queue(MakeRecord(kAppData, std::string_view(data + at, n)));
      at += n;
    }
    return true;
  }

  size_t PendingOutput() const override { return lent_.size() + out_.size(); }

  // What is lent stays put until consumed; records queued meanwhile wait in out_.
  size_t PeekOutput(const char** data) override {
    if (lent_.empty() && !out_.empty()) {
      size_t n = out_.size();
      if (rng_->Chance(200)) n = 1 + rng_->Below(n);  // records split across sends
      lent_.assign(out_, 0, n);
      out_.erase(0, n);
    }
    *data = lent_.data();
    return lent_.size();
  }
  void ConsumeOutput(size_t n) override {
    RINGD_ASSERT(n <= lent_.size());
    lent_.erase(0, n);
  }

  void Close() override {
    // The shard shut its side down or closed: what it had read by now is what it answers
    // (SimLoop marks this at its own shutdown and close, which TlsLoop makes later).
    SimSocket& s = Socket();
    if (s.received_before_abort == UINT64_MAX) s.received_before_abort = s.received;
    w_->Trace("tls fd %d: closed (%zu bytes of input held)", s.fd, in_.size() + plain_.size());
    if (closed_ || !handshake_done_ || ended_ == tls::TlsEnd::kBadInput) return;
    closed_ = true;
    Queue(MakeRecord(kCloseNotify, ""));
    s.tls_close_notify_end = s.tls_queued;
    ++k_->close_notify_queued;
  }

  bool HasBufferedInput() const override { return !in_.empty() || !plain_.empty(); }
  bool HandshakeDone() const override { return handshake_done_; }
  tls::TlsEnd Ended() const override { return ended_; }
  std::string_view Version() const override { return handshake_done_ ? "sim" : ""; }
  std::string_view Cipher() const override { return handshake_done_ ? "sim" : ""; }
  std::string_view ServerName() const override { return ""; }
  bool Resumed() const override { return false; }

 private:
  SimSocket& Socket() { return w_->sockets[sock_]; }

  void Queue(const std::string& record) {
    RINGD_ASSERT_MSG(ended_ != tls::TlsEnd::kBadInput, "a record queued after the alert");
    out_ += record;
    Socket().tls_queued += record.size();
  }

  // Bad input: an alert, and nothing after it (nor after close_notify: the alert only goes
  // out if that has not).
  void Refuse() {
    SimSocket& s = Socket();
    if (!closed_) {
      Queue(MakeRecord(kAlert, "bad"));
      s.tls_alert_queued = true;
    }
    ended_ = tls::TlsEnd::kBadInput;
    s.tls_bad_input = true;
    s.tls_bad_input_end = s.tls_queued;
    ++k_->bad_input;
    w_->Trace("tls fd %d: bad input, alert queued", s.fd);
  }

  SimWorld* w_;
  Rng* rng_;
  SimTlsCounters* k_;
  size_t sock_;
  std::string in_;     // ciphertext not parsed yet
  std::string plain_;  // decrypted, not handed out yet
  std::string lent_;   // records lent to the send in flight (PeekOutput)
  std::string out_;    // records queued to send after them
  bool handshake_done_ = false;
  bool closed_ = false;
  tls::TlsEnd ended_ = tls::TlsEnd::kNone;
  char scan_buf_[kRecordHeader] = {};
  size_t scan_header_ = 0;
  size_t scan_payload_ = 0;
};

}  // namespace

std::unique_ptr<tls::TlsSession> SimTlsFactory::Make() {
  RINGD_ASSERT_MSG(world_->accepting != SIZE_MAX, "a TLS session made outside an accept");
  SimSocket& s = world_->sockets[world_->accepting];
  RINGD_ASSERT_MSG(s.tls, "socket %zu (fd %d) is not a TLS client's, but came to a TLS listener",
                   world_->accepting, s.fd);
  return std::make_unique<SimTlsSession>(world_, rng_, counters_, world_->accepting);
}

// The client ----------------------------------------------------------------------------------

void SimTlsClient::Put(uint8_t type, std::string_view payload, uint64_t plain_end, SimSocket* s) {
  if (s->server_closed) return;  // as a write to a closed socket: gone
  const std::string r = MakeRecord(type, payload);
  s->client_records.emplace_back(wire_out_, plain_end);
  s->to_server += r;
  wire_out_ += r.size();
}

void SimTlsClient::Precede(SimSocket* s, size_t n) {
  for (auto& record : s->client_records) record.first += n;
  wire_out_ += n;
}

void SimTlsClient::Hello(SimSocket* s, size_t bytes) {
  hello_sent_ = true;
  const std::string r = MakeRecord(kClientHello, "hello");
  bytes = std::min(bytes, r.size());
  if (bytes == 0) return;
  s->client_records.emplace_back(wire_out_, 0);
  s->to_server.append(r, 0, bytes);
  wire_out_ += bytes;
}

void SimTlsClient::Write(Rng& rng, std::string_view plain, SimSocket* s) {
  if (!server_hello_) {
    held_.append(plain);
    return;
  }
  for (size_t at = 0; at < plain.size();) {
    const size_t n = RecordSize(rng, plain.size() - at);
    plain_out_ += n;
    Put(kAppData, plain.substr(at, n), plain_out_, s);
    at += n;
  }
}

void SimTlsClient::Garbage(Rng& rng, bool renegotiate, SimSocket* s) {
  broke = true;
  if (renegotiate) return Put(kClientHello, "again", plain_out_, s);
  static const uint8_t kTypes[] = {0, kServerHello, kAlert, 0x17, 0xff};
  Put(kTypes[rng.Below(5)], std::string(rng.Below(40), 'g'), plain_out_, s);
}

void SimTlsClient::CloseNotify(SimSocket* s) { Put(kCloseNotify, "", plain_out_, s); }

bool SimTlsClient::Take(Rng& rng, std::string_view wire, SimSocket* s, std::string* plain,
                        std::string* why) {
  partial_.append(wire);
  while (partial_.size() >= kRecordHeader) {
    const size_t len = PayloadLength(partial_);
    if (partial_.size() < kRecordHeader + len) return true;
    const uint8_t type = static_cast<uint8_t>(partial_[0]);
    if (alert_ || close_notify_) {
      *why = std::string("a record after the server's ") + (alert_ ? "alert" : "close_notify");
      return false;
    }
    const std::string_view payload = std::string_view(partial_).substr(kRecordHeader, len);
    switch (type) {
      case kServerHello:
        if (server_hello_ || !hello_sent_) {
          *why = "a server hello out of turn";
          return false;
        }
        server_hello_ = true;
        if (!held_.empty()) {
          const std::string held = std::move(held_);
          held_.clear();
          Write(rng, held, s);
        }
        break;
      case kAppData:
        if (!server_hello_) {
          *why = "application data before the server's hello";
          return false;
        }
        plain->append(payload);
        break;
      case kAlert:
        if (!broke) {
          *why = "an alert, though the client sent nothing wrong";
          return false;
        }
        alert_ = true;
        break;
      case kCloseNotify:
        close_notify_ = true;
        break;
      default:
        *why = "a record of unknown type " + std::to_string(type);
        return false;
    }
    partial_.erase(0, kRecordHeader + len);
  }
  return true;
}

// The callback check ----------------------------------------------------------------------------

namespace {

struct CheckState {
  CallbackCheckLoop* loop = nullptr;
  std::unordered_map<const io::Completion*, io::Callback> callbacks;  // lookups only
  const int* in_call = nullptr;
  const bool* in_poll = nullptr;
};
thread_local CheckState* g_check = nullptr;

}  // namespace

struct CallbackCheckLoop::Call {
  explicit Call(CallbackCheckLoop* l) : loop(l) { ++loop->in_call_; }
  ~Call() { --loop->in_call_; }
  CallbackCheckLoop* loop;
};

// (A failed seed leaves its shard, and this loop, undestroyed: the next one takes over.)
CallbackCheckLoop::CallbackCheckLoop(std::unique_ptr<io::Loop> inner) : inner_(std::move(inner)) {
  g_check = new CheckState{this, {}, &in_call_, &in_poll_};
}

CallbackCheckLoop::~CallbackCheckLoop() {
  inner_.reset();
  if (g_check != nullptr && g_check->loop == this) {
    delete g_check;
    g_check = nullptr;
  }
}

void CallbackCheckLoop::Wrap(io::Completion* c) {
  if (c->callback == &Trampoline) return;
  g_check->callbacks[c] = c->callback;
  c->callback = &Trampoline;
}

void CallbackCheckLoop::Trampoline(io::Completion* c) {
  RINGD_ASSERT_MSG(*g_check->in_poll, "a callback (op %d, fd %d) outside Poll",
                   static_cast<int>(c->op), c->fd);
  RINGD_ASSERT_MSG(*g_check->in_call == 0,
                   "a callback (op %d, fd %d) from inside a call of the loop",
                   static_cast<int>(c->op), c->fd);
  g_check->callbacks.at(c)(c);
}

void CallbackCheckLoop::Accept(int listen_fd, io::Completion* c) {
  Call call(this);
  Wrap(c);
  inner_->Accept(listen_fd, c);
}
void CallbackCheckLoop::Recv(int fd, io::Completion* c) {
  Call call(this);
  Wrap(c);
  inner_->Recv(fd, c);
}
void CallbackCheckLoop::Send(int fd, iovec* iov, int iovcnt, io::Completion* c, bool more) {
  Call call(this);
  Wrap(c);
  inner_->Send(fd, iov, iovcnt, c, more);
}
void CallbackCheckLoop::SendFile(int sock_fd, int file_fd, uint64_t offset, uint64_t length,
                                 io::Completion* c, bool more) {
  Call call(this);
  Wrap(c);
  inner_->SendFile(sock_fd, file_fd, offset, length, c, more);
}
void CallbackCheckLoop::Open(int dir_fd, const char* path, io::FileStat* stat, io::Completion* c) {
  Call call(this);
  Wrap(c);
  inner_->Open(dir_fd, path, stat, c);
}
void CallbackCheckLoop::Read(int fd, char* buf, uint64_t length, uint64_t offset,
                             io::Completion* c) {
  Call call(this);
  Wrap(c);
  inner_->Read(fd, buf, length, offset, c);
}
void CallbackCheckLoop::Cancel(io::Completion* c) {
  Call call(this);
  inner_->Cancel(c);
}
void CallbackCheckLoop::PauseRecv(io::Completion* c) {
  Call call(this);
  inner_->PauseRecv(c);
}
void CallbackCheckLoop::ResumeRecv(io::Completion* c) {
  Call call(this);
  inner_->ResumeRecv(c);
}
void CallbackCheckLoop::Shutdown(int fd, int how) {
  Call call(this);
  inner_->Shutdown(fd, how);
}
void CallbackCheckLoop::Close(int fd) {
  Call call(this);
  inner_->Close(fd);
}

void CallbackCheckLoop::Poll(int timeout_ms) {
  RINGD_ASSERT_MSG(!in_poll_ && in_call_ == 0, "Poll from inside a callback or a call");
  in_poll_ = true;
  inner_->Poll(timeout_ms);
  in_poll_ = false;
}

}  // namespace ringd::sim
