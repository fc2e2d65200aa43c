// Running as root only as long as it takes: ringd binds its ports, opens the document root and
// creates its rings as root, then becomes --user (supplementary groups, group, user, in that
// order) and checks that root cannot come back. Root without --user is refused unless
// --allow-root says so.
//
//   std::string why;
//   if (!RootAllowed(config, &why)) Die(1, why);           // before anything is bound
//   ... bind, open the root, Shard::Setup on every shard ...
//   if (!DropPrivileges(config, &why)) Die(1, why);        // before any request is served
#pragma once

#include <string>

#include "server/core/config.h"

namespace ringd {

// False, with the one line to print, when ringd must not go on under its current identity: root
// without --user or --allow-root, or --user naming someone else when not root.
bool RootAllowed(const Config& config, std::string* error);

// Becomes config.uid / config.gid (with the user's supplementary groups), for every thread of
// the process, and verifies it: real, effective and saved ids all changed, no capability left,
// setuid(0) refused. A no-op without --user, or when already that user. False with one line.
bool DropPrivileges(const Config& config, std::string* error);

}  // namespace ringd
