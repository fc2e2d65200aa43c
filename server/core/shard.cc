#include "server/core/shard.h"

#include <pthread.h>
#include <sched.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "io/assert.h"

namespace ringd {
namespace {

constexpr int64_t kLingerMs = 5000;      // after the last response, wait this long for EOF
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
      cpu_(cpu),
      header_timers_(config.header_timeout_ms),
      idle_timers_(config.keepalive_timeout_ms),
      send_timers_(config.send_timeout_ms),
      linger_timers_(kLingerMs),
      discard_timers_(config.discard_body_timeout_ms),
      gave_way_timers_(kLingerMs) {}

Shard::~Shard() {
  // Quiet the loop first: after Quiesce nothing completes into the cache or the pools (the epoll
  // backend's workers would otherwise still run queued opens into cache entries). The cache then
  // closes its descriptors through the loop, and the loop goes.
  if (loop_ != nullptr) loop_->Quiesce();
  if (live_ > 0) {
    // Step gave up on connections whose last callback never came (an epoll worker still
    // reading a slow disk at the drain deadline): the process is exiting, and after Quiesce
    // nothing touches them. They are left as they are.
    exchanges_->Abandon();
    conns_->Abandon();
    input_pool_->Abandon();  // their input buffers
  }
  files_.reset();
  loop_.reset();
  content_pool_.reset();
  input_pool_.reset();
  memory_.reset();
  for (int fd : listen_fds_) ::close(fd);
}

void Shard::RequestStop() {
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
  std::string err;
  loop_ = make_loop_(lo, &err);
  if (loop_ == nullptr) {
    error_ = "shard " + std::to_string(index_) + ": " + err;
    return false;
  }
  if (log_ != nullptr) log_->set_io(loop_->Name());
  // "top -H" and /proc/PID/task/*/comm name the shard (at most 15 bytes); named after the loop
  // is made, so that the epoll backend's workers do not inherit the name.
  const std::string name = "ringd-shard-" + std::to_string(index_);
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());

  return true;
}

// What the request path needs beside the loop: the pools, the file cache, the send queue, the
// planners and the parser's limits.
void Shard::SetupRequestPath() {
  conns_ = std::make_unique<mem::SlabPool<Connection>>(capacity());
  exchanges_ = std::make_unique<mem::SlabPool<Exchange>>(capacity());
  if (log_ != nullptr) peers_ = std::make_unique<PeerAddress[]>(capacity());
  FileCacheOptions fo;
  fo.max_entries = config_.open_file_cache_entries;
  fo.valid_ms = config_.open_file_cache_valid_ms;
  fo.small_file_max = config_.small_file_max;
  files_ = std::make_unique<FileCache>(loop_.get(), root_fd_, content_pool_.get(), fo);
  SendQueueOptions so;
  so.srpt = config_.send_srpt;
  so.slots = config_.send_slots;
  so.short_bytes = config_.send_short_bytes;
  so.max_wait_ms = config_.send_max_wait_ms;
  so.hold_ms = config_.send_slot_hold_ms;
  so.capacity = capacity();
  sends_ = std::make_unique<SendQueue>(so);
  scratch_ = std::make_unique<http::PlanScratch>();

  uint64_t random = 0;
  if (getrandom(&random, sizeof random, 0) != sizeof random)
    random = static_cast<uint64_t>(loop_->MonotonicMs());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(random));
  boundary_ = std::string("ringd-") + hex;
  planner_.target.serve_dot_files = config_.serve_dot_files;
  planner_.mime = mime_;
  planner_.index_file = config_.index;
  planner_.max_ranges = config_.max_ranges;
  planner_.precompressed = config_.precompressed;
  planner_.max_discarded_body = config_.max_discarded_body;
  planner_.multipart_boundary = boundary_;
  planner_.origin = config_.origin.empty() ? nullptr : &config_.origin;
  redirect_planner_ = planner_;
  redirect_planner_.redirect_to_https = true;
  redirect_planner_.https_port_suffix = https_port_suffix_;
  redirect_listeners_.resize(listen_fds_.size(), false);
  limits_.max_request_line = config_.max_request_line;
  limits_.max_head_bytes = config_.max_request_head;
  limits_.max_headers = config_.max_headers;
}

void Shard::Serve() {
  while (Step()) {
  }
  snapshot_.Close();  // the admin thread stops asking this shard
}

