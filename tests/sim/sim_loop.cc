#include "tests/sim/sim_loop.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string_view>

#include "io/assert.h"

namespace ringd::sim {
namespace {

constexpr size_t kTraceLines = 48;
constexpr uint64_t kMaxSegment = 64 << 10;  // the most one send progress step moves
constexpr uint64_t kCorkSegment = 1448;     // the segment a cork fills before it sends

uint64_t SplitMix(uint64_t* x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

const char* OpName(io::Op op) {
  switch (op) {
    case io::Op::kAccept:
      return "accept";
    case io::Op::kRecv:
      return "recv";
    case io::Op::kSend:
      return "send";
    case io::Op::kSendFile:
      return "sendfile";
    case io::Op::kOpen:
      return "open";
    case io::Op::kRead:
      return "read";
    default:
      return "?";
  }
}

}  // namespace

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& s : s_) s = SplitMix(&x);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

uint64_t Rng::Below(uint64_t n) { return n == 0 ? 0 : Next() % n; }
uint64_t Rng::Range(uint64_t lo, uint64_t hi) { return lo + Below(hi - lo + 1); }
bool Rng::Chance(uint32_t per_mille) { return Below(1000) < per_mille; }

// ---------------------------------------------------------------------------------------------
// The world.

bool SimWorld::IsListener(int fd) const {
  return std::find(listen_fds.begin(), listen_fds.end(), fd) != listen_fds.end();
}

bool SimWorld::ListenerShut(int fd) const {
  return std::find(shut_listeners.begin(), shut_listeners.end(), fd) != shut_listeners.end();
}

int SimWorld::BacklogFor(int listen_fd) const {
  for (size_t i = 0; i < backlog.size(); ++i) {
    const int l = sockets[backlog[i]].listener;
    if (l < 0 || l == listen_fd) return static_cast<int>(i);
  }
  return -1;
}

uint64_t SimSocket::PlainAt(uint64_t wire) const {
  // The last record that starts before `wire`.
  auto it = std::lower_bound(
      client_records.begin(), client_records.end(), wire,
      [](const std::pair<uint64_t, uint64_t>& r, uint64_t w) { return r.first < w; });
  return it == client_records.begin() ? 0 : std::prev(it)->second;
}

size_t SimWorld::Connect(uint64_t window) {
  sockets.emplace_back();
  sockets.back().window = window;
  sockets.back().connect_ms = now_ms;
  const size_t index = sockets.size() - 1;
  if (listen_shut) {
    sockets.back().refused = true;
  } else {
    backlog.push_back(index);
  }
  return index;
}

void SimWorld::Record(const std::string& path) {
  ++edits;
  std::vector<PathVersion>& h = history[path];
  if (!h.empty() && h.back().to_ms == INT64_MAX) {
    h.back().to_ms = now_ms;
    h.back().to_edit = edits;
  }
  PathVersion v;
  v.from_ms = now_ms;
  v.from_edit = edits;
  auto it = tree.find(path);
  if (it != tree.end()) v.inode = std::make_shared<const Inode>(*it->second);
  h.push_back(v);
}

void SimWorld::PutFile(const std::string& path, std::string content, bool unreadable) {
  auto inode = std::make_shared<Inode>();
  inode->ino = next_ino++;
  inode->unreadable = unreadable;
  inode->content = std::make_shared<const std::string>(std::move(content));
  inode->mtime_sec = RealtimeSec();
  tree[path] = inode;
  Record(path);
}

void SimWorld::MakeDir(const std::string& path) {
  auto inode = std::make_shared<Inode>();
  inode->ino = next_ino++;
  inode->dir = true;
  inode->mtime_sec = RealtimeSec();
  tree[path] = inode;
  Record(path);
}

void SimWorld::ReplaceFile(const std::string& path, std::string content) {
  PutFile(path, std::move(content));
  Trace("file %s replaced (%zu bytes)", path.c_str(), tree[path]->content->size());
}

void SimWorld::TruncateInPlace(const std::string& path, uint64_t size) {
  auto it = tree.find(path);
  RINGD_ASSERT(it != tree.end() && !it->second->dir);
  Inode& inode = *it->second;
  if (size < inode.content->size()) {
    inode.content = std::make_shared<const std::string>(inode.content->substr(0, size));
  }
  inode.mtime_sec = RealtimeSec();
  Record(path);
  Trace("file %s truncated in place to %llu", path.c_str(), static_cast<unsigned long long>(size));
}

void SimWorld::SwitchRoot(int fd) {
  RINGD_ASSERT(fd != root_fd && old_roots.count(fd) == 0);
  const std::map<std::string, std::shared_ptr<Inode>> old = tree;
  old_roots[root_fd] = old;
  for (const auto& [path, inode] : old) {
    if (inode->dir) {
      MakeDir(path);
    } else {
      PutFile(path, *inode->content, inode->unreadable);
    }
  }
  root_fd = fd;
  Trace("root switched: fd %d, %zu paths", fd, old.size());
}

void SimWorld::Remove(const std::string& path) {
  tree.erase(path);
  Record(path);
  Trace("file %s removed", path.c_str());
}

void SimWorld::Trace(const char* fmt, ...) {
  if (!tracing) return;
  char line[200];
  const int prefix = std::snprintf(line, sizeof line, "t=%lld ", static_cast<long long>(now_ms));
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line + prefix, sizeof line - static_cast<size_t>(prefix), fmt, ap);
  va_end(ap);
  if (print_trace) std::printf("  %s\n", line);
  if (trace.size() < kTraceLines) {
    trace.emplace_back(line);
  } else {
    trace[trace_next] = line;
  }
  trace_next = (trace_next + 1) % kTraceLines;
}

