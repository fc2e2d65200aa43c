// systemd integration through libsystemd: listening sockets passed by socket activation
// (LISTEN_FDS / LISTEN_PID) and the notify protocol (READY=1, STOPPING=1, WATCHDOG=1 on
// NOTIFY_SOCKET). Outside systemd every call here does nothing.
//
//   absl::StatusOr<ListenSockets> passed = TakeListenSockets();    // empty: not activated
//   if (!passed.ok()) Die(1, passed.status());
//   ServiceNotifier notify;
//   notify.Ready("serving ...");                           // once every shard serves
//   if (notify.watchdog_interval_ms() > 0) ...             // ping with Watchdog() that often
//   notify.Stopping();                                     // a drain begins
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ringd {

// Takes the sockets systemd passed to this process (and unsets LISTEN_FDS and friends, so no
// child inherits them). Each must be a listening stream socket; it is made non-blocking (and,
// for TCP, TCP_NODELAY, inherited by accepted connections). An error of one line when a passed
// descriptor cannot serve; both lists empty when nothing was passed. Sockets named `https`
// (FileDescriptorName=https in their socket unit: LISTEN_FDNAMES) go to `tls_fds` and serve
// HTTPS; every other one goes to `fds` and serves plain HTTP. Those named `proxy` (plain HTTP)
// or `https-proxy` (HTTPS) read a PROXY protocol header first, as a `,proxy` listener does: they
// are in `fds` or `tls_fds`, and in `proxy_fds` too.
inline constexpr const char* kTlsSocketName = "https";
inline constexpr const char* kProxySocketName = "proxy";
inline constexpr const char* kTlsProxySocketName = "https-proxy";
struct ListenSockets {
  std::vector<int> fds;
  std::vector<int> tls_fds;
  std::vector<int> proxy_fds;
};
absl::StatusOr<ListenSockets> TakeListenSockets();

class ServiceNotifier {
 public:
  ServiceNotifier();
  // Whether NOTIFY_SOCKET names a socket to tell.
  bool enabled() const { return enabled_; }
  void Ready(const std::string& status);
  void Stopping(const std::string& status);
  // How often to send WATCHDOG=1: half of WATCHDOG_USEC, as systemd advises; 0 when systemd
  // does not watch this process.
  uint64_t watchdog_interval_ms() const { return watchdog_interval_ms_; }
  void Watchdog();

 private:
  bool enabled_ = false;
  uint64_t watchdog_interval_ms_ = 0;
};

}  // namespace ringd
