// Running as root only as long as it takes: ringd binds its ports, opens the document root and
// creates its rings as root, then becomes --user (supplementary groups, group, user, in that
// order) and checks that root cannot come back. Root without --user is refused unless
// --allow-root says so.
//
//   if (absl::Status s = RootAllowed(config); !s.ok()) Die(1, s);   // before anything is bound
//   ... bind, open the root, Shard::Setup on every shard ...
//   if (absl::Status s = DropPrivileges(config); !s.ok()) Die(1, s);   // before any request
#pragma once

#include "absl/status/status.h"
#include "server/core/config.h"

namespace ringd {

// An error (its message the one line to print) when ringd must not go on under its current
// identity: root without --user or --allow-root, or --user naming someone else when not root.
absl::Status RootAllowed(const Config& config);

// Becomes config.uid / config.gid (with the user's supplementary groups), for every thread of
// the process, and verifies it: real, effective and saved ids all changed, no capability left,
// setuid(0) refused. A no-op without --user, or when already that user. An error of one line.
absl::Status DropPrivileges(const Config& config);

}  // namespace ringd
