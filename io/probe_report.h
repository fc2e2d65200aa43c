// What the start-up probe (io/probe.h) found this kernel offers, as plain data: the tier table
// (io/tier.h) reads it to say which tiers run here. No liburing, so the table and the tiers that
// live outside io/ can see it.
#pragma once

#include <string>
#include <vector>

namespace ringd::io {

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

}  // namespace ringd::io
