// What a shard counts, and how another thread reads it. Every counter here is a plain integer
// written only by its shard's thread: the request path takes no lock and touches no shared cache
// line. The admin thread reads a shard through its SnapshotSlot: it asks (an atomic and a loop
// wake-up), the shard copies its counters into the slot at the end of its next loop turn and
// publishes them with a release store, and the admin reads them after an acquire load (Seastar's
// way: each shard reports its own metrics on its own thread).
//
//   slot.Request();  shard->loop()->Wake();          // admin thread
//   if (slot.Pending()) { fill slot.data(); slot.Publish(); }   // shard thread, after Poll
//   if (slot.WaitFor(deadline)) read slot.data();     // admin thread
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "io/loop.h"
#include "server/core/compressor.h"
#include "server/core/file_cache.h"
#include "server/http/client_address.h"

namespace ringd {

struct ShardStats {
  uint64_t accepted = 0, requests = 0, closed = 0, accept_paused = 0, overloaded = 0;
  uint64_t header_timeouts = 0, idle_timeouts = 0, send_timeouts = 0, truncated = 0;
  uint64_t discard_timeouts = 0;  // a skipped request body stalled after the response
  uint64_t idle_reclaimed = 0;    // idle keep-alive connections closed for newcomers at the limit
  // Connections closed for newcomers at the limit that had sent no byte of a request in
  // Shard::kSilentGiveWayMs (a TLS handshake that did not finish, a client that said nothing).
  uint64_t silent_reclaimed = 0;
  // Of those, closed before their lingering ended, for newcomers waiting for a slot; and the
  // newcomers that waited (parked: accepted while every slot was taken).
  uint64_t gave_way_closed = 0, parked = 0;
  uint64_t lookup_refused = 0;  // 503: the file cache was full, too many lookups, no listing slot
  uint64_t recv_errors = 0, send_errors = 0;  // a connection ended by an error of its socket
  uint64_t sends_queued = 0;  // body chunks that waited for a send slot (--send-order=srpt)
  uint64_t sends_aged = 0;    // of those, started over the slot budget by --send-max-wait-ms
  // Receives ended beside the last response (the client asked to close and had sent all), and
  // of those, re-armed because bytes came after all (the connection then lingers as any other).
  uint64_t recv_ended_early = 0, recv_rearmed_to_linger = 0;
  // HTTP/2: connections that sent the preface, streams answered, streams refused for want of an
  // exchange, malformed requests (RST_STREAM PROTOCOL_ERROR), connection errors (GOAWAY, then
  // closed), RST_STREAM and GOAWAY frames each way.
  uint64_t h2_connections = 0, h2_streams = 0, h2_streams_refused = 0, h2_malformed = 0;
  uint64_t h2_connection_errors = 0, h2_resets_received = 0, h2_resets_sent = 0;
  uint64_t h2_goaways_received = 0, h2_goaways_sent = 0;
  // HTTP/2 flow-control stalls: a connection had response bytes ready and nothing else to send,
  // and the client's window (the connection's, else a stream's) was shut. Once per stall: it
  // ends when bytes go out again.
  uint64_t h2_stalls_connection_window = 0, h2_stalls_stream_window = 0;
  // HTTP/2 connections idle long enough to hand their frame buffer's pages back (H2Memory), and
  // what nghttp2 holds now for the shard's sessions (bytes of its allocations).
  uint64_t h2_frame_buffers_released = 0, h2_library_bytes = 0;
  // Pool entries whose pages went back to the kernel after a period unused (ReleaseIdle): input
  // buffers, and exchanges (HTTP/1.1's and HTTP/2's).
  uint64_t input_buffers_released = 0, exchanges_released = 0;
  // Responses still being sent when the drain's deadline (--shutdown-timeout-ms) ended them.
  uint64_t cut_at_drain_deadline = 0;
  // Connections closed for their client: refused by --allow/--deny (at accept, or at the PROXY
  // header that named it), and on ",proxy" listeners from a peer not in --proxy-from, without a
  // PROXY header, or with a malformed one. (TLS listeners' header refusals: io::LoopStats.)
  uint64_t clients_denied = 0;
  uint64_t proxy_untrusted = 0, proxy_missing = 0, proxy_malformed = 0;
  http::ClientAddress last_refused;  // the last client refused by address, for the log line
  // Requests answered 403 because their site's --allow/--deny refused their client.
  uint64_t site_clients_denied = 0;
  // Refused by the limits per client: connections closed by --limit-conn, requests answered
  // --limit-req-status by --limit-req.
  uint64_t limit_conn_refused = 0, limit_req_refused = 0;
  // --limit-req's table: clients forgotten to make room (their buckets not yet drained), and
  // its entries in use (at most --limit-table).
  uint64_t limit_req_evicted = 0, limit_req_clients = 0;
  uint64_t limit_conn_clients = 0;  // --limit-conn's table: clients holding a connection
};

// What a shard holds right now, for checks that nothing leaks (tests, the simulator).
struct ShardUsage {
  uint32_t connections = 0, exchanges = 0, input_buffers = 0, cache_entries = 0;
  uint32_t cache_pinned = 0;      // cache entries a response holds
  uint64_t h2_library_bytes = 0;  // what nghttp2 holds for the shard's HTTP/2 sessions
};

// Where a response's body came from.
enum class BodyPath : uint8_t {
  kNone,    // no body: HEAD, 304, an empty file, or no response at all (499)
  kCached,  // the small-file cache: the bytes were in memory
  kFile,    // the file itself: sendfile or splice (the loop picks per chunk)
  kInline,  // static text: error pages
};
constexpr int kBodyPaths = 4;
constexpr int kStatusClasses = 5;  // 1xx .. 5xx

// Request-duration histogram: fixed upper bounds in microseconds (and +Inf after them).
constexpr uint64_t kDurationBoundsUs[] = {100,     250,     500,     1000,    2500,   5000,
                                          10000,   25000,   50000,   100000,  250000, 500000,
                                          1000000, 2500000, 5000000, 10000000};
constexpr int kDurationBuckets = sizeof(kDurationBoundsUs) / sizeof(kDurationBoundsUs[0]) + 1;

// Per-response counters, kept by the shard as each response ends (completed or aborted).
struct RequestMetrics {
  uint64_t responses[kStatusClasses][kBodyPaths] = {};
  uint64_t response_bytes = 0;                       // head and body bytes handed to the kernel
  uint64_t duration_buckets[kDurationBuckets] = {};  // not cumulative; the last is +Inf
  uint64_t duration_sum_us = 0;

