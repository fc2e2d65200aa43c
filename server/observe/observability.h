// What ringd_main wires together for operators: the access log (--access-log), the error log
// (--error-log) and the admin
// listener (--admin-listen), their threads, and the signals that concern them. Kept out of
// ringd_main.cc so that the start-up sequence there stays a list of steps.
//
//   Observability obs;
//   if (absl::Status s = obs.Open(config, shards); !s.ok()) Die(1, s);   // bad log path, port in
//   use obs.Attach(shard, i);                                    // each shard, before Setup
//   obs.Start(shards, backend, reason);                      // once every shard serves
//   obs.ReopenLog();                                         // SIGUSR1
//   obs.Tick();                                              // every second or so
//   obs.BeginDrain();                                        // SIGTERM: /readyz turns 503
//   obs.Stop();                                              // after the shards are joined
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/core/access_log.h"
#include "server/core/config.h"
#include "server/core/shard.h"
#include "server/observe/admin.h"
#include "server/observe/metrics.h"

namespace ringd {

class Observability {
 public:
  ~Observability();
  absl::Status Open(const Config& config, uint32_t shards);
  void Attach(Shard* shard, int index);
  void Start(std::vector<Shard*> shards, const std::string& backend, const std::string& io_reason);
  void ReopenLog();
  // Before Start: the certificates in use now, asked at each scrape (they change on SIGHUP).
  // `dropped_ocsp`: the --tls-ocsp files left out of the generation in use; `refuse_expired`:
  // --tls-expired=refuse (an expired certificate makes /readyz 503, not a warning).
  void SetCertificates(std::function<std::vector<ProcessInfo::Certificate>()> certificates,
                       std::function<std::vector<std::string>()> dropped_ocsp,
                       bool refuse_expired) {
    certificates_ = std::move(certificates);
    dropped_ocsp_ = std::move(dropped_ocsp);
    refuse_expired_ = refuse_expired;
  }
  // After each SIGHUP, from the main thread: whether the reload took, for
  // ringd_reload_success and (when it did) ringd_reload_timestamp_seconds.
  void ReloadDone(bool ok);
  // /readyz turns 503, after the admin listener is left to a --takeover process sharing its
  // address, if there is one (AdminServer::LeaveToTheNewProcess; said on stderr).
  void BeginDrain();
  // About once a second, from the main thread: says on stderr if log lines are being dropped.
  void Tick();
  void Stop();

  bool has_admin() const { return admin_ != nullptr; }
  std::string admin_address() const { return admin_ != nullptr ? admin_->address() : ""; }

  // How long the admin thread waits for a shard's snapshot.
  static constexpr int kSnapshotWaitMs = 1000;

 private:
  std::vector<ShardView> Collect();
  ProcessInfo Info() const;

  std::unique_ptr<AccessLog> log_;
  // The error log: its writer (the access log's machinery, on its own path) and each shard's side.
  std::unique_ptr<AccessLog> error_log_;
  std::vector<std::unique_ptr<ErrorLogShard>> error_shards_;
  bool error_log_file_ = false;  // --error-log names a file (else stderr, or off)
  std::unique_ptr<AdminServer> admin_;
  std::vector<Shard*> shards_;
  std::string backend_, io_reason_;
  std::function<std::vector<ProcessInfo::Certificate>()> certificates_;
  std::function<std::vector<std::string>()> dropped_ocsp_;
  bool refuse_expired_ = false;
  int64_t start_time_sec_ = 0;
  // Read by the admin thread at a scrape; written by the main thread after a SIGHUP.
  std::atomic<bool> reload_ok_{true};
  std::atomic<int64_t> reload_time_sec_{0};
  std::atomic<bool> draining_{false};
};

}  // namespace ringd