std::vector<std::string> SimWorld::RecentTrace() const {
  std::vector<std::string> out;
  if (trace.size() < kTraceLines) return trace;
  for (size_t i = 0; i < kTraceLines; ++i) out.push_back(trace[(trace_next + i) % kTraceLines]);
  return out;
}

int SimWorld::AllocFd() {
  int fd = 1000;
  while (socket_fds.count(fd) != 0 || file_fds.count(fd) != 0) ++fd;
  return fd;
}

// ---------------------------------------------------------------------------------------------
// The loop.

SimLoop::SimLoop(SimWorld* world, const io::LoopOptions& options)
    : w_(world), options_(options), recv_buf_(options.recv_buffer_size) {}

SimLoop::~SimLoop() = default;

size_t SimLoop::OpsInFlightExcept(io::Op kind) const {
  size_t n = 0;
  for (const auto& [seq, op] : ops_) n += op.kind != kind;
  return n;
}

std::string SimLoop::DescribeOps() const {
  std::string out;
  for (const auto& [seq, op] : ops_) {
    char line[120];
    std::snprintf(line, sizeof line, "  #%llu %s fd %d%s%s\n", static_cast<unsigned long long>(seq),
                  OpName(op.kind), op.c->fd, op.c->cancelled ? " cancelled" : "",
                  op.c->paused ? " paused" : "");
    out += line;
  }
  return out;
}

uint64_t SimLoop::Begin(io::Completion* c, io::Op kind, int fd) {
  RINGD_ASSERT_MSG(!c->in_flight, "%s submitted on a Completion still in flight (%s)", OpName(kind),
                   OpName(c->op));
  RINGD_ASSERT_MSG(!quiesced_, "%s submitted after Quiesce", OpName(kind));
  c->op = kind;
  c->fd = fd;
  c->in_flight = true;
  c->cancelled = false;
  c->paused = false;
  c->result = 0;
  c->done = 0;
  c->more = false;
  c->data = nullptr;
  const uint64_t seq = next_seq_++;
  OpState& op = ops_[seq];
  op.c = c;
  op.kind = kind;
  seq_of_[c] = seq;
  ++stats_.submitted;
  return seq;
}

SimSocket* SimLoop::SocketOf(int fd) {
  auto it = w_->socket_fds.find(fd);
  RINGD_ASSERT_MSG(it != w_->socket_fds.end(), "socket operation on fd %d, not an open socket", fd);
  return &w_->sockets[it->second];
}

void SimLoop::Accept(int listen_fd, io::Completion* c) {
  RINGD_ASSERT_MSG(w_->IsListener(listen_fd), "accept on fd %d, not a listener", listen_fd);
  for (const auto& [seq, op] : ops_) {
    RINGD_ASSERT_MSG(op.kind != io::Op::kAccept || op.c->fd != listen_fd,
                     "two accepts on listener fd %d", listen_fd);
  }
  Begin(c, io::Op::kAccept, listen_fd);
}

void SimLoop::Recv(int fd, io::Completion* c) {
  SocketOf(fd);
  w_->accepted_unread.erase(w_->socket_fds.at(fd));
  for (const auto& [seq, op] : ops_) {
    RINGD_ASSERT_MSG(!(op.kind == io::Op::kRecv && op.c->fd == fd), "two receives on fd %d", fd);
  }
  Begin(c, io::Op::kRecv, fd);
}

