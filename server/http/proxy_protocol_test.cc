#include "server/http/proxy_protocol.h"

#include <arpa/inet.h>

#include <string>

#include "gtest/gtest.h"

namespace ringd::http {
namespace {

std::string Text(const ClientAddress& a) {
  char text[ClientAddress::kTextMax];
  return std::string(text, a.Format(text, sizeof text));
}

const std::string kSig("\r\n\r\n\0\r\nQUIT\n", 12);

// A v2 header: command (0 LOCAL, 1 PROXY), family byte, then the address block and TLVs.
std::string V2(uint8_t command, uint8_t family, const std::string& rest) {
  std::string h = kSig;
  h += static_cast<char>(0x20 | command);
  h += static_cast<char>(family);
  h += static_cast<char>(rest.size() >> 8);
  h += static_cast<char>(rest.size() & 0xff);
  return h + rest;
}

std::string V4Block(const char* src, const char* dst) {
  std::string b(12, '\0');
  inet_pton(AF_INET, src, b.data());
  inet_pton(AF_INET, dst, b.data() + 4);
  b[8] = 0x30;
  b[9] = 0x39;
  b[10] = 0x01;
  b[11] = static_cast<char>(0xbb);
  return b;
}

std::string V6Block(const char* src, const char* dst) {
  std::string b(36, '\0');
  inet_pton(AF_INET6, src, b.data());
  inet_pton(AF_INET6, dst, b.data() + 16);
  return b;
}

// Every prefix of a whole header is partial; the whole is done (and stays done with bytes after).
void ExpectWholeOnlyAtTheEnd(const std::string& header) {
  for (size_t i = 0; i < header.size(); ++i) {
    EXPECT_EQ(ParseProxyHeader(header.substr(0, i)).status, ProxyStatus::kPartial)
        << i << " bytes of " << header.size();
  }
  const ProxyHeader h = ParseProxyHeader(header + "GET / HTTP/1.1\r\n");
  EXPECT_EQ(h.status, ProxyStatus::kDone);
  EXPECT_EQ(h.length, header.size());
}

TEST(ProxyV1, Tcp4AndTcp6) {
  const std::string v4 = "PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\r\n";
  ExpectWholeOnlyAtTheEnd(v4);
  ProxyHeader h = ParseProxyHeader(v4);
  ASSERT_TRUE(h.has_source);
  EXPECT_EQ(Text(h.source), "192.0.2.7");
  const std::string v6 = "PROXY TCP6 2001:db8::7 2001:db8::1 56324 443\r\n";
  ExpectWholeOnlyAtTheEnd(v6);
  h = ParseProxyHeader(v6);
  ASSERT_TRUE(h.has_source);
  EXPECT_EQ(Text(h.source), "2001:db8::7");
}

TEST(ProxyV1, UnknownKeepsTheSocketsPeer) {
  ProxyHeader h = ParseProxyHeader("PROXY UNKNOWN\r\n");
  EXPECT_EQ(h.status, ProxyStatus::kDone);
  EXPECT_FALSE(h.has_source);
  h = ParseProxyHeader("PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n");
  EXPECT_EQ(h.status, ProxyStatus::kDone);
  EXPECT_FALSE(h.has_source);
}

TEST(ProxyV1, TheLongestHeaderFits) {
  const std::string longest =
      "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
      "65535 65535\r\n";
  ASSERT_EQ(longest.size(), 104u);
  EXPECT_EQ(ParseProxyHeader(longest).status, ProxyStatus::kDone);
}

TEST(ProxyV1, Malformed) {
  for (const char* bad : {
           "PROXY TCP4 192.0.2.7 198.51.100.1 56324\r\n",
           "PROXY TCP4 192.0.2.7 198.51.100.1 56324 443 9\r\n",
           "PROXY TCP4 2001:db8::7 2001:db8::1 56324 443\r\n",
           "PROXY TCP6 192.0.2.7 198.51.100.1 56324 443\r\n",
           "PROXY TCP4 192.0.2.7 198.51.100.1 65536 443\r\n",
           "PROXY TCP4 192.0.2.7 198.51.100.1 056324 443\r\n",
           "PROXY TCP4  192.0.2.7 198.51.100.1 56324 443\r\n",
           "PROXY TCP4 192.0.2.7 198.51.100.1 56324 443 \r\n",
           "PROXY UDP4 192.0.2.7 198.51.100.1 56324 443\r\n",
           "PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\n",
           "PROXY TCP4 192.0.2.7\r198.51.100.1 56324 443\r\n",
           "PROXY \r\n",
           "PROXY UNKNOWN a\rb\r\n",
           "PROXY UNKNOWN a\nb\r\n",
       }) {
    EXPECT_EQ(ParseProxyHeader(bad).status, ProxyStatus::kMalformed) << bad;
  }
  // No line end within the spec's 107 bytes.
  EXPECT_EQ(ParseProxyHeader("PROXY UNKNOWN " + std::string(100, 'x')).status,
            ProxyStatus::kMalformed);
  EXPECT_EQ(ParseProxyHeader("PROXY UNKNOWN " + std::string(90, 'x')).status,
            ProxyStatus::kPartial);
}

TEST(ProxyV2, ProxyOverIpv4AndIpv6) {
  const std::string v4 = V2(1, 0x11, V4Block("203.0.113.9", "10.0.0.1"));
  ExpectWholeOnlyAtTheEnd(v4);
  ProxyHeader h = ParseProxyHeader(v4);
  ASSERT_TRUE(h.has_source);
  EXPECT_EQ(Text(h.source), "203.0.113.9");
  const std::string v6 = V2(1, 0x21, V6Block("2001:db8::9", "2001:db8::1"));
  ExpectWholeOnlyAtTheEnd(v6);
  h = ParseProxyHeader(v6);
  ASSERT_TRUE(h.has_source);
  EXPECT_EQ(Text(h.source), "2001:db8::9");
}

TEST(ProxyV2, TlvsAreSkipped) {
  // PP2_TYPE_ALPN "h2" and PP2_TYPE_AUTHORITY, as HAProxy sends with proxy-v2-options.
  const std::string tlvs = std::string("\x01\x00\x02h2\x02\x00\x0bexample.org", 19);
  const std::string header = V2(1, 0x11, V4Block("203.0.113.9", "10.0.0.1") + tlvs);
  ExpectWholeOnlyAtTheEnd(header);
  EXPECT_EQ(Text(ParseProxyHeader(header).source), "203.0.113.9");
}

TEST(ProxyV2, LocalUnspecAndUnixKeepTheSocketsPeer) {
  for (const std::string& header :
       {V2(0, 0x00, ""), V2(0, 0x11, V4Block("203.0.113.9", "10.0.0.1")), V2(1, 0x00, ""),
        V2(1, 0x31, std::string(216, 'u'))}) {
    const ProxyHeader h = ParseProxyHeader(header);
    EXPECT_EQ(h.status, ProxyStatus::kDone);
    EXPECT_EQ(h.length, header.size());
    EXPECT_FALSE(h.has_source);
  }
}

TEST(ProxyV2, Malformed) {
  std::string wrong_version = V2(1, 0x11, V4Block("203.0.113.9", "10.0.0.1"));
  wrong_version[12] = 0x11;
  for (const std::string& bad : {
           wrong_version, wrong_version.substr(0, 13),  // the version is judged as soon as it comes
           V2(2, 0x11, V4Block("203.0.113.9", "10.0.0.1")),  // no such command
           V2(1, 0x41, ""),                                  // no such family
           V2(1, 0x11, std::string(11, '\0')),               // shorter than its addresses
           V2(1, 0x21, std::string(12, '\0')),
           V2(1, 0x11, std::string(kMaxProxyHeader, '\0')),  // longer than the bound
       }) {
    EXPECT_EQ(ParseProxyHeader(bad).status, ProxyStatus::kMalformed);
  }
}

TEST(ProxyHeader, MissingWhenNeitherSignatureBegins) {
  for (const char* missing :
       {"GET / HTTP/1.1\r\n", "\x16\x03\x01", "PRI * HTTP/2.0", "PROXX", "\r\nGET", "proxy TCP4"}) {
    EXPECT_EQ(ParseProxyHeader(missing).status, ProxyStatus::kMissing) << missing;
  }
  EXPECT_EQ(ParseProxyHeader("").status, ProxyStatus::kPartial);
  EXPECT_EQ(ParseProxyHeader("PRO").status, ProxyStatus::kPartial);
  EXPECT_EQ(ParseProxyHeader("\r\n\r\n").status, ProxyStatus::kPartial);
}

}  // namespace
}  // namespace ringd::http
