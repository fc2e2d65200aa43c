// The machine's surface toward its shard: opening a connection, the timers, the drain, the
// connection limit's means, and the last step of every connection (MaybeFree). The state machine
// itself is connection.cc (the request side) and body_send.cc (the response after its head).
#include <sys/random.h>

#include <algorithm>
#include <cstdio>

#include "io/assert.h"
#include "server/core/connection.h"
#include "server/core/h2_session.h"

namespace ringd {
namespace {

constexpr int64_t kLingerMs = 5000;  // after the last response, wait this long for EOF

Connection* ConnOfTimer(TimerNode* t) {
  return reinterpret_cast<Connection*>(reinterpret_cast<char*>(t) - offsetof(Connection, timer));
}

}  // namespace

ConnectionMachine::ConnectionMachine(ConnectionParts parts)
    : config_(*parts.config),
      loop_(parts.loop),
      input_pool_(parts.input_pool),
      host_(parts.host),
      stats_(*parts.stats),
      log_(parts.log),
      error_log_(parts.error_log),
      timing_(parts.timing),
      https_port_suffix_(std::move(parts.https_port_suffix)),
      header_timers_(config_.header_timeout_ms),
      idle_timers_(config_.keepalive_timeout_ms),
      send_timers_(config_.send_timeout_ms),
      linger_timers_(kLingerMs),
      discard_timers_(config_.discard_body_timeout_ms),
      gave_way_timers_(kLingerMs) {
  RINGD_ASSERT(loop_ != nullptr && input_pool_ != nullptr && host_ != nullptr);
  RINGD_ASSERT(input_pool_->count() >= parts.capacity);  // Stash: one buffer per connection
  conns_ = std::make_unique<mem::SlabPool<Connection>>(parts.capacity);
  exchanges_ = std::make_unique<mem::SlabPool<Exchange>>(parts.capacity);
  if (config_.http2) {
    h2_ = std::make_unique<H2Session*[]>(parts.capacity);
    h2_exchanges_ = std::make_unique<mem::SlabPool<Exchange>>(parts.capacity);
    MakeH2Callbacks();
  }
  // The error log at level error writes few lines, each while its socket is open: it asks for
  // the peer then (ClientOf) rather than cost every connection a getpeername.
  // The limits, --real-ip-from and a site's --allow / --deny need every connection's client.
  real_ip_ = !config_.real_ip_from.empty();
  const bool peer_at_accept = log_ != nullptr ||
                              (error_log_ != nullptr && error_log_->Wants(ErrorLevel::kInfo)) ||
                              config_.limits_clients() || real_ip_ || config_.any_site_rules();
  if (peer_at_accept) peers_ = std::make_unique<PeerAddress[]>(parts.capacity);
  if (config_.limit_req.microrequests_per_s != 0) {
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, 0) != sizeof seed) seed = static_cast<uint64_t>(now_ms_);
    rates_ = std::make_unique<http::RateTable>(config_.limit_req, config_.limit_table, seed);
  }
  if (config_.limit_conn != 0) {
    // One entry per connection slot at most: a client with no connection has none.
    conn_counts_ = std::make_unique<http::ConnTable>(config_.limit_conn, parts.capacity);
    conn_keys_ = std::make_unique<http::LimitKey[]>(parts.capacity);
    conn_counted_ = std::make_unique<uint8_t[]>(parts.capacity);
  }
  FileCacheOptions fo;
  fo.max_entries = config_.open_file_cache_entries;
  fo.valid_ms = config_.open_file_cache_valid_ms;
  fo.small_file_max = config_.small_file_max;
  root_word_ = parts.root_state;
  int root_fd = parts.root_fd;
  if (root_word_ != nullptr) {
    root_state_ = root_word_->load(std::memory_order_acquire);
    root_fd = DocumentRoot::Fd(root_state_);
  }
  files_ = std::make_unique<FileCache>(loop_, root_fd, parts.content_pool, fo);
  SendQueueOptions so;
  so.srpt = config_.send_srpt;
  so.slots = config_.send_slots;
  so.short_bytes = config_.send_short_bytes;
  so.max_wait_ms = config_.send_max_wait_ms;
  so.hold_ms = config_.send_slot_hold_ms;
  so.capacity = parts.capacity;
  sends_ = std::make_unique<SendQueue>(so);
  scratch_ = std::make_unique<http::PlanScratch>();

  uint64_t random = parts.boundary_seed;
  if (random == 0 && getrandom(&random, sizeof random, 0) != sizeof random)
    random = static_cast<uint64_t>(loop_->MonotonicMs());
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(random));
  boundary_ = std::string("ringd-") + hex;
  planner_.target.serve_dot_files = config_.serve_dot_files;
  planner_.mime = parts.mime;
  planner_.index_file = config_.index;
  planner_.fallback = config_.fallback;
  planner_.autoindex = config_.autoindex;
  planner_.autoindex_format = config_.autoindex_format;
  if (config_.any_autoindex()) {
    DirLister::Options lo;
    lo.format = config_.autoindex_format;
    lo.show_dot_files = config_.serve_dot_files;
    lo.max_entries = config_.autoindex_max_entries;
    lister_ = std::make_unique<DirLister>(loop_, lo);
  }
  if (config_.compress) {
    planner_.compress = &config_.compress_policy;
    CompressorOptions co;
    co.cache_bytes = config_.compress_cache_bytes;
    compressor_ = std::make_unique<Compressor>(loop_, co);
  }
  planner_.max_ranges = config_.max_ranges;
  planner_.precompressed = config_.precompressed;
  planner_.max_discarded_body = config_.max_discarded_body;
  planner_.multipart_boundary = boundary_;
  origin_word_ = parts.origin_word;
  origin_ =
      origin_word_ != nullptr ? origin_word_->load(std::memory_order_acquire) : &config_.origin;
  planner_.origin = origin_->empty() ? nullptr : origin_;
  redirect_planner_ = planner_;
  redirect_planner_.redirect_to_https = true;
  redirect_planner_.https_port_suffix = https_port_suffix_;
  content_pool_ = parts.content_pool;
  file_options_ = fo;
  sites_word_ = parts.sites_word;
  if (sites_word_ != nullptr) TakeUpSites(sites_word_->load(std::memory_order_acquire));
  limits_.max_request_line = config_.max_request_line;
  limits_.max_head_bytes = config_.max_request_head;
  limits_.max_headers = config_.max_headers;
  now_ms_ = loop_->MonotonicMs();
}

