// The io tier for this run, from the flags, io's tier table and the probe: which tier, the
// start-up line that says why, and the optional loop features the tier takes up here. With
// ringd_main.cc this is the composition root's side of io: flags meet the tier table here, and
// everything after asks the chosen Tier's capabilities, never its name.
//
//   if (absl::Status s = CheckIoFlags(config, tiers); !s.ok()) Die(2, s);   // before probing
//   io::ProbeReport probe = io::ProbeUring(config.io_mask);
//   absl::StatusOr<IoSetup> io = ChooseIo(config, tiers, probe, descriptor_limit);
//   if (!io.ok()) Die(1, io.status());
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/loop.h"
#include "io/tier.h"
#include "server/core/config.h"

namespace ringd {

struct IoSetup {
  const io::Tier* tier = nullptr;
  std::string line;  // the start-up line after "io backend ": the choice, why, each feature
  // The optional loop features the tier decided on (recv_incremental with the pool's
  // recv_buffer_count and recv_buffer_size, skip_unread_cqes, bypass_sendfile, register_ring_fd);
  // Shard::SetLoopFeatures takes them.
  io::LoopOptions features;
};

// What the flags ask of io that no probe is needed to refuse: an unknown --io or --io-mask name,
// or a flag that needs a capability the tier named by --io lacks. An error of one line.
absl::Status CheckIoFlags(const Config& config, const io::TierTable& tiers);

// The tier --io asks for (or auto's choice), checked against what this machine offers and what
// the other flags need of it. An error of one line when it cannot serve as asked.
absl::StatusOr<IoSetup> ChooseIo(const Config& config, const io::TierTable& tiers,
                                 const io::ProbeReport& probe, uint64_t descriptor_limit);

// Sizes the flags ask for that this machine cannot give, a warning line each (ringd starts all
// the same, as nginx does when worker_connections exceed the open-file limit): connections across
// the shards, with each shard's reserve, beyond `descriptor_limit` (0: none), and more shards
// than the `usable_cpus` this process may run on.
std::vector<std::string> SizingWarnings(const Config& config, uint32_t shards,
                                        uint64_t descriptor_limit, size_t usable_cpus);

// `ringd --probe`'s text: what was checked, each tier's verdict, and what --io=auto would choose.
std::string DescribeProbe(const Config& config, const io::TierTable& tiers,
                          const io::ProbeReport& probe, uint64_t descriptor_limit);

}  // namespace ringd
