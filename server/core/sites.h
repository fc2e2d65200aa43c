// The sites (virtual hosts, --site) as the shards serve them: the table of names, and for each
// site where its root moves (its DocumentRoot) and its planner's options. Built by the composition
// root from Config::sites and immutable afterwards: every shard reads it, none writes it. What a
// shard owns per site (an open-file cache beneath its root, its PlannerConfig) is the shard's
// own (ConnectionMachine::site_files_).
//
//   Sites sites;  sites.table.Add(names, &error);
//   sites.sites.push_back({name, root.state_word(), -1, index, &site_origin});
//   shard.SetSites(&sites);   // before Setup
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "server/core/config.h"
#include "server/http/origin_headers.h"
#include "server/http/site_table.h"

namespace ringd {

struct SiteRuntime {
  std::string name;  // its first name: the access log's and the metrics' (bounded: configured)
  // Where its root is: DocumentRoot's state word, or (null) `root_fd` throughout.
  const std::atomic<uint64_t>* root_state = nullptr;
  int root_fd = -1;
  std::string index;                            // empty: --index
  const http::OriginHeaders* origin = nullptr;  // null: the top level's (and its reloads)
};

struct Sites {
  http::SiteTable table;  // site i of the table is sites[i]
  std::vector<SiteRuntime> sites;
  UnknownSite unknown = UnknownSite::kDefault;
};

}  // namespace ringd
