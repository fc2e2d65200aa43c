#include "server/ops/systemd.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ringd {

absl::StatusOr<ListenSockets> TakeListenSockets() {
  ListenSockets passed;
  char** names = nullptr;
  const int n = sd_listen_fds_with_names(/*unset_environment=*/1, &names);
  std::vector<std::string> name_of;
  for (int i = 0; names != nullptr && names[i] != nullptr; ++i) {
    name_of.emplace_back(names[i]);
    std::free(names[i]);
  }
  std::free(names);
  if (n < 0) {
    return absl::FailedPreconditionError(
        std::string("LISTEN_FDS: cannot take the sockets systemd passed: ") + strerror(-n));
  }
  for (int fd = SD_LISTEN_FDS_START; fd < SD_LISTEN_FDS_START + n; ++fd) {
    if (sd_is_socket(fd, AF_UNSPEC, SOCK_STREAM, /*listening=*/1) <= 0) {
      return absl::FailedPreconditionError(
          "LISTEN_FDS: descriptor " + std::to_string(fd) +
          " is not a listening stream socket (the socket unit needs ListenStream=)");
    }
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
      return absl::FailedPreconditionError("LISTEN_FDS: descriptor " + std::to_string(fd) + ": " +
                                           strerror(errno));
    }
    if (sd_is_socket_inet(fd, AF_UNSPEC, SOCK_STREAM, 1, 0) > 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    const size_t i = static_cast<size_t>(fd - SD_LISTEN_FDS_START);
    const std::string name = i < name_of.size() ? name_of[i] : "";
    const bool tls = name == kTlsSocketName || name == kTlsProxySocketName;
    (tls ? passed.tls_fds : passed.fds).push_back(fd);
    if (name == kProxySocketName || name == kTlsProxySocketName) passed.proxy_fds.push_back(fd);
  }
  return passed;
}

ServiceNotifier::ServiceNotifier() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  enabled_ = socket != nullptr && socket[0] != '\0';
  uint64_t usec = 0;
  if (enabled_ && sd_watchdog_enabled(/*unset_environment=*/0, &usec) > 0 && usec > 0)
    watchdog_interval_ms_ = usec / 2000 > 0 ? usec / 2000 : 1;
}

void ServiceNotifier::Ready(const std::string& status) {
  if (enabled_) sd_notifyf(0, "READY=1\nSTATUS=%s\nMAINPID=%d", status.c_str(), ::getpid());
}

void ServiceNotifier::Stopping(const std::string& status) {
  if (enabled_) sd_notifyf(0, "STOPPING=1\nSTATUS=%s", status.c_str());
}

void ServiceNotifier::Watchdog() {
  if (watchdog_interval_ms_ > 0) sd_notify(0, "WATCHDOG=1");
}

}  // namespace ringd
