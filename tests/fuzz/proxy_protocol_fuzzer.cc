// Fuzzes the PROXY protocol header parser: whatever the input, a whole header is no longer than
// the input nor than the bound, a prefix of the input is never judged differently once more
// bytes come (a header split across receives reads as one that came whole), and a named client
// is IPv4 or IPv6.
#include <sys/socket.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/http/proxy_protocol.h"

using ringd::http::kMaxProxyHeader;
using ringd::http::ParseProxyHeader;
using ringd::http::ProxyHeader;
using ringd::http::ProxyStatus;

namespace {
void Check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const ProxyHeader whole = ParseProxyHeader(bytes);
  if (whole.status == ProxyStatus::kDone) {
    Check(whole.length > 0 && whole.length <= size && whole.length <= kMaxProxyHeader);
    if (whole.has_source) {
      Check(whole.source.family == AF_INET || whole.source.family == AF_INET6);
    }
    // The header alone, and the header with anything behind it, read the same.
    const ProxyHeader alone = ParseProxyHeader(bytes.substr(0, whole.length));
    Check(alone.status == ProxyStatus::kDone && alone.length == whole.length);
    Check(alone.has_source == whole.has_source);
  }
  // Every prefix is partial or already judged as the whole input is: bytes arriving one at a
  // time reach the same verdict (a header is done at its last byte, never earlier).
  for (size_t i = 0; i < size; ++i) {
    const ProxyHeader part = ParseProxyHeader(bytes.substr(0, i));
    if (part.status == ProxyStatus::kPartial) continue;
    Check(part.status == whole.status);
    if (part.status == ProxyStatus::kDone) Check(part.length == whole.length && part.length <= i);
    break;
  }
  return 0;
}
