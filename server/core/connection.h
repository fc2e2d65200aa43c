// A shard's connections and the state machine that serves them: each connection's receive,
// parse, plan, response and close, over the shard's loop, pools, file cache and send queue.
// The shard (shard.h) accepts connections, decides when the limit makes one give way, drains,
// and turns the loop; everything a connection does between its accept and its last callback is
// here (connection.cc: the request side; body_send.cc: the response after its head), behind
// ConnectionMachine's narrow surface and ConnectionHost's one call back.
//
//   ConnectionMachine machine(parts);                  // after the loop and the pools exist
//   if (Connection* c = machine.Open(fd, redirect)) ...   // nullptr: no slot free
//   machine.Tick(now_ms, realtime_sec);                // timers, each turn
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/loop.h"
#include "mem/buffer_pool.h"
#include "mem/slab_pool.h"
#include "server/core/access_log.h"
#include "server/core/compressor.h"
#include "server/core/config.h"
#include "server/core/dir_lister.h"
#include "server/core/document_root.h"
#include "server/core/file_cache.h"
#include "server/core/h2_memory.h"
#include "server/core/send_queue.h"
#include "server/core/shard_snapshot.h"
#include "server/core/sites.h"
#include "server/core/timer_list.h"
#include "server/http/client_address.h"
#include "server/http/client_limits.h"
#include "server/http/h2_fields.h"
#include "server/http/http_date.h"
#include "server/http/request_parser.h"
#include "server/http/response_plan.h"

struct nghttp2_rcbuf;
struct nghttp2_session_callbacks;
struct nghttp2_option;

