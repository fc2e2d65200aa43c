// Virtual hosts: which configured site a request's host names (nginx's server_name). Sans-IO:
// the shard hands in the Host (or :authority, or the TLS server name) and gets a site's index.
// Names are matched as nginx matches server_name: case-insensitively, the port and one trailing
// dot dropped; an exact name first, then the longest wildcard "*.example.org" (which matches
// "www.example.org" and "a.b.example.org", not "example.org" itself).
//
//   SiteTable table;
//   table.Add({"example.org", "www.example.org"}, &error);   // site 0
//   table.Add({"*.example.net"}, &error);                    // site 1
//   char buf[SiteTable::kMaxName];
//   std::string_view host = NormalizeHost("WWW.Example.org.:8080", buf);   // "www.example.org"
//   int site = table.Match(host);                            // 0; kNoSite when none matches
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace ringd::http {

// The host of a Host field value (or :authority, or a TLS server name) as sites are matched on:
// lowercased, without its port and without one trailing dot; an IPv6 literal keeps its brackets.
// Written into `out`; empty when the host is empty or longer than kMaxHostName (such a host names
// no site: a configured name is at most that long).
constexpr size_t kMaxHostName = 253;
std::string_view NormalizeHost(std::string_view host, char (&out)[kMaxHostName + 1]);

// The host a request names: an absolute-form target's authority (RFC 9112 section 3.2.2: Host
// is then ignored), else its Host field (HTTP/2: :authority, or Host). Not yet normalised.
std::string_view RequestHost(std::string_view host_field, std::string_view target);

class SiteTable {
 public:
  static constexpr int kNoSite = -1;
  // Sites a process may have: a bound on the table, the per-site metrics and the caches.
  static constexpr size_t kMaxSites = 1024;

  // Adds a site with these names (each a host name, an IPv4 or IPv6 literal, or "*.SUFFIX");
  // its index is the number of sites added before it. False with one line in *error for a name
  // that is not one, or one that an earlier site has.
  bool Add(const std::vector<std::string>& names, std::string* error);

  // The site `host` (already normalised) names, or kNoSite. Allocates nothing.
  int Match(std::string_view host) const;

  size_t size() const { return sites_; }
  bool empty() const { return sites_ == 0; }

 private:
  absl::flat_hash_map<std::string, int> exact_;
  // "*.example.org" is kept as ".example.org"; Match tries each suffix of the host that begins
  // at a dot, longest first.
  absl::flat_hash_map<std::string, int> wildcard_;
  size_t sites_ = 0;
};

// Whether `name` is a name a site may have, lowercased into *normal (what Match compares).
bool ParseSiteName(std::string_view name, std::string* normal, std::string* error);

}  // namespace ringd::http
