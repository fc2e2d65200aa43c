// The sites (virtual hosts, --site) as the shards serve them: one generation holds the table of
// names, and for each site its configuration, its root (a DocumentRoot, followed when renamed
// over) and its planner's options. Built by the composition root at start-up and by each SIGHUP
// that changes the sites, published whole through an atomic pointer (SitesPublisher, in
// ringd_main.cc), and immutable once published: every shard reads it, none writes it. What a
// shard owns per site, an open-file cache beneath its root and its PlannerConfig, is the shard's
// own (SiteFiles, in connection.h).
//
//   std::string error;
//   std::unique_ptr<Sites> sites = BuildSites(config, {}, &error);   // opens each root
//   word.store(sites.get());  shard.SetSites(&word);                  // before Setup
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/core/config.h"
#include "server/core/document_root.h"
#include "server/http/client_address.h"
#include "server/http/origin_headers.h"
#include "server/http/site_table.h"

namespace ringd {

struct SiteRuntime {
  std::string name;  // its first name: the access log's and the metrics' (bounded: configured)
  // Where its root is: DocumentRoot's state word, or (null) `root_fd` throughout (tests).
  const std::atomic<uint64_t>* root_state = nullptr;
  int root_fd = -1;
  std::string index;                            // empty: --index
  const http::OriginHeaders* origin = nullptr;  // null: the top level's (and its reloads)
  // Its --allow / --deny (null: none, and no request of it is judged).
  const http::ClientRules* client_rules = nullptr;
  // Its --autoindex and --autoindex-format (unset: the top level's).
  std::optional<bool> autoindex;
  std::optional<http::ListingFormat> autoindex_format;
};

struct Sites {
  http::SiteTable table;  // site i of the table is sites[i]
  std::vector<SiteRuntime> sites;
  UnknownSite unknown = UnknownSite::kDefault;
  // What the runtime entries point into.
  std::vector<SiteConfig> configs;
  std::vector<std::unique_ptr<DocumentRoot>> roots;
  bool empty() const { return sites.empty(); }
};

// A generation for config.sites: each root opened (O_PATH), or taken from `root_fds` when given
// (one per site, opened at start-up; owned by the result). Null with one line in *error when a
// root cannot be opened or searched, or a name is refused.
std::unique_ptr<Sites> BuildSites(const Config& config, const std::vector<int>& root_fds,
                                  std::string* error);

}  // namespace ringd
