#include "server/ops/listeners.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace ringd {
namespace {

// Sockets systemd passed, grouped by the address they are bound to (ListenStream= given once, or
// several times with ReusePort=yes: one SO_REUSEPORT socket each).
std::vector<std::vector<int>> GroupByAddress(const std::vector<int>& fds) {
  std::vector<std::vector<int>> groups;
  std::vector<std::string> keys;
  for (const int fd : fds) {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    const std::string key(reinterpret_cast<const char*>(&a), len);
    size_t g = 0;
    while (g < keys.size() && keys[g] != key) ++g;
    if (g == keys.size()) {
      keys.push_back(key);
      groups.emplace_back();
    }
    groups[g].push_back(fd);
  }
  return groups;
}

}  // namespace

int PortOf(const sockaddr_storage& a) {
  return a.ss_family == AF_INET ? ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port)
                                : ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
}

std::string AddressText(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    port = ntohs(v4->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
  inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
  port = ntohs(v6->sin6_port);
  return "[" + std::string(host) + "]:" + std::to_string(port);
}

bool AddressFree(const ListenAddress& a, std::string* error) {
  const int fd = ::socket(a.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;  // the real bind below reports the problem
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // TIME_WAIT leftovers are fine
  if (a.addr.ss_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&a.addr), a.len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok && err == EADDRINUSE) {
    *error = "cannot listen on " + a.text + ": " + strerror(err);
    return false;
  }
  return true;
}

int ListenersOnAddressOf(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return 0;
  // The kernel prints each 32-bit word of the address as it lies in memory, in hex, then the
  // port: 127.0.0.1:9100 is "0100007F:238C" on a little-endian machine.
  char local[64];
  const char* table = "/proc/net/tcp";
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    uint32_t w;
    std::memcpy(&w, &v4->sin_addr, 4);
    std::snprintf(local, sizeof local, "%08X:%04X", w, ntohs(v4->sin_port));
  } else {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    uint32_t w[4];
    std::memcpy(w, &v6->sin6_addr, 16);
    std::snprintf(local, sizeof local, "%08X%08X%08X%08X:%04X", w[0], w[1], w[2], w[3],
                  ntohs(v6->sin6_port));
    table = "/proc/net/tcp6";
  }
  std::ifstream f(table);
  std::string line;
  std::getline(f, line);  // the column names
  int count = 0;
  std::string slot, address, remote, state;
  while (f >> slot >> address >> remote >> state) {
    if (address == local && state == "0A") ++count;  // 0A: TCP_LISTEN
    std::getline(f, line);                           // the rest of the row
  }
  return count;
}

int Listen(ListenAddress& a, std::string* error) {
  const int fd = ::socket(a.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = "socket for " + a.text + ": " + strerror(errno);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // inherited by accepted sockets
  if (a.addr.ss_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a.addr), a.len) != 0) {
    *error = "cannot listen on " + a.text + ": " + strerror(errno);
    ::close(fd);
    return -1;
  }
  if (::listen(fd, 4096) != 0) {
    *error = "listen on " + a.text + ": " + strerror(errno);
    ::close(fd);
    return -1;
  }
  // Port 0: every further shard binds the port the kernel chose for the first.
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  a.addr = bound;
  a.len = len;
  return fd;
}

void SetDeferAccept(int fd, bool on) {
  // The kernel counts the seconds as retransmissions of its SYN-ACK: one second is one. A client
  // that sends nothing is accepted when it acknowledges that retransmission.
  const int seconds = on ? 1 : 0;
  ::setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &seconds, sizeof seconds);
}

std::vector<std::vector<int>> AssignInheritedSockets(const std::vector<int>& fds, uint32_t shards,
                                                     std::string* error) {
  std::vector<std::vector<int>> by_shard(shards);
  for (const std::vector<int>& group : GroupByAddress(fds)) {
    const size_t k = group.size();
    for (size_t j = 0; j < std::max<size_t>(k, shards); ++j) {
      const int fd = ::fcntl(group[j % k], F_DUPFD_CLOEXEC, 3);
      if (fd < 0) {
        *error = std::string("LISTEN_FDS: dup: ") + strerror(errno);
        return {};
      }
      by_shard[j % shards].push_back(fd);
    }
  }
  return by_shard;
}

std::string InheritedSharing(const std::vector<int>& fds, uint32_t shards) {
  const std::vector<std::vector<int>> groups = GroupByAddress(fds);
  bool own = true;
  for (const auto& g : groups) own = own && g.size() >= shards;
  if (shards == 1) return "one shard";
  if (own) return "each shard accepting on its own (SO_REUSEPORT spreads connections)";
  return "shared by the shards (fewer sockets than shards per address; repeat ListenStream= with "
         "ReusePort=yes to give each shard its own)";
}

}  // namespace ringd
