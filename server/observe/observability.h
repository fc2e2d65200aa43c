// What ringd_main wires together for operators: the access log (--access-log) and the admin
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
  void SetCertificates(std::function<std::vector<ProcessInfo::Certificate>()> certificates) {
    certificates_ = std::move(certificates);
  }
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
  std::unique_ptr<AdminServer> admin_;
  std::vector<Shard*> shards_;
  std::string backend_, io_reason_;
  std::function<std::vector<ProcessInfo::Certificate>()> certificates_;
  int64_t start_time_sec_ = 0;
  std::atomic<bool> draining_{false};
};

}  // namespace ringd
