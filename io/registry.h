// The built-in io tiers, in the order --io=auto prefers them: bypass (io_uring with direct
// descriptors), uring (io_uring with process descriptors), epoll (readiness and a worker pool,
// always available). A new tier is one entry here, with its capabilities, and touches no
// server code.
//
//   io::TierTable tiers = io::BuiltinTiers();
//   const io::Tier* epoll = tiers.Find("epoll");
#pragma once

#include "io/tier.h"

namespace ringd::io {

TierTable BuiltinTiers();

}  // namespace ringd::io
