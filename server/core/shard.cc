#include "server/core/shard.h"

#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "io/assert.h"

namespace ringd {
namespace {

constexpr int64_t kAcceptRetryMs = 100;  // after an accept error, try accepting again after this
constexpr int kDrainGraceMs = 1000;      // after the drain deadline's aborts, for their callbacks

size_t RoundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

}  // namespace

Shard::Shard(int index, const Config& config, std::vector<int> listen_fds, int root_fd,
             const http::MimeTypes* mime, io::LoopFactory make_loop, int cpu)
    : index_(index),
      config_(config),
      listen_fds_(std::move(listen_fds)),
      root_fd_(root_fd),
      mime_(mime),
      make_loop_(std::move(make_loop)),
      cpu_(cpu) {}

Shard::~Shard() {
  // Quiet the loop first: after Quiesce nothing completes into the cache or the pools (the epoll
  // backend's workers would otherwise still run queued opens into cache entries). The cache then
  // closes its descriptors through the loop, and the loop goes.
  if (loop_ != nullptr) loop_->Quiesce();
  // Step gave up on connections whose last callback never came (an epoll worker still reading a
  // slow disk at the drain deadline): the process is exiting, and after Quiesce nothing touches
  // them. The machine (and its file cache, which closes its descriptors through the loop) goes
  // before the loop.
  if (machine_ != nullptr && machine_->live() > 0) machine_->Abandon();
  machine_.reset();
  loop_.reset();
  content_pool_.reset();
  input_pool_.reset();
  memory_.reset();
  for (int fd : listen_fds_) ::close(fd);
}

void Shard::RequestStop(StopBound bound) {
  if (bound == StopBound::kTimeout) stop_bounded_.store(true, std::memory_order_release);
  stop_requested_.store(true, std::memory_order_release);
  if (loop_ != nullptr) loop_->Wake();
}

bool Shard::Setup() {
  if (cpu_ >= 0 && config_.pin) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu_, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort
  }
  if (!SetupMemory() || !MakeLoop()) return false;
  SetupRequestPath();
  parked_.assign(kParkedMax, Parked{});
  accepts_.resize(listen_fds_.size());
  accept_armed_.assign(listen_fds_.size(), false);
  for (io::Completion& c : accepts_) {
    c.owner = this;
    c.callback = &Shard::OnAccept;
  }
  now_ms_ = loop_->MonotonicMs();
  ArmAccept();
  return true;
}

bool Shard::SetupMemory() {
  // One mapping for the shard's I/O memory, carved into: input buffers (one per connection at
  // most), small-file contents (registered with the ring), and the receive buffers the loop
  // provides to the kernel.
  // An input buffer holds a partial head (at most max_request_head bytes, or the parser has
  // answered 431) plus one delivery from the loop (at most recv_buffer_size): whatever arrives
  // always fits, and pipelined bytes are never clipped.
  // (Plus the empty lines the parser skips before a request line: a head of exactly
  // max_request_head behind kMaxLeadingEmptyBytes of CRLFs still leaves room for a delivery.)
  const size_t input_size = RoundUp(static_cast<size_t>(config_.max_request_head) +
                                        http::kMaxLeadingEmptyBytes + config_.recv_buffer_size,
                                    4096);
  const size_t content_size = RoundUp(std::max<uint32_t>(config_.small_file_max, 1), 4096);
  const uint32_t content_count = static_cast<uint32_t>(std::min<uint64_t>(
      config_.small_file_max == 0 ? 0 : config_.small_file_cache_bytes / content_size, 16384));
  const size_t recv_bytes = static_cast<size_t>(RecvBufferCount()) * RecvBufferSize();
  memory_ = std::make_unique<mem::ShardMemory>(std::initializer_list<size_t>{
      input_size * capacity(), content_size * content_count, recv_bytes});
  if (!memory_->ok()) {
    error_ = memory_->error();
    return false;
  }
  input_pool_ = std::make_unique<mem::BufferPool>(input_size, capacity(), memory_->Region(0));
  if (content_count > 0) {
    content_pool_ =
        std::make_unique<mem::BufferPool>(content_size, content_count, memory_->Region(1));
  }

  return true;
}