bool Shard::Step() {
  Tick();
  if (draining_ && live_ == 0 && accepts_active_ == 0) return false;
  if (draining_ && now_ms_ >= drain_deadline_ms_ + kDrainGraceMs) {
    // Every connection was aborted at the deadline; one whose last callback has still not come
    // would keep this loop polling forever. The process is exiting: stop here.
    std::fprintf(stderr, "ringd: shard %d: %u connections still open %d ms after the deadline\n",
                 index_, static_cast<unsigned>(live_), kDrainGraceMs);
    return false;
  }
  int64_t next = std::min({header_timers_.NextDeadline(), idle_timers_.NextDeadline(),
                           send_timers_.NextDeadline(), linger_timers_.NextDeadline(),
                           gave_way_timers_.NextDeadline()});
  if (accept_retry_ms_ != 0) next = std::min(next, accept_retry_ms_);
  if (parked_count_ > 0 || accept_paused_) next = std::min(next, NextSilentGiveWayMs());
  if (draining_) {
    next = std::min(next, now_ms_ < drain_deadline_ms_ ? drain_deadline_ms_
                                                       : drain_deadline_ms_ + kDrainGraceMs);
  }
  next = std::min(next, discard_timers_.NextDeadline());
  next = std::min(next, sends_->NextDeadlineMs());  // a queued body reaching the aging bound
  const int64_t wait = std::clamp<int64_t>(next - now_ms_, 0, 1000);
  loop_->Poll(static_cast<int>(wait));
  files_->RunWakeups();                     // connections whose file lookups finished in that Poll
  MakeRoom();                               // newcomers over the limit, or waiting for a slot
  if (snapshot_.Pending()) FillSnapshot();  // the admin thread asked (shard_observe.cc)
  if (heartbeat_on_ && heartbeat_.Pending()) heartbeat_.Answer();  // the watchdog asked
  return true;
}

ShardUsage Shard::Usage() const {
  ShardUsage u;
  u.connections = live_;
  u.exchanges = static_cast<uint32_t>(exchanges_->InUse());
  u.input_buffers = static_cast<uint32_t>(input_pool_->count() - input_pool_->Available());
  u.cache_entries = files_->entries_in_use();
  u.cache_pinned = static_cast<uint32_t>(files_->Stats().pinned);
  return u;
}

void Shard::Tick() {
  now_ms_ = loop_->MonotonicMs();
  files_->set_now(now_ms_);
  const int64_t sec = loop_->RealtimeSec();
  if (sec != date_sec_) {
    date_sec_ = sec;
    http::FormatHttpDate(sec, date_);
  }
  auto conn_of = [](TimerNode* t) {
    return reinterpret_cast<Connection*>(reinterpret_cast<char*>(t) - offsetof(Connection, timer));
  };
  header_timers_.Expire(now_ms_, [&](TimerNode* t) {
    ++stats_.header_timeouts;  // slowloris, or a client that connected and said nothing
    Abort(conn_of(t));
  });
  idle_timers_.Expire(now_ms_, [&](TimerNode* t) {
    ++stats_.idle_timeouts;
    Abort(conn_of(t));
  });
  send_timers_.Expire(now_ms_, [&](TimerNode* t) {
    Connection* conn = conn_of(t);
    Exchange* ex = conn->ex;
    // Only a response (or its file lookup) waits on the send timer: once the last one is over,
    // the connection closes, lingers, or waits in kEndingRecv, each without it.
    RINGD_ASSERT(ex != nullptr);
    if (ex != nullptr && ex->sending != Exchange::Sending::kNone &&
        ex->send.done > ex->send_progress) {
      ex->send_progress = ex->send.done;  // slow, but moving: another period
      return send_timers_.Arm(t, now_ms_);
    }
    // Waiting for a send slot is the shard's doing, not the client's (and bounded by
    // --send-max-wait-ms): another period.
    if (ex != nullptr && ex->ticket.queued()) return send_timers_.Arm(t, now_ms_);
    ++stats_.send_timeouts;
    Abort(conn);
  });
  linger_timers_.Expire(now_ms_, [&](TimerNode* t) { Abort(conn_of(t)); });
  gave_way_timers_.Expire(now_ms_, [&](TimerNode* t) { Abort(conn_of(t)); });
  discard_timers_.Expire(now_ms_, [&](TimerNode* t) {
    ++stats_.discard_timeouts;  // a request body that stopped arriving after its response
    Abort(conn_of(t));
  });

  if (sends_->NextDeadlineMs() <= now_ms_) PumpSends();  // the aging bound
  if (!draining_ && stop_requested_.load(std::memory_order_acquire)) BeginDrain();
  if (accept_retry_ms_ != 0 && now_ms_ >= accept_retry_ms_) {
    accept_retry_ms_ = 0;
    if (!draining_ && !accept_paused_) ArmAccept();
  }
  if (draining_ && now_ms_ >= drain_deadline_ms_) {
    // Out of time: end every connection still open.
    auto abort_all = [&](TimerList& list) {
      list.Expire(INT64_MAX, [&](TimerNode* t) { Abort(conn_of(t)); });
    };
    abort_all(header_timers_);
    abort_all(idle_timers_);
    abort_all(send_timers_);
    abort_all(linger_timers_);
    abort_all(gave_way_timers_);
    abort_all(discard_timers_);
  }
}