void SimLoop::Send(int fd, iovec* iov, int iovcnt, io::Completion* c, bool more) {
  RINGD_ASSERT_MSG(!SocketOf(fd)->promised,
                   "send on fd %d after a SendFile promised the same body's next piece", fd);
  for (const auto& [seq, op] : ops_) {
    RINGD_ASSERT_MSG(
        !((op.kind == io::Op::kSend || op.kind == io::Op::kSendFile) && op.c->fd == fd),
        "two sends on fd %d", fd);
  }
  Begin(c, io::Op::kSend, fd);
  c->send_flags = MSG_NOSIGNAL | (more ? MSG_MORE : 0);
  c->iov = iov;
  c->iovcnt = iovcnt;
  c->remaining = 0;
  for (int i = 0; i < iovcnt; ++i) c->remaining += iov[i].iov_len;
  RINGD_ASSERT_MSG(iovcnt < 2 || c->remaining > w_->one_buffer_max,
                   "fd %d: %d buffers of %llu bytes in all, which fit in one head buffer", fd,
                   iovcnt, static_cast<unsigned long long>(c->remaining));
  ++w_->counters.sends;
  if (w_->print_trace && iovcnt > 0 && iov[0].iov_len > 12) {
    const char* head = static_cast<const char*>(iov[0].iov_base);
    if (std::memcmp(head, "HTTP/1.1 ", 9) == 0) {
      w_->Trace(
          "send fd %d: %.12s...%s", fd, head,
          std::string_view(head, iov[0].iov_len).find("Connection: close") != std::string_view::npos
              ? " (close)"
              : "");
    }
  }
}

void SimLoop::SendFile(int sock_fd, int file_fd, uint64_t offset, uint64_t length,
                       io::Completion* c, bool more) {
  SimSocket* s = SocketOf(sock_fd);
  RINGD_ASSERT_MSG(!s->promised || (file_fd == s->promised_file && offset == s->promised_offset),
                   "sendfile on fd %d from file fd %d at %llu, but the promised piece is file fd "
                   "%d at %llu",
                   sock_fd, file_fd, static_cast<unsigned long long>(offset), s->promised_file,
                   static_cast<unsigned long long>(s->promised_offset));
  s->Uncork();  // the next piece: what the cork held leaves with it
  RINGD_ASSERT_MSG(w_->file_fds.count(file_fd) != 0, "sendfile from fd %d, not an open file",
                   file_fd);
  for (const auto& [seq, op] : ops_) {
    RINGD_ASSERT_MSG(
        !((op.kind == io::Op::kSend || op.kind == io::Op::kSendFile) && op.c->fd == sock_fd),
        "two sends on fd %d", sock_fd);
  }
  const uint64_t seq = Begin(c, io::Op::kSendFile, sock_fd);
  c->file_fd = file_fd;
  c->offset = offset;
  c->remaining = length;
  ops_[seq].length = length;
  ops_[seq].more = more;
  ++w_->counters.sendfiles;
}

void SimLoop::Open(int dir_fd, const char* path, io::FileStat* stat, io::Completion* c) {
  (void)dir_fd;
  const uint64_t seq = Begin(c, io::Op::kOpen, -1);
  c->dir_fd = dir_fd;
  c->path = path;
  c->stat = stat;
  OpState& op = ops_[seq];
  op.ready_at_ms = w_->now_ms;
  if (w_->rng.Chance(w_->faults.open_slow)) {
    op.ready_at_ms += static_cast<int64_t>(
        w_->rng.Range(1, static_cast<uint64_t>(std::max<int64_t>(1, w_->faults.open_slow_max_ms))));
  }
  ++w_->counters.opens;
}

void SimLoop::Read(int fd, char* buf, uint64_t length, uint64_t offset, io::Completion* c) {
  RINGD_ASSERT_MSG(w_->file_fds.count(fd) != 0, "read from fd %d, not an open file", fd);
  const uint64_t seq = Begin(c, io::Op::kRead, fd);
  c->buf = buf;
  c->offset = offset;
  c->remaining = length;
  OpState& op = ops_[seq];
  op.length = length;
  op.ready_at_ms = w_->now_ms + (w_->rng.Chance(w_->faults.read_slow) ? 1 + w_->rng.Below(20) : 0);
  ++w_->counters.reads;
}

void SimLoop::Cancel(io::Completion* c) {
  if (!c->in_flight || c->cancelled) return;
  RINGD_ASSERT_MSG(c->op == io::Op::kRecv || c->op == io::Op::kAccept,
                   "Cancel of a %s: only multishot operations are cancelled", OpName(c->op));
  c->cancelled = true;
  ++w_->counters.cancels;
  if (c->op == io::Op::kRecv) {
    SimSocket* s = SocketOf(c->fd);
    if (s->received_before_abort == UINT64_MAX) s->received_before_abort = s->received;
    OpState& op = ops_.at(seq_of_.at(c));
    if (s->taken_before_cancel == UINT64_MAX) {
      s->taken_before_cancel =
          s->tls ? s->PlainAt(s->wire_received + op.held.size()) : s->received + op.held.size();
    }
    if (!op.held.empty()) {  // as uring: what a pause kept goes with the receive
      w_->Trace("cancel drops %zu bytes held from a pause", op.held.size());
      op.held.clear();
      op.held_dropped = true;
      ++w_->counters.held_dropped;
    }
    for (const auto& [seq, other] : ops_) {
      if ((other.kind == io::Op::kSend || other.kind == io::Op::kSendFile) && other.c->fd == c->fd)
        op.cancelled_beside_send = true;
    }
  }
  w_->Trace("cancel %s fd %d", OpName(c->op), c->fd);
}