// The shard's loop, on the tier chosen at start (make_loop_), with the options its flags give.
bool Shard::MakeLoop() {
  io::LoopOptions lo;
  lo.recv_buffer_count = RecvBufferCount();
  lo.recv_buffer_size = RecvBufferSize();
  lo.uring.recv_incremental = features_.uring.recv_incremental;
  lo.uring.register_ring_fd = features_.uring.register_ring_fd;
  lo.uring.skip_unread_cqes = features_.uring.skip_unread_cqes;
  lo.recv_max_bytes = config_.recv_buffer_size;
  lo.uring.busy_poll_us = config_.busy_poll_us;
  lo.uring.batch_wait_us = config_.batch_wait_us;
  lo.uring.bypass_sendfile = features_.uring.bypass_sendfile;
  lo.uring.splice_min_bytes = config_.splice_min_bytes;
  lo.uring.attach_ring_fd = attach_ring_fd_;
  lo.recv_region = memory_->Region(2);
  lo.uring.pipe_pool_size = config_.pipes;
  lo.uring.body_buffers = config_.body_buffers;
  lo.uring.body_buffer_size = config_.body_buffer_kib * 1024;
  lo.uring.send_zc = config_.send_zc;
  lo.uring.send_zc_min_bytes = config_.send_zc_min_bytes;
  lo.send_turn_bytes = config_.send_turn_bytes;
  lo.send_turn_share_bytes = config_.send_turn_share_bytes;
  lo.page_cache_trust_ms = config_.page_cache_trust_ms;
  lo.tcp_nopush = config_.tcp_nopush;
  lo.epoll.worker_threads = config_.workers;
  lo.uring.direct_files = config_.max_connections + kSpareSlots;  // bypass: the file table
  lo.uring.sqpoll = config_.sqpoll;
  lo.uring.sqpoll_cpu = config_.sqpoll_cpu;
  lo.uring.sqpoll_idle_ms = config_.sqpoll_idle_ms;
  lo.uring.iowq_max_workers = config_.iowq_max_workers;
  lo.epoll.worker_queue = config_.worker_queue;
  if (content_pool_ != nullptr) {
    lo.uring.registered_region = content_pool_->base();
    lo.uring.registered_buffer_size = content_pool_->buffer_size();
    lo.uring.registered_buffer_count = content_pool_->count();
  }
  absl::StatusOr<std::unique_ptr<io::Loop>> loop = make_loop_(lo);
  if (!loop.ok()) {
    error_ = "shard " + std::to_string(index_) + ": " + std::string(loop.status().message());
    return false;
  }
  loop_ = *std::move(loop);
  if (log_ != nullptr) log_->set_io(loop_->Name());
  // "top -H" and /proc/PID/task/*/comm name the shard (at most 15 bytes); named after the loop
  // is made, so that the epoll backend's workers do not inherit the name.
  const std::string name = "ringd-shard-" + std::to_string(index_);
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());

  return true;
}

// The connections' state machine, lent the loop, the pools and the shard's counters.
void Shard::SetupRequestPath() {
  ConnectionParts parts;
  parts.config = &config_;
  parts.loop = loop_.get();
  parts.input_pool = input_pool_.get();
  parts.content_pool = content_pool_.get();
  parts.root_fd = root_fd_;
  parts.root_state = root_state_;
  parts.origin_word = origin_word_;
  parts.sites_word = sites_word_;
  parts.boundary_seed = boundary_seed_;
  parts.mime = mime_;
  parts.capacity = capacity();
  parts.https_port_suffix = https_port_suffix_;
  parts.log = log_;
  parts.error_log = error_log_;
  parts.timing = timing_;
  parts.stats = &stats_;
  parts.host = this;
  machine_ = std::make_unique<ConnectionMachine>(std::move(parts));
  redirect_listeners_.resize(listen_fds_.size(), false);
  if (!proxy_listeners_.empty()) proxy_listeners_.resize(listen_fds_.size(), ProxyHeader::kNone);
}