void Shard::BeginDrain() {
  draining_ = true;
  drain_deadline_ms_ = now_ms_ + config_.shutdown_timeout_ms;
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
  // Connections between requests have nothing in flight: end them now. Those with a response in
  // flight finish it and close (FinishResponse checks draining_).
  auto conn_of = [](TimerNode* t) {
    return reinterpret_cast<Connection*>(reinterpret_cast<char*>(t) - offsetof(Connection, timer));
  };
  idle_timers_.Expire(INT64_MAX, [&](TimerNode* t) { Abort(conn_of(t)); });
  discard_timers_.Expire(INT64_MAX, [&](TimerNode* t) { Abort(conn_of(t)); });
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
    // gave way close now, and the longest-idle ones give way, a batch of each (the accept
    // itself is retried below, kAcceptRetryMs later: a lingering connection still holds its
    // descriptor, and the next round closes it).
    for (uint32_t i = 0; i < kReclaimBatch && self->CloseOldestGaveWay(); ++i) {
    }
    for (uint32_t i = 0; i < kReclaimBatch && self->ReclaimOldestIdle(); ++i) {
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
  // First come, first served: while newcomers are parked, the next one parks behind them.
  Connection* conn = parked_count_ == 0 ? conns_->Get() : nullptr;
  if (conn != nullptr) return Admit(conn, fd, listener);
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

void Shard::Admit(Connection* conn, int fd, size_t listener) {
  ++stats_.accepted;
  ++live_;
  ++state_counts_[static_cast<int>(ConnState::kReading)];
  conn->shard = this;
  conn->fd = fd;
  conn->https_redirect = redirect_listeners_[listener];
  NotePeer(conn);
  conn->recv.owner = conn;
  conn->recv.callback = &Shard::OnRecv;
  header_timers_.Arm(&conn->timer, now_ms_);
  ArmRecv(conn);
  // Over the limit, the longest-idle connections give way to newcomers at the end of the turn
  // (MakeRoom). With nobody idle to give way, stop accepting: the kernel's backlog holds
  // newcomers until a connection closes or goes idle (ResumeAcceptIfRoom).
  if (AtLimit()) PauseAccept();
}

void Shard::PauseAccept() {
  if (accept_paused_) return;
  accept_paused_ = true;
  ++stats_.accept_paused;
  for (io::Completion& c : accepts_) loop_->Cancel(&c);
}

uint32_t Shard::capacity() const { return config_.max_connections + kReclaimReserve; }

// The connections --max-connections counts: all but those on their way out (their last response
// out, their receive ending; lingering after their last response or after giving way; or
// closing), which take the reserve's slots.
uint32_t Shard::Serving() const {
  return live_ - state_counts_[static_cast<int>(ConnState::kEndingRecv)] -
         state_counts_[static_cast<int>(ConnState::kLingering)] -
         state_counts_[static_cast<int>(ConnState::kClosing)];
}

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
    Connection* conn = conns_->Get();
    if (conn == nullptr) break;
    const Parked p = parked_[parked_head_];
    parked_head_ = (parked_head_ + 1) % kParkedMax;
    --parked_count_;
    Admit(conn, p.fd, p.listener);
  }
  const uint32_t wanted = Serving() + parked_count_;
  for (uint32_t i = 0; wanted > config_.max_connections + i && i < kReclaimBatch; ++i) {
    if (!ReclaimOldestIdle() && !ReclaimOldestSilent()) break;
  }
  const uint32_t freeing = state_counts_[static_cast<int>(ConnState::kClosing)];
  for (uint32_t i = 0; parked_count_ > freeing + i && i < kReclaimBatch; ++i) {
    if (!CloseOldestGaveWay()) break;
  }
  ResumeAcceptIfRoom();
}

