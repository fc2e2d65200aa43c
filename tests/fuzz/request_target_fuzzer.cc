// Fuzzes request-target normalisation: whatever the input, an accepted path starts with '/',
// holds no NUL, no "." or ".." segment, no empty segment, and normalising it again changes nothing.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/http/request_target.h"

using ringd::http::NormalizeTarget;
using ringd::http::TargetOptions;
using ringd::http::TargetResult;

namespace {
void Check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view target(reinterpret_cast<const char*>(data), size);
  std::string scratch(size + 1, '\0');
  TargetOptions options;
  options.serve_dot_files = size > 0 && (data[0] & 1);
  const TargetResult r = NormalizeTarget(target, options, scratch.data(), scratch.size());
  if (r.status != 0) {
    Check(r.status == 400 || r.status == 404 || r.status == 414);
    return 0;
  }
  if (r.is_asterisk) return 0;
  const std::string path(r.path);
  Check(!path.empty() && path[0] == '/');
  Check(path.find('\0') == std::string::npos);
  Check(path.find("//") == std::string::npos);
  Check(path.find("/./") == std::string::npos && path.find("/../") == std::string::npos);
  Check(!path.ends_with("/.") && !path.ends_with("/.."));
  if (!options.serve_dot_files) {
    Check(path.find("/.") == std::string::npos || path.starts_with("/.well-known"));
  }
  // Idempotent: percent-encoding the result and normalising again gives the same path.
  std::string encoded(3 * path.size() + 1, '\0');
  encoded.resize(ringd::http::EncodePath(path, encoded.data(), encoded.size()));
  std::string scratch2(encoded.size() + 1, '\0');
  const TargetResult again = NormalizeTarget(encoded, options, scratch2.data(), scratch2.size());
  Check(again.status == 0 && again.path == r.path);
  return 0;
}