void SimLoop::PauseRecv(io::Completion* c) {
  RINGD_ASSERT(c->op == io::Op::kRecv);
  if (!c->in_flight || c->cancelled || c->paused) return;
  c->paused = true;
  ++w_->counters.pauses;
  // As io_uring: the multishot receive may have taken bytes from the socket before the pause
  // took effect; the loop keeps them, in order, for after ResumeRecv (PauseRecv's contract).
  OpState& op = ops_.at(seq_of_.at(c));
  SimSocket& s = *SocketOf(c->fd);
  if (op.held.empty() && !s.to_server.empty() && !s.client_reset &&
      w_->rng.Chance(w_->faults.held_at_pause)) {
    const uint64_t n =
        1 + w_->rng.Below(std::min<uint64_t>(s.to_server.size(), options_.recv_buffer_size));
    op.held.assign(s.to_server, 0, n);
    s.to_server.erase(0, n);
    ++w_->counters.held_at_pause;
    w_->Trace("pause recv fd %d: %llu bytes held", c->fd, static_cast<unsigned long long>(n));
  }
}

void SimLoop::ResumeRecv(io::Completion* c) {
  RINGD_ASSERT(c->op == io::Op::kRecv);
  if (!c->in_flight || c->cancelled || !c->paused) return;
  c->paused = false;
  ++w_->counters.resumes;
}

void SimLoop::Shutdown(int fd, int how) {
  if (w_->IsListener(fd)) {
    if (!w_->ListenerShut(fd)) w_->shut_listeners.push_back(fd);
    w_->Trace("shutdown listener fd %d", fd);
    if (w_->shut_listeners.size() < w_->listen_fds.size()) return;
    w_->listen_shut = true;
    for (size_t i : w_->backlog) w_->sockets[i].refused = true;  // queued connections: reset
    w_->backlog.clear();
    return;
  }
  SimSocket* s = SocketOf(fd);
  if (how == SHUT_RD || how == SHUT_RDWR) s->server_shut_rd = true;
  if (how == SHUT_WR || how == SHUT_RDWR) {
    s->server_shut_wr = true;
    s->Uncork();  // the FIN pushes out what the cork held
    // Nothing read after the FIN is answered: what the server had read by now is what counts.
    if (s->received_before_abort == UINT64_MAX) s->received_before_abort = s->received;
  }
  w_->Trace("shutdown fd %d how %d", fd, how);
}

void SimLoop::Close(int fd) {
  // After Quiesce the operations still in flight are abandoned (the owner is being destroyed).
  auto sit = w_->socket_fds.find(fd);
  if (sit != w_->socket_fds.end()) {
    for (const auto& [seq, op] : ops_) {
      RINGD_ASSERT_MSG(quiesced_ || op.c->fd != fd, "close of fd %d with a %s in flight", fd,
                       OpName(op.kind));
    }
    SimSocket& s = w_->sockets[sit->second];
    s.server_closed = true;
    s.Uncork();  // the FIN pushes out what the cork held
    if (s.received_before_abort == UINT64_MAX) s.received_before_abort = s.received;
    // Unread input turns the close into a reset (RFC 9293 3.6.1); the peer loses what it had
    // not read yet. That is why the server lingers.
    if (!s.to_server.empty() && !s.client_reset) s.server_reset = true;
    // Closing at once (no SHUT_WR first, no lingering) on a client known to be still sending:
    // the server's side had taken bytes past its close request from the socket (delivered, or
    // held by the loop from a pause) before its receive ended, or was told of bytes left.
    const uint64_t taken = s.TakenBeforeEnd();
    // (A TLS session that refused the client's input has sent its alert: no response is owed
    // after it, and nothing the client sends can be read. Nor is one owed on a TLS connection
    // whose server read no byte of a request, as when the header timeout ends it just after its
    // handshake: only the session's own records, a server hello or close_notify, were going out
    // beside the receive's end, and a reset loses nothing more than a plain connection's would.)
    const bool tls_before_any_request = s.tls && s.received == 0;
    if (!quiesced_ && !s.client_reset && !s.client_fin && !s.server_shut_wr && !s.response_cut &&
        !s.tls_bad_input && !tls_before_any_request &&
        (s.told_input_left || (s.close_request_end != UINT64_MAX && taken > s.close_request_end))) {
      s.closed_on_talker = true;
    }
    w_->accepted_unread.erase(sit->second);
    w_->socket_fds.erase(sit);
    w_->Trace("close socket fd %d%s", fd, s.server_reset ? " (reset: unread input)" : "");
    return;
  }
  auto fit = w_->file_fds.find(fd);
  RINGD_ASSERT_MSG(fit != w_->file_fds.end(), "close of fd %d, which is not open", fd);
  for (const auto& [seq, op] : ops_) {
    RINGD_ASSERT_MSG(quiesced_ || (!(op.kind == io::Op::kRead && op.c->fd == fd) &&
                                   !(op.kind == io::Op::kSendFile && op.c->file_fd == fd)),
                     "close of file fd %d with a %s in flight", fd, OpName(op.kind));
  }
  w_->file_fds.erase(fit);
}

