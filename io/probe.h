// Start-up probing of io_uring: what the kernel offers here, each feature tried by using it. The
// tier table (io/tier.h, io/registry.h) reads the report to say which tier runs here and why.
//
//   io::ProbeReport r = io::ProbeUring(/*masked=*/{});
//   io::TierChoice c = io::BuiltinTiers().Choose("auto", r, needs);   // c.tier, c.reason
#pragma once

#include <string>
#include <vector>

#include "io/loop.h"
#include "io/probe_report.h"

namespace ringd::io {

// `masked`: feature names the probe reports as missing without trying them (tests force each
// fallback this way; `ringd --io-mask`). Names are the ones `ringd --probe` prints.
ProbeReport ProbeUring(const std::vector<std::string>& masked = {});

// Whether a feature name is one the probe knows (for --io-mask's validation).
bool KnownFeature(const std::string& name);

}  // namespace ringd::io
