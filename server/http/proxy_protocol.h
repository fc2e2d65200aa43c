// The PROXY protocol (HAProxy's spec, versions 1 and 2): the header a load balancer sends first
// on a connection to name the client it stands for. A pure function over the bytes received so
// far, as the request parser is: the caller keeps what has come until the header is whole, then
// strips `length` bytes and goes on with the rest (HTTP, or TLS on a TLS listener).
//
//   const ProxyHeader h = ParseProxyHeader(bytes);
//   if (h.status == ProxyStatus::kPartial) keep bytes, wait for more;
//   else if (h.status == ProxyStatus::kDone) client = h.has_source ? h.source : the socket's peer;
//   else close the connection (kMissing, kMalformed).
#pragma once

#include <cstddef>
#include <string_view>

#include "server/http/client_address.h"

namespace ringd::http {

enum class ProxyStatus : uint8_t {
  kPartial,    // a prefix of a header: wait for more bytes
  kDone,       // a whole header of `length` bytes
  kMissing,    // the bytes begin neither version's signature: no header was sent
  kMalformed,  // a header that breaks the spec, or is longer than kMaxProxyHeader
};

struct ProxyHeader {
  ProxyStatus status = ProxyStatus::kPartial;
  size_t length = 0;  // kDone: the header's bytes, to strip
  // kDone: the header names the client (v1 TCP4/TCP6, v2 PROXY over IPv4 or IPv6). False for
  // v2 LOCAL (the proxy's own connection: a health check), v1 UNKNOWN and v2 UNSPEC or UNIX
  // addresses: the socket's own peer stands, as the spec says.
  bool has_source = false;
  ClientAddress source;
};

// A v1 header is at most 107 bytes (the spec); a v2 header's length is its own, with TLVs. One
// longer than this is refused (nginx's bound too), so a header's bytes are bounded while they
// wait.
inline constexpr size_t kMaxProxyHeader = 4096;

ProxyHeader ParseProxyHeader(std::string_view bytes);

}  // namespace ringd::http