bool SimLoop::Ready(const OpState& op) const {
  const io::Completion* c = op.c;
  switch (op.kind) {
    case io::Op::kAccept:
      return c->cancelled || w_->ListenerShut(c->fd) || w_->BacklogFor(c->fd) >= 0;
    case io::Op::kRecv: {
      if (c->cancelled) return true;
      if (c->paused) return false;
      if (!op.held.empty()) return true;
      const SimSocket& s = w_->sockets[w_->socket_fds.at(c->fd)];
      return !s.to_server.empty() || s.client_fin || s.client_reset || s.server_shut_rd;
    }
    case io::Op::kSend:
    case io::Op::kSendFile: {
      const SimSocket& s = w_->sockets[w_->socket_fds.at(c->fd)];
      if (s.client_reset || s.client_closed || s.server_shut_wr || c->remaining == 0) return true;
      if (op.kind == io::Op::kSendFile) {
        const auto& content = *w_->file_fds.at(c->file_fd)->content;
        if (content.size() <= c->offset + c->done) return true;  // truncated: a short result
      }
      return s.Readable() < s.window;  // what a cork holds is in the sender's queue
    }
    case io::Op::kOpen:
    case io::Op::kRead:
      return w_->now_ms >= op.ready_at_ms;
    default:
      return false;
  }
}

void SimLoop::Deliver(io::Completion* c, int64_t result, bool more, const char* data) {
  RINGD_ASSERT(in_poll_);  // callbacks run from Poll only
  c->result = result;
  c->more = more;
  c->data = data;
  if (!more) {
    auto it = seq_of_.find(c);
    RINGD_ASSERT(it != seq_of_.end());
    ops_.erase(it->second);
    seq_of_.erase(it);
    c->in_flight = false;
    c->paused = false;
  }
  ++callbacks_this_poll_;
  ++stats_.completed;
  ++w_->counters.callbacks;
  c->callback(c);
}

void SimLoop::Finish(uint64_t seq, int64_t result, const char* data) {
  Deliver(ops_.at(seq).c, result, false, data);
}

void SimLoop::ProgressAccept(uint64_t seq) {
  io::Completion* c = ops_.at(seq).c;
  Rng& rng = w_->rng;
  auto accept_one = [&](bool more) {
    const int at = w_->BacklogFor(c->fd);
    const size_t index = w_->backlog[static_cast<size_t>(at)];
    w_->backlog.erase(w_->backlog.begin() + at);
    const int fd = w_->AllocFd();
    w_->socket_fds[fd] = index;
    SimSocket& s = w_->sockets[index];
    s.fd = fd;
    s.accepted = true;
    s.accept_ms = w_->now_ms;
    w_->accepted_unread.insert(index);
    ++w_->counters.accepts;
    w_->Trace("accept socket %zu as fd %d%s", index, fd, more ? "" : " (last)");
    w_->accepting = index;
    if (more) {
      Deliver(c, fd, true, nullptr);
    } else {
      Finish(seq, fd);
    }
    w_->accepting = SIZE_MAX;
  };
  if (c->cancelled) {
    // A connection the kernel had already accepted may still come before the cancellation.
    if (w_->BacklogFor(c->fd) >= 0 && !w_->ListenerShut(c->fd) && rng.Chance(200))
      return accept_one(true);
    return Finish(seq, -ECANCELED);
  }
  if (w_->ListenerShut(c->fd)) return Finish(seq, -EINVAL);
  if (rng.Chance(w_->faults.accept_error)) {
    // Out of descriptors, mostly; now and then an error no listener should meet (an LSM's
    // EPERM), or the backend's own failure to watch the listener (epoll_ctl's ENOMEM, which the
    // epoll backend reports as a cancelled accept): the server must still accept again.
    if (rng.Chance(100)) {
      w_->Trace("accept: ENOMEM (the backend cannot watch the listener)");
      c->cancelled = true;
      return Finish(seq, -ENOMEM);
    }
    const int err = rng.Chance(100) ? EPERM : rng.Chance(500) ? EMFILE : ENFILE;
    w_->Trace("accept: %s", err == EPERM ? "EPERM" : err == EMFILE ? "EMFILE" : "ENFILE");
    return Finish(seq, -err);
  }
  accept_one(!rng.Chance(w_->faults.accept_end));
}

