// A shard: one thread, pinned to one CPU, owning one io Loop, its listening sockets, its
// connections, its pools and its caches. Shards share nothing; the only cross-thread call is
// RequestStop (from the signal-handling main thread).
//
//   Shard shard(index, config, listen_fds, root_fd, mime, tier->make, cpu);   // io/tier.h
//   std::thread t([&] { if (shard.Setup()) shard.Serve(); });   // Serve returns after a stop
//   shard.RequestStop();
//
// Everything the shard learns from the world (bytes, files, time) comes through its Loop, so a
// simulated Loop (tests/sim) drives the same code with Step() instead of Serve().
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/loop.h"
#include "mem/buffer_pool.h"
#include "mem/shard_memory.h"
#include "mem/slab_pool.h"
#include "server/core/access_log.h"
#include "server/core/config.h"
#include "server/core/file_cache.h"
#include "server/core/send_queue.h"
#include "server/core/shard_snapshot.h"
#include "server/core/timer_list.h"
#include "server/http/http_date.h"
#include "server/http/request_parser.h"
#include "server/http/response_plan.h"

namespace ringd {

class Shard;
struct Connection;

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
  FileWaiter waiter;          // on the file cache while a lookup is under way (kWaitingFile)
  uint32_t lookups = 0;       // file lookups the request has waited for
  bool head_request = false;  // the request is a HEAD
  // Input behind this request (and the body it declares) is already here: pipelined requests.
  bool input_follows = false;
  uint64_t plan_since = 0;  // the file cache's validations() when the request began planning
  // `plan` lives as long as the response, but its file_path, etag, last_modified and location
  // view the shard's PlanScratch, which the next plan (any connection's) overwrites. They are
  // read only on the way from PlanResponse to the response head, before any other plan can
  // run (Plan pins the file, StartResponse writes the head), and cleared once the head is
  // written. A plan that stopped for a file lookup is made again, whole, when the lookup ends
  // (PlanResponse starts from an empty plan); a pipelined request is planned only after the
  // response before it has its head; the access log and the metrics read no view (EndExchange:
  // the status, lengths, and the request line copied at parse time). plan_number (the shard's
  // count of plans when this one was made) lets StartResponse assert that the views it writes
  // are still the latest plan's.
  http::ResponsePlan plan;
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
  enum class Phase : uint8_t { kSlice, kPartHead, kTail, kDone } phase = Phase::kDone;
  // What `send` is doing, as the shard started it (never read from the Completion, which is the
  // backend's): nothing, buffers (Send) or a file's bytes (SendFile).
  enum class Sending : uint8_t { kNone, kBuffers, kFile } sending = Sending::kNone;
  uint32_t head_len = 0;
  // For the access log and metrics (shard_observe.cc).
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
  kWaitingFile,  // planning needs file metadata that is being fetched
  kSending,      // a response is in flight
  // The last response is out and its receive is being ended: the receive's last callback says
  // whether the client sent more (then kLingering) or not (then kClosing). Waits on the loop,
  // not on the peer: no timer.
  kEndingRecv,
  kLingering,  // the last response is out; reading until the client closes
  kClosing,    // waiting for operations in flight to end, then freed
};

struct Connection {
  Shard* shard = nullptr;
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
// goes in the Exchange, and the access log's peer address in Shard::peers_; a field added here
// costs every idle connection, so the bound moves only on purpose.
static_assert(sizeof(Connection) <= 232);

class Shard {
 public:
  Shard(int index, const Config& config, std::vector<int> listen_fds, int root_fd,
        const http::MimeTypes* mime, io::LoopFactory make_loop, int cpu);
  ~Shard();

  // Creates the loop and pools on the calling (shard) thread; false with `error()` set if the
  // shard cannot start. Then Serve runs until a graceful stop completes.
  bool Setup();
  void Serve();
  // One turn of Serve: timers, then one Poll of the loop (waiting at most until the next
  // deadline). False once a graceful stop has completed.
  bool Step();
  void RequestStop();
  // Whether the drain RequestStop asked for has begun: accepting stopped, listeners shut down
  // (any thread may ask).
  bool DrainBegun() const { return drain_begun_.load(std::memory_order_acquire); }
  io::Loop* loop() const { return loop_.get(); }
  const std::string& error() const { return error_; }
  // Connection slots beyond --max-connections: connections on their way out (lingering or
  // closing, those that gave way to newcomers among them) take these.
  static constexpr uint32_t kReclaimReserve = 32;
  // Newcomers the kernel handed over while no slot was free wait, by descriptor, until one frees
  // (io_uring's multishot accept takes everything in the backlog at once, and a slot frees only
  // once its connection's last callback has come): as many as the listen backlog holds.
  static constexpr uint32_t kParkedMax = 4096;
  // The bypass tier's file table has this many slots more than --max-connections: the reserve,
  // parked newcomers, and closes in flight. A full table would make the kernel drop the next
  // connection it accepts (ENFILE after the accept).
  static constexpr uint32_t kSpareSlots = kReclaimReserve + kParkedMax + 64;
  // Connections that give way (or close for parked newcomers) in one turn of the loop, as nginx
  // drains 32 reusable connections at a time.
  static constexpr uint32_t kReclaimBatch = 32;
  // At the limit, after every idle connection, one that has been open this long without a byte of
  // a request (a TLS handshake that does not finish, a client that connected and said nothing)
  // gives way too, as nginx closes connections still waiting for their first request. Long enough
  // that a client whose request (or TLS handshake) is on its way over a slow path is never cut.
  static constexpr int64_t kSilentGiveWayMs = 500;
  // Connections waiting for a request head looked at per turn for a silent one.
  static constexpr uint32_t kSilentScan = 256;
  const ShardStats& Stats() const { return stats_; }
  const SendQueue& send_queue() const { return *sends_; }
  ShardUsage Usage() const;