ConnectionMachine::~ConnectionMachine() { FreeH2Callbacks(); }

std::unique_ptr<SiteFiles> ConnectionMachine::MakeSiteFiles(const SiteRuntime& site) {
  auto f = std::make_unique<SiteFiles>();
  f->name = site.name;
  int fd = site.root_fd;
  f->root_word = site.root_state;
  if (f->root_word != nullptr) {
    f->root_state = f->root_word->load(std::memory_order_acquire);
    fd = DocumentRoot::Fd(f->root_state);
  }
  f->files = std::make_unique<FileCache>(loop_, fd, content_pool_, file_options_);
  f->files->set_now(now_ms_);
  f->own_origin = site.origin;
  f->client_rules = site.client_rules;
  f->planner = planner_;
  if (!site.index.empty()) f->planner.index_file = site.index;
  if (site.origin != nullptr) f->planner.origin = site.origin->empty() ? nullptr : site.origin;
  // A site that lists directories needs the lister, started when the process began with some
  // (a reload that asks for the first one is refused: ringd_main.cc).
  if (site.autoindex.has_value()) f->planner.autoindex = *site.autoindex && lister_ != nullptr;
  if (site.autoindex_format.has_value()) f->planner.autoindex_format = *site.autoindex_format;
  f->redirect_planner = f->planner;
  f->redirect_planner.redirect_to_https = true;
  f->redirect_planner.https_port_suffix = https_port_suffix_;
  return f;
}

// A new generation: a cache and planners for each of its sites (allocated here, at a reload,
// never on a request's path). The sites before go now, or, while exchanges still use them (a
// response under way, a lookup waited for), once those are released.
void ConnectionMachine::TakeUpSites(const Sites* sites) {
  sites_seen_ = sites;
  sites_ = sites != nullptr && !sites->empty() ? sites : nullptr;
  std::vector<std::unique_ptr<SiteFiles>> before = std::move(site_files_);
  site_files_.clear();
  if (sites_ != nullptr) {
    RINGD_ASSERT(sites_->sites.size() == sites_->table.size());
    for (const SiteRuntime& site : sites_->sites) {
      site_files_.push_back(MakeSiteFiles(site));
      for (const auto& old : before) {
        if (old->name == site.name) site_files_.back()->requests = old->requests;
      }
    }
  }
  for (auto& old : before) {
    if (old->exchanges > 0 || old->files->loading() > 0) retired_sites_.push_back(std::move(old));
  }
}

