#include "perf/tool_flags.h"

#include <algorithm>
#include <string>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"

namespace ringd {

std::vector<char*> ParseToolFlags(int argc, char** argv, const char* usage) {
  absl::SetProgramUsageMessage(usage);
  // --help lists the tool's own flags, wherever they are defined, and not abseil's.
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [](absl::string_view file) {
    return file.find("absl/") == absl::string_view::npos;
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  // The rewritten arguments outlive the call: the returned positional ones point into them.
  static std::vector<std::string> args;
  args.assign(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& a = args[i];
    if (a == "--") break;  // the rest is positional
    if (a.size() < 3 || a[0] != '-' || a[1] != '-') continue;
    const size_t name_end = std::min(a.find('='), a.size());
    for (size_t k = 2; k < name_end; ++k) {
      if (a[k] == '-') a[k] = '_';
    }
  }
  std::vector<char*> ptrs;
  for (std::string& a : args) ptrs.push_back(a.data());
  ptrs.push_back(nullptr);
  return absl::ParseCommandLine(static_cast<int>(args.size()), ptrs.data());
}

}  // namespace ringd