  void Record(int status, BodyPath path, uint64_t bytes) {
    int cls = status / 100 - 1;
    if (cls < 0 || cls >= kStatusClasses) cls = kStatusClasses - 1;
    ++responses[cls][static_cast<int>(path)];
    response_bytes += bytes;
  }
  void Observe(uint64_t duration_us) {
    int b = 0;
    while (b < kDurationBuckets - 1 && duration_us > kDurationBoundsUs[b]) ++b;
    ++duration_buckets[b];
    duration_sum_us += duration_us;
  }
};

// Connection states as the debug view names them (ConnState's order).
constexpr int kConnStates = 7;
constexpr const char* kConnStateNames[kConnStates] = {
    "reading", "waiting_file", "sending", "ending_recv", "lingering", "closing", "h2"};

// A shard's state at one moment, copied on its own thread.
struct ShardSnapshot {
  int shard = 0;
  const char* backend = "";  // the loop's name ("uring", "epoll")
  bool draining = false;
  bool accept_paused = false;
  ShardStats stats;
  RequestMetrics requests;
  io::LoopStats loop;
  FileCacheStats cache;
  CompressorStats compress;                 // --compress (zero without it)
  uint64_t cache_content_buffer_bytes = 0;  // the size of one content buffer
  uint32_t connection_capacity = 0;
  uint32_t connection_states[kConnStates] = {};
  uint32_t idle_connections = 0;  // kReading, between requests, on the keep-alive timer
  uint32_t exchanges = 0, exchange_capacity = 0;
  uint32_t input_buffers = 0, input_buffer_capacity = 0;
  uint32_t content_buffers = 0, content_buffer_capacity = 0;
  uint32_t pipes_in_use = 0, pipe_capacity = 0;
  uint32_t listings = 0, listing_capacity = 0;  // --autoindex: DirLister's slots (0: off)
  uint64_t log_lines = 0, log_dropped = 0;      // access log lines queued / dropped by this shard
  // --site: responses per site ("-": the default site, and requests answered 421), one entry
  // per configured site; empty without sites.
  struct SiteRequests {
    std::string name;
    uint64_t requests = 0;
  };
  std::vector<SiteRequests> sites;
};

// One shard's snapshot and the handshake around it: one reader thread (the admin) at a time.
class alignas(64) SnapshotSlot {
 public:
  // Reader: asks for a fresh snapshot; then wake the shard's loop.
  void Request() { requested_.store(++asked_, std::memory_order_release); }
  // Shard: whether a snapshot is asked for (one relaxed load per loop turn).
  bool Pending() const {
    return requested_.load(std::memory_order_relaxed) != published_.load(std::memory_order_relaxed);
  }
  // Shard: after filling data(), makes it visible to the reader.
  void Publish() {
    published_.store(requested_.load(std::memory_order_acquire), std::memory_order_release);
  }
  // Shard: it stops turning its loop (its drain is over) and will never answer again.
  void Close() { closed_.store(true, std::memory_order_release); }
  bool closed() const { return closed_.load(std::memory_order_acquire); }

  // Reader: waits until the snapshot asked for last is published (true), or the deadline
  // passes or the shard has stopped (false). On false do not read data(): the shard may still
  // be writing it.
  bool WaitFor(std::chrono::steady_clock::time_point deadline) const {
    while (published_.load(std::memory_order_acquire) != asked_) {
      if (closed() || std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return true;
  }
  ShardSnapshot& data() { return data_; }
  const ShardSnapshot& data() const { return data_; }

 private:
  uint64_t asked_ = 0;  // reader's own count
  std::atomic<uint64_t> requested_{0};
  std::atomic<uint64_t> published_{0};
  std::atomic<bool> closed_{false};
  ShardSnapshot data_;
};

// The watchdog's question to a shard (systemd's WatchdogSec=): has your loop turned since I
// asked? The main thread asks and wakes the loop; the shard answers after its next Poll. A shard
// stuck in a callback never answers, and the main thread stops telling systemd all is well.
// Costs the shard one relaxed load per loop turn, only while a watchdog is on.
class alignas(64) Heartbeat {
 public:
  void Ask() { asked_.fetch_add(1, std::memory_order_release); }
  bool Pending() const {
    return asked_.load(std::memory_order_relaxed) != answered_.load(std::memory_order_relaxed);
  }
  void Answer() {
    answered_.store(asked_.load(std::memory_order_acquire), std::memory_order_release);
  }
  // Whether the last question was answered (true before any was asked).
  bool Answered() const {
    return answered_.load(std::memory_order_acquire) == asked_.load(std::memory_order_acquire);
  }

 private:
  std::atomic<uint64_t> asked_{0};
  std::atomic<uint64_t> answered_{0};
};

}  // namespace ringd