void ConnectionMachine::LeaveSite(Exchange* ex) {
  if (ex->site == nullptr) return;
  RINGD_ASSERT(ex->site->exchanges > 0);
  --ex->site->exchanges;
  ex->site = nullptr;
}

Connection* ConnectionMachine::Open(int fd, bool https_redirect, bool proxy_header, bool tls_proxy,
                                    bool* refused) {
  Connection* conn = conns_->Get();
  if (conn == nullptr) return nullptr;
  if (conn_counts_ != nullptr) {
    // Judged before anything is armed: a refused newcomer is closed at once, its slot back.
    conn->fd = fd;
    NotePeer(conn);
    const size_t slot = conns_->IndexOf(conn);
    conn_counted_[slot] = 0;
    if (tls_proxy) {
      conn_counted_[slot] = 2;  // the client is named below TLS: counted at its first bytes
    } else if (!proxy_header && !CountConnection(conn, peers_[slot])) {
      conns_->Put(conn);
      loop_->Close(fd);
      if (refused != nullptr) *refused = true;
      return nullptr;
    }
  }
  ++stats_.accepted;
  ++live_;
  ++state_counts_[static_cast<int>(ConnState::kReading)];
  conn->machine = this;
  conn->fd = fd;
  conn->https_redirect = https_redirect;
  conn->proxy_header = proxy_header;
  if (conn_counts_ == nullptr) NotePeer(conn);
  conn->recv.owner = conn;
  conn->recv.callback = &ConnectionMachine::OnRecv;
  header_timers_.Arm(&conn->timer, loop_->MonotonicMs());
  ArmRecv(conn);
  return conn;
}

void ConnectionMachine::Tick(int64_t now_ms, int64_t realtime_sec) {
  now_ms_ = now_ms;
  files_->set_now(now_ms_);
  if (root_word_ != nullptr) {
    const uint64_t state = root_word_->load(std::memory_order_acquire);
    if (state != root_state_) {
      root_state_ = state;
      files_->SwitchRoot(DocumentRoot::Fd(state));
    }
  }
  if (origin_word_ != nullptr) {
    const http::OriginHeaders* origin = origin_word_->load(std::memory_order_acquire);
    if (origin != origin_) {
      origin_ = origin;
      planner_.origin = origin->empty() ? nullptr : origin;
      redirect_planner_.origin = planner_.origin;
      for (auto* list : {&site_files_, &retired_sites_}) {
        for (auto& f : *list) {
          if (f->own_origin != nullptr) continue;
          f->planner.origin = planner_.origin;
          f->redirect_planner.origin = planner_.origin;
        }
      }
    }
  }
  if (sites_word_ != nullptr) {
    const Sites* sites = sites_word_->load(std::memory_order_acquire);
    if (sites != sites_seen_) TakeUpSites(sites);
  }
  for (auto& f : site_files_) {
    f->files->set_now(now_ms_);
    if (f->root_word == nullptr) continue;
    const uint64_t state = f->root_word->load(std::memory_order_acquire);
    if (state != f->root_state) {
      f->root_state = state;
      f->files->SwitchRoot(DocumentRoot::Fd(state));
    }
  }
  if (!retired_sites_.empty()) {
    // A site of a generation before the one in use goes once nothing uses it.
    std::erase_if(retired_sites_, [&](const std::unique_ptr<SiteFiles>& f) {
      f->files->set_now(now_ms_);
      return f->exchanges == 0 && f->files->loading() == 0;
    });
  }
  if (realtime_sec != date_sec_) {
    date_sec_ = realtime_sec;
    http::FormatHttpDate(realtime_sec, date_);
  }
  header_timers_.Expire(now_ms_, [&](TimerNode* t) {
    ++stats_.header_timeouts;  // slowloris, or a client that connected and said nothing
    Abort(ConnOfTimer(t));
  });
  idle_timers_.Expire(now_ms_, [&](TimerNode* t) {
    ++stats_.idle_timeouts;
    Connection* conn = ConnOfTimer(t);
    conn->h2 ? H2GoAway(conn) : Abort(conn);  // HTTP/2 says GOAWAY first
  });
  send_timers_.Expire(now_ms_, [&](TimerNode* t) { ExpireSendTimer(ConnOfTimer(t)); });
  linger_timers_.Expire(now_ms_, [&](TimerNode* t) { Abort(ConnOfTimer(t)); });
  gave_way_timers_.Expire(now_ms_, [&](TimerNode* t) { Abort(ConnOfTimer(t)); });
  discard_timers_.Expire(now_ms_, [&](TimerNode* t) {
    ++stats_.discard_timeouts;  // a request body that stopped arriving after its response
    Abort(ConnOfTimer(t));
  });
  h2_quiet_timers_.Expire(now_ms_, [&](TimerNode* t) { H2Quiet(t); });
  stats_.h2_library_bytes = h2_memory_.live_bytes();
  if (sends_->NextDeadlineMs() <= now_ms_) PumpSends();  // the aging bound
}

