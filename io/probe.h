// Start-up probing of io_uring and the choice of an io tier: bypass (io_uring with direct
// descriptors), uring, or epoll. Each tier's features are probed by using them; `--io=auto`
// takes the best tier that works here and says which and why in one line.
//
//   io::ProbeReport r = io::ProbeUring(/*masked=*/{});
//   io::Selection s = io::Select(io::IoMode::kAuto, r, &error);   // s.backend, s.reason
//   io::LoopFactory make = io::FactoryFor(s.backend);              // io/registry.h
#pragma once

#include <string>
#include <vector>

#include "io/loop.h"

namespace ringd::io {

enum class IoMode { kAuto, kBypass, kUring, kEpoll };

struct ProbeReport {
  bool usable = false;         // every opcode and feature the uring backend needs
  std::string reason;          // why not, in one line ("io_uring_setup: EPERM (...)")
  bool bypass_usable = false;  // and what the bypass tier adds (direct descriptors)
  std::string bypass_reason;
  bool sqpoll_usable = false;  // SQPOLL rings can be made (optional, for --sqpoll)
  // Optional features of the uring tiers: missing, they are not used and the tier stays.
  bool recv_incremental = false;  // incremental buffer consumption with capped multishot recv
  bool napi = false;              // IORING_REGISTER_NAPI (for --busy-poll-us)
  bool batch_wait = false;        // io_uring_enter's min_wait_usec (for --batch-wait-us)
  bool fd_install = false;        // IORING_OP_FIXED_FD_INSTALL (bypass: sendfile for bodies)
  bool cqe_skip = false;  // IOSQE_CQE_SKIP_SUCCESS (uring tiers: LoopOptions::skip_unread_cqes)
  bool registered_ring = false;  // IORING_REGISTER_RING_FDS (bypass: LoopOptions::register_ring_fd)
  std::vector<std::string> lines;  // what was checked, for `ringd --probe`
};

// `masked`: feature names the probe reports as missing without trying them (tests force each
// fallback this way; `ringd --io-mask`). Names are the ones `ringd --probe` prints.
ProbeReport ProbeUring(const std::vector<std::string>& masked = {});

// Whether a feature name is one the probe knows (for --io-mask's validation).
bool KnownFeature(const std::string& name);

// What `--io` asks for, the probe, and the choice: a backend name and why.
struct Selection {
  std::string backend;  // "bypass", "uring" or "epoll"
  std::string reason;   // one line: why this backend
};

// kBypass or kUring where the probe says no is an error: Selection.reason then says why and
// `error` is set.
Selection Select(IoMode mode, const ProbeReport& report, bool* error);

}  // namespace ringd::io