// The keep-alive connection that has been idle longest gives way to a newcomer; false if none
// is idle. Connections with a request in progress never give way. The close lingers (FIN, then
// read and drop until the client closes): the connection may have gone idle a moment ago, its
// last response still unread in the client's buffer, and a request already on its way would turn
// a plain close into a reset that destroys that response. Its slot goes to a newcomer when the
// client closes, the linger ends, or a parked newcomer needs it (CloseOldestGaveWay).
bool Shard::ReclaimOldestIdle() {
  // Idle keep-alive connections first; then those whose response is done and that only wait for
  // the rest of a body we skip (idle too, as far as serving goes).
  TimerNode* t = idle_timers_.PopOldest();
  if (t == nullptr) t = discard_timers_.PopOldest();
  if (t == nullptr) return false;
  ++stats_.idle_reclaimed;
  Connection* conn =
      reinterpret_cast<Connection*>(reinterpret_cast<char*>(t) - offsetof(Connection, timer));
  conn->more_input_expected = true;
  CloseGracefully(conn);
  if (conn->state == ConnState::kLingering) gave_way_timers_.Arm(&conn->timer, now_ms_);
  return true;
}

// The connection waiting longest for the first byte of its first request, among the
// kSilentScan waiting longest for a head (nullptr if none): those are armed on the header timers
// in the order they began to wait. Connections with part of a head, or after an earlier
// request, are passed over. `began_before`: only one that began waiting by then.
Connection* Shard::OldestSilent(int64_t began_before) const {
  const int64_t deadline_by = began_before + header_timers_.duration_ms();
  uint32_t scanned = 0;
  for (TimerNode* t = header_timers_.Oldest(); t != nullptr && scanned < kSilentScan;
       t = TimerList::Next(t), ++scanned) {
    if (t->deadline_ms > deadline_by) return nullptr;  // this one and all after it too young
    Connection* conn =
        reinterpret_cast<Connection*>(reinterpret_cast<char*>(t) - offsetof(Connection, timer));
    if (conn->state == ConnState::kReading && conn->requests == 0 && conn->in_len == 0 &&
        conn->ex == nullptr) {
      return conn;
    }
  }
  return nullptr;
}

// A connection open for kSilentGiveWayMs with no byte of a request yet gives way (closed at
// once: it has nothing to lose); false if none has.
bool Shard::ReclaimOldestSilent() {
  Connection* conn = OldestSilent(now_ms_ - kSilentGiveWayMs);
  if (conn == nullptr) return false;
  ++stats_.silent_reclaimed;
  Abort(conn);
  return true;
}

// When the oldest connection waiting for a head may give way if it is silent (INT64_MAX: none
// waits): with newcomers parked or accepting paused, the loop wakes for it.
int64_t Shard::NextSilentGiveWayMs() const {
  const TimerNode* t = header_timers_.Oldest();
  if (t == nullptr) return INT64_MAX;
  return t->deadline_ms - header_timers_.duration_ms() + kSilentGiveWayMs;
}

// Closes the connection that gave way longest ago and still lingers; false if none does. Its
// FIN went out first of all those lingering, and a lingering connection reads and drops whatever
// its client sends, so only bytes still on their way turn this close into a reset, as they do
// nginx's closes of idle connections (which do not linger at all).
bool Shard::CloseOldestGaveWay() {
  TimerNode* t = gave_way_timers_.PopOldest();
  if (t == nullptr) return false;
  ++stats_.gave_way_closed;
  Abort(reinterpret_cast<Connection*>(reinterpret_cast<char*>(t) - offsetof(Connection, timer)));
  return true;
}

// Whether a newcomer now could not be served soon, so that accepting should pause: the parking
// is full, or the connections that serve are at the limit with none idle to give way.
// Accepting goes on at the limit while a connection can give way to a newcomer this turn (one
// idle, or one silent for kSilentGiveWayMs: MakeRoom); while none can, the kernel's backlog holds
// newcomers, and the loop wakes when the oldest silent connection may give way.
bool Shard::AtLimit() const {
  return parked_count_ == kParkedMax ||
         (Serving() + parked_count_ >= config_.max_connections && idle_timers_.Empty() &&
          discard_timers_.Empty() && OldestSilent(now_ms_ - kSilentGiveWayMs) == nullptr);
}

void Shard::ResumeAcceptIfRoom() {
  if (accept_paused_ && !draining_ && !AtLimit() && accepts_active_ == 0) {
    accept_paused_ = false;
    ArmAccept();
  }
}

void Shard::MaybeFree(Connection* conn) {
  if (conn->state != ConnState::kClosing || conn->recv_active ||
      (conn->ex != nullptr && conn->ex->sending != Exchange::Sending::kNone)) {
    return;
  }
  ReleaseExchange(conn);
  if (conn->in != nullptr) {
    input_pool_->Put(conn->in);
    conn->in = nullptr;
  }
  loop_->Close(conn->fd);
  --state_counts_[static_cast<int>(conn->state)];
  conns_->Put(conn);
  --live_;
  ++stats_.closed;
  ResumeAcceptIfRoom();
}

}  // namespace ringd
