// The io backends by name: one registry, so a new tier is one entry here and touches no server
// code. The names are what `--io` takes and what io::Select chooses.
//
//   io::LoopFactory make = io::FactoryFor("bypass");   // null for an unknown name
//   std::unique_ptr<io::Loop> loop = make(options, &error);
#pragma once

#include <string>

#include "io/loop.h"

namespace ringd::io {

LoopFactory FactoryFor(const std::string& backend);

}  // namespace ringd::io
