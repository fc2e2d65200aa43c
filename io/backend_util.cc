#include "io/backend_util.h"

#include <sys/uio.h>

namespace ringd::io::internal {

bool PagesCached(int fd, uint64_t offset, uint64_t length) {
  char byte;
  iovec v{&byte, 1};
  if (::preadv2(fd, &v, 1, static_cast<off_t>(offset), RWF_NOWAIT) < 0) return false;
  return length <= 1 ||
         ::preadv2(fd, &v, 1, static_cast<off_t>(offset + length - 1), RWF_NOWAIT) >= 0;
}

}  // namespace ringd::io::internal
