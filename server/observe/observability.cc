#include "server/observe/observability.h"

#include <time.h>

#include <chrono>
#include <cstdio>

#include "server/core/version.h"

namespace ringd {

Observability::~Observability() { Stop(); }

absl::Status Observability::Open(const Config& config, uint32_t shards) {
  start_time_sec_ = ::time(nullptr);
  if (!config.access_log.empty()) {
    absl::StatusOr<std::unique_ptr<AccessLog>> log = AccessLog::Open(
        config.access_log,
        config.access_log_json ? AccessLogFormat::kJson : AccessLogFormat::kCombined, shards,
        config.access_log_buffer_bytes);
    if (!log.ok()) return log.status();
    log_ = *std::move(log);
  }
  if (config.has_admin_listen) {
    absl::StatusOr<std::unique_ptr<AdminServer>> admin =
        AdminServer::Listen(config.admin_listen, config.takeover);
    if (!admin.ok()) return admin.status();
    admin_ = *std::move(admin);
  }
  return absl::OkStatus();
}

void Observability::Attach(Shard* shard, int index) {
  if (log_ != nullptr) shard->SetAccessLog(log_->shard(index));
  // Requests are timed only when something reads the times.
  shard->SetTiming(log_ != nullptr || admin_ != nullptr);
}

void Observability::Start(std::vector<Shard*> shards, const std::string& backend,
                          const std::string& io_reason) {
  shards_ = std::move(shards);
  backend_ = backend;
  io_reason_ = io_reason;
  if (log_ != nullptr) log_->Start();
  if (admin_ == nullptr) return;
  AdminHandlers h;
  h.metrics = [this] { return FormatPrometheus(Collect(), Info()); };
  h.debug_shards = [this] { return FormatDebugShards(Collect(), Info()); };
  h.healthz = [this] {
    AdminResponse r;
    // A shard whose drain is over has stopped on purpose; one that does not answer is stuck.
    for (const ShardView& v : Collect()) {
      if (!v.up && !v.stopped) {
        r.status = 503;
        r.body += "shard " + std::to_string(v.shard) + " did not answer within " +
                  std::to_string(kSnapshotWaitMs) + " ms\n";
      }
    }
    if (r.status == 200) r.body = "ok\n";
    return r;
  };
  h.readyz = [this] {
    AdminResponse r;
    if (draining_.load(std::memory_order_acquire)) {
      r.status = 503;
      r.body = "draining\n";
    } else if (std::string why = certificates_ != nullptr
                                     ? UnusableCertificates(Info(), ::time(nullptr))
                                     : std::string();
               !why.empty()) {
      r.status = 503;
      r.body = std::move(why);
    } else {
      r.body = "ready\n";
    }
    return r;
  };
  admin_->Start(std::move(h));
}

void Observability::BeginDrain() {
  // Left before the flag turns: the process that took over answers every scrape from here on,
  // and none sees this one's 503.
  if (admin_ != nullptr && admin_->LeaveToTheNewProcess()) {
    std::fprintf(stderr, "ringd: admin listener on %s left to the process sharing it\n",
                 admin_->address().c_str());
  }
  draining_.store(true, std::memory_order_release);
}

void Observability::ReopenLog() {
  if (log_ == nullptr) {
    std::fprintf(stderr, "ringd: SIGUSR1: no access log to reopen\n");
    return;
  }
  log_->Reopen();
}

void Observability::Tick() {
  if (log_ == nullptr) return;
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  log_->ReportDrops(ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

void Observability::Stop() {
  if (admin_ != nullptr) admin_->Stop();
  if (log_ != nullptr) log_->Stop();
  Tick();  // drops since the last report
}

std::vector<ShardView> Observability::Collect() {
  for (Shard* s : shards_) {
    s->snapshot_slot().Request();
    s->loop()->Wake();
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kSnapshotWaitMs);
  std::vector<ShardView> views;
  for (size_t i = 0; i < shards_.size(); ++i) {
    ShardView v;
    v.shard = static_cast<int>(i);
    v.up = shards_[i]->snapshot_slot().WaitFor(deadline);
    v.stopped = !v.up && shards_[i]->snapshot_slot().closed();
    v.snapshot = &shards_[i]->snapshot_slot().data();
    views.push_back(v);
  }
  return views;
}

ProcessInfo Observability::Info() const {
  ProcessInfo p;
  p.version = BuildVersion();
  p.commit = BuildCommit();
  p.backend = backend_;
  p.io_reason = io_reason_;
  p.draining = draining_.load(std::memory_order_acquire);
  p.access_log = log_ != nullptr;
  p.access_log_lost_lines = log_ != nullptr ? log_->write_failed_lines() : 0;
  p.start_time_sec = start_time_sec_;
  if (certificates_ != nullptr) p.tls_certificates = certificates_();
  return p;
}

}  // namespace ringd
