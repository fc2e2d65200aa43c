// A shard: one thread, pinned to one CPU, owning one io Loop, its listening sockets, its
// connections, its pools and its caches. Shards share nothing; the only cross-thread call is
// RequestStop (from the signal-handling main thread). The shard accepts, parks newcomers while
// no slot is free, applies the connection limit's policy, drains and turns the loop; its
// ConnectionMachine (connection.h) serves each connection from accept to last callback.
//
//   Shard shard(index, config, listen_fds, root_fd, mime, tier->make, cpu);   // io/tier.h
//   std::thread t([&] { if (shard.Setup()) shard.Serve(); });   // Serve returns after a stop
//   shard.RequestStop(Shard::StopBound::kTimeout);   // SIGTERM; kWhileMoving: SIGQUIT
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
#include "server/core/access_log.h"
#include "server/core/config.h"
#include "server/core/connection.h"
#include "server/core/shard_snapshot.h"
#include "server/core/sites.h"

namespace ringd {

class Shard final : private ConnectionHost {
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
  // How a drain ends the responses still under way: kTimeout cuts them --shutdown-timeout-ms
  // after it begins (SIGTERM, SIGINT); kWhileMoving lets each run as long as it moves, each
  // connection's own timeouts (--send-timeout-ms) ending the stalled ones (SIGQUIT, as nginx's
  // graceful QUIT). A kTimeout request during a kWhileMoving drain bounds it from then on.
  enum class StopBound : uint8_t { kTimeout, kWhileMoving };
  void RequestStop(StopBound bound = StopBound::kTimeout);
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
  // At the limit, after every idle connection, one silent this long (no byte of a request) gives
  // way too (ConnectionMachine::kSilentGiveWayMs).
  static constexpr int64_t kSilentGiveWayMs = ConnectionMachine::kSilentGiveWayMs;
  const ShardStats& Stats() const { return stats_; }
  const SendQueue& send_queue() const { return machine_->sends(); }
  // Requests answered by the --site sites (not the default one), summed (tests, the simulator).
  uint64_t SiteRequests() const {
    uint64_t n = 0;
    for (const auto& site : machine_->site_files()) n += site->requests;
    return n;
  }
  // Responses ended (completed or aborted), 400s to unparseable input included: the sum of
  // ringd_requests_total. Stats().requests counts requests parsed whole.
  uint64_t Responses() const;
  ShardUsage Usage() const;