namespace ringd {

class ConnectionMachine;
struct Connection;
struct H2Session;
struct H2Batch;

// One response in flight: its plan, the head bytes, and where the body has got to. It exists
// from the moment a request is planned (file waits included) until its response has gone out,
// so what only a request in flight needs lives here rather than in every (idle) Connection.
// Flags bounded in config.h size arrays here and in the HTTP core.
static_assert(http::RangeSet::kCapacity >= kMaxRangesPerRequest);
// An input buffer (a head plus one delivery) stays well within 32-bit lengths.
// Any request target the flags let through (--max-request-line <= --max-request-head) is decoded
// whole: its length is limited by the request line's limit alone (414), never by the planner's.
static_assert(http::PlanScratch::kMaxTarget >= kMaxRequestHead);
static_assert(uint64_t{kMaxRequestHead} + kMaxRecvBufferSize + 4096 < UINT32_MAX);

struct Exchange {
  Connection* conn = nullptr;  // whose response this is
  // While the request is planned: the file lookups it waits for (at most 8: connection.cc).
  // On the file cache while a lookup is under way (kWaitingFile); woken by the DirLister too.
  FileWaiter waiter;
  uint32_t lookups = 0;  // file lookups (and listings) the request has waited for
  // The site the request is for (--site), chosen at its first plan; null: the default site (the
  // top-level flags). Counted in its SiteFiles::exchanges until the exchange is released.
  struct SiteFiles* site = nullptr;
  // --autoindex: the listing made (or being made) for this request, held until the response
  // has gone out (its body is streamed from it: Phase::kListing).
  DirListing* listing = nullptr;
  // --compress: the cached variant the body is (the plan's inline_body), held until the
  // response has gone out.
  Variant* variant = nullptr;
  bool listing_piece_out = false;  // a piece of it is being sent (or copied): Consume after
  bool listing_wait = false;       // the next piece is not made yet: the lister's wake-up sends it
  bool head_request = false;       // the request is a HEAD
  // Input behind this request (and the body it declares) is already here: pipelined requests.
  bool input_follows = false;
  uint64_t plan_since = 0;  // the file cache's validations() when the request began planning
  // `plan` lives as long as the response, but its file_path, etag, last_modified and location
  // view the machine's PlanScratch, which the next plan (any connection's) overwrites. They are
  // read only on the way from PlanResponse to the response head, before any other plan can
  // run (Plan pins the file, StartResponse writes the head), and cleared once the head is
  // written. A plan that stopped for a file lookup is made again, whole, when the lookup ends
  // (PlanResponse starts from an empty plan); a pipelined request is planned only after the
  // response before it has its head; the access log and the metrics read no view (EndExchange:
  // the status, lengths, and the request line copied at parse time). plan_number (the machine's
  // count of plans when this one was made) lets StartResponse assert that the views it writes
  // are still the latest plan's.
  http::ResponsePlan plan;
  // The request's client, for the log and the limits: the connection's, or with --real-ip-from
  // the one its header names; unknown (family 0) until the request is planned.
  http::ClientAddress client;
  uint64_t plan_number = 0;
  io::Completion send;
  uint64_t send_progress = 0;  // the send's progress (Completion::done) when its timer was armed
  SendTicket ticket;  // its place in the shard's send queue (a body chunk waiting for a slot)
  iovec iov[2];
  CacheEntry* file = nullptr;  // pinned for the response
  uint64_t body_offset = 0;    // next byte of the current slice (file offsets)
  uint64_t body_left = 0;      // bytes of the current slice not yet sent
  uint64_t chunk = 0;          // bytes the SendFile in flight was asked for
  uint32_t part = 0;           // multipart: the part being sent
  // kListing: the pieces of `listing` (chunked over HTTP/1.1), as the lister makes them.
  enum class Phase : uint8_t { kSlice, kPartHead, kTail, kListing, kDone } phase = Phase::kDone;
  // What `send` is doing, as the shard started it (never read from the Completion, which is the
  // backend's): nothing, buffers (Send) or a file's bytes (SendFile).
  enum class Sending : uint8_t { kNone, kBuffers, kFile } sending = Sending::kNone;
  uint32_t head_len = 0;
  // HTTP/2 (h2_connection.cc): the stream this exchange answers (0: an HTTP/1.1 exchange), its
  // place on its connection's list of streams, the request fields the planner reads (nghttp2's
  // buffers, referenced until the response begins), and where the DATA frame being written
  // takes its payload from (h2_piece_file: bytes of `file`'s fd at h2_piece_offset, else
  // memory at h2_piece).
  int32_t stream_id = 0;
  mem::ListLink<Exchange> h2_link;
  // The kept fields by http::H2Field, then the --real-ip-header field (with --real-ip-from).
  static constexpr size_t kH2RealIpField = http::kH2FieldCount;
  nghttp2_rcbuf* h2_fields[http::kH2FieldCount + 1] = {};
  uint32_t h2_head_bytes = 0;  // the request's field section, as HTTP/1.1 would count it
  uint32_t h2_fields_seen = 0;
  bool h2_refused = false;   // its fields passed --max-request-head or --max-headers: 431
  bool h2_waiting = false;   // planning waits for a file lookup
  bool h2_deferred = false;  // its next DATA frame waits for room in the send buffer
  bool h2_closed = false;    // on H2Session::closed, not H2Session::streams
  bool h2_piece_file = false;
  bool h2_listing_piece = false;  // iov[0] is a listing's piece: handed back once copied
  bool h2_listing_wait = false;   // its next DATA frame waits for the lister's next piece
  const char* h2_piece = nullptr;
  uint64_t h2_piece_offset = 0;
  // For the access log and metrics (connection_observe.cc).
  int64_t started_ns = 0;   // the request head parsed (CLOCK_MONOTONIC; 0 when not timing)
  uint64_t bytes_sent = 0;  // head and body bytes the kernel took
  bool logged = false;      // `capture` holds the request (the access log is on)
  // `head`: the response head, then multipart part heads (and the closing tail); a body that
  // fits behind the head is copied after it (StartResponse).
  static constexpr size_t kHeadBytes = 4096;
  static_assert(http::MultipartLayout::kMaxPartHead <= kHeadBytes);
  static_assert(http::MultipartLayout::kMaxBoundary + 8 <= kHeadBytes);
  // The operator's header lines (bounded when the flags are parsed) leave room for everything
  // else a 200/206/304 head carries (no Location there); a head that still does not fit (an
  // absurd Content-Type from mime.types) is answered 500 (StartResponse).
  static_assert(http::OriginHeaders::kMaxBytes + 1024 <= kHeadBytes);
  // The large buffers come last, after every field that each exchange sets, so that an
  // exchange whose head is short and whose request is not logged touches only its first pages
  // (a burst of responses leaves the pool that many exchanges resident).
  char head[kHeadBytes];
  // The request line, Referer and User-Agent, for the access log; set (and read) only when
  // `logged`.
  RequestCapture capture;
};

enum class ConnState : uint8_t {
  kReading,      // waiting for (the rest of) a request head
  kWaitingFile,  // planning needs file metadata being fetched, or a listing being made
  kSending,      // a response is in flight
  // The last response is out and its receive is being ended: the receive's last callback says
  // whether the client sent more (then kLingering) or not (then kClosing). Waits on the loop,
  // not on the peer: no timer.
  kEndingRecv,
  kLingering,  // the last response is out; reading until the client closes
  kClosing,    // waiting for operations in flight to end, then freed
  // HTTP/2 (h2_connection.cc): the connection preface came; its streams own exchanges, and the
  // connection's H2Session owns its sends. Leaves for kLingering (GOAWAY sent, every stream
  // done) or kClosing.
  kH2,
};

struct Connection {
  ConnectionMachine* machine = nullptr;
  int fd = -1;
  ConnState state = ConnState::kReading;
  // Flags, a bit each (every idle connection holds them: see the bound below).
  bool recv_active : 1 = false;
  bool recv_paused : 1 = false;  // recv cancelled because the input buffer is full
  // The receive is being cancelled to end the connection: UpdateRecv ended it beside the last
  // response, or CloseGracefully, which then waits in kEndingRecv for its last callback.
  bool recv_ending : 1 = false;
  bool peer_closed : 1 = false;
  bool wants_close : 1 = false;  // close after the current response
  // A framing error or an unread body: the client may still send.
  bool more_input_expected : 1 = false;
  bool client_keep_alive : 1 = false;  // the last request asked to keep the connection
  // The last body chunk of its last response took --send-slot-hold-ms or more (SendTicket::slow):
  // its client (or the disk) is slow, so the next response's ticket starts out slow and its
  // first chunk needs no slot either.
  bool send_slow : 1 = false;
  // Accepted on a listener that redirects every request to HTTPS (--redirect-https).
  bool https_redirect : 1 = false;
  // Spoke HTTP/2: an H2Session (ConnectionMachine::h2_) serves it, until it is freed.
  bool h2 : 1 = false;
  // Accepted on a plaintext ",proxy" listener, and its PROXY protocol header has not come whole
  // yet: the first bytes are that header (its prefix waits in `in`), then HTTP.
  bool proxy_header : 1 = false;
  uint32_t requests = 0;
  char* in = nullptr;  // pending input, from the shard's input pool; null when empty
  uint32_t in_len = 0;
  uint32_t parsed_len = 0;  // how much of `in` the parser has already seen
  uint64_t discard = 0;     // request body bytes still to skip
  Exchange* ex = nullptr;
  io::Completion recv;
  TimerNode timer;
};
// Every connection holds one of these, idle or not, so it is most of what an idle keep-alive
// connection costs, which is to stay below nginx's in RSS. What only a request in flight needs
// goes in the Exchange, and the access log's peer address in ConnectionMachine::peers_; a field
// added here costs every idle connection, so the bound moves only on purpose.
static_assert(sizeof(Connection) <= 232);

// One site (--site) as a shard serves it: its own open-file cache beneath the site's root, its
// planners, and its counters. Made for each site of a generation the shard takes up.
struct SiteFiles {
  std::string name;  // the site's first name (logs, metrics)
  std::unique_ptr<FileCache> files;
  const std::atomic<uint64_t>* root_word = nullptr;  // its DocumentRoot's (null: it stays)
  uint64_t root_state = 0;                           // *root_word as last taken up
  const http::OriginHeaders* own_origin = nullptr;   // null: the top level's
  const http::ClientRules* client_rules = nullptr;   // its --allow / --deny; null: none
  http::PlannerConfig planner, redirect_planner;
  uint64_t requests = 0;   // responses (ringd_site_requests_total); kept across reloads by name
  uint32_t exchanges = 0;  // exchanges that chose it and are not released yet
};

// What the machine asks of the shard that owns it.
class ConnectionHost {
 public:
  // A connection went idle (it may give way to a newcomer now) or closed (its slot is free):
  // accepting may resume if it paused at the connection limit.
  virtual void RoomMayHaveChanged() = 0;

