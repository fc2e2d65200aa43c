#include "server/http/proxy_protocol.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "server/http/decimal.h"

namespace ringd::http {
namespace {

constexpr std::string_view kV1Prefix = "PROXY ";
constexpr size_t kV1Max = 107;  // the spec's bound, CRLF included
constexpr std::string_view kV2Signature("\r\n\r\n\0\r\nQUIT\n", 12);
constexpr size_t kV2Fixed = 16;  // signature, version and command, family, length

ProxyHeader Status(ProxyStatus s) {
  ProxyHeader h;
  h.status = s;
  return h;
}

// Whether `bytes` begins with `prefix`, or is a prefix of it.
bool Agrees(std::string_view bytes, std::string_view prefix) {
  const size_t n = std::min(bytes.size(), prefix.size());
  return bytes.substr(0, n) == prefix.substr(0, n);
}

// The next space-separated field of a v1 line (single spaces, as the spec writes them).
bool NextField(std::string_view* line, std::string_view* field) {
  const size_t space = line->find(' ');
  *field = line->substr(0, space);
  *line = space == std::string_view::npos ? std::string_view() : line->substr(space + 1);
  return !field->empty();
}

bool ParseIp(std::string_view text, int family, uint8_t* out) {
  char buf[64];
  if (text.size() >= sizeof buf) return false;
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  return inet_pton(family, buf, out) == 1;
}

bool ParsePort(std::string_view text) {
  uint64_t port;
  // The spec: no leading zero (a port is written as a plain decimal).
  return ParseDecimal(text, 65535, &port) && (text.size() == 1 || text[0] != '0');
}

ProxyHeader ParseV1(std::string_view bytes) {
  const size_t crlf = bytes.substr(0, kV1Max).find("\r\n");
  if (crlf == std::string_view::npos) {
    if (bytes.size() >= kV1Max) return Status(ProxyStatus::kMalformed);
    // A bare LF or CR before the end is no v1 header either.
    if (bytes.find('\n') != std::string_view::npos) return Status(ProxyStatus::kMalformed);
    const size_t cr = bytes.find('\r');
    if (cr != std::string_view::npos && cr + 1 != bytes.size()) {
      return Status(ProxyStatus::kMalformed);
    }
    return Status(ProxyStatus::kPartial);
  }
  // No other CR or LF within the line (as a prefix of it is judged above, the same bytes
  // whether they come whole or in pieces).
  if (bytes.substr(0, crlf).find_first_of("\r\n") != std::string_view::npos) {
    return Status(ProxyStatus::kMalformed);
  }
  ProxyHeader h;
  h.length = crlf + 2;
  std::string_view line = bytes.substr(kV1Prefix.size(), crlf - kV1Prefix.size());
  std::string_view proto, src, dst, sport, dport;
  if (!NextField(&line, &proto)) return Status(ProxyStatus::kMalformed);
  if (proto == "UNKNOWN") {  // the rest of the line is to be ignored
    h.status = ProxyStatus::kDone;
    return h;
  }
  int family;
  if (proto == "TCP4") {
    family = AF_INET;
  } else if (proto == "TCP6") {
    family = AF_INET6;
  } else {
    return Status(ProxyStatus::kMalformed);
  }
  uint8_t dst_addr[16];
  // Single spaces between fields and none at the end (an empty field is refused by NextField).
  if (line.ends_with(' ') || !NextField(&line, &src) || !NextField(&line, &dst) ||
      !NextField(&line, &sport) || !NextField(&line, &dport) || !line.empty() ||
      !ParseIp(src, family, h.source.addr) || !ParseIp(dst, family, dst_addr) ||
      !ParsePort(sport) || !ParsePort(dport)) {
    return Status(ProxyStatus::kMalformed);
  }
  h.source.family = static_cast<uint8_t>(family);
  h.has_source = true;
  h.status = ProxyStatus::kDone;
  return h;
}

ProxyHeader ParseV2(std::string_view bytes) {
  if (bytes.size() < kV2Fixed) {
    // Check what has come of the version and family already.
    if (bytes.size() > 12 && (static_cast<uint8_t>(bytes[12]) >> 4) != 2) {
      return Status(ProxyStatus::kMalformed);
    }
    return Status(ProxyStatus::kPartial);
  }
  const uint8_t version_command = static_cast<uint8_t>(bytes[12]);
  const uint8_t family = static_cast<uint8_t>(bytes[13]) >> 4;
  const size_t len =
      (size_t{static_cast<uint8_t>(bytes[14])} << 8) | static_cast<uint8_t>(bytes[15]);
  if ((version_command >> 4) != 2) return Status(ProxyStatus::kMalformed);
  const uint8_t command = version_command & 0x0f;
  if (command > 1) return Status(ProxyStatus::kMalformed);  // 0: LOCAL, 1: PROXY
  if (family > 3) return Status(ProxyStatus::kMalformed);   // UNSPEC, INET, INET6, UNIX
  if (kV2Fixed + len > kMaxProxyHeader) return Status(ProxyStatus::kMalformed);
  // The address block each family needs: two addresses and (but for UNIX) two ports.
  constexpr size_t kBlock[] = {0, 12, 36, 216};
  if (len < kBlock[family]) return Status(ProxyStatus::kMalformed);
  if (bytes.size() < kV2Fixed + len) return Status(ProxyStatus::kPartial);
  ProxyHeader h;
  h.status = ProxyStatus::kDone;
  h.length = kV2Fixed + len;
  if (command == 1 && (family == 1 || family == 2)) {
    h.has_source = true;
    h.source.family = family == 1 ? AF_INET : AF_INET6;
    std::memcpy(h.source.addr, bytes.data() + kV2Fixed, family == 1 ? 4 : 16);
  }
  return h;
}

}  // namespace

ProxyHeader ParseProxyHeader(std::string_view bytes) {
  if (bytes.empty()) return Status(ProxyStatus::kPartial);
  if (Agrees(bytes, kV1Prefix)) {
    return bytes.size() < kV1Prefix.size() ? Status(ProxyStatus::kPartial) : ParseV1(bytes);
  }
  if (Agrees(bytes, kV2Signature)) {
    return bytes.size() < kV2Signature.size() ? Status(ProxyStatus::kPartial) : ParseV2(bytes);
  }
  // Neither signature: a client that spoke first without the header (or a v1 signature with a
  // typo: both begin differently from any HTTP method or TLS record but "PROXY", which the
  // first branch took).
  return Status(ProxyStatus::kMissing);
}

}  // namespace ringd::http