// A response (or its file lookup) that waited --send-timeout-ms: cut, unless it is moving.
void ConnectionMachine::ExpireSendTimer(Connection* conn) {
  if (conn->h2) return H2ExpireSendTimer(conn);
  Exchange* ex = conn->ex;
  // Only a response (or its file lookup) waits on the send timer: once the last one is over,
  // the connection closes, lingers, or waits in kEndingRecv, each without it.
  RINGD_ASSERT(ex != nullptr);
  if (ex->sending != Exchange::Sending::kNone && ex->send.done > ex->send_progress) {
    ex->send_progress = ex->send.done;  // slow, but moving: another period
    return send_timers_.Arm(&conn->timer, loop_->MonotonicMs());
  }
  // Waiting for a send slot is the shard's doing, not the client's (and bounded by
  // --send-max-wait-ms): another period.
  if (ex->ticket.queued()) return send_timers_.Arm(&conn->timer, loop_->MonotonicMs());
  // So is waiting for the lister: to read the directory and say the status (it makes one
  // listing at a time, so a big one waits behind others), or to make the next piece.
  const bool lister_busy = ex->listing != nullptr && lister_->Waiting(ex->listing);
  if (ex->listing_wait || lister_busy) return send_timers_.Arm(&conn->timer, loop_->MonotonicMs());
  ++stats_.send_timeouts;
  Abort(conn);
}

int64_t ConnectionMachine::NextDeadlineMs() const {
  return std::min({header_timers_.NextDeadline(), idle_timers_.NextDeadline(),
                   send_timers_.NextDeadline(), linger_timers_.NextDeadline(),
                   gave_way_timers_.NextDeadline(), discard_timers_.NextDeadline(),
                   h2_quiet_timers_.NextDeadline(),
                   sends_->NextDeadlineMs()});  // a queued body reaching the aging bound
}

// Connections between requests have nothing in flight: they end now. Those with a response in
// flight finish it and close (StartResponse and FinishResponse read draining_).
void ConnectionMachine::BeginDrain() {
  draining_ = true;
  // HTTP/2 connections send GOAWAY: idle ones close once it is out, busy ones once the streams
  // it names are done.
  for (TimerNode* t = send_timers_.Oldest(); t != nullptr;) {
    TimerNode* next = TimerList::Next(t);
    if (ConnOfTimer(t)->h2) H2GoAway(ConnOfTimer(t));
    t = next;
  }
  idle_timers_.Expire(INT64_MAX, [&](TimerNode* t) {
    Connection* conn = ConnOfTimer(t);
    conn->h2 ? H2GoAway(conn) : Abort(conn);
  });
  discard_timers_.Expire(INT64_MAX, [&](TimerNode* t) { Abort(ConnOfTimer(t)); });
}

uint32_t ConnectionMachine::AbortAll() {
  uint32_t sending = 0;
  send_timers_.Expire(INT64_MAX, [&](TimerNode* t) {
    Abort(ConnOfTimer(t));
    ++sending;
  });
  for (TimerList* list :
       {&header_timers_, &idle_timers_, &linger_timers_, &gave_way_timers_, &discard_timers_}) {
    list->Expire(INT64_MAX, [&](TimerNode* t) { Abort(ConnOfTimer(t)); });
  }
  return sending;
}

void ConnectionMachine::Abandon() {
  exchanges_->Abandon();
  if (h2_exchanges_ != nullptr) h2_exchanges_->Abandon();
  conns_->Abandon();
  input_pool_->Abandon();  // their input buffers
}

uint32_t ConnectionMachine::Serving() const {
  return live_ - state_counts_[static_cast<int>(ConnState::kEndingRecv)] -
         state_counts_[static_cast<int>(ConnState::kLingering)] -
         state_counts_[static_cast<int>(ConnState::kClosing)];
}