 protected:
  ~ConnectionHost() = default;
};

// What the shard lends the machine; all of it outlives the machine.
struct ConnectionParts {
  const Config* config = nullptr;
  io::Loop* loop = nullptr;
  mem::BufferPool* input_pool = nullptr;    // at least one input buffer per connection slot
  mem::BufferPool* content_pool = nullptr;  // small files' contents (null: none kept)
  int root_fd = -1;                         // the directory served
  // Where root_fd moves: DocumentRoot's state word (null: it stays).
  const std::atomic<uint64_t>* root_state = nullptr;
  // Where the origin headers move: a generation published whole, taken up at the machine's next
  // Tick (null: config->origin throughout). Generations a plan may still view are kept alive by
  // their publisher.
  const std::atomic<const http::OriginHeaders*>* origin_word = nullptr;
  // Where the sites (--site) are published: a generation whole, taken up at the machine's next
  // Tick (null, or a generation without sites: every request is the default site's).
  // Generations are kept alive by their publisher until the shards have moved on.
  const std::atomic<const Sites*>* sites_word = nullptr;
  const http::MimeTypes* mime = nullptr;
  uint32_t capacity = 0;               // connection slots: --max-connections and the reserve
  std::string https_port_suffix;       // for the redirects of --redirect-https listeners
  uint64_t boundary_seed = 0;          // the multipart boundary's random part (0: from getrandom)
  AccessLogShard* log = nullptr;       // the shard's side of the access log; null: off
  ErrorLogShard* error_log = nullptr;  // the shard's side of the error log; null: off
  bool timing = false;                 // time requests (the log, the duration histogram)
  ShardStats* stats = nullptr;         // the shard's counters; the machine counts into them
  ConnectionHost* host = nullptr;
};

class ConnectionMachine {
 public:
  explicit ConnectionMachine(ConnectionParts parts);
  ~ConnectionMachine();
  ConnectionMachine(const ConnectionMachine&) = delete;
  ConnectionMachine& operator=(const ConnectionMachine&) = delete;

