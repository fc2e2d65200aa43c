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

}  // namespace ringd::http