void Shard::Serve() {
  while (Step()) {
  }
  snapshot_.Close();  // the admin thread stops asking this shard
}

bool Shard::Step() {
  Tick();
  if (draining_ && machine_->live() == 0 && accepts_active_ == 0) return false;
  if (draining_ && now_ms_ >= drain_deadline_ms_ + kDrainGraceMs) {
    // Every connection was aborted at the deadline; one whose last callback has still not come
    // would keep this loop polling forever. The process is exiting: stop here.
    std::fprintf(stderr, "ringd: shard %d: %u connections still open %d ms after the deadline\n",
                 index_, static_cast<unsigned>(machine_->live()), kDrainGraceMs);
    return false;
  }
  int64_t next = machine_->NextDeadlineMs();
  if (accept_retry_ms_ != 0) next = std::min(next, accept_retry_ms_);
  if (parked_count_ > 0 || accept_paused_) next = std::min(next, machine_->NextSilentGiveWayMs());
  if (parked_count_ > 0) next = std::min(next, machine_->NextGaveWayClosableMs());
  if (draining_) {
    next = std::min(next, now_ms_ < drain_deadline_ms_ ? drain_deadline_ms_
                                                       : drain_deadline_ms_ + kDrainGraceMs);
  }
  const int64_t wait = std::clamp<int64_t>(next - now_ms_, 0, 1000);
  loop_->Poll(static_cast<int>(wait));
  machine_->RunWakeups();                   // connections whose file lookups finished in that Poll
  MakeRoom();                               // newcomers over the limit, or waiting for a slot
  if (snapshot_.Pending()) FillSnapshot();  // the admin thread asked (shard_observe.cc)
  if (heartbeat_on_ && heartbeat_.Pending()) heartbeat_.Answer();  // the watchdog asked
  return true;
}

ShardUsage Shard::Usage() const {
  ShardUsage u;
  u.connections = machine_->live();
  u.exchanges = machine_->exchanges_in_use();
  u.input_buffers = static_cast<uint32_t>(input_pool_->count() - input_pool_->Available());
  u.cache_entries = machine_->files().entries_in_use();
  u.cache_pinned = static_cast<uint32_t>(machine_->files().Stats().pinned);
  u.h2_library_bytes = machine_->h2_library_bytes();
  for (const auto& site : machine_->site_files()) {  // --site: each site's own cache too
    u.cache_entries += site->files->entries_in_use();
    u.cache_pinned += static_cast<uint32_t>(site->files->Stats().pinned);
  }
  return u;
}

void Shard::Tick() {
  now_ms_ = loop_->MonotonicMs();
  machine_->Tick(now_ms_, loop_->RealtimeSec());
  if (!draining_ && stop_requested_.load(std::memory_order_acquire)) BeginDrain();
  if (draining_ && drain_deadline_ms_ == kNoDeadline &&
      stop_bounded_.load(std::memory_order_acquire)) {
    drain_deadline_ms_ = now_ms_ + config_.shutdown_timeout_ms;  // SIGTERM after SIGQUIT
  }
  if (accept_retry_ms_ != 0 && now_ms_ >= accept_retry_ms_) {
    accept_retry_ms_ = 0;
    if (!draining_ && !accept_paused_) ArmAccept();
  }
  if (draining_ && now_ms_ >= drain_deadline_ms_) {  // out of time
    stats_.cut_at_drain_deadline += machine_->AbortAll();
  }
  if (now_ms_ >= release_idle_ms_) {
    release_idle_ms_ = now_ms_ + kReleaseIdleMs;
    input_pool_->ReleaseIdle();
    stats_.input_buffers_released = input_pool_->released();
    stats_.exchanges_released = machine_->ReleaseIdleExchanges();
  }
  LogRefusals();
}

