// Listening sockets: bound by ringd (one SO_REUSEPORT socket per shard and address, so the
// kernel spreads connections across shards) or passed by systemd (socket activation), dealt out
// to the shards. Errors come back as one line for the caller to print.
//
//   if (!AddressFree(a, &error)) ...            // before binding with SO_REUSEPORT
//   int fd = Listen(a, &error);                  // port 0: a.addr becomes the port chosen
//   auto by_shard = AssignInheritedSockets(passed, shards, &error);
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <vector>

#include "server/core/config.h"

namespace ringd {

int PortOf(const sockaddr_storage& a);
// "127.0.0.1:8080", "[::1]:8080".
std::string AddressText(const sockaddr_storage& a);

// Whether nothing listens on `a` yet. SO_REUSEPORT would let ringd bind a port another process of
// this user serves with SO_REUSEPORT too, and silently share its traffic; a plain socket's bind
// fails with EADDRINUSE there. False with *error set only for that.
bool AddressFree(const ListenAddress& a, std::string* error);

// How many sockets listen on exactly `fd`'s bound address in this network namespace, `fd`'s own
// included (/proc/net/tcp or tcp6): more than one is another process's SO_REUSEPORT listener
// sharing it, such as a new ringd's under --takeover. 0 if the tables cannot be read.
int ListenersOnAddressOf(int fd);

// A listening SO_REUSEPORT socket on `a` (non-blocking, TCP_NODELAY for the accepted sockets), or
// -1 with *error set. With port 0, `a` becomes the address bound, so further shards share it.
int Listen(ListenAddress& a, std::string* error);

// TCP_DEFER_ACCEPT on a listening TCP socket (`on`: one second; off: 0): the kernel hands over a
// connection when its first bytes come, or after a second without, so that the accept and the
// first request reach the shard together. Ignored by sockets that are not TCP.
void SetDeferAccept(int fd, bool on);

// Which passed sockets each of `shards` accepts on, as descriptors of its own (dups: a shard
// closes its own, and the caller closes the originals once every shard has its copies). Per
// address: with at least as many sockets as shards (ListenStream= repeated with ReusePort=yes),
// the sockets are dealt out and each shard accepts on its own; with fewer, shards share them.
// Every socket is accepted on by some shard. Empty with *error set when a dup fails.
std::vector<std::vector<int>> AssignInheritedSockets(const std::vector<int>& fds, uint32_t shards,
                                                     std::string* error);

// How the shards share the passed sockets, for the serving line: "one shard", "each shard
// accepting on its own (...)" or "shared by the shards (...)".
std::string InheritedSharing(const std::vector<int>& fds, uint32_t shards);

}  // namespace ringd
