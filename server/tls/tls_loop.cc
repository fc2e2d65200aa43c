#include "server/tls/tls_loop.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <string_view>

#include "io/assert.h"
#include "server/http/proxy_protocol.h"

namespace ringd::tls {

// A connection's sending state: made when it has records to send or the shard sends on it,
// kept while it serves (a keep-alive connection's next response reuses it) and freed once it
// has been idle kTrimIdleMs (as the shard keeps a request's state in an Exchange apart from its
// Connection), so that an idle connection is a Conn alone.
struct TlsLoop::Out {
  // The inner send of records, from the session's memory (PeekOutput).
  io::Completion tx;
  bool tx_active = false;
  // The session refused the plaintext of the shard's Send in flight (bad input came, or it is
  // closed): that send fails, but the socket still carries the records queued before (the
  // alert), so this is no tx_error.
  bool send_refused = false;
  bool send_is_file = false;
  bool file_active = false;
  int file_fd = -1;
  size_t tx_lent = 0;  // bytes of the session's records the send in flight carries
  iovec tx_iov{};

  // The shard's Send or SendFile in flight: done when every record it made has gone out.
  io::Completion* send = nullptr;
  size_t sending_at = 0;    // its place in the loop's sending_
  uint64_t wire_sent = 0;   // record bytes the socket took since it started
  uint64_t send_total = 0;  // plaintext bytes handed over (Send), or sent so far (SendFile)
  // Its progress in plaintext the client can decrypt: its plaintext goes to the session at most
  // a record's worth at a time (kRecordPlain), and each piece leaves a mark: where its records
  // end, counted as wire_sent counts (what went out before, plus what is queued), and the
  // plaintext handed over up to it. Once the socket has taken a mark's records, the plaintext
  // up to it has left (plain_left). A Send longer than kMarks pieces merges its last marks: its
  // progress then moves in larger steps near its end.
  struct Mark {
    uint64_t wire_end = 0;
    uint64_t plain_end = 0;
  };
  static constexpr size_t kMarks = 16;
  std::array<Mark, kMarks> marks{};
  size_t marks_head = 0, marks_count = 0;
  uint64_t plain_written = 0;  // handed to the session, this send
  uint64_t plain_left = 0;     // of which whose records the socket has taken
  io::Completion file_op;
  uint64_t file_offset = 0;
  uint64_t file_left = 0;
  uint32_t file_chunk = 0;  // plaintext bytes of the chunk whose records are going out
  std::unique_ptr<char[]> file_buf;
};

// A connection of a ",proxy" TLS listener: its PROXY protocol header until it has come (a
// prefix of it kept while it comes in pieces), then the client it named, for the log.
struct TlsLoop::Proxied {
  bool pending = true;
  bool refused = false;  // the header (or the client it named) was refused
  uint32_t partial_len = 0;
  std::unique_ptr<char[]> partial;  // kMaxProxyHeader bytes, while a prefix waits
  uint8_t client_len = 0;           // 0: the header named nobody (LOCAL): the socket's peer
  char client[http::ClientAddress::kTextMax];
};

// A TLS connection: its session and the inner operations that carry its records. Every idle
// TLS connection holds one: fields are ordered to leave no padding (the sending state is in Out).
// Its Linked base puts it on hellos_ while hello_waiting, on closing_ from its Close until it is
// released or overdue, on warm_ while it keeps its sending state with nothing to send.
struct TlsLoop::Conn : TlsLoop::Linked {
  TlsLoop* loop = nullptr;
  std::unique_ptr<TlsSession> session;
  int fd = -1;
  int shutdown_how = -1;  // a SHUT_WR waiting for the records before it (close_notify last)

  // The inner multishot receive of ciphertext, and how it ended.
  io::Completion rx;
  int64_t rx_end = 0;  // its last result: 0, -errno, -ECANCELED, io::kRecvCancelledWithInput
  bool rx_active = false;
  bool rx_cancel_sent = false;
  bool rx_ended = false;

  // The shard's receive while it runs.
  bool recv_paused = false;
  bool recv_cancelled = false;
  io::Completion* recv = nullptr;

  int64_t tx_error = 0;  // the socket refused a send: every later one fails the same way
  // While records or a send of the shard's are under way (null while idle).
  std::unique_ptr<Out> out;
  bool tx_active() const { return out != nullptr && out->tx_active; }
  bool file_active() const { return out != nullptr && out->file_active; }
  io::Completion* send() const { return out != nullptr ? out->send : nullptr; }