// Connections refused for their address, on stderr at most once a second per shard: a flood of
// them (a scan, a misconfigured balancer) costs a line a second, not a line each. The counters
// (and so the metrics) have every one.
void Shard::LogRefusals() {
  if (proxy_listeners_.empty() && config_.client_rules.empty()) return;
  if (now_ms_ - refusals_logged_ms_ < 1000) return;
  refusals_logged_ms_ = now_ms_;
  const io::LoopStats loop = loop_->Stats();
  const uint64_t denied = stats_.clients_denied + loop.clients_denied;
  const uint64_t proxy = stats_.proxy_untrusted + stats_.proxy_missing + stats_.proxy_malformed +
                         loop.proxy_missing + loop.proxy_malformed;
  const uint64_t total = denied + proxy;
  if (total == refusals_logged_) return;
  char last[http::ClientAddress::kTextMax];
  const size_t last_len = stats_.last_refused.Format(last, sizeof last);
  std::fprintf(stderr,
               "ringd: shard %d: %llu connections refused (%llu by --allow/--deny, %llu for the "
               "PROXY protocol: untrusted peer, header missing or malformed) since the last line; "
               "last refused by address: %.*s\n",
               index_, static_cast<unsigned long long>(total - refusals_logged_),
               static_cast<unsigned long long>(denied), static_cast<unsigned long long>(proxy),
               static_cast<int>(last_len), last);
  refusals_logged_ = total;
}

void Shard::BeginDrain() {
  draining_ = true;
  drain_deadline_ms_ = stop_bounded_.load(std::memory_order_acquire)
                           ? now_ms_ + config_.shutdown_timeout_ms
                           : kNoDeadline;
  for (io::Completion& c : accepts_) loop_->Cancel(&c);
  // Stop listening at once: newcomers are refused (or, with SO_REUSEPORT, go to a listener that
  // is still open, such as a new process's) instead of waiting in a backlog nobody accepts
  // from. Shutting a listening socket down also resets what is queued in its backlog (with
  // net.ipv4.tcp_migrate_req=1 the kernel moves it to another listener of the same SO_REUSEPORT
  // group instead: a new process started with --takeover). A socket
  // systemd passed stays open: systemd keeps it, and what waits in its backlog is the next
  // process's to accept (a restart refuses nobody).
  if (!listeners_shared_) {
    for (int fd : listen_fds_) loop_->Shutdown(fd, SHUT_RDWR);
  }
  machine_->BeginDrain();
  // Newcomers parked for a slot are refused like those in the backlog.
  for (; parked_count_ > 0; --parked_count_, parked_head_ = (parked_head_ + 1) % kParkedMax) {
    ++stats_.overloaded;
    loop_->Close(parked_[parked_head_].fd);
  }
  // Connections still receiving a request head are not cut: one accepted a moment ago has a
  // request on its way (a restart under load would lose it). They are answered with
  // `Connection: close`, within the header timeout and the drain deadline.
  drain_begun_.store(true, std::memory_order_release);
}

void Shard::ArmAccept() {
  for (size_t i = 0; i < accepts_.size(); ++i) {
    if (accept_armed_[i]) continue;
    accept_armed_[i] = true;
    loop_->Accept(listen_fds_[i], &accepts_[i]);
  }
  accepts_active_ = static_cast<uint32_t>(accepts_.size());
}

