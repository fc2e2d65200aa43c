// Start-up probing of io_uring and the choice of backend. `--io=auto` takes io_uring when every
// feature the uring backend needs is there, epoll otherwise, and says why in one line.
//
//   io::ProbeReport r = io::ProbeUring();
//   io::Selection s = io::Select(io::IoMode::kAuto, r);   // s.use_uring, s.reason
#pragma once

#include <string>
#include <vector>

#include "io/loop.h"

namespace ringd::io {

enum class IoMode { kAuto, kUring, kEpoll };

struct ProbeReport {
  bool usable = false;             // every opcode and feature the uring backend needs
  std::string reason;              // why not, in one line ("io_uring_setup: EPERM (...)")
  std::vector<std::string> lines;  // what was checked, for `ringd --probe`
};

ProbeReport ProbeUring();

// kUring where io_uring is unusable is an error: Selection.reason then says why and
// `error` is set.
Selection Select(IoMode mode, const ProbeReport& report, bool* error);

}  // namespace ringd::io