  bool counted_handshake = false;
  // The session has answered the ClientHello (or refused it): the costly step of a handshake.
  bool hello_answered = false;
  // Waiting for a turn's budget of ClientHellos (TlsLoop::kHellosPerTurn), in arrival order.
  bool hello_waiting = false;
  bool plain_counted = false;  // TlsEnd::kPlainHttp: counted in stats_.plain_http
  bool plain_told = false;     // and the shard's receive ended with -EPROTO for it
  bool close_requested = false;
  bool queued = false;
  bool warm = false;  // on warm_
  int busy = 0;       // callbacks of this loop running for it: no release until they return
  // On closing_: its close_notify's deadline (kOverdue: past it, off closing_, cut when it
  // sends). On warm_: when it gives its sending state and buffers back.
  int64_t deadline_ms = 0;
  Conn* next_ready = nullptr;
};

// A closing connection's deadline once it has passed (Poll took it off closing_).
constexpr int64_t kOverdue = INT64_MIN;

TlsLoop::Conn* TlsLoop::ConnOf(Linked* linked) { return static_cast<Conn*>(linked); }

struct TlsLoop::AcceptTap {
  TlsLoop* loop = nullptr;
  int listen_fd = -1;
  bool proxy = false;  // its connections begin with a PROXY protocol header
  io::Completion inner;
  io::Completion* outer = nullptr;
};

TlsLoop::TlsLoop(std::unique_ptr<io::Loop> inner, TlsSessionFactory* sessions,
                 std::vector<int> tls_listeners, uint32_t recv_max_bytes, uint32_t max_connections,
                 uint32_t max_handshakes)
    : inner_(std::move(inner)),
      sessions_(sessions),
      tls_listeners_(std::move(tls_listeners)),
      recv_max_bytes_(recv_max_bytes),
      max_handshakes_(max_handshakes),
      plain_(new char[recv_max_bytes]) {
  // An idle TLS connection costs its Conn, its session and the library's state.
  static_assert(sizeof(Conn) <= 256, "Conn grew: what only a send needs belongs in Out");
  RINGD_ASSERT(recv_max_bytes_ > 0);
  // Room for the descriptors of max_connections and some more (listeners, files): the table's
  // pages are touched only as high as the descriptors in use.
  conns_.reserve(max_connections + 1024u);
  for (const int fd : tls_listeners_) {
    auto tap = std::make_unique<AcceptTap>();
    tap->loop = this;
    tap->listen_fd = fd;
    tap->inner.callback = &TlsLoop::OnAccept;
    tap->inner.owner = tap.get();
    taps_.push_back(std::move(tap));
  }
}

void TlsLoop::ReadProxyHeaders(const std::vector<int>& listeners,
                               const http::ClientRules* client_rules) {
  client_rules_ = client_rules != nullptr && !client_rules->empty() ? client_rules : nullptr;
  for (auto& tap : taps_) {
    tap->proxy = std::find(listeners.begin(), listeners.end(), tap->listen_fd) != listeners.end();
  }
}

TlsLoop::~TlsLoop() {
  // The shard has quiesced the loop and closed its connections; what is left was sending
  // close_notify. Connections scheduled for a Poll that never came are among them.
  for (Conn* conn = ready_; conn != nullptr; conn = conn->next_ready)
    RINGD_ASSERT_MSG(Find(conn->fd) == conn, "a freed connection is scheduled");
  warm_.Abandon();
  for (Conn* conn : conns_) {
    if (conn == nullptr) continue;
    inner_->Close(conn->fd);
    delete conn;
  }
}

// The table's index for a connection handle: a process fd, or a registered file table slot
// marked with io::kDirectHandle (one loop's connections are all one or all the other); both are
// small and dense.
static size_t SlotOf(int fd) { return static_cast<size_t>(fd & (io::kDirectHandle - 1)); }

// Kept beside the connection (by its slot) rather than in it: a connection of a listener
// without ",proxy" carries nothing for it.
TlsLoop::Proxied* TlsLoop::ProxiedOf(const Conn* conn) const {
  const size_t slot = SlotOf(conn->fd);
  return slot < proxied_.size() ? proxied_[slot].get() : nullptr;
}

bool TlsLoop::ProxyRefused(const Conn* conn) const {
  const Proxied* p = ProxiedOf(conn);
  return p != nullptr && p->refused;
}

TlsLoop::Conn* TlsLoop::Find(int fd) const {
  if (fd < 0 || SlotOf(fd) >= conns_.size()) return nullptr;
  Conn* conn = conns_[SlotOf(fd)];
  return conn != nullptr && conn->fd == fd ? conn : nullptr;
}

io::TransportInfo TlsLoop::Transport(int fd) const {
  const Conn* conn = Find(fd);
  if (conn == nullptr) return inner_->Transport(fd);
  const TlsSession& s = *conn->session;
  io::TransportInfo info{s.Version(), s.Cipher(),           s.ServerName(),
                         s.Resumed(), s.PlainHttpRequest(), {}};
  if (const Proxied* p = ProxiedOf(conn); p != nullptr) info.client = {p->client, p->client_len};
  return info;
}

void TlsLoop::AddConn(Conn* conn) {
  RINGD_ASSERT(conn->fd >= 0);
  const size_t slot = SlotOf(conn->fd);
  if (slot >= conns_.size()) conns_.resize(slot + 1, nullptr);
  RINGD_ASSERT(conns_[slot] == nullptr);
  conns_[slot] = conn;
  ++live_conns_;
}

void TlsLoop::RemoveConn(Conn* conn) {
  RINGD_ASSERT(Find(conn->fd) == conn);
  conns_[SlotOf(conn->fd)] = nullptr;
  if (SlotOf(conn->fd) < proxied_.size()) proxied_[SlotOf(conn->fd)].reset();
  --live_conns_;
}

TlsLoop::Conn* TlsLoop::Owner(io::Completion* c) const {
  if (c->op != io::Op::kRecv) return nullptr;
  Conn* conn = Find(c->fd);
  return conn != nullptr && conn->recv == c ? conn : nullptr;
}

void TlsLoop::Enter(Conn* conn) { ++conn->busy; }

void TlsLoop::Leave(Conn* conn) {
  RINGD_ASSERT(conn->busy > 0);
  if (--conn->busy == 0 && conn->close_requested) Release(conn);
}

void TlsLoop::Schedule(Conn* conn) {
  if (conn->queued) return;
  conn->queued = true;
  conn->next_ready = ready_;
  ready_ = conn;
}

// Off ready_ before it is freed outside Poll (a quiesced Close): a walk of the list, at shutdown
// only.
void TlsLoop::Unschedule(Conn* conn) {
  if (!conn->queued) return;
  for (Conn** link = &ready_; *link != nullptr; link = &(*link)->next_ready) {
    if (*link == conn) {
      *link = conn->next_ready;
      break;
    }
  }
  conn->queued = false;
  conn->next_ready = nullptr;
}

// Accept ------------------------------------------------------------------------------------

void TlsLoop::Accept(int listen_fd, io::Completion* c) {
  for (auto& tap : taps_) {
    if (tap->listen_fd != listen_fd) continue;
    RINGD_ASSERT(!c->in_flight);
    tap->outer = c;
    c->op = io::Op::kAccept;
    c->fd = listen_fd;  // the caller re-arms an ended accept with c->fd
    c->in_flight = true;
    inner_->Accept(listen_fd, &tap->inner);
    return;
  }
  inner_->Accept(listen_fd, c);
}

void TlsLoop::OnAccept(io::Completion* inner) {
  auto* tap = static_cast<AcceptTap*>(inner->owner);
  TlsLoop* self = tap->loop;
  io::Completion* outer = tap->outer;
  if (inner->result >= 0 && self->handshaking_ >= self->max_handshakes_) {
    self->inner_->Close(static_cast<int>(inner->result));
    ++self->stats_.handshakes_refused;
    if (inner->more) return;        // the shard never hears of it
    inner->result = -ECONNABORTED;  // the accept ended here: the shard arms it again
  }
  if (inner->result >= 0) {
    ++self->handshaking_;
    auto* conn = new Conn();
    conn->loop = self;
    conn->fd = static_cast<int>(inner->result);
    conn->session = self->sessions_->Make();
    conn->rx.callback = &TlsLoop::OnRx;
    conn->rx.owner = conn;
    self->AddConn(conn);
    if (tap->proxy) {
      const size_t slot = SlotOf(conn->fd);
      if (slot >= self->proxied_.size()) self->proxied_.resize(slot + 1);
      self->proxied_[slot] = std::make_unique<Proxied>();
    }
  }
  outer->result = inner->result;
  outer->more = inner->more;
  if (!inner->more) {
    outer->in_flight = false;
    tap->outer = nullptr;
  }
  outer->callback(outer);
}

// Receive -----------------------------------------------------------------------------------

void TlsLoop::Recv(int fd, io::Completion* c) {
  Conn* conn = Find(fd);
  if (conn == nullptr) return inner_->Recv(fd, c);
  RINGD_ASSERT(!c->in_flight && conn->recv == nullptr && !conn->close_requested);
  c->op = io::Op::kRecv;
  c->fd = fd;
  c->in_flight = true;
  c->more = false;
  conn->recv = c;
  conn->recv_paused = false;
  conn->recv_cancelled = false;
  if (!conn->rx_active && !conn->rx_ended) {
    conn->rx_active = true;
    conn->rx_cancel_sent = false;
    inner_->Recv(fd, &conn->rx);
    if (conn->hello_waiting) inner_->PauseRecv(&conn->rx);  // as WaitForHelloTurn does
  }
  Schedule(conn);  // plaintext already decrypted, or an end already known, goes from Poll
}

void TlsLoop::OnRx(io::Completion* inner) {
  auto* conn = static_cast<Conn*>(inner->owner);
  TlsLoop* self = conn->loop;
  self->Enter(conn);
  bool fed = false;
  if (inner->result > 0 && !self->ProxyRefused(conn)) {
    const char* data = inner->data;
    size_t n = static_cast<size_t>(inner->result);
    // A ",proxy" listener's header comes first and never reaches the session.
    Proxied* p = self->ProxiedOf(conn);
    if (p == nullptr || !p->pending || self->TakeProxyHeader(conn, p, &data, &n)) {
      fed = n > 0;
      if (fed) conn->session->Feed(data, n);
    }
  }
  if (!inner->more) {
    conn->rx_active = false;
    conn->rx_ended = true;
    // Bytes in the last callback came before a cancel took effect.
    conn->rx_end = inner->result > 0 ? -ECANCELED : inner->result;
  }
  // A ClientHello beyond this turn's budget waits for a later turn (its bytes are kept by the
  // session, its receive paused); a receive that ended is pumped at once, so that the
  // connection's end is not held.
  // (Bytes that were all a PROXY header's bring no ClientHello: they take no turn.)
  if (fed && !conn->hello_answered && inner->more &&
      (conn->hello_waiting || !self->TakeHelloTurn())) {
    self->WaitForHelloTurn(conn);
  } else {
    self->Pump(conn);
  }
  self->Leave(conn);
}

// The PROXY protocol header of a ",proxy" listener's connection, read as it comes (a prefix is
// kept until the rest arrives, so a header split across receives, even byte by byte, reads as
// one that came whole), then stripped. True with *data and *n past it once it is whole; false
// while it is partial, or when it was refused (ProxyRefused: the shard's receive then ends
// with -ECONNREFUSED, FinishRecvIfEnded).
bool TlsLoop::TakeProxyHeader(Conn* conn, Proxied* proxied, const char** data, size_t* n) {
  Proxied& p = *proxied;
  const size_t had = p.partial_len;
  http::ProxyHeader h;
  if (had == 0) {
    h = http::ParseProxyHeader(std::string_view(*data, *n));
  } else {
    const size_t take = std::min(*n, http::kMaxProxyHeader - had);
    std::memcpy(p.partial.get() + had, *data, take);
    p.partial_len += static_cast<uint32_t>(take);
    h = http::ParseProxyHeader(std::string_view(p.partial.get(), p.partial_len));
  }
  switch (h.status) {
    case http::ProxyStatus::kPartial:
      RINGD_ASSERT(had + *n < http::kMaxProxyHeader);  // every byte so far is the header's
      if (had == 0) {
        p.partial = std::make_unique<char[]>(http::kMaxProxyHeader);
        std::memcpy(p.partial.get(), *data, *n);
        p.partial_len = static_cast<uint32_t>(*n);
      }
      return false;
    case http::ProxyStatus::kMissing:
      ++stats_.proxy_missing;
      p.refused = true;
      return false;
    case http::ProxyStatus::kMalformed:
      ++stats_.proxy_malformed;
      p.refused = true;
      return false;
    case http::ProxyStatus::kDone:
      break;
  }
  RINGD_ASSERT(h.length > had && h.length - had <= *n);
  *data += h.length - had;
  *n -= h.length - had;
  p.pending = false;
  p.partial.reset();
  p.partial_len = 0;
  if (client_rules_ != nullptr) {
    http::ClientAddress client;
    if (h.has_source) {
      client = h.source;
    } else if (conn->fd < io::kDirectHandle) {  // LOCAL: the socket's peer
      sockaddr_storage ss;
      socklen_t len = sizeof ss;
      if (::getpeername(conn->fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) client.Set(ss);
    }
    if (!client_rules_->Allows(client)) {
      ++stats_.clients_denied;
      p.refused = true;
      return false;
    }
  }
  if (h.has_source) p.client_len = static_cast<uint8_t>(h.source.Format(p.client, sizeof p.client));
  return true;
}

// ClientHellos: answering one costs a key exchange and a signature, hundreds of times what a
// request on an established connection costs. A turn of the loop answers at most
// kHellosPerTurn of them, oldest first, beside everything the established connections brought, so
// a flood of ClientHellos delays established connections by at most that many answers a turn
// (nginx accepts one connection per turn of its loop to the same end). Unused budget is not
// carried over: with no flood, a lone handshake is answered in the turn its ClientHello came.
bool TlsLoop::TakeHelloTurn() {
  if (hello_budget_ == 0) return false;
  --hello_budget_;
  return true;
}

// A waiting connection's receive is paused: what its client sends meanwhile stays in the socket
// (bounded by the kernel's buffer, as for any paused receive), not in the session, so that a
// flood of ClientHellos that keep sending costs no memory while they wait (at most the receive
// that brought the hello, and what the backend had taken before the pause).
void TlsLoop::WaitForHelloTurn(Conn* conn) {
  if (conn->hello_waiting) return;
  RINGD_ASSERT(!conn->close_requested);
  StopKeepingWarm(conn);  // one list at a time (Linked)
  conn->hello_waiting = true;
  hellos_.PushBack(conn);
  ++stats_.hellos_deferred;
  if (conn->rx_active && !conn->recv_paused) inner_->PauseRecv(&conn->rx);
}

void TlsLoop::StopWaitingForHelloTurn(Conn* conn) {
  if (!conn->hello_waiting) return;
  conn->hello_waiting = false;
  hellos_.Remove(conn);
  // Its receive goes on, unless the shard has paused it meanwhile.
  if (conn->rx_active && !conn->recv_paused) inner_->ResumeRecv(&conn->rx);
}

// The turn's first answers go to the ClientHellos that waited longest.
void TlsLoop::AnswerWaitingHellos() {
  while (!hellos_.empty() && TakeHelloTurn()) {
    Conn* conn = ConnOf(hellos_.front());
    StopWaitingForHelloTurn(conn);
    Enter(conn);
    Pump(conn);
    if (!conn->tx_active()) AfterOutput(conn);
    Leave(conn);
  }
}

void TlsLoop::Pump(Conn* conn) {
  Deliver(conn);
  TlsSession& s = *conn->session;
  if (s.HandshakeDone() || s.PendingOutput() > 0 || s.Ended() != TlsEnd::kNone)
    conn->hello_answered = true;
  if (s.HandshakeDone() && !conn->counted_handshake) {
    conn->counted_handshake = true;
    --handshaking_;
    ++stats_.handshakes;
    stats_.resumed += s.Resumed() ? 1 : 0;
  }
  if (s.Ended() == TlsEnd::kPlainHttp && !conn->plain_counted) {
    // The shard answers it (nginx's 400 that says so), logged and counted as any response:
    // its receive ends with -EPROTO and Transport() gives the request.
    conn->plain_counted = true;
    ++stats_.plain_http;
  }
  Flush(conn);
  // Bad input, or the peer's close_notify: the receive has nothing more to give.
  if (s.Ended() != TlsEnd::kNone && conn->rx_active && !conn->rx_cancel_sent) {
    if (s.Ended() == TlsEnd::kBadInput || s.Ended() == TlsEnd::kPlainHttp)
      ++(conn->counted_handshake ? stats_.bad_records : stats_.handshake_failures);
    conn->rx_cancel_sent = true;
    inner_->Cancel(&conn->rx);
  }
  FinishRecvIfEnded(conn);
}

// Hands decrypted bytes to the shard's receive while it runs and is not paused.
void TlsLoop::Deliver(Conn* conn) {
  while (conn->recv != nullptr && !conn->recv_paused && !conn->recv_cancelled) {
    const size_t n = conn->session->ReadPlain(plain_.get(), recv_max_bytes_);
    if (n == 0) return;
    io::Completion* c = conn->recv;
    c->data = plain_.get();
    c->result = static_cast<int64_t>(n);
    c->more = true;
    c->callback(c);
    c->data = nullptr;
  }
}

// The shard's receive ends once the inner one has: with what the cancel, the session or the
// socket said.
void TlsLoop::FinishRecvIfEnded(Conn* conn) {
  io::Completion* c = conn->recv;
  if (c == nullptr) return;
  const TlsEnd end = conn->session->Ended();
  const bool ending =
      conn->recv_cancelled || conn->rx_ended || end != TlsEnd::kNone || ProxyRefused(conn);
  if (!ending) return;
  if (conn->rx_active) {
    if (!conn->rx_cancel_sent) {
      conn->rx_cancel_sent = true;
      inner_->Cancel(&conn->rx);
    }
    return;  // its last callback comes back through OnRx
  }
  // A paused receive keeps what it has decrypted for after ResumeRecv (Deliver hands out every
  // whole record otherwise; what is left then is a partial one).
  if (!conn->recv_cancelled && conn->recv_paused && conn->session->HasBufferedInput()) return;
  int64_t result;
  if (conn->recv_cancelled) {
    result = conn->session->HasBufferedInput() || conn->rx_end == io::kRecvCancelledWithInput
                 ? io::kRecvCancelledWithInput
                 : -ECANCELED;
  } else if (ProxyRefused(conn)) {
    result = -ECONNREFUSED;
  } else if (end == TlsEnd::kPlainHttp && conn->plain_told) {
    result = 0;  // the shard knows (-EPROTO before): the answer is out, nothing more is read
  } else if (end == TlsEnd::kBadInput || end == TlsEnd::kPlainHttp) {
    result = -EPROTO;
    conn->plain_told = end == TlsEnd::kPlainHttp;
  } else if (end == TlsEnd::kCloseNotify) {
    result = 0;
  } else {
    result = conn->rx_end;  // end of stream, or the socket's error
  }
  // The inner receive is over: a later Recv starts a new one, unless the stream itself ended.
  if (conn->recv_cancelled && conn->rx_end != 0 && end == TlsEnd::kNone) conn->rx_ended = false;
  conn->recv = nullptr;
  c->in_flight = false;
  c->more = false;
  c->data = nullptr;
  c->result = result;
  c->callback(c);
}

void TlsLoop::PauseRecv(io::Completion* c) {
  Conn* conn = Owner(c);
  if (conn == nullptr) return inner_->PauseRecv(c);
  conn->recv_paused = true;
  if (conn->rx_active) inner_->PauseRecv(&conn->rx);  // the socket holds what comes meanwhile
}

void TlsLoop::ResumeRecv(io::Completion* c) {
  Conn* conn = Owner(c);
  if (conn == nullptr) return inner_->ResumeRecv(c);
  conn->recv_paused = false;
  // A ClientHello waiting for its turn keeps the inner receive paused until then.
  if (conn->rx_active && !conn->hello_waiting) inner_->ResumeRecv(&conn->rx);
  Schedule(conn);
}

void TlsLoop::Cancel(io::Completion* c) {
  if (Conn* conn = Owner(c); conn != nullptr) {
    conn->recv_cancelled = true;
    if (conn->rx_active && !conn->rx_cancel_sent) {
      conn->rx_cancel_sent = true;
      inner_->Cancel(&conn->rx);
    } else {
      Schedule(conn);  // the last callback comes from Poll, never from inside Cancel
    }
    return;
  }
  for (auto& tap : taps_) {
    if (tap->outer == c) return inner_->Cancel(&tap->inner);
  }
  inner_->Cancel(c);
}

// Send --------------------------------------------------------------------------------------

TlsLoop::Out* TlsLoop::OutOf(Conn* conn) {
  if (conn->out == nullptr) {
    conn->out = std::make_unique<Out>();
    conn->out->tx.callback = &TlsLoop::OnTx;
    conn->out->tx.owner = conn;
    conn->out->file_op.callback = &TlsLoop::OnFileRead;
    conn->out->file_op.owner = conn;
  }
  return conn->out.get();
}

// The shard's Send or SendFile `c` starts on `conn`: it is the connection's one send, and Poll
// copies its progress to it while its records go out.
void TlsLoop::BeginSend(Conn* conn, io::Completion* c, io::Op op) {
  RINGD_ASSERT(!c->in_flight && conn->send() == nullptr);
  c->op = op;
  c->in_flight = true;
  c->done = 0;
  Out* out = OutOf(conn);
  out->send = c;
  out->wire_sent = 0;
  out->sending_at = sending_.size();
  sending_.push_back(conn);
  out->send_is_file = op == io::Op::kSendFile;
  out->send_total = 0;
  out->marks_head = out->marks_count = 0;
  out->plain_written = out->plain_left = 0;
}

// Hands `len` bytes of the send's plaintext to the session, a record's worth at a time, marking
// where each piece's records end. False once the session cannot send.
bool TlsLoop::WritePlainMarked(Conn* conn, const char* data, size_t len) {
  Out* out = conn->out.get();
  while (len > 0) {
    const size_t n = std::min<size_t>(len, kRecordPlain);
    if (!conn->session->WritePlain(data, n)) return false;
    data += n;
    len -= n;
    out->plain_written += n;
    const Out::Mark mark{out->wire_sent + conn->session->PendingOutput(), out->plain_written};
    if (out->marks_count == Out::kMarks) {  // full: the newest mark moves on
      out->marks[(out->marks_head + Out::kMarks - 1) % Out::kMarks] = mark;
    } else {
      out->marks[(out->marks_head + out->marks_count++) % Out::kMarks] = mark;
    }
  }
  return true;
}

// The send's progress from what the socket has taken so far (the send of records in flight
// included): the plaintext of every piece whose records are all out, into the shard's `done`.
void TlsLoop::UpdateProgress(Conn* conn) {
  Out* out = conn->out.get();
  const uint64_t taken = out->wire_sent + (out->tx_active ? out->tx.done : 0);
  while (out->marks_count > 0 && out->marks[out->marks_head].wire_end <= taken) {
    out->plain_left = out->marks[out->marks_head].plain_end;
    out->marks_head = (out->marks_head + 1) % Out::kMarks;
    --out->marks_count;
  }
  out->send->done = std::max(out->send->done, out->plain_left);
}

void TlsLoop::Send(int fd, iovec* iov, int iovcnt, io::Completion* c, bool more) {
  Conn* conn = Find(fd);
  // A connection that spoke plaintext HTTP is answered in plaintext (TransportInfo).
  if (conn == nullptr || conn->session->Ended() == TlsEnd::kPlainHttp)
    return inner_->Send(fd, iov, iovcnt, c, more);
  BeginSend(conn, c, io::Op::kSend);
  bool ok = conn->tx_error == 0;
  for (int i = 0; ok && i < iovcnt; ++i) {
    ok = WritePlainMarked(conn, static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
    conn->out->send_total += iov[i].iov_len;
  }
  conn->out->send_refused = !ok && conn->tx_error == 0;
  Flush(conn);
  if (!conn->tx_active()) Schedule(conn);  // an error: the completion still comes from Poll
}

void TlsLoop::SendFile(int sock_fd, int file_fd, uint64_t offset, uint64_t length,
                       io::Completion* c, bool more) {
  Conn* conn = Find(sock_fd);
  if (conn == nullptr) return inner_->SendFile(sock_fd, file_fd, offset, length, c, more);
  BeginSend(conn, c, io::Op::kSendFile);
  Out* out = conn->out.get();
  out->file_fd = file_fd;
  out->file_offset = offset;
  out->file_left = length;
  out->file_chunk = 0;
  // A send the socket already refused, or one of nothing, completes from Poll (AfterOutput),
  // never inside this call.
  if (conn->tx_error != 0 || length == 0) return Schedule(conn);
  if (out->file_buf == nullptr) out->file_buf.reset(new char[kFileChunkAt + kFileChunk]);
  ReadFileChunk(conn);
}

void TlsLoop::ReadFileChunk(Conn* conn) {
  Out* out = conn->out.get();
  if (conn->tx_error != 0) return FinishSend(conn, conn->tx_error);
  if (out->file_left == 0) return FinishSend(conn, static_cast<int64_t>(out->send_total));
  const uint64_t n = std::min<uint64_t>(out->file_left, kFileChunk);
  out->file_active = true;
  inner_->Read(out->file_fd, out->file_buf.get() + kFileChunkAt, n, out->file_offset,
               &out->file_op);
}

void TlsLoop::OnFileRead(io::Completion* inner) {
  auto* conn = static_cast<Conn*>(inner->owner);
  TlsLoop* self = conn->loop;
  self->Enter(conn);
  Out* out = conn->out.get();
  out->file_active = false;
  if (inner->result < 0) {
    self->FinishSend(conn, inner->result);
  } else if (inner->result == 0) {
    // The file ended early (truncated under us): fewer bytes than asked, as SendFile says.
    self->FinishSend(conn, static_cast<int64_t>(out->send_total));
  } else if (!self->WritePlainMarked(conn, out->file_buf.get() + kFileChunkAt,
                                     static_cast<size_t>(inner->result))) {
    self->FinishSend(conn, -EPIPE);
  } else {
    out->file_chunk = static_cast<uint32_t>(inner->result);
    out->file_offset += static_cast<uint64_t>(inner->result);
    out->file_left -= static_cast<uint64_t>(inner->result);
    self->Flush(conn);
    if (!conn->tx_active()) self->AfterOutput(conn);  // a socket error already known
  }
  self->Leave(conn);
}

void TlsLoop::FinishSend(Conn* conn, int64_t result) {
  Out* out = conn->out.get();
  io::Completion* c = out->send;
  RINGD_ASSERT(c != nullptr);
  UpdateProgress(conn);  // a send that fails reports the plaintext that left (`done`)
  out->send = nullptr;
  sending_.back()->out->sending_at = out->sending_at;
  std::swap(sending_[out->sending_at], sending_.back());
  sending_.pop_back();
  c->in_flight = false;
  c->more = false;
  c->result = result;
  if (result > 0) c->done = static_cast<uint64_t>(result);
  c->callback(c);
}

// Records out -------------------------------------------------------------------------------

// Sends the records the session has queued, from where the session holds them (they stay put
// until OnTx gives them back).
void TlsLoop::Flush(Conn* conn) {
  if (conn->tx_active() || conn->tx_error != 0) return;
  const char* records = nullptr;
  const size_t n = conn->session->PeekOutput(&records);
  if (n == 0) return;
  Out* out = OutOf(conn);
  out->tx_iov = iovec{const_cast<char*>(records), n};  // the send only reads
  out->tx_lent = n;
  out->tx_active = true;
  inner_->Send(conn->fd, &out->tx_iov, 1, &out->tx);
  // Past its close deadline (Poll): the client has had its time to take the last records.
  if (conn->deadline_ms == kOverdue) inner_->Shutdown(conn->fd, SHUT_RDWR);
}

void TlsLoop::OnTx(io::Completion* inner) {
  auto* conn = static_cast<Conn*>(inner->owner);
  TlsLoop* self = conn->loop;
  self->Enter(conn);
  Out* out = conn->out.get();
  out->tx_active = false;
  if (inner->result < 0) {
    conn->tx_error = inner->result;
    out->wire_sent += inner->done;  // what the socket took before it failed
  }
  if (inner->result > 0) {
    out->wire_sent += static_cast<uint64_t>(inner->result);
    if (out->tx_lent > 0) {
      RINGD_ASSERT(static_cast<size_t>(inner->result) == out->tx_lent);  // a Send sends all
      conn->session->ConsumeOutput(out->tx_lent);
    }
  }
  out->tx_lent = 0;
  self->Flush(conn);
  if (!conn->tx_active()) self->AfterOutput(conn);
  self->Leave(conn);
}

// Every queued record is out (or the socket refused them): what waited for that goes on.
void TlsLoop::AfterOutput(Conn* conn) {
  if (conn->send() != nullptr && !conn->file_active()) {
    Out* out = conn->out.get();
    if (!out->send_is_file) {
      FinishSend(conn, conn->tx_error != 0 ? conn->tx_error
                       : out->send_refused ? -EPIPE
                                           : static_cast<int64_t>(out->send_total));
    } else if (out->file_chunk > 0) {
      out->send_total += out->file_chunk;
      UpdateProgress(conn);  // progress, for the shard's send timer
      out->file_chunk = 0;
      ReadFileChunk(conn);
    } else if (conn->tx_error != 0 || out->file_left == 0) {
      ReadFileChunk(conn);  // it completes: with the socket's error, or with nothing to send
    }
  }
  // The FIN goes after every record, close_notify the last. The send's callback above may just
  // have queued them (the shard shuts its side down from there): they go out first.
  if (conn->shutdown_how >= 0 && conn->send() == nullptr) {
    Flush(conn);
    if (!conn->tx_active()) {
      inner_->Shutdown(conn->fd, conn->shutdown_how);
      conn->shutdown_how = -1;
    }
  }
  if (conn->send() == nullptr && !conn->tx_active()) {
    RINGD_ASSERT(!conn->file_active());  // a file read belongs to a send
    KeepWarm(conn);
  }
}

// Nothing is being sent on `conn`: it keeps its sending state and buffers for the next response
// until kTrimIdleMs from now. warm_ stays in that order (the clock never goes back).
void TlsLoop::KeepWarm(Conn* conn) {
  // Closed: released soon, with everything it holds. Waiting for its ClientHello's turn: it has
  // sent nothing yet.
  if (conn->close_requested || conn->hello_waiting) return;
  if (conn->warm) warm_.Remove(conn);
  conn->deadline_ms = inner_->MonotonicMs() + kTrimIdleMs;
  conn->warm = true;
  warm_.PushBack(conn);
}

void TlsLoop::StopKeepingWarm(Conn* conn) {
  if (!conn->warm) return;
  warm_.Remove(conn);
  conn->warm = false;
}

// An idle connection holds no sending state or buffers of its own (the session and the library
// release theirs); one that has started sending again since is taken off too, and goes back on
// when it is idle again.
void TlsLoop::TrimIdle() {
  if (warm_.empty()) return;
  const int64_t now = inner_->MonotonicMs();
  while (!warm_.empty() && ConnOf(warm_.front())->deadline_ms <= now) {
    Conn* conn = ConnOf(warm_.PopFront());
    conn->warm = false;
    if (conn->send() != nullptr || conn->tx_active()) continue;
    conn->out.reset();
    conn->session->Trim();
  }
}

void TlsLoop::Shutdown(int fd, int how) {
  Conn* conn = Find(fd);
  if (conn == nullptr || how != SHUT_WR) return inner_->Shutdown(fd, how);  // SHUT_RDWR: at once
  // The FIN follows the records already queued, with close_notify the last of them.
  conn->session->Close();
  conn->shutdown_how = how;
  Schedule(conn);
}

void TlsLoop::Close(int fd) {
  Conn* conn = Find(fd);
  if (conn == nullptr) return inner_->Close(fd);
  RINGD_ASSERT(conn->recv == nullptr && conn->send() == nullptr && !conn->close_requested);
  StopWaitingForHelloTurn(conn);  // closed while its ClientHello waited: never answered
  StopKeepingWarm(conn);
  conn->close_requested = true;
  if (quiesced_) {
    if (!conn->counted_handshake) --handshaking_;
    Unschedule(conn);
    RemoveConn(conn);
    inner_->Close(fd);
    delete conn;
    return;
  }
  if (conn->tx_error == 0 && conn->session->Ended() != TlsEnd::kBadInput &&
      conn->session->HandshakeDone()) {
    conn->session->Close();
    ++stats_.close_notify_sent;
  }
  // The clock never goes back: closing_ stays in deadline order.
  conn->deadline_ms = inner_->MonotonicMs() + kCloseNotifyMs;
  RINGD_ASSERT(closing_.empty() || ConnOf(closing_.back())->deadline_ms <= conn->deadline_ms);
  closing_.PushBack(conn);
  Schedule(conn);  // Poll sends what is queued, then releases it
}

void TlsLoop::Release(Conn* conn) {
  if (conn->busy > 0 || conn->queued) return;
  Flush(conn);
  if (conn->tx_active() || conn->rx_active || conn->file_active()) return;  // callbacks to come
  if (!conn->counted_handshake) --handshaking_;
  RemoveConn(conn);
  if (conn->deadline_ms != kOverdue) closing_.Remove(conn);
  inner_->Close(conn->fd);
  delete conn;
}

// Poll --------------------------------------------------------------------------------------

void TlsLoop::Poll(int timeout_ms) {
  hello_budget_ = kHellosPerTurn;
  AnswerWaitingHellos();
  const bool closing = !closing_.empty();
  int wait_ms = ready_ != nullptr || !hellos_.empty() ? 0
                : closing                             ? std::min(timeout_ms, 100)
                                                      : timeout_ms;
  if (!warm_.empty() && wait_ms != 0) {  // woken for the first trim (-1: no bound but it)
    const int64_t until =
        std::max<int64_t>(0, ConnOf(warm_.front())->deadline_ms - inner_->MonotonicMs());
    wait_ms = wait_ms < 0 ? static_cast<int>(std::min<int64_t>(until, INT32_MAX))
                          : static_cast<int>(std::min<int64_t>(until, wait_ms));
  }
  inner_->Poll(wait_ms);
  TrimIdle();
  // The shard's send timer reads its Completion's `done` as progress (loop.h): a slow reader
  // taking a send's records a little at a time is not a stalled one, though no send of records
  // has completed yet (a file chunk's are one send). Their progress is the send's: the
  // plaintext whose records have left.
  for (Conn* conn : sending_) UpdateProgress(conn);
  // Connections whose close_notify the peer will not take in time are cut: the overdue ones
  // leave closing_ from its front, and a turn looks no further than the first that is not.
  if (closing) {
    const int64_t now = inner_->MonotonicMs();
    while (!closing_.empty()) {
      Conn* conn = ConnOf(closing_.front());
      ++stats_.closing_checked;
      if (conn->deadline_ms > now) break;
      closing_.Remove(conn);
      conn->deadline_ms = kOverdue;
      // The send ends with an error and OnTx releases it; one not sending yet is cut by Flush.
      if (conn->tx_active()) inner_->Shutdown(conn->fd, SHUT_RDWR);
    }
  }
  // What was scheduled before this turn runs now; what it schedules runs next turn.
  Conn* list = ready_;
  ready_ = nullptr;
  while (list != nullptr) {
    Conn* conn = list;
    list = conn->next_ready;
    conn->queued = false;
    Enter(conn);
    if (conn->close_requested) {
      Flush(conn);
    } else {
      Pump(conn);
      if (!conn->tx_active()) AfterOutput(conn);
    }
    Leave(conn);
  }
}

io::LoopStats TlsLoop::Stats() const {
  io::LoopStats s = inner_->Stats();
  s.tls_connections = live_conns_;
  s.tls_handshakes = stats_.handshakes;
  s.tls_resumed = stats_.resumed;
  s.tls_handshake_failures = stats_.handshake_failures;
  s.tls_bad_records = stats_.bad_records;
  s.tls_plain_http = stats_.plain_http;
  s.tls_handshakes_refused = stats_.handshakes_refused;
  s.tls_hellos_deferred = stats_.hellos_deferred;
  s.proxy_missing = stats_.proxy_missing;
  s.proxy_malformed = stats_.proxy_malformed;
  s.clients_denied = stats_.clients_denied;
  return s;
}

void TlsLoop::Quiesce() {
  quiesced_ = true;
  inner_->Quiesce();
}

}  // namespace ringd::tls