  // At the limit, after every idle connection, one that has been open this long without a byte of
  // a request (a TLS handshake that does not finish, a client that connected and said nothing)
  // gives way too, as nginx closes connections still waiting for their first request. Long enough
  // that a client whose request (or TLS handshake) is on its way over a slow path is never cut.
  static constexpr int64_t kSilentGiveWayMs = 500;
  // Connections waiting for a request head looked at per call for a silent one.
  static constexpr uint32_t kSilentScan = 256;

  // A newcomer's connection, waiting for its first request (after its PROXY protocol header,
  // with `proxy_header`); nullptr when every slot is taken, or, with *refused set, when
  // --limit-conn refused its client (closed). `tls_proxy`: a TLS listener's PROXY header (read
  // below, by the TlsLoop) names the client.
  Connection* Open(int fd, bool https_redirect, bool proxy_header = false, bool tls_proxy = false,
                   bool* refused = nullptr);
  // Once a turn, before the loop polls: the clock, the Date header, the timers, and queued
  // bodies that reached the send queue's aging bound.
  void Tick(int64_t now_ms, int64_t realtime_sec);
  // The earliest of the timers' deadlines and the send queue's aging bound (INT64_MAX: none).
  int64_t NextDeadlineMs() const;
  // After a Poll: connections whose file lookups finished in it.
  void RunWakeups() {
    files_->RunWakeups();
    for (auto& s : site_files_) s->files->RunWakeups();
    for (auto& s : retired_sites_) s->files->RunWakeups();
    if (lister_ != nullptr) lister_->RunWakeups();
    if (compressor_ != nullptr) compressor_->RunCompletions();
  }

  // The drain: connections between requests end now; responses under way go out with
  // `Connection: close` and their connections close after them.
  void BeginDrain();
  // The drain's deadline: every connection still open ends. Returns how many of them were
  // sending a response (cut short: the client has part of it).
  uint32_t AbortAll();
  // The process exits with connections whose last callback never came (the loop is quiesced,
  // so nothing touches them again): their memory is left as it is.
  void Abandon();