void SimLoop::ProgressRecv(uint64_t seq) {
  OpState& op = ops_.at(seq);
  io::Completion* c = op.c;
  SimSocket& s = *SocketOf(c->fd);
  Rng& rng = w_->rng;
  auto chunk = [&]() {
    uint64_t n = std::min<uint64_t>(s.to_server.size(), options_.recv_buffer_size);
    if (w_->faults.recv_tiny > 0 && rng.Chance(w_->faults.recv_tiny)) {
      n = std::min<uint64_t>(n, 1 + rng.Below(3));
    } else if (rng.Chance(w_->faults.recv_split)) {
      n = 1 + rng.Below(n);
    }
    std::memcpy(recv_buf_.data(), s.to_server.data(), n);
    s.to_server.erase(0, n);
    (s.tls ? s.wire_received : s.received) += n;
    w_->counters.bytes_to_server += n;
    ++w_->counters.recv_deliveries;
    return static_cast<int64_t>(n);
  };
  if (c->cancelled) {
    // As io_uring: bytes the kernel had received may still arrive before the cancellation (even
    // on the last callback), unless the receive was paused or dropped what a pause kept (nothing
    // is delivered then: the stream would have a hole); twice at most, and a second time as the
    // last callback.
    if (!c->paused && !op.held_dropped && !s.to_server.empty() && !s.client_reset &&
        op.data_after_cancel < 2 && rng.Chance(w_->faults.data_after_cancel)) {
      ++op.data_after_cancel;
      ++w_->counters.data_after_cancel;
      const bool last = op.data_after_cancel == 2 || rng.Chance(300);
      const int64_t n = chunk();
      w_->Trace("recv fd %d: %lld bytes after cancel%s", c->fd, static_cast<long long>(n),
                last ? " (last)" : "");
      return Deliver(c, n, !last, recv_buf_.data());
    }
    int64_t end = -ECANCELED;
    if (op.held_dropped) {
      // As uring: bytes received and dropped with the receive; its owner hears that the client
      // sent more than was delivered.
      end = io::kRecvCancelledWithInput;
      if (op.cancelled_beside_send) s.told_input_left = true;
    } else if (s.client_reset && rng.Chance(w_->faults.cancel_reset)) {
      end = -ECONNRESET;
    } else if (s.client_fin && s.to_server.empty() && !c->paused && rng.Chance(200)) {
      end = 0;
    } else if (!s.to_server.empty() && !s.client_reset && !c->paused &&
               rng.Chance(w_->faults.cancel_input_left)) {
      // As uring: the kernel had no free buffer for the bytes waiting, and says so.
      end = io::kRecvCancelledWithInput;
      ++w_->counters.cancel_input_left;
      // Cancelled beside a response still going out (not by Abort, which shuts the socket down
      // first when a send is in flight): the server knows, while it can still linger.
      if (op.cancelled_beside_send) s.told_input_left = true;
    }
    w_->Trace("recv fd %d: ends %lld (cancelled)", c->fd, static_cast<long long>(end));
    return Finish(seq, end);
  }
  if (!op.held.empty()) {  // what a pause kept comes first, in order, in one delivery
    const int64_t n = static_cast<int64_t>(op.held.size());
    std::memcpy(recv_buf_.data(), op.held.data(), op.held.size());
    op.held.clear();
    (s.tls ? s.wire_received : s.received) += static_cast<uint64_t>(n);
    w_->counters.bytes_to_server += static_cast<uint64_t>(n);
    ++w_->counters.recv_deliveries;
    w_->Trace("recv fd %d: %lld bytes held from a pause", c->fd, static_cast<long long>(n));
    return Deliver(c, n, true, recv_buf_.data());
  }
  if (s.client_reset && (s.to_server.empty() || rng.Chance(700))) {
    ++w_->counters.peer_errors;
    w_->Trace("recv fd %d: ECONNRESET", c->fd);
    return Finish(seq, -ECONNRESET);
  }
  if (!s.to_server.empty()) {
    const int64_t n = chunk();
    w_->Trace("recv fd %d: %lld bytes", c->fd, static_cast<long long>(n));
    return Deliver(c, n, true, recv_buf_.data());
  }
  w_->Trace("recv fd %d: end of stream", c->fd);
  Finish(seq, 0);
}