void Shard::OnAccept(io::Completion* c) {
  Shard* self = static_cast<Shard*>(c->owner);
  if (c->result >= 0) {
    self->Accepted(static_cast<int>(c->result), static_cast<size_t>(c - self->accepts_.data()));
  } else if ((c->result == -EMFILE || c->result == -ENFILE) && !self->draining_) {
    // Out of descriptors (EMFILE; ENFILE: the system's, or on the bypass tier the ring's file
    // table, which a burst of newcomers can fill while closes are in flight): connections that
    // gave way (and have lingered their while) close now, and the longest-idle ones give way, a
    // batch of each (the accept
    // itself is retried below, kAcceptRetryMs later: a lingering connection still holds its
    // descriptor, and the next round closes it).
    for (uint32_t i = 0; i < kReclaimBatch && self->machine_->CloseOldestGaveWay(); ++i) {
    }
    for (uint32_t i = 0; i < kReclaimBatch && self->machine_->GiveWayOldestIdle(); ++i) {
    }
  }
  if (c->more) return;
  self->accept_armed_[static_cast<size_t>(c - self->accepts_.data())] = false;
  --self->accepts_active_;
  if (self->draining_) return;
  if (self->accept_paused_) {
    // Paused at the connection limit; if connections closed while the cancel was in flight,
    // nothing else will resume accepting.
    if (self->accepts_active_ == 0 && !self->AtLimit()) {
      self->accept_paused_ = false;
      self->ArmAccept();
    }
    return;
  }
  // The shard cancels accepts only to pause or drain (both above): an accept that ends cancelled
  // here was ended by the backend itself (epoll cannot watch the listener: ENOMEM), and is
  // retried like any other error below.
  if (c->result == -ECANCELED) return;
  if (c->result >= 0 || c->result == -EINTR || c->result == -ECONNABORTED) {
    // The kernel ended the multishot: start another (armed again, or ArmAccept would start a
    // second accept on this listener while this one runs, as another listener's EMFILE retry
    // may ask it to).
    self->accept_armed_[static_cast<size_t>(c - self->accepts_.data())] = true;
    self->loop_->Accept(c->fd, c);
    ++self->accepts_active_;
    return;
  }
  // Out of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM), or an error no listener
  // should meet: accept again later (Tick, ArmAccept) rather than spin on it, or leave this
  // listener unserved for good.
  if (self->accept_retry_ms_ == 0) self->accept_retry_ms_ = self->now_ms_ + kAcceptRetryMs;
}

void Shard::Accepted(int fd, size_t listener) {
  if (draining_) {
    ++stats_.overloaded;
    loop_->Close(fd);
    return;
  }
  if (!Welcome(fd, listener)) return;
  // First come, first served: while newcomers are parked, the next one parks behind them.
  if (parked_count_ == 0 && Admit(fd, listener)) return;
  if (parked_count_ == kParkedMax) {  // more than the listen backlog: the last resort
    ++stats_.overloaded;
    loop_->Close(fd);
    return;
  }
  // Every slot is taken (a burst beyond the reserve, or slots held by connections on their way
  // out): the newcomer waits for one, and MakeRoom frees one for it at the end of this turn.
  parked_[(parked_head_ + parked_count_) % kParkedMax] =
      Parked{fd, static_cast<uint32_t>(listener)};
  ++parked_count_;
  ++stats_.parked;
  if (AtLimit()) PauseAccept();
}

// Who may connect, judged at accept before any work: on a ",proxy" listener the peer must be a
// --proxy-from address (the client it names is judged when its header comes), elsewhere the
// peer is the client, judged by --allow/--deny. False when it closed the connection. Neither
// set (or --proxy-from all): no system call here.
bool Shard::Welcome(int fd, size_t listener) {
  const bool proxy = !proxy_listeners_.empty() && proxy_listeners_[listener] != ProxyHeader::kNone;
  if (proxy ? config_.proxy_from_all : config_.client_rules.empty()) return true;
  sockaddr_storage ss;
  socklen_t len = sizeof ss;
  http::ClientAddress peer;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) peer.Set(ss);
  if (proxy ? config_.proxy_from.Contains(peer) : config_.client_rules.Allows(peer)) return true;
  ++(proxy ? stats_.proxy_untrusted : stats_.clients_denied);
  stats_.last_refused = peer;
  loop_->Close(fd);
  return false;
}