  // Observability (shard_observe.cc). Before Setup: the shard's side of the access log (null:
  // off), and whether to time requests (for the log and the duration histogram).
  void SetAccessLog(AccessLogShard* log) { log_ = log; }
  void SetTiming(bool on) { timing_ = on; }
  // The admin thread's way in: Request() on the slot, then loop()->Wake().
  SnapshotSlot& snapshot_slot() { return snapshot_; }
  // The watchdog's way in (systemd WATCHDOG=1): before Setup, turn it on; then Ask() and
  // loop()->Wake(), and see later whether it was answered.
  void SetHeartbeat(bool on) { heartbeat_on_ = on; }
  Heartbeat& heartbeat() { return heartbeat_; }
  // Before Setup: the listening sockets are shared with another owner (systemd's socket unit, or
  // the other shards through dup): a drain stops accepting on them but does not shut them down,
  // so connections wait in the backlog for the next process instead of being refused.
  void SetListenersShared(bool shared) { listeners_shared_ = shared; }
  // Before Setup: which listeners (in listen_fds order) answer every request with a 301 to
  // https://HOST`port_suffix`TARGET (--redirect-https).
  void SetHttpsRedirect(std::vector<bool> listeners, std::string port_suffix) {
    redirect_listeners_ = std::move(listeners);
    https_port_suffix_ = std::move(port_suffix);
  }
  // Before Setup: the optional loop features the chosen tier takes up here (io::Tier::adapt:
  // uring.recv_incremental with a pool of recv_buffer_count buffers of recv_buffer_size
  // (--recv-pool-kib) instead of --recv-buffers; uring.register_ring_fd, skip_unread_cqes,
  // bypass_sendfile), and an SQ thread to share (another shard's ring, io::Loop::RingFd; -1 for
  // a thread of its own).
  void SetLoopFeatures(const io::LoopOptions& features) { features_ = features; }
  void SetAttachRing(int ring_fd) { attach_ring_fd_ = ring_fd; }

 private:
  // Setup's parts: the shard's one mapping and its pools; the loop; the rest of the request path.
  bool SetupMemory();
  bool MakeLoop();
  void SetupRequestPath();
  // The receive pool: --recv-buffers of --recv-buffer-size, or with incremental consumption
  // --recv-pool-kib in large buffers that many receives share (each still at most
  // --recv-buffer-size, which an input buffer is sized for).
  uint32_t RecvBufferCount() const {
    return features_.uring.recv_incremental ? features_.recv_buffer_count : config_.recv_buffers;
  }
  uint32_t RecvBufferSize() const {
    return features_.uring.recv_incremental ? features_.recv_buffer_size : config_.recv_buffer_size;
  }
  void Tick();
  void BeginDrain();
  void ArmAccept();
  static void OnAccept(io::Completion* c);
  void Accepted(int fd, size_t listener);

