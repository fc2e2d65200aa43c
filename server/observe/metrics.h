// What the admin listener says about the shards: /metrics in the Prometheus text exposition
// format (version 0.0.4) and /debug/shards as JSON, both from snapshots the shards copied on
// their own threads (server/core/shard_snapshot.h). Pure functions: no threads, no sockets.
//
//   std::vector<ShardView> views = ...;   // one per shard: its snapshot, or !up
//   std::string text = FormatPrometheus(views, process);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "server/core/shard_snapshot.h"

namespace ringd {

// One shard as the admin thread sees it: a snapshot, or `up == false` when the shard did not
// answer in time (its counters are then left out rather than shown stale).
struct ShardView {
  int shard = 0;
  bool up = false;
  bool stopped = false;  // not up because its drain is over (not because it is stuck)
  const ShardSnapshot* snapshot = nullptr;  // valid when up
};

struct ProcessInfo {
  std::string version;    // BuildVersion(): the package version, or "dev"
  std::string commit;     // BuildCommit()
  std::string backend;    // "uring", "epoll"
  std::string io_reason;  // why that backend (the probe's line)
  bool draining = false;
  bool access_log = false;             // whether lines are being written
  uint64_t access_log_lost_lines = 0;  // lost to write errors
  int64_t start_time_sec = 0;          // realtime
  struct Certificate {
    std::string file;
    int64_t not_after_sec = 0;
    std::string ocsp_file;             // its stapled OCSP response (--tls-ocsp), if any
    int64_t ocsp_next_update_sec = 0;  // when that response goes stale (0: it never says)
  };
  std::vector<Certificate> tls_certificates;  // in use now (--tls-cert), with their expiry
  int64_t now_sec = 0;                        // realtime, for what has expired by now
  std::vector<std::string> tls_ocsp_dropped;  // --tls-ocsp files left out of the generation in use
  bool reload_success = true;                 // the last SIGHUP's reload took (true before any)
  int64_t reload_time_sec = 0;                // when the configuration in use was loaded
};

// Why HTTPS cannot be served as configured now: a line for each certificate in use that has
// expired. Empty when every certificate is usable. /readyz answers 503 with these lines under
// --tls-expired=refuse, and 200 with them as a warning otherwise.
std::string UnusableCertificates(const ProcessInfo& process, int64_t now_sec);

std::string FormatPrometheus(const std::vector<ShardView>& shards, const ProcessInfo& process);
std::string FormatDebugShards(const std::vector<ShardView>& shards, const ProcessInfo& process);

// The status-class and body-path label values, in RequestMetrics's order.
inline constexpr const char* kStatusClassNames[kStatusClasses] = {"1xx", "2xx", "3xx", "4xx",
                                                                  "5xx"};
inline constexpr const char* kBodyPathNames[kBodyPaths] = {"none", "cached", "file", "inline"};

}  // namespace ringd
