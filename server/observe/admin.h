// The admin listener (--admin-listen): a small HTTP/1.1 server on its own thread and its own
// address, never the public one. It answers GET (and HEAD) for
//
//   /metrics        Prometheus text exposition format 0.0.4
//   /healthz        200 while every shard turns its loop; 503 names a shard that does not
//   /readyz         200 while accepting; 503 from the moment a drain begins
//   /debug/shards   per-shard JSON: connections by state, pool occupancy, cache entries
//
// one request per connection (Connection: close). One thread serves every connection: a poll(2)
// loop over the listener and up to kMaxConnections nonblocking sockets, so a client that says
// nothing delays no one else. Each connection has kIoTimeoutMs from its accept to send its head
// and take the answer, and is closed when that passes. When kMaxConnections are open, accepting
// one more closes the oldest (as nginx, out of connections, closes its oldest idle keep-alive
// ones): a flood of silent connections cannot keep a health check out, which is answered as soon
// as its head is read, usually at its accept. The handlers run on the admin thread once a head is
// complete; they may block it for up to a second waiting on shard snapshots, and every other
// admin connection waits meanwhile.
//
//   absl::StatusOr<std::unique_ptr<AdminServer>> admin = AdminServer::Listen(address);
//   admin->Start(handlers);  // after start-up
//   ...
//   admin->LeaveToTheNewProcess();  // a drain: a --takeover process sharing the address answers
//   admin->Stop();           // closes every open admin connection
//
// The listener is an SO_REUSEPORT socket, as the serving ones are, so that a new process started
// with --takeover binds the same address while this one still answers: scrapes and health checks
// reach one or the other through the switch.
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
  // Binds and listens (SO_REUSEPORT); an error of one line on failure. Unless `share` (--takeover),
  // an address some socket already listens on is an error, as it is for --listen.
  static absl::StatusOr<std::unique_ptr<AdminServer>> Listen(const ListenAddress& address,
                                                             bool share = false);
  ~AdminServer();

  void Start(AdminHandlers handlers);
  // When another process's socket shares the listener's address (a new ringd under --takeover),
  // closes this one's listener, so that new admin connections reach that process only (and, with
  // net.ipv4.tcp_migrate_req=1, those queued here move there); connections already accepted are
  // still answered. Returns whether it closed it. Without another listener it keeps listening: a
  // draining process answers /readyz with 503 to whoever asks.
  bool LeaveToTheNewProcess();
  void Stop();
  std::string address() const { return address_; }  // as bound: "127.0.0.1:9100"

  // Routes one request (exposed for tests): method and target as sent.
  AdminResponse Handle(std::string_view method, std::string_view target) const;

  static constexpr int kIoTimeoutMs = 2000;        // per connection, from its accept to its close
  static constexpr size_t kMaxRequestHead = 8192;  // longer: 431
  static constexpr size_t kMaxConnections = 64;    // open at once; one more closes the oldest

 private:
  AdminServer(int listen_fd, int wake_fd, std::string address)
      : listen_fd_(listen_fd), wake_fd_(wake_fd), address_(std::move(address)) {}
  void Run();

  int listen_fd_;  // -1 once closed (LeaveToTheNewProcess)
  int wake_fd_;    // eventfd: Stop, or the listener's close
  std::string address_;
  AdminHandlers handlers_;
  std::thread thread_;  // runs Run(), which owns the open connections
  std::atomic<bool> stop_{false};
  std::atomic<bool> close_listener_{false};  // asked of the admin thread, which polls it
  std::atomic<bool> listener_closed_{false};
};

}  // namespace ringd