void SimLoop::ProgressSend(uint64_t seq) {
  OpState& op = ops_.at(seq);
  io::Completion* c = op.c;
  SimSocket& s = *SocketOf(c->fd);
  Rng& rng = w_->rng;
  const char* name = OpName(op.kind);
  if (s.client_reset || s.client_closed || s.server_shut_wr) s.Uncork();  // the piece fails
  if (s.client_reset || s.client_closed) {
    const int64_t err = rng.Chance(500) ? -ECONNRESET : -EPIPE;
    ++w_->counters.peer_errors;
    w_->Trace("%s fd %d: %lld (peer gone)", name, c->fd, static_cast<long long>(err));
    return Finish(seq, err);
  }
  if (s.server_shut_wr) {
    w_->Trace("%s fd %d: EPIPE (shut down)", name, c->fd);
    return Finish(seq, -EPIPE);
  }
  uint64_t file_left = UINT64_MAX;
  std::shared_ptr<const std::string> content;
  if (op.kind == io::Op::kSendFile) {
    content = w_->file_fds.at(c->file_fd)->content;
    const uint64_t at = c->offset + c->done;
    file_left = content->size() > at ? content->size() - at : 0;
  }
  if (c->remaining > 0 && file_left == 0) {
    ++w_->counters.short_sendfiles;
    s.response_cut = true;  // the server cannot finish this response: it ends the connection
  }
  if (c->remaining == 0 || file_left == 0) {
    w_->Trace("%s fd %d: done, %llu bytes%s", name, c->fd, static_cast<unsigned long long>(c->done),
              c->remaining > 0 ? " (file short)" : "");
    EndPiece(op, &s);
    return Finish(seq, static_cast<int64_t>(c->done));
  }
  // The window bounds what the client has yet to read; what a cork holds has not been sent.
  const uint64_t space = s.window > s.Readable() ? s.window - s.Readable() : 0;
  uint64_t n = std::min({c->remaining, space, file_left, kMaxSegment});
  if (n == 0) return;
  if (rng.Chance(w_->faults.send_partial)) n = 1 + rng.Below(n);
  if (op.kind == io::Op::kSendFile) {
    s.to_client.append(*content, c->offset + c->done, n);
  } else {
    // Read the caller's buffers now, not at submission: a buffer changed or freed while its send
    // is in flight shows up as wrong bytes at the client.
    uint64_t left = n;
    while (left > 0) {
      RINGD_ASSERT(c->iovcnt > 0);
      const uint64_t take = std::min<uint64_t>(left, c->iov->iov_len);
      s.to_client.append(static_cast<const char*>(c->iov->iov_base), take);
      left -= take;
      if (take == c->iov->iov_len) {
        ++c->iov;
        --c->iovcnt;
      } else {
        c->iov->iov_base = static_cast<char*>(c->iov->iov_base) + take;
        c->iov->iov_len -= take;
      }
    }
  }
  c->done += n;
  c->remaining -= n;
  s.sent_total += n;
  w_->counters.bytes_to_client += n;
  // A body piece that leaves the socket corked for the next (`more`) holds its partly filled
  // last segment back from the client.
  if (op.kind == io::Op::kSendFile && op.more) {
    s.corked = std::min<uint64_t>(s.to_client.size(), c->done % kCorkSegment);
  }
  if (c->remaining == 0) {
    w_->Trace("%s fd %d: done, %llu bytes", name, c->fd, static_cast<unsigned long long>(c->done));
    EndPiece(op, &s);
    Finish(seq, static_cast<int64_t>(c->done));
  }
}

// A SendFile's end: one that asked to stay corked (`more`) and sent every byte promises the
// body's next piece and keeps its last partial segment held; any other end uncorks.
void SimLoop::EndPiece(const OpState& op, SimSocket* s) {
  if (op.kind != io::Op::kSendFile || !op.more) return;
  if (op.c->remaining > 0) return s->Uncork();  // the file ended early
  s->promised = true;
  s->promised_ms = w_->now_ms;
  s->promised_file = op.c->file_fd;
  s->promised_offset = op.c->offset + op.c->done;
  ++w_->counters.corked_pieces;
  w_->Trace("sendfile fd %d: the next piece follows (%llu bytes corked)", op.c->fd,
            static_cast<unsigned long long>(s->corked));
}