// Connections with a request in progress never give way. The close lingers (FIN, then read and
// drop until the client closes): the connection may have gone idle a moment ago, its last
// response still unread in the client's buffer, and a request already on its way would turn a
// plain close into a reset that destroys that response. Its slot goes to a newcomer when the
// client closes, the linger ends, or a parked newcomer needs it (CloseOldestGaveWay).
bool ConnectionMachine::GiveWayOldestIdle() {
  // Idle keep-alive connections first; then those whose response is done and that only wait for
  // the rest of a body we skip (idle too, as far as serving goes).
  TimerNode* t = idle_timers_.PopOldest();
  if (t == nullptr) t = discard_timers_.PopOldest();
  if (t == nullptr) return false;
  ++stats_.idle_reclaimed;
  Connection* conn = ConnOfTimer(t);
  if (conn->h2) {
    H2GoAway(conn);
    return true;
  }
  conn->more_input_expected = true;
  CloseGracefully(conn);
  if (conn->state == ConnState::kLingering)
    gave_way_timers_.Arm(&conn->timer, loop_->MonotonicMs());
  return true;
}

// The connection waiting longest for the first byte of its first request, among the
// kSilentScan waiting longest for a head (nullptr if none): those are armed on the header timers
// in the order they began to wait. Connections with part of a head, or after an earlier
// request, are passed over. `began_before`: only one that began waiting by then.
Connection* ConnectionMachine::OldestSilent(int64_t began_before) const {
  const int64_t deadline_by = began_before + header_timers_.duration_ms();
  uint32_t scanned = 0;
  for (TimerNode* t = header_timers_.Oldest(); t != nullptr && scanned < kSilentScan;
       t = TimerList::Next(t), ++scanned) {
    if (t->deadline_ms > deadline_by) return nullptr;  // this one and all after it too young
    Connection* conn = ConnOfTimer(t);
    if (conn->state == ConnState::kReading && conn->requests == 0 && conn->in_len == 0 &&
        conn->ex == nullptr) {
      return conn;
    }
  }
  return nullptr;
}

// Closed at once: it has nothing to lose.
bool ConnectionMachine::AbortOldestSilent() {
  Connection* conn = OldestSilent(now_ms_ - kSilentGiveWayMs);
  if (conn == nullptr) return false;
  ++stats_.silent_reclaimed;
  Abort(conn);
  return true;
}

int64_t ConnectionMachine::NextSilentGiveWayMs() const {
  const TimerNode* t = header_timers_.Oldest();
  if (t == nullptr) return INT64_MAX;
  return t->deadline_ms - header_timers_.duration_ms() + kSilentGiveWayMs;
}

int64_t ConnectionMachine::NextGaveWayClosableMs() const {
  const TimerNode* t = gave_way_timers_.Oldest();
  if (t == nullptr) return INT64_MAX;
  return t->deadline_ms - gave_way_timers_.duration_ms() + kGaveWayLingerMs;
}

// Its FIN went out first of all those lingering, and a lingering connection reads and drops
// whatever its client sends, so only bytes still on their way turn this close into a reset, as
// they do nginx's closes of idle connections (which do not linger at all).
bool ConnectionMachine::CloseOldestGaveWay() {
  if (NextGaveWayClosableMs() > now_ms_) return false;
  TimerNode* t = gave_way_timers_.PopOldest();
  ++stats_.gave_way_closed;
  Abort(ConnOfTimer(t));
  return true;
}

// A closing connection is freed once nothing of it is in flight: its slot goes back.
void ConnectionMachine::MaybeFree(Connection* conn) {
  if (conn->state != ConnState::kClosing || conn->recv_active ||
      (conn->ex != nullptr && conn->ex->sending != Exchange::Sending::kNone) || H2Busy(conn)) {
    return;
  }
  H2Free(conn);
  ReleaseExchange(conn);
  if (conn->in != nullptr) {
    input_pool_->Put(conn->in);
    conn->in = nullptr;
  }
  loop_->Close(conn->fd);
  if (conn_counts_ != nullptr) UncountConnection(conn);
  --state_counts_[static_cast<int>(conn->state)];
  conns_->Put(conn);
  --live_;
  ++stats_.closed;
  host_->RoomMayHaveChanged();
}

}  // namespace ringd