  // Observability (connection_observe.cc, shard_observe.cc). Before Setup: the shard's side of the
  // access log (null: off), and whether to time requests (for the log and the duration histogram).
  void SetAccessLog(AccessLogShard* log) { log_ = log; }
  void SetErrorLog(ErrorLogShard* log) { error_log_ = log; }
  void SetTiming(bool on) { timing_ = on; }
  // Before Setup: where the root moves (DocumentRoot::state_word); without it the shard serves
  // root_fd throughout.
  void SetDocumentRoot(const std::atomic<uint64_t>* state) { root_state_ = state; }
  // Before Setup: where the origin headers move (a SIGHUP reload publishes a new generation);
  // without it the shard serves Config::origin throughout.
  void SetOriginHeaders(const std::atomic<const http::OriginHeaders*>* word) {
    origin_word_ = word;
  }
  // Before Setup: where the sites (--site) requests are chosen among by Host are published (a
  // SIGHUP that changes them publishes a new generation); without it every request is the
  // default site's. The shard builds its own caches beneath their roots.
  void SetSites(const std::atomic<const Sites*>* word) { sites_word_ = word; }
  // Before Setup: the multipart boundary's random part (0: from getrandom). A simulation sets it
  // from its seed, so that a seed's bytes replay exactly (HPACK's Huffman code makes even the
  // length of a header that carries the boundary depend on its digits).
  void SetBoundarySeed(uint64_t seed) { boundary_seed_ = seed; }
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
  // Before Setup: how each listener (in listen_fds order) reads the PROXY protocol header: not at
  // all, the connection machine (plaintext), or the TLS loop below the shard (before TLS). On
  // either kind the peer must be a --proxy-from address.
  enum class ProxyHeader : uint8_t { kNone, kPlain, kBeforeTls };
  void SetProxyListeners(std::vector<ProxyHeader> listeners) {
    proxy_listeners_ = std::move(listeners);
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
  bool Admit(int fd, size_t listener);
  bool Welcome(int fd, size_t listener);
  bool ReadsProxyHeader(size_t listener) const {
    return !proxy_listeners_.empty() && proxy_listeners_[listener] == ProxyHeader::kPlain;
  }
  bool ReadsProxyHeaderBelowTls(size_t listener) const {
    return !proxy_listeners_.empty() && proxy_listeners_[listener] == ProxyHeader::kBeforeTls;
  }
  void LogRefusals();
  // The connection limit's policy (shard.cc).
  void RoomMayHaveChanged() override { ResumeAcceptIfRoom(); }
  bool AtLimit() const;
  void MakeRoom();
  void PauseAccept();
  void ResumeAcceptIfRoom();
  uint32_t capacity() const;
  void FillSnapshot();  // shard_observe.cc

  int index_;
  const Config& config_;
  std::vector<int> listen_fds_;
  int root_fd_;
  const std::atomic<uint64_t>* root_state_ = nullptr;
  const std::atomic<const http::OriginHeaders*>* origin_word_ = nullptr;
  const std::atomic<const Sites*>* sites_word_ = nullptr;
  uint64_t boundary_seed_ = 0;
  const http::MimeTypes* mime_;
  io::LoopFactory make_loop_;
  int cpu_;
  std::string error_;

  std::unique_ptr<mem::ShardMemory> memory_;  // declared first: destroyed after its users
  std::unique_ptr<io::Loop> loop_;
  std::unique_ptr<mem::BufferPool> input_pool_;
  std::unique_ptr<mem::BufferPool> content_pool_;
  std::unique_ptr<ConnectionMachine> machine_;  // declared after the loop: destroyed before it
  std::vector<bool> redirect_listeners_;
  std::string https_port_suffix_;
  std::vector<ProxyHeader> proxy_listeners_;  // empty: none reads one
  // Refusals by address (clients denied, PROXY headers refused) as last logged (LogRefusals).
  uint64_t refusals_logged_ = 0;
  int64_t refusals_logged_ms_ = 0;

  std::vector<io::Completion> accepts_;  // one per listening socket
  std::vector<bool> accept_armed_;       // accepts_[i] is in the loop (until its last callback)
  uint32_t accepts_active_ = 0;
  bool accept_paused_ = false;
  int64_t accept_retry_ms_ = 0;
  // Newcomers waiting for a connection slot (their descriptors), a ring of kParkedMax, oldest
  // at parked_head_.
  struct Parked {
    int fd = -1;
    uint32_t listener = 0;  // which of listen_fds_ it came from
  };
  std::vector<Parked> parked_;
  uint32_t parked_head_ = 0, parked_count_ = 0;

  int64_t now_ms_ = 0;
  // Input buffers and exchanges idle a whole period go back to the kernel (ReleaseIdle): a burst
  // of requests waiting for one file lookup takes one of each, and their pages would stay.
  static constexpr int64_t kReleaseIdleMs = 1000;
  int64_t release_idle_ms_ = 0;

  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> stop_bounded_{false};  // a kTimeout stop was asked for
  std::atomic<bool> drain_begun_{false};
  bool draining_ = false;
  // kNoDeadline while a kWhileMoving drain has no bound (far enough below INT64_MAX that adding
  // kDrainGraceMs to it cannot overflow).
  static constexpr int64_t kNoDeadline = INT64_MAX / 2;
  int64_t drain_deadline_ms_ = 0;
  ShardStats stats_;

  AccessLogShard* log_ = nullptr;
  ErrorLogShard* error_log_ = nullptr;
  bool timing_ = false;
  SnapshotSlot snapshot_;
  bool heartbeat_on_ = false;
  Heartbeat heartbeat_;
  bool listeners_shared_ = false;
  io::LoopOptions features_;  // only the feature flags SetLoopFeatures names are read
  int attach_ring_fd_ = -1;
};

}  // namespace ringd
