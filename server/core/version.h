// What this binary was built from: the package version and the commit. tools/package stamps
// them (bazel build --stamp with tools/workspace-status); a plain build says "dev" and
// "unknown". --version, the "serving" line (and systemd's STATUS=) and /metrics'
// ringd_build_info all read them here.
//
//   std::puts(VersionLine().c_str());  // ringd 0.1.0+git12.abc1234 (commit abc1234...)
#pragma once

#include <string>

namespace ringd {

const char* BuildVersion();  // "0.1.0+git296.cf6ced3", or "dev"
const char* BuildCommit();   // the full commit hash (+dirty), or "unknown"

// "ringd VERSION (commit COMMIT)": what --version prints.
std::string VersionLine();

}  // namespace ringd