// A newcomer takes a connection slot; false if none is free.
bool Shard::Admit(int fd, size_t listener) {
  bool refused = false;  // by --limit-conn: closed
  if (machine_->Open(fd, redirect_listeners_[listener], ReadsProxyHeader(listener),
                     ReadsProxyHeaderBelowTls(listener), &refused) == nullptr) {
    return refused;
  }
  // Over the limit, the longest-idle connections give way to newcomers at the end of the turn
  // (MakeRoom). With nobody idle to give way, stop accepting: the kernel's backlog holds
  // newcomers until a connection closes or goes idle (ResumeAcceptIfRoom).
  if (AtLimit()) PauseAccept();
  return true;
}

void Shard::PauseAccept() {
  if (accept_paused_) return;
  accept_paused_ = true;
  ++stats_.accept_paused;
  for (io::Completion& c : accepts_) loop_->Cancel(&c);
}

uint32_t Shard::capacity() const { return config_.max_connections + kReclaimReserve; }

// The connection limit's policy, once per turn of the loop (after Poll): what nginx does when it
// runs out of connections (ngx_drain_connections: the reusable, idle keep-alive connections,
// oldest first, closed 32 at a time), with a lingering close, and with newcomers parked while
// the slots they need free.
//  1. Newcomers parked for a slot take the slots that freed, first come first served.
//  2. Over the limit, the longest-idle keep-alive connections give way, one per newcomer over
//     it, at most kReclaimBatch a turn. Never one with a request or a response in progress.
//  3. Newcomers still parked: the connections that gave way longest ago close now (as many as
//     the closes under way will not free), at most kReclaimBatch a turn.
//  4. Accepting resumes if it had paused and there is room now.
void Shard::MakeRoom() {
  if (draining_) return;
  while (parked_count_ > 0) {
    const Parked p = parked_[parked_head_];
    bool refused = false;  // by --limit-conn: closed, and the next may take the slot
    if (machine_->Open(p.fd, redirect_listeners_[p.listener], ReadsProxyHeader(p.listener),
                       ReadsProxyHeaderBelowTls(p.listener), &refused) == nullptr &&
        !refused) {
      break;
    }
    parked_head_ = (parked_head_ + 1) % kParkedMax;
    --parked_count_;
    if (AtLimit()) PauseAccept();  // as Admit
  }
  const uint32_t wanted = machine_->Serving() + parked_count_;
  for (uint32_t i = 0; wanted > config_.max_connections + i && i < kReclaimBatch; ++i) {
    if (!machine_->GiveWayOldestIdle() && !machine_->AbortOldestSilent()) break;
  }
  const uint32_t freeing = machine_->Closing();
  for (uint32_t i = 0; parked_count_ > freeing + i && i < kReclaimBatch; ++i) {
    if (!machine_->CloseOldestGaveWay()) break;
  }
  ResumeAcceptIfRoom();
}

// Whether a newcomer now could not be served soon, so that accepting should pause: the parking
// is full, or the connections that serve are at the limit with none idle to give way.
// Accepting goes on at the limit while a connection can give way to a newcomer this turn (one
// idle, or one silent for kSilentGiveWayMs: MakeRoom); while none can, the kernel's backlog holds
// newcomers, and the loop wakes when the oldest silent connection may give way.
bool Shard::AtLimit() const {
  return parked_count_ == kParkedMax ||
         (machine_->Serving() + parked_count_ >= config_.max_connections && !machine_->HasIdle() &&
          !machine_->HasSilent());
}

void Shard::ResumeAcceptIfRoom() {
  if (accept_paused_ && !draining_ && !AtLimit() && accepts_active_ == 0) {
    accept_paused_ = false;
    ArmAccept();
  }
}

}  // namespace ringd
