#include "server/http/client_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <string>

#include "server/http/decimal.h"

namespace ringd::http {

void ClientAddress::Set(const sockaddr_storage& ss) {
  *this = ClientAddress{};
  if (ss.ss_family == AF_INET) {
    family = AF_INET;
    std::memcpy(addr, &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, 4);
  } else if (ss.ss_family == AF_INET6) {
    family = AF_INET6;
    std::memcpy(addr, &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, 16);
  }
}

size_t ClientAddress::Format(char* out, size_t cap) const {
  if (family == 0 || inet_ntop(family, addr, out, static_cast<socklen_t>(cap)) == nullptr) {
    if (cap < 2) return 0;
    out[0] = '-';
    out[1] = '\0';
    return 1;
  }
  return std::strlen(out);
}

std::optional<Cidr> ParseCidr(std::string_view text) {
  Cidr c;
  if (text == "all") return c;
  const size_t slash = text.find('/');
  const std::string host(text.substr(0, slash));
  if (inet_pton(AF_INET, host.c_str(), c.addr) == 1) {
    c.family = AF_INET;
  } else if (inet_pton(AF_INET6, host.c_str(), c.addr) == 1) {
    c.family = AF_INET6;
  } else {
    return std::nullopt;
  }
  const uint64_t max_bits = c.family == AF_INET ? 32 : 128;
  uint64_t bits = max_bits;
  if (slash != std::string_view::npos && !ParseDecimal(text.substr(slash + 1), max_bits, &bits)) {
    return std::nullopt;
  }
  c.prefix_bits = static_cast<uint8_t>(bits);
  for (uint64_t i = bits; i < max_bits; ++i) {
    if (c.addr[i / 8] & (0x80 >> (i % 8))) return std::nullopt;  // host bits set
  }
  return c;
}

bool Cidr::Contains(const ClientAddress& a) const {
  if (family == 0) return a.family != 0;  // all
  if (a.family != family) return false;
  const size_t whole = prefix_bits / 8;
  if (std::memcmp(addr, a.addr, whole) != 0) return false;
  const unsigned rest = prefix_bits % 8;
  if (rest == 0) return true;
  const uint8_t mask = static_cast<uint8_t>(0xff00 >> rest);
  return (addr[whole] & mask) == (a.addr[whole] & mask);
}

std::optional<ClientAddress> ParseAddress(std::string_view text) {
  char host[INET6_ADDRSTRLEN];
  if (text.empty() || text.size() >= sizeof host) return std::nullopt;
  std::memcpy(host, text.data(), text.size());
  host[text.size()] = '\0';
  ClientAddress a;
  if (inet_pton(AF_INET, host, a.addr) == 1) {
    a.family = AF_INET;
  } else if (inet_pton(AF_INET6, host, a.addr) == 1) {
    a.family = AF_INET6;
  } else {
    return std::nullopt;
  }
  return a;
}

// An IPv4-mapped IPv6 address (::ffff:192.0.2.1, as a PROXY v1 TCP6 line may carry) is judged
// as the IPv4 address it is, as nginx's allow/deny judge it.
ClientAddress Unmapped(const ClientAddress& a) {
  static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (a.family != AF_INET6 || std::memcmp(a.addr, kMapped, sizeof kMapped) != 0) return a;
  ClientAddress v4;
  v4.family = AF_INET;
  std::memcpy(v4.addr, a.addr + 12, 4);
  return v4;
}

bool ClientRules::Allows(const ClientAddress& address) const {
  const ClientAddress a = Unmapped(address);
  for (const Rule& r : rules_) {
    if (r.cidr.Contains(a)) return r.allow;
  }
  return true;
}

bool ClientRules::Contains(const ClientAddress& address) const {
  const ClientAddress a = Unmapped(address);
  for (const Rule& r : rules_) {
    if (r.cidr.Contains(a)) return true;
  }
  return false;
}

ClientAddress RealClient(const ClientAddress& peer, const std::string_view* values, size_t count,
                         const ClientRules& trusted, bool recursive) {
  ClientAddress client = peer;
  if (!trusted.Contains(client)) return client;
  for (size_t v = count; v-- > 0;) {
    std::string_view list = values[v];
    while (!list.empty()) {
      const size_t comma = list.rfind(',');
      std::string_view item = comma == std::string_view::npos ? list : list.substr(comma + 1);
      list = comma == std::string_view::npos ? std::string_view() : list.substr(0, comma);
      while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
      while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
      if (item.empty()) continue;
      const std::optional<ClientAddress> named = ParseAddress(item);
      if (!named.has_value()) return client;
      client = *named;
      if (!recursive || !trusted.Contains(client)) return client;
    }
  }
  return client;
}

}  // namespace ringd::http
