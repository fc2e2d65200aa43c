// The admin listener (--admin-listen): a small HTTP/1.1 server on its own thread and its own
// address, never the public one. It answers GET (and HEAD) for
//
//   /metrics        Prometheus text exposition format 0.0.4
//   /healthz        200 while every shard turns its loop; 503 names a shard that does not
//   /readyz         200 while accepting; 503 from the moment a drain begins
//   /debug/shards   per-shard JSON: connections by state, pool occupancy, cache entries
//
// one request per connection (Connection: close), one connection at a time, each bounded by a
// 2-second receive and send timeout. The handlers run on the admin thread.
//
//   absl::StatusOr<std::unique_ptr<AdminServer>> admin = AdminServer::Listen(address);  // at
//   start-up admin->Start(handlers);  ...  admin->Stop();
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "server/core/config.h"

namespace ringd {

struct AdminResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

struct AdminHandlers {
  std::function<std::string()> metrics;       // the Prometheus text
  std::function<std::string()> debug_shards;  // JSON
  std::function<AdminResponse()> healthz;
  std::function<AdminResponse()> readyz;
};

class AdminServer {
 public:
  // Binds and listens (no SO_REUSEPORT: an address in use is an error); an error of one line on
  // failure.
  static absl::StatusOr<std::unique_ptr<AdminServer>> Listen(const ListenAddress& address);
  ~AdminServer();

  void Start(AdminHandlers handlers);
  void Stop();
  std::string address() const { return address_; }  // as bound: "127.0.0.1:9100"

  // Routes one request (exposed for tests): method and target as sent.
  AdminResponse Handle(std::string_view method, std::string_view target) const;

  static constexpr int kIoTimeoutMs = 2000;
  static constexpr size_t kMaxRequestHead = 8192;

 private:
  AdminServer(int listen_fd, int wake_fd, std::string address)
      : listen_fd_(listen_fd), wake_fd_(wake_fd), address_(std::move(address)) {}
  void Run();
  void Serve(int fd) const;

  int listen_fd_;
  int wake_fd_;  // eventfd: Stop
  std::string address_;
  AdminHandlers handlers_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

}  // namespace ringd