  // The connection limit's means; when to use them is the shard's policy (Shard::MakeRoom).
  uint32_t live() const { return live_; }
  // Those --max-connections counts: all but those on their way out (ending their receive,
  // lingering, closing), which take the reserve's slots.
  uint32_t Serving() const;
  uint32_t Closing() const { return state_counts_[static_cast<int>(ConnState::kClosing)]; }
  // Whether a keep-alive connection is idle between requests (or only skipping a body), so that
  // it can give way to a newcomer.
  bool HasIdle() const { return !idle_timers_.Empty() || !discard_timers_.Empty(); }
  // The longest-idle connection gives way (a lingering close); false if none is idle.
  bool GiveWayOldestIdle();
  // Whether a connection has been silent (no byte of a request) for kSilentGiveWayMs.
  bool HasSilent() const { return OldestSilent(now_ms_ - kSilentGiveWayMs) != nullptr; }
  // The one silent longest closes at once; false if none has been silent that long.
  bool AbortOldestSilent();
  // When the oldest connection waiting for a head may give way if it is silent (INT64_MAX: none).
  int64_t NextSilentGiveWayMs() const;
  // The connection that gave way longest ago, still lingering, closes now; false if none has
  // lingered kGaveWayLingerMs yet.
  bool CloseOldestGaveWay();
  // When the connection that gave way longest ago will have lingered kGaveWayLingerMs
  // (INT64_MAX: none lingers).
  int64_t NextGaveWayClosableMs() const;
  // A connection that gave way lingers at least this long before a newcomer's need (or a want of
  // descriptors) closes it: long enough for its client to read the last response and see the
  // FIN, so that bytes the client still sends (a body being skipped) do not make the close a
  // reset that destroys that response in the client's buffer.
  static constexpr int64_t kGaveWayLingerMs = 100;

  // For the shard's snapshot and usage.
  bool draining() const { return draining_; }
  const FileCache& files() const { return *files_; }
  const Compressor* compressor() const { return compressor_.get(); }  // null without --compress
  const SendQueue& sends() const { return *sends_; }
  const RequestMetrics& metrics() const { return metrics_; }
  // --site: responses of the default site, and of each site of the generation in use (empty
  // without sites).
  uint64_t default_site_requests() const { return default_site_requests_; }
  const std::vector<std::unique_ptr<SiteFiles>>& site_files() const { return site_files_; }
  const uint32_t* state_counts() const { return state_counts_; }
  size_t idle_connections() const { return idle_timers_.size(); }
  uint64_t h2_library_bytes() const { return h2_memory_.live_bytes(); }
  // Hands back the pages of exchanges free for a whole period since the last call; returns the
  // exchanges released so far.
  uint64_t ReleaseIdleExchanges() {
    exchanges_->ReleaseIdle();
    if (h2_exchanges_ != nullptr) h2_exchanges_->ReleaseIdle();
    return exchanges_->released() + (h2_exchanges_ != nullptr ? h2_exchanges_->released() : 0);
  }
  // --autoindex: listings being made or sent, of DirLister::kSlots (0 and 0 without it).
  uint32_t listings_in_use() const { return lister_ != nullptr ? lister_->in_use() : 0; }
  uint32_t listing_capacity() const { return lister_ != nullptr ? DirLister::kSlots : 0; }
  // HTTP/1.1 responses' and HTTP/2 streams' exchanges.
  uint32_t exchanges_in_use() const {
    return static_cast<uint32_t>(exchanges_->InUse() +
                                 (h2_exchanges_ != nullptr ? h2_exchanges_->InUse() : 0));
  }

