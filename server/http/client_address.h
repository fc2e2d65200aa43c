// A client's IP address, and the CIDR rules that judge it: --proxy-from (which peers may send a
// PROXY protocol header) and --allow / --deny (who may connect). Pure: no socket is touched; the
// caller hands in the address it got from getpeername or from a PROXY header.
//
//   http::ClientRules rules;
//   rules.Add(true, *http::ParseCidr("10.0.0.0/8"));   // --allow 10.0.0.0/8
//   rules.Add(false, *http::ParseCidr("all"));          // --deny all
//   if (!rules.Allows(address)) close it;
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace ringd::http {

struct ClientAddress {
  uint8_t family = 0;  // AF_INET, AF_INET6, or 0: unknown
  uint8_t addr[16] = {};
  void Set(const sockaddr_storage& ss);
  // The address as nginx's $remote_addr writes it ("127.0.0.1", "::1"), "-" when unknown;
  // returns the length. `cap` of kTextMax always suffices.
  size_t Format(char* out, size_t cap) const;
  static constexpr size_t kTextMax = 46;  // INET6_ADDRSTRLEN
};

// An address block: "192.0.2.0/24", "2001:db8::/32", a single address ("::1": /128), or "all"
// (every address of both families, as nginx's `allow all`).
struct Cidr {
  uint8_t family = 0;  // AF_INET, AF_INET6, or 0: all
  uint8_t prefix_bits = 0;
  uint8_t addr[16] = {};
  bool Contains(const ClientAddress& a) const;
};

// An address alone ("192.0.2.1", "2001:db8::1"); nullopt for anything else. No allocation.
std::optional<ClientAddress> ParseAddress(std::string_view text);

// An IPv4-mapped IPv6 address (::ffff:192.0.2.1) as the IPv4 address it is; others unchanged.
ClientAddress Unmapped(const ClientAddress& a);

// nullopt for text that is none of those forms, or whose host bits are not all zero past the
// prefix ("10.0.0.1/8" is a typo more often than a wish; nginx warns and masks, ringd refuses).
std::optional<Cidr> ParseCidr(std::string_view text);

// An ordered list of allow and deny rules, judged as nginx's allow/deny: the first rule that
// contains the address decides; an address no rule contains is allowed (end the list with
// `deny all` to refuse everyone else). An empty list allows everyone. An IPv4-mapped IPv6
// address is judged as its IPv4 address.
class ClientRules {
 public:
  void Add(bool allow, const Cidr& cidr) { rules_.push_back({cidr, allow}); }
  bool empty() const { return rules_.empty(); }
  bool Allows(const ClientAddress& a) const;
  // Whether some rule contains `a` (for a list of allows only, such as --proxy-from).
  bool Contains(const ClientAddress& a) const;

 private:
  struct Rule {
    Cidr cidr;
    bool allow;
  };
  std::vector<Rule> rules_;
};

// The client a trusted proxy names in a header such as X-Forwarded-For, as nginx's realip module
// (set_real_ip_from, real_ip_header, real_ip_recursive) finds it. `values` are the header's
// fields in the order they came, each a list ("client, proxy1, proxy2": the nearest proxy
// last). A `peer` that `trusted` does not contain is the client, whatever it sent. Otherwise
// the list is read from its end: the last address is the client; with `recursive`, an address
// `trusted` contains is a proxy too and the one before it is read, so the client is the last
// untrusted address (all trusted: the first). Text that is not an address stops the walk and
// the address reached so far is the client.
ClientAddress RealClient(const ClientAddress& peer, const std::string_view* values, size_t count,
                         const ClientRules& trusted, bool recursive);

}  // namespace ringd::http