  // The request/response state machine (connection.cc).
  static void OnRecv(io::Completion* c);
  static void OnSend(io::Completion* c);
  static void OnFileReady(FileWaiter* w);
  void Received(Connection* conn, const char* data, size_t n);
  void ProcessInput(Connection* conn);
  bool Plan(Connection* conn, const http::Request& req, size_t head_bytes);
  void ProcessDirect(Connection* conn, const char* data, size_t n);
  bool Stash(Connection* conn);
  void StartResponse(Connection* conn, Exchange* ex);
  void RespondError(Connection* conn, int status, std::string_view raw = {});
  void Sent(Connection* conn, io::Completion* c);
  void SendNext(Connection* conn);
  void StartBodyChunk(Connection* conn);
  void PumpSends();
  uint64_t ChunkBytes(const Connection* conn) const;
  void FinishResponse(Connection* conn);
  bool TakeExchange(Connection* conn);
  void ReleaseExchange(Connection* conn);
  void SetState(Connection* conn, ConnState next);
  // Starts the exchange's send of its iov (StartBuffers) or of a chunk of its file.
  void SendBuffers(Connection* conn, int iovcnt, bool more = false);
  bool BodyFollowsAtOnce(const Connection* conn) const;
  void SendFileChunk(Connection* conn, uint64_t offset, uint64_t length);
  void UpdateRecv(Connection* conn);
  void WaitForRequest(Connection* conn);
  void ArmSendTimer(Connection* conn);
  void Admit(Connection* conn, int fd, size_t listener);
  bool AtLimit() const;
  uint32_t Serving() const;
  bool ReclaimOldestIdle();
  bool ReclaimOldestSilent();
  Connection* OldestSilent(int64_t began_before) const;
  int64_t NextSilentGiveWayMs() const;
  bool CloseOldestGaveWay();
  void MakeRoom();
  void PauseAccept();
  void ResumeAcceptIfRoom();
  uint32_t capacity() const;
  void ConsumeInput(Connection* conn, size_t n);
  void DropHead(Connection* conn, size_t head_bytes);
  void ReleaseInputIfEmpty(Connection* conn);
  bool ClientMaySend(const Connection* conn) const;
  void CloseGracefully(Connection* conn);
  void Abort(Connection* conn);
  void MaybeFree(Connection* conn);
  void ArmRecv(Connection* conn);

  // Observability hooks (shard_observe.cc): a response's exchange begins (the raw request line,
  // and the parsed request when there is one) and ends (metrics, the access log line).
  void BeginExchange(Connection* conn, std::string_view request_line, const http::Request* req);
  void EndExchange(Connection* conn, Exchange* ex);
  void NotePeer(Connection* conn);
  void FillSnapshot();

  int index_;
  const Config& config_;
  std::vector<int> listen_fds_;
  int root_fd_;
  const http::MimeTypes* mime_;
  io::LoopFactory make_loop_;
  int cpu_;
  std::string error_;

  std::unique_ptr<mem::ShardMemory> memory_;  // declared first: destroyed after its users
  std::unique_ptr<io::Loop> loop_;
  std::unique_ptr<mem::BufferPool> input_pool_;
  std::unique_ptr<mem::BufferPool> content_pool_;
  std::unique_ptr<mem::SlabPool<Connection>> conns_;
  std::unique_ptr<mem::SlabPool<Exchange>> exchanges_;
  // With the access log only: each connection slot's client (conns_->IndexOf), taken at accept.
  std::unique_ptr<PeerAddress[]> peers_;
  std::unique_ptr<FileCache> files_;
  std::unique_ptr<SendQueue> sends_;  // which long bodies send now (send_queue.h)
  std::unique_ptr<http::PlanScratch> scratch_;
  uint64_t plans_ = 0;  // PlanResponse calls so far (Exchange::plan_number)
  http::PlannerConfig planner_;
  http::PlannerConfig redirect_planner_;  // planner_ with redirect_to_https (--redirect-https)
  std::vector<bool> redirect_listeners_;
  std::string https_port_suffix_;
  http::ParserLimits limits_;
  http::Header headers_[kMaxHeaderFields];
  std::string boundary_;

  std::vector<io::Completion> accepts_;  // one per listening socket
  std::vector<bool> accept_armed_;       // accepts_[i] is in the loop (until its last callback)
  uint32_t accepts_active_ = 0;
  bool accept_paused_ = false;
  int64_t accept_retry_ms_ = 0;
  uint32_t live_ = 0;  // connections
  // Newcomers waiting for a connection slot (their descriptors), a ring of kParkedMax, oldest
  // at parked_head_.
  struct Parked {
    int fd = -1;
    uint32_t listener = 0;  // which of listen_fds_ it came from
  };
  std::vector<Parked> parked_;
  uint32_t parked_head_ = 0, parked_count_ = 0;

  TimerList header_timers_, idle_timers_, send_timers_, linger_timers_, discard_timers_;
  // Lingering connections that gave way to newcomers, the longest lingering first: closed for
  // parked newcomers, or when their linger ends.
  TimerList gave_way_timers_;
  int64_t now_ms_ = 0;
  int64_t date_sec_ = -1;
  char date_[http::kHttpDateLen];

  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> drain_begun_{false};
  bool draining_ = false;
  int64_t drain_deadline_ms_ = 0;
  ShardStats stats_;

  RequestMetrics metrics_;
  uint32_t state_counts_[kConnStates] = {};
  AccessLogShard* log_ = nullptr;
  bool timing_ = false;
  SnapshotSlot snapshot_;
  bool heartbeat_on_ = false;
  Heartbeat heartbeat_;
  bool listeners_shared_ = false;
  io::LoopOptions features_;  // only the feature flags SetLoopFeatures names are read
  int attach_ring_fd_ = -1;
};

}  // namespace ringd