 private:
  // The request side (connection.cc).
  static void OnRecv(io::Completion* c);
  static void OnFileReady(FileWaiter* w);
  void ArmRecv(Connection* conn);
  void UpdateRecv(Connection* conn);
  void WaitForRequest(Connection* conn);
  void Received(Connection* conn, const char* data, size_t n);
  bool TakeProxyHeader(Connection* conn, const char** data, size_t* n);
  void ProcessInput(Connection* conn);
  void ProcessDirect(Connection* conn, const char* data, size_t n);
  bool Stash(Connection* conn);
  bool Plan(Connection* conn, const http::Request& req, size_t head_bytes);
  void ConsumeInput(Connection* conn, size_t n);
  void DropHead(Connection* conn, size_t head_bytes);
  void ReleaseInputIfEmpty(Connection* conn);
  void RespondError(Connection* conn, int status, std::string_view raw = {});
  void StartResponse(Connection* conn, Exchange* ex);
  bool BodyFollowsAtOnce(const Connection* conn) const;
  // Starts the exchange's send of its iov, or of a chunk of its file.
  void SendBuffers(Connection* conn, int iovcnt, bool more = false);
  void SendFileChunk(Connection* conn, uint64_t offset, uint64_t length);
  void FinishResponse(Connection* conn);
  bool ClientMaySend(const Connection* conn) const;
  void CloseGracefully(Connection* conn);
  void SetState(Connection* conn, ConnState next);
  bool TakeExchange(Connection* conn);
  void ReleaseExchange(Connection* conn);
  void ArmSendTimer(Connection* conn);
  void Abort(Connection* conn);
  void MaybeFree(Connection* conn);
  Connection* OldestSilent(int64_t began_before) const;
  void ExpireSendTimer(Connection* conn);

  // Shared by both protocols: plans `ex` for `req`; false while it waits for a file lookup
  // (its waiter fetched), true once the plan is ready (its file pinned). The response head, or
  // a 500 if it does not fit its buffer; returns the head's length.
  bool PlanExchange(Connection* conn, Exchange* ex, const http::Request& req);
  // --site: the site a request's host names (1 + its index in site_files_; 0: the default
  // site), or kMisdirected (421: no site and --unknown-site=421), kSniMismatch (421: a TLS
  // server name that names another site than the host) or kCloseNow (--unknown-site=close).
  // Only called with sites configured.
  static constexpr int kMisdirected = -1, kSniMismatch = -2, kCloseNow = -3;
  // The reason of a kCloseNow's 421: HTTP/1.1 closes after it (keep_alive), HTTP/2 sends GOAWAY.
  static constexpr char kSiteDenied[] = "access forbidden by rule (the site's --allow/--deny)";
  static constexpr char kNoSiteClose[] = "the host names no site (--unknown-site=close)";
  int ChooseSite(const Connection* conn, const http::Request& req) const;
  FileCache& FilesOf(const Exchange* ex) {
    return ex->site == nullptr ? *files_ : *ex->site->files;
  }
  // The exchange is done with its site: a site of a generation no longer in use is freed with
  // its last exchange.
  void LeaveSite(Exchange* ex);
  // Tick: a newly published generation of sites replaces the one in use.
  void TakeUpSites(const Sites* sites);
  std::unique_ptr<SiteFiles> MakeSiteFiles(const SiteRuntime& site);
  // A planned error's line in the error log (connection_observe.cc); called only when the log
  // wants the status's level.
  void LogPlanError(Connection* conn, const Exchange* ex, const http::Request& req);
  // A connection's error (a failed send or receive, a TLS handshake that failed, a truncated
  // file) in the error log, if it is on and wants `level`. `path`: the file's, or empty.
  void LogConnectionError(Connection* conn, ErrorLevel level, const char* cause, int error,
                          std::string_view path = {});
  // The client's address written into `out` (nginx's $remote_addr, or "-"): the one taken at
  // accept when there is one, else asked of the socket now.
  std::string_view ClientOf(const Connection* conn, char (&out)[INET6_ADDRSTRLEN]) const;
  size_t WriteHead(Exchange* ex);
  // Stops what the exchange's planning waits for: a file lookup, or a listing not yet made
  // (its wake-up never runs). A listing whose body the response sends stays until the response
  // is done (ReleaseListing).
  void StopWaiting(Exchange* ex);
  void ReleaseListing(Exchange* ex);
  void ReleaseVariant(Exchange* ex);

