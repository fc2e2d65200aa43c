#include "server/http/client_address.h"

#include <arpa/inet.h>

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ringd::http {
namespace {

ClientAddress Addr(const char* text) {
  ClientAddress a;
  if (inet_pton(AF_INET, text, a.addr) == 1) {
    a.family = AF_INET;
  } else {
    EXPECT_EQ(inet_pton(AF_INET6, text, a.addr), 1) << text;
    a.family = AF_INET6;
  }
  return a;
}

bool In(const char* cidr, const char* addr) {
  const std::optional<Cidr> c = ParseCidr(cidr);
  EXPECT_TRUE(c.has_value()) << cidr;
  return c.has_value() && c->Contains(Addr(addr));
}

TEST(Cidr, ParsesBlocksAndSingleAddresses) {
  EXPECT_TRUE(In("10.0.0.0/8", "10.255.1.2"));
  EXPECT_FALSE(In("10.0.0.0/8", "11.0.0.1"));
  EXPECT_TRUE(In("127.0.0.2", "127.0.0.2"));
  EXPECT_FALSE(In("127.0.0.2", "127.0.0.3"));
  EXPECT_TRUE(In("192.168.1.128/25", "192.168.1.200"));
  EXPECT_FALSE(In("192.168.1.128/25", "192.168.1.127"));
  EXPECT_TRUE(In("0.0.0.0/0", "203.0.113.9"));
  EXPECT_FALSE(In("0.0.0.0/0", "::1"));
  EXPECT_TRUE(In("2001:db8::/32", "2001:db8:ffff::1"));
  EXPECT_FALSE(In("2001:db8::/32", "2001:db9::1"));
  EXPECT_TRUE(In("::1", "::1"));
  EXPECT_FALSE(In("::1/128", "::2"));
  EXPECT_TRUE(In("fe80::/10", "febf::1"));
  EXPECT_FALSE(In("fe80::/10", "fec0::1"));
  EXPECT_TRUE(In("all", "::1"));
  EXPECT_TRUE(In("all", "10.0.0.1"));
  EXPECT_FALSE(ParseCidr("all")->Contains(ClientAddress{}));  // unknown is in no block
}

TEST(Cidr, RefusesWhatIsNoBlock) {
  for (const char* bad :
       {"", "10.0.0.0/", "10.0.0.0/33", "::/129", "10.0.0.1/8", "10.0.0.0/-1", "10.0.0.0/+8",
        "example.org", "10.0.0", "::1/ 64", "1.2.3.4/08x", "2001:db8::1/32", "ALL"}) {
    EXPECT_FALSE(ParseCidr(bad).has_value()) << bad;
  }
}

TEST(ClientRules, FirstMatchWinsAndNoMatchAllows) {
  ClientRules rules;
  EXPECT_TRUE(rules.Allows(Addr("10.0.0.1")));
  rules.Add(false, *ParseCidr("127.0.0.3"));
  rules.Add(true, *ParseCidr("127.0.0.0/8"));
  rules.Add(true, *ParseCidr("::1"));
  EXPECT_FALSE(rules.Allows(Addr("127.0.0.3")));
  EXPECT_TRUE(rules.Allows(Addr("127.0.0.4")));
  EXPECT_TRUE(rules.Allows(Addr("::1")));
  EXPECT_TRUE(rules.Allows(Addr("10.0.0.1")));  // no rule matched: allowed, as nginx
  rules.Add(false, *ParseCidr("all"));
  EXPECT_FALSE(rules.Allows(Addr("10.0.0.1")));
  EXPECT_FALSE(rules.Allows(Addr("::2")));
  EXPECT_TRUE(rules.Contains(Addr("::2")));
}

TEST(ClientRules, AnIpv4MappedAddressIsJudgedAsIpv4) {
  ClientRules rules;
  rules.Add(false, *ParseCidr("192.0.2.0/24"));
  EXPECT_FALSE(rules.Allows(Addr("::ffff:192.0.2.9")));
  EXPECT_TRUE(rules.Allows(Addr("::ffff:198.51.100.9")));
  EXPECT_TRUE(rules.Contains(Addr("::ffff:192.0.2.1")));
}

TEST(ClientAddress, FormatsAsRemoteAddr) {
  char text[ClientAddress::kTextMax];
  EXPECT_EQ(std::string(text, Addr("192.0.2.1").Format(text, sizeof text)), "192.0.2.1");
  EXPECT_EQ(std::string(text, Addr("2001:db8::1").Format(text, sizeof text)), "2001:db8::1");
  EXPECT_EQ(std::string(text, ClientAddress{}.Format(text, sizeof text)), "-");
}

std::string Real(const char* peer, std::vector<std::string_view> values, bool recursive) {
  ClientRules trusted;
  trusted.Add(true, *ParseCidr("127.0.0.0/8"));
  trusted.Add(true, *ParseCidr("10.0.0.0/8"));
  char text[ClientAddress::kTextMax];
  const ClientAddress a = RealClient(Addr(peer), values.data(), values.size(), trusted, recursive);
  return std::string(text, a.Format(text, sizeof text));
}

TEST(RealClient, AsNginxRealIp) {
  // An untrusted peer is the client, whatever it says.
  EXPECT_EQ(Real("192.0.2.1", {"203.0.113.7"}, false), "192.0.2.1");
  // A trusted peer: the last address of the list.
  EXPECT_EQ(Real("127.0.0.1", {"203.0.113.7"}, false), "203.0.113.7");
  EXPECT_EQ(Real("127.0.0.1", {"198.51.100.1, 203.0.113.7"}, false), "203.0.113.7");
  EXPECT_EQ(Real("127.0.0.1", {"198.51.100.1, 10.0.0.2"}, false), "10.0.0.2");
  // Recursive: trusted addresses are proxies too; the last untrusted one is the client.
  EXPECT_EQ(Real("127.0.0.1", {"198.51.100.1, 203.0.113.7, 10.0.0.2"}, true), "203.0.113.7");
  EXPECT_EQ(Real("127.0.0.1", {"10.0.0.3 ,10.0.0.2"}, true), "10.0.0.3");  // all trusted
  // Several fields read as one list, the last field's end nearest.
  EXPECT_EQ(Real("127.0.0.1", {"198.51.100.1", "10.0.0.2"}, true), "198.51.100.1");
  EXPECT_EQ(Real("127.0.0.1", {"2001:db8::5, ::ffff:10.1.1.1"}, true), "2001:db8::5");
  // Not an address: the walk stops at what it reached.
  EXPECT_EQ(Real("127.0.0.1", {"unknown"}, false), "127.0.0.1");
  EXPECT_EQ(Real("127.0.0.1", {"junk, 10.0.0.2"}, true), "10.0.0.2");
  EXPECT_EQ(Real("127.0.0.1", {"", " , "}, false), "127.0.0.1");
  EXPECT_EQ(Real("127.0.0.1", {}, false), "127.0.0.1");
  EXPECT_FALSE(ParseAddress("1.2.3.4:80").has_value());
  EXPECT_FALSE(ParseAddress(std::string(100, '1')).has_value());
}

}  // namespace
}  // namespace ringd::http