void SimLoop::ProgressOpen(uint64_t seq) {
  io::Completion* c = ops_.at(seq).c;
  Rng& rng = w_->rng;
  const std::string path = c->path;
  // Beneath the root the open named: an old root's tree stays as it was when the root moved.
  RINGD_ASSERT_MSG(c->dir_fd == w_->root_fd || w_->old_roots.count(c->dir_fd) != 0,
                   "open beneath fd %d, not a root", c->dir_fd);
  const auto& tree = c->dir_fd == w_->root_fd ? w_->tree : w_->old_roots.at(c->dir_fd);
  int64_t result;
  if (rng.Chance(w_->faults.open_transient)) {
    ++w_->counters.open_transient;
    result = rng.Chance(500) ? -EMFILE : -ENFILE;
  } else if (path.empty() || path[0] == '/' || path == ".." || path.rfind("../", 0) == 0 ||
             path.find("/../") != std::string::npos ||
             (path.size() >= 3 && path.compare(path.size() - 3, 3, "/..") == 0)) {
    result = -EXDEV;  // RESOLVE_BENEATH
  } else if (auto it = tree.find(path); it != tree.end()) {
    const Inode& inode = *it->second;
    if (inode.unreadable) {
      result = -EACCES;
    } else {
      const int fd = w_->AllocFd();
      w_->file_fds[fd] = it->second;
      *c->stat = io::FileStat{inode.content->size(), inode.mtime_sec, inode.ino,
                              inode.dir ? (S_IFDIR | 0755u) : (S_IFREG | 0644u)};
      result = fd;
    }
  } else {
    result = -ENOENT;
    for (size_t slash = path.find('/'); slash != std::string::npos;
         slash = path.find('/', slash + 1)) {
      auto parent = tree.find(path.substr(0, slash));
      if (parent != tree.end() && !parent->second->dir) result = -ENOTDIR;
    }
  }
  w_->Trace("open %s beneath %d -> %lld", path.c_str(), c->dir_fd, static_cast<long long>(result));
  Finish(seq, result);
}

void SimLoop::ProgressRead(uint64_t seq) {
  OpState& op = ops_.at(seq);
  io::Completion* c = op.c;
  const std::string& content = *w_->file_fds.at(c->fd)->content;
  const uint64_t n =
      content.size() > c->offset ? std::min<uint64_t>(op.length, content.size() - c->offset) : 0;
  if (n > 0) std::memcpy(c->buf, content.data() + c->offset, n);
  // A short read is a file truncated under a body being sent. TLS bodies are read, not
  // sendfile()d (TlsLoop), and a read does not say for which socket: every open TLS socket
  // counts as one whose response may be cut (the lingering checks allow for it).
  if (n < op.length) {
    for (SimSocket& s : w_->sockets) {
      if (s.tls && s.accepted && !s.server_closed) s.response_cut = true;
    }
  }
  w_->Trace("read fd %d: %llu bytes", c->fd, static_cast<unsigned long long>(n));
  Finish(seq, static_cast<int64_t>(n));
}

void SimLoop::Progress(uint64_t seq) {
  switch (ops_.at(seq).kind) {
    case io::Op::kAccept:
      return ProgressAccept(seq);
    case io::Op::kRecv:
      return ProgressRecv(seq);
    case io::Op::kSend:
    case io::Op::kSendFile:
      return ProgressSend(seq);
    case io::Op::kOpen:
      return ProgressOpen(seq);
    case io::Op::kRead:
      return ProgressRead(seq);
    default:
      RINGD_ASSERT(false);
  }
}

bool SimLoop::RunPass() {
  std::vector<uint64_t> seqs;
  seqs.reserve(ops_.size());
  for (const auto& [seq, op] : ops_) seqs.push_back(seq);
  for (size_t i = seqs.size(); i > 1; --i) std::swap(seqs[i - 1], seqs[w_->rng.Below(i)]);
  bool any = false;
  for (uint64_t seq : seqs) {
    auto it = ops_.find(seq);
    if (it == ops_.end() || !Ready(it->second)) continue;  // finished, or not yet
    any = true;
    if (!w_->rng.Chance(w_->faults.deliver)) continue;  // later: reordering, and gaps
    Progress(seq);
  }
  return any;
}

void SimLoop::Poll(int timeout_ms) {
  RINGD_ASSERT_MSG(!in_poll_, "Poll called from inside a callback");
  ++polls_;
  callbacks_this_poll_ = 0;
  in_poll_ = true;
  if (!quiesced_) {
    const bool ready = RunPass();
    if (!ready && !woken_ && timeout_ms > 0) {
      // Nothing to do: time passes until the poll's timeout, a timed completion, or the next
      // thing a client does, whichever comes first.
      int64_t target = w_->now_ms + timeout_ms;
      for (const auto& [seq, op] : ops_) {
        if ((op.kind == io::Op::kOpen || op.kind == io::Op::kRead) && op.ready_at_ms > w_->now_ms)
          target = std::min(target, op.ready_at_ms);
      }
      if (w_->external_deadline_ms > w_->now_ms)
        target = std::min(target, w_->external_deadline_ms);
      if (w_->external_deadline_ms <= w_->now_ms) target = w_->now_ms;
      w_->now_ms = target;
      RunPass();
    }
  }
  woken_ = false;
  in_poll_ = false;
  max_callbacks_per_poll_ = std::max(max_callbacks_per_poll_, callbacks_this_poll_);
}

}  // namespace ringd::sim