  // HTTP/2 (h2_connection.cc): a connection whose first bytes are the preface becomes an
  // H2Session; its streams' exchanges come from h2_exchanges_.
  enum class Preface : uint8_t { kNo, kPartial, kYes };
  Preface H2Preface(const Connection* conn, const char* data, size_t n) const;
  void StartH2(Connection* conn, const char* data, size_t n);
  H2Session*& SessionOf(const Connection* conn) { return h2_[conns_->IndexOf(conn)]; }
  void H2Received(Connection* conn, const char* data, size_t n);
  void H2Flush(Connection* conn);
  void H2Settle(Connection* conn);
  void H2Quiet(TimerNode* t);
  void H2CountStall(Connection* conn);
  void H2GoAway(Connection* conn);
  void H2PlanStream(Connection* conn, Exchange* ex);
  void H2StartResponse(Connection* conn, Exchange* ex);
  void H2ReleaseStream(Connection* conn, Exchange* ex);
  bool H2Busy(const Connection* conn);
  void H2Abort(Connection* conn);
  void H2Free(Connection* conn);
  void H2CountSent(Connection* conn, H2Batch* b, uint64_t taken);
  void H2SendPiece(Connection* conn, H2Batch* b);
  static bool H2PieceSent(H2Batch* b, const io::Completion* c, uint64_t taken, bool* truncated);
  void H2ExpireSendTimer(Connection* conn);
  static void OnH2Send(io::Completion* c);
  static void OnH2Read(io::Completion* c);
  static void OnStreamFileReady(FileWaiter* w);
  static void OnStreamListingMore(void* arg);
  void MakeH2Callbacks();
  void FreeH2Callbacks();
  H2Batch* TakeH2Batch(Connection* conn);
  void PutH2Batch(H2Batch* b);
  friend struct H2Callbacks;

  // The response after its head (body_send.cc).
  static void OnSend(io::Completion* c);
  void Sent(Connection* conn, io::Completion* c);
  void SendNext(Connection* conn);
  void StartBodyChunk(Connection* conn);
  void SendListingPiece(Connection* conn);
  static void OnListingMore(void* arg);
  void PumpSends();
  uint64_t ChunkBytes(const Connection* conn) const;

  // Observability (connection_observe.cc): a response's exchange begins (the raw request line,
  // and the parsed request when there is one) and ends (metrics, the access log line).
  void BeginExchange(Exchange* ex, std::string_view request_line, const http::Request* req);
  void EndExchange(Connection* conn, Exchange* ex);
  void NotePeer(Connection* conn);
  // A PROXY protocol header came whole: the client it names (or the socket's peer) is judged by
  // --allow/--deny and becomes the log's; false when the rules refused it (the connection closes).
  bool NoteProxiedClient(Connection* conn, const http::ClientAddress* named);

  // Per-client limits and the real client (client_limits.cc); each costs nothing unless its
  // flag is set. The connection's client: the PROXY header's, else the socket's peer.
  http::ClientAddress ConnClient(const Connection* conn) const;
  // Counts the connection against --limit-conn as `client`'s; false (counted, logged) when its
  // client holds the limit already.
  bool CountConnection(const Connection* conn, const http::ClientAddress& client);
  void UncountConnection(const Connection* conn);
  // A new request: its client (--real-ip-from) into ex->client, then --limit-req; true when
  // the request is refused (ex->plan is the refusal).
  bool RefusedByRate(Connection* conn, Exchange* ex, const http::Request& req);
  // Whether the site `ex` chose (one with --allow / --deny) refuses the request's client: then
  // its plan is a 403, counted and logged.
  bool RefusedBySite(Connection* conn, Exchange* ex, const http::Request& req);

  const Config& config_;
  io::Loop* loop_;
  mem::BufferPool* input_pool_;
  ConnectionHost* host_;
  ShardStats& stats_;
  AccessLogShard* log_;
  ErrorLogShard* error_log_;
  bool timing_;

