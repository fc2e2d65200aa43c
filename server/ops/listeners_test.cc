// Listening sockets: binding per shard, the check that an address is free, and how passed
// sockets are dealt out to the shards.
#include "server/ops/listeners.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ringd {
namespace {

ListenAddress Loopback(int port) {
  ListenAddress a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.addr);
  v4->sin_family = AF_INET;
  v4->sin_port = htons(static_cast<uint16_t>(port));
  v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.len = sizeof(sockaddr_in);
  a.text = "127.0.0.1:" + std::to_string(port);
  return a;
}

// A plain listener (no SO_REUSEPORT), as another server would hold a port; its port.
int PlainListener(int* fd) {
  *fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ListenAddress a = Loopback(0);
  EXPECT_EQ(::bind(*fd, reinterpret_cast<sockaddr*>(&a.addr), a.len), 0);
  EXPECT_EQ(::listen(*fd, 8), 0);
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(*fd, reinterpret_cast<sockaddr*>(&bound), &len);
  return PortOf(bound);
}

int Port(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return PortOf(a);
}

TEST(ListenersTest, PortZeroIsSharedByEveryShard) {
  ListenAddress a = Loopback(0);
  std::string error;
  const int first = Listen(a, &error);
  ASSERT_GE(first, 0) << error;
  const int port = PortOf(a.addr);
  EXPECT_NE(port, 0);
  EXPECT_EQ(Port(first), port);
  const int second = Listen(a, &error);  // the next shard: the same port, SO_REUSEPORT
  ASSERT_GE(second, 0) << error;
  EXPECT_EQ(Port(second), port);
  EXPECT_EQ(AddressText(a.addr), "127.0.0.1:" + std::to_string(port));
  // ringd's own SO_REUSEPORT listeners hold the port: a plain socket cannot have it.
  EXPECT_FALSE(AddressFree(a, &error));
  ::close(first);
  ::close(second);
}

TEST(ListenersTest, AnAddressHeldByAnotherServerIsNotFree) {
  int other;
  const int port = PlainListener(&other);
  std::string error;
  EXPECT_FALSE(AddressFree(Loopback(port), &error));
  EXPECT_NE(error.find("cannot listen on 127.0.0.1:" + std::to_string(port)), std::string::npos)
      << error;
  ListenAddress a = Loopback(port);
  error.clear();
  EXPECT_EQ(Listen(a, &error), -1);  // no SO_REUSEPORT on the other's socket: no sharing
  EXPECT_NE(error.find("Address already in use"), std::string::npos) << error;
  ::close(other);
  error.clear();
  EXPECT_TRUE(AddressFree(Loopback(port), &error)) << error;
}

TEST(ListenersTest, CountsTheListenersSharingAnAddress) {
  ListenAddress a = Loopback(0);
  std::string error;
  const int first = Listen(a, &error);
  ASSERT_GE(first, 0) << error;
  EXPECT_EQ(ListenersOnAddressOf(first), 1);
  const int second = Listen(a, &error);  // the same port (a is now the address bound)
  ASSERT_GE(second, 0) << error;
  EXPECT_EQ(ListenersOnAddressOf(first), 2);
  EXPECT_EQ(ListenersOnAddressOf(second), 2);
  ::close(second);
  EXPECT_EQ(ListenersOnAddressOf(first), 1);
  ::close(first);
}

TEST(ListenersTest, IPv6Text) {
  sockaddr_storage s{};
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&s);
  v6->sin6_family = AF_INET6;
  v6->sin6_port = htons(8443);
  v6->sin6_addr = in6addr_loopback;
  EXPECT_EQ(AddressText(s), "[::1]:8443");
  EXPECT_EQ(PortOf(s), 8443);
}

// `n` SO_REUSEPORT sockets on one address, as systemd passes ListenStream= repeated with
// ReusePort=yes.
std::vector<int> Passed(int n) {
  std::vector<int> fds;
  ListenAddress a = Loopback(0);
  std::string error;
  for (int i = 0; i < n; ++i) fds.push_back(Listen(a, &error));
  return fds;
}

// The inode of a descriptor's socket: a dup has the original's.
ino_t Socket(int fd) {
  struct stat st;
  ::fstat(fd, &st);
  return st.st_ino;
}

TEST(ListenersTest, PassedSocketsAreDealtOutOrShared) {
  std::string error;
  // As many sockets as shards: each shard its own.
  std::vector<int> four = Passed(4);
  auto by_shard = AssignInheritedSockets(four, 4, &error);
  ASSERT_EQ(by_shard.size(), 4u) << error;
  std::set<ino_t> seen;
  for (size_t i = 0; i < 4; ++i) {
    ASSERT_EQ(by_shard[i].size(), 1u);
    EXPECT_NE(by_shard[i][0], four[i]);  // a descriptor of its own
    EXPECT_EQ(Socket(by_shard[i][0]), Socket(four[i]));
    seen.insert(Socket(by_shard[i][0]));
  }
  EXPECT_EQ(seen.size(), 4u);
  EXPECT_EQ(InheritedSharing(four, 4),
            "each shard accepting on its own (SO_REUSEPORT spreads connections)");

  // One socket, three shards: all share it. Two shards, four sockets: two each, every one used.
  std::vector<int> one = Passed(1);
  by_shard = AssignInheritedSockets(one, 3, &error);
  ASSERT_EQ(by_shard.size(), 3u);
  for (const auto& fds : by_shard) {
    ASSERT_EQ(fds.size(), 1u);
    EXPECT_EQ(Socket(fds[0]), Socket(one[0]));
  }
  EXPECT_NE(InheritedSharing(one, 3).find("shared by the shards"), std::string::npos);
  EXPECT_EQ(InheritedSharing(one, 1), "one shard");
  by_shard = AssignInheritedSockets(four, 2, &error);
  seen.clear();
  for (const auto& fds : by_shard) {
    EXPECT_EQ(fds.size(), 2u);
    for (const int fd : fds) seen.insert(Socket(fd));
  }
  EXPECT_EQ(seen.size(), 4u);

  // Two addresses: each is dealt out on its own; every shard gets one of each.
  std::vector<int> both = Passed(2);
  const std::vector<int> other = Passed(2);
  both.insert(both.end(), other.begin(), other.end());
  by_shard = AssignInheritedSockets(both, 2, &error);
  for (const auto& fds : by_shard) {
    ASSERT_EQ(fds.size(), 2u);
    EXPECT_NE(Port(fds[0]), Port(fds[1]));
  }
}

}  // namespace
}  // namespace ringd
