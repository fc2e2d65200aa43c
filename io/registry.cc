#include "io/registry.h"

namespace ringd::io {

LoopFactory FactoryFor(const std::string& backend) {
  if (backend == "bypass") return &MakeBypassLoop;
  if (backend == "uring") return &MakeUringLoop;
  if (backend == "epoll") return &MakeEpollLoop;
  return nullptr;
}

}  // namespace ringd::io