  std::unique_ptr<mem::SlabPool<Connection>> conns_;
  std::unique_ptr<mem::SlabPool<Exchange>> exchanges_;
  // HTTP/2: each connection slot's session (null unless it speaks h2), the exchanges its streams
  // own (one per connection slot, all connections' streams together: a stream that finds none
  // is refused, REFUSED_STREAM), and nghttp2's callbacks and options, made once.
  std::unique_ptr<H2Session*[]> h2_;
  std::unique_ptr<mem::SlabPool<Exchange>> h2_exchanges_;
  nghttp2_session_callbacks* h2_callbacks_ = nullptr;
  nghttp2_option* h2_options_ = nullptr;
  // nghttp2's allocations (counted), and the sessions idle long enough to hand their frame
  // buffers' pages back (H2Memory::Quiet).
  H2Memory h2_memory_;
  TimerList h2_quiet_timers_{kH2QuietMs};
  // Send batches (h2_session.h) of connections that went idle, for the next to send.
  static constexpr size_t kH2SpareBatches = 16;
  // How long an HTTP/2 connection with no stream waits before its frame buffer's pages go back:
  // long enough that a client between bursts of requests does not pay a page fault per burst.
  static constexpr int64_t kH2QuietMs = 1000;
  std::vector<H2Batch*> h2_spare_batches_;
  // With the access log or the error log at info only: each connection slot's client
  // (conns_->IndexOf), taken at accept.
  std::unique_ptr<PeerAddress[]> peers_;
  // --limit-req's buckets and --limit-conn's counts, this shard's alone (bounds: client_limits.h),
  // and by connection slot the key a connection is counted under (conn_counted_: 0 not counted,
  // 1 counted, 2 to be counted when its first bytes come: a TLS listener's PROXY header).
  std::unique_ptr<http::RateTable> rates_;
  std::unique_ptr<http::ConnTable> conn_counts_;
  std::unique_ptr<http::LimitKey[]> conn_keys_;
  std::unique_ptr<uint8_t[]> conn_counted_;
  bool real_ip_ = false;  // --real-ip-from given
  std::unique_ptr<FileCache> files_;
  std::unique_ptr<DirLister> lister_;  // with --autoindex only
  // With --compress only: this shard's variants and the thread that makes them.
  std::unique_ptr<Compressor> compressor_;
  const std::atomic<uint64_t>* root_word_ = nullptr;
  uint64_t root_state_ = 0;  // *root_word_ as this machine last took it up
  const std::atomic<const http::OriginHeaders*>* origin_word_ = nullptr;
  const http::OriginHeaders* origin_ = nullptr;  // *origin_word_ as this machine last took it up
  std::unique_ptr<SendQueue> sends_;             // which long bodies send now (send_queue.h)
  std::unique_ptr<http::PlanScratch> scratch_;
  uint64_t plans_ = 0;             // PlanResponse calls so far (Exchange::plan_number)
  std::string boundary_;           // planner_ views it
  std::string https_port_suffix_;  // redirect_planner_ views it
  http::PlannerConfig planner_;
  http::PlannerConfig redirect_planner_;  // planner_ with redirect_to_https (--redirect-https)
  // --site: each site of the generation in use (sites_) with this shard's own cache beneath its
  // root and its planners (Sites is shared and read-only); empty without sites. A reload that
  // changes the sites retires them, until the exchanges still using them are released.
  const std::atomic<const Sites*>* sites_word_ = nullptr;
  const Sites* sites_ = nullptr;       // null, or a generation with sites
  const Sites* sites_seen_ = nullptr;  // *sites_word_ as last taken up
  std::vector<std::unique_ptr<SiteFiles>> site_files_;
  std::vector<std::unique_ptr<SiteFiles>> retired_sites_;
  mem::BufferPool* content_pool_ = nullptr;  // what the sites' caches keep small files in
  FileCacheOptions file_options_;
  uint64_t default_site_requests_ = 0;
  http::ParserLimits limits_;
  http::Header headers_[kMaxHeaderFields];

  // Armed by the loop's clock, not now_ms_: a callback runs in the Poll after Tick, and a Poll
  // that slept up to a second would otherwise set its deadlines that much early. The clock only
  // moves forward, so each list stays in deadline order.
  TimerList header_timers_, idle_timers_, send_timers_, linger_timers_, discard_timers_;
  // Lingering connections that gave way to newcomers, the longest lingering first: closed for
  // parked newcomers, or when their linger ends.
  TimerList gave_way_timers_;
  int64_t now_ms_ = 0;  // the last Tick's: for expiring timers, and comparisons within a turn
  int64_t date_sec_ = -1;
  char date_[http::kHttpDateLen];
  bool draining_ = false;

  uint32_t live_ = 0;  // connections
  uint32_t state_counts_[kConnStates] = {};
  RequestMetrics metrics_;
};

}  // namespace ringd
