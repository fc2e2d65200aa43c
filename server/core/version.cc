#include "server/core/version.h"

#include "server/core/build_stamp.h"

namespace ringd {

const char* BuildVersion() { return RINGD_BUILD_VERSION; }
const char* BuildCommit() { return RINGD_BUILD_COMMIT; }

std::string VersionLine() {
  return std::string("ringd ") + BuildVersion() + " (commit " + BuildCommit() + ")";
}

}  // namespace ringd
