// Command lines of ringd's perf and test tools, parsed by abseil's flags library: each flag is an
// ABSL_FLAG, and a value that is not of its type ("--connections=1O") or an unknown flag is one
// line on stderr and exit 1, never a silent 1 or 0. The tools' flags are spelled with dashes
// (--duration-s); ABSL_FLAG names are C identifiers (duration_s), so ParseToolFlags turns the
// dashes of each flag's name into underscores before abseil reads the command line.
//
//   ABSL_FLAG(int, port, 0, "the server's port");
//   ABSL_FLAG(double, duration_s, 5, "seconds to run");  // given as --duration-s
//
//   int main(int argc, char** argv) {
//     std::vector<char*> args = ringd::ParseToolFlags(argc, argv, "usage: tool --port P");
//     // args[0] is the program, the rest are the positional arguments.
#pragma once

#include <vector>

namespace ringd {

// Parses the flags (--name=value, --name value, --bool, --nobool; "--" ends them) and returns
// the program name and the positional arguments. `usage` is what --help prints above the flags.
std::vector<char*> ParseToolFlags(int argc, char** argv, const char* usage);

}  // namespace ringd
