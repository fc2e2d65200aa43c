// The composition root's io choices on the built-in tiers, from probe reports the test writes:
// flags checked against the table, auto's choice, the features each tier keeps, and the lines.
#include "server/io_setup.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "io/probe.h"
#include "io/registry.h"

namespace ringd {
namespace {

// A kernel with everything the tiers can use.
io::ProbeReport FullProbe() {
  io::ProbeReport p;
  p.usable = true;
  p.reason = "every opcode";
  p.bypass_usable = true;
  p.bypass_reason = "direct descriptors";
  p.sqpoll_usable = p.recv_incremental = p.napi = p.batch_wait = true;
  p.fd_install = p.cqe_skip = p.registered_ring = true;
  return p;
}

Config WithIo(const std::string& io) {
  Config c;
  c.root = "/tmp";
  c.io = io;
  return c;
}

class IoSetupTest : public testing::Test {
 protected:
  io::TierTable tiers_ = io::BuiltinTiers();
};

TEST_F(IoSetupTest, FlagsAreCheckedAgainstTheTableBeforeAnyProbe) {
  EXPECT_EQ(CheckIoFlags(WithIo("auto"), tiers_), absl::OkStatus());
  EXPECT_EQ(CheckIoFlags(WithIo("kqueue"), tiers_).message(),
            "--io: expected auto, bypass, uring or epoll, got 'kqueue'");
  Config c = WithIo("uring");
  c.io_mask = {"warp drive"};
  EXPECT_EQ(CheckIoFlags(c, tiers_).message(),
            "--io-mask: unknown feature 'warp drive' (names as ringd --probe prints)");
  c = WithIo("uring");
  c.sqpoll = true;
  EXPECT_EQ(CheckIoFlags(c, tiers_).message(),
            "--sqpoll needs a tier that has it (--io=bypass); the uring tier does not");
  c = WithIo("epoll");
  c.busy_poll_us = 50;
  EXPECT_EQ(CheckIoFlags(c, tiers_).message(),
            "--busy-poll-us needs a tier that has it (--io=bypass or --io=uring); the epoll "
            "tier does not");
  c.busy_poll_us = 0;
  c.batch_wait_us = 50;
  EXPECT_FALSE(CheckIoFlags(c, tiers_).ok());
  c = WithIo("bypass");
  c.sqpoll = true;
  EXPECT_EQ(CheckIoFlags(c, tiers_), absl::OkStatus());
}

TEST_F(IoSetupTest, AutoTakesBypassWithEveryFeatureWhereTheKernelHasThem) {
  absl::StatusOr<IoSetup> io;
  io = ChooseIo(WithIo("auto"), tiers_, FullProbe(), 0);
  ASSERT_TRUE(io.ok()) << io.status();
  EXPECT_EQ(io->tier->name, "bypass");
  EXPECT_EQ(io->line,
            "bypass: direct descriptors; incremental receive buffers (1024 KiB per shard); closes "
            "and cancels post no "
            "completion; cached bodies with sendfile on an installed fd; registered ring fd");
  EXPECT_TRUE(io->features.uring.recv_incremental);
  EXPECT_TRUE(io->features.uring.skip_unread_cqes);
  EXPECT_TRUE(io->features.uring.bypass_sendfile);
  EXPECT_TRUE(io->features.uring.register_ring_fd);
}

TEST_F(IoSetupTest, EachTierKeepsOnlyTheFeaturesItCanUse) {
  io::ProbeReport probe = FullProbe();
  probe.fd_install = false;
  probe.cqe_skip = false;
  absl::StatusOr<IoSetup> io;
  io = ChooseIo(WithIo("bypass"), tiers_, probe, 0);
  ASSERT_TRUE(io.ok()) << io.status();
  EXPECT_FALSE(io->features.uring.bypass_sendfile);
  EXPECT_FALSE(io->features.uring.skip_unread_cqes);
  EXPECT_NE(io->line.find("; every body spliced"), std::string::npos) << io->line;
  EXPECT_NE(io->line.find("; closes and cancels complete (CQE skip: unavailable)"),
            std::string::npos)
      << io->line;
  io = ChooseIo(WithIo("uring"), tiers_, FullProbe(), 0);
  ASSERT_TRUE(io.ok()) << io.status();
  EXPECT_TRUE(io->features.uring.recv_incremental);
  EXPECT_FALSE(io->features.uring.register_ring_fd);  // a process-fd ring gains nothing from it
  EXPECT_FALSE(io->features.uring.bypass_sendfile);
  io = ChooseIo(WithIo("epoll"), tiers_, FullProbe(), 0);
  ASSERT_TRUE(io.ok()) << io.status();
  EXPECT_EQ(io->line,
            "epoll: chosen with --io=epoll (readiness and a worker pool, available "
            "everywhere)");
  EXPECT_FALSE(io->features.uring.recv_incremental || io->features.uring.skip_unread_cqes ||
               io->features.uring.register_ring_fd || io->features.uring.bypass_sendfile);
}

TEST_F(IoSetupTest, WithoutIoUringAutoFallsBackToEpollAndSaysWhy) {
  io::ProbeReport probe;
  probe.reason = "io_uring_setup: ENOSYS";
  probe.bypass_reason = "needs the uring tier";
  absl::StatusOr<IoSetup> io;
  io = ChooseIo(WithIo("auto"), tiers_, probe, 0);
  ASSERT_TRUE(io.ok()) << io.status();
  EXPECT_EQ(io->tier->name, "epoll");
  EXPECT_NE(io->line.find("; not uring: io_uring_setup: ENOSYS"), std::string::npos) << io->line;
  io = ChooseIo(WithIo("uring"), tiers_, probe, 0);
  ASSERT_FALSE(io.ok());
  EXPECT_EQ(io.status().message(),
            "--io=uring, but the uring tier is unusable: io_uring_setup: ENOSYS");
}

TEST_F(IoSetupTest, AutoPassesOverTiersThatCannotDoWhatTheFlagsNeed) {
  absl::StatusOr<IoSetup> io;
  // The access log wants client addresses: bypass cannot name them.
  Config c = WithIo("auto");
  c.access_log = "/dev/null";
  io = ChooseIo(c, tiers_, FullProbe(), 0);
  ASSERT_TRUE(io.ok()) << io.status();
  EXPECT_EQ(io->tier->name, "uring");
  // A descriptor limit below bypass's file table.
  io = ChooseIo(WithIo("auto"), tiers_, FullProbe(), 1024);
  ASSERT_TRUE(io.ok()) << io.status();
  EXPECT_EQ(io->tier->name, "uring");
  // Auto fell back to a tier without what a flag needs: one line.
  c = WithIo("auto");
  c.sqpoll = true;
  c.access_log = "/dev/null";
  io = ChooseIo(c, tiers_, FullProbe(), 0);
  ASSERT_FALSE(io.ok());
  EXPECT_EQ(io.status().message(),
            "--sqpoll needs a tier that has it (--io=bypass); the uring tier does not");
  // A flag whose kernel feature is missing.
  io::ProbeReport probe = FullProbe();
  probe.batch_wait = false;
  c = WithIo("uring");
  c.batch_wait_us = 50;
  io = ChooseIo(c, tiers_, probe, 0);
  ASSERT_FALSE(io.ok());
  EXPECT_NE(io.status().message().find("--batch-wait-us: this kernel cannot bound a wait"),
            std::string::npos);
}

// The limits per client and --real-ip-from key on the client: bypass cannot ask a socket's peer,
// unless a PROXY header names every client (every listener ,proxy, --proxy-from all).
TEST_F(IoSetupTest, LimitsNeedATierThatNamesClientsUnlessHeadersNameThem) {
  const std::string refused =
      "--limit-conn, --limit-req or --real-ip-from without every listener ,proxy and "
      "--proxy-from all needs a tier that has it (--io=uring or --io=epoll); the bypass tier "
      "does not";
  Config c = WithIo("bypass");
  c.limit_conn = 4;
  EXPECT_EQ(CheckIoFlags(c, tiers_).message(), refused);
  c = WithIo("bypass");
  c.limit_req.microrequests_per_s = 1000;
  EXPECT_EQ(CheckIoFlags(c, tiers_).message(), refused);
  c = WithIo("bypass");
  c.real_ip_from.Add(true, *http::ParseCidr("10.0.0.0/8"));
  EXPECT_EQ(CheckIoFlags(c, tiers_).message(), refused);
  ListenAddress proxied;
  proxied.proxy = true;
  c.listen = {proxied};
  c.listen_tls = {proxied};
  c.proxy_from_all = true;
  EXPECT_EQ(CheckIoFlags(c, tiers_), absl::OkStatus());
  c.listen.push_back(ListenAddress{});  // one listener whose clients no header names
  EXPECT_EQ(CheckIoFlags(c, tiers_).message(), refused);
  // Auto passes over bypass for them.
  c = WithIo("auto");
  c.limit_conn = 4;
  absl::StatusOr<IoSetup> io = ChooseIo(c, tiers_, FullProbe(), 0);
  ASSERT_TRUE(io.ok()) << io.status();
  EXPECT_EQ(io->tier->name, "uring");
}

// A site's --allow/--deny judge each request's client: the same rule as the limits.
TEST_F(IoSetupTest, SiteRulesNeedATierThatNamesClientsUnlessHeadersNameThem) {
  const std::string refused =
      "--allow/--deny in a --site without every listener ,proxy and --proxy-from all needs a "
      "tier that has it (--io=uring or --io=epoll); the bypass tier does not";
  Config c = WithIo("bypass");
  c.sites.emplace_back();
  EXPECT_EQ(CheckIoFlags(c, tiers_), absl::OkStatus()) << "a site without rules asks nothing";
  c.sites.back().client_rules.Add(false, *http::ParseCidr("192.0.2.0/24"));
  EXPECT_EQ(CheckIoFlags(c, tiers_).message(), refused);
  ListenAddress proxied;
  proxied.proxy = true;
  c.listen = {proxied};
  EXPECT_EQ(CheckIoFlags(c, tiers_).message(), refused) << "not every peer trusted";
  c.proxy_from_all = true;
  EXPECT_EQ(CheckIoFlags(c, tiers_), absl::OkStatus());
  c.listen_tls = {ListenAddress{}};  // a TLS listener whose clients no header names
  EXPECT_EQ(CheckIoFlags(c, tiers_).message(), refused);
  // Auto passes over bypass for them.
  c.io = "auto";
  absl::StatusOr<IoSetup> io = ChooseIo(c, tiers_, FullProbe(), 0);
  ASSERT_TRUE(io.ok()) << io.status();
  EXPECT_EQ(io->tier->name, "uring");
}

TEST_F(IoSetupTest, TheProbeTextGivesEachTiersVerdict) {
  io::ProbeReport probe = FullProbe();
  probe.lines = {"io_uring_setup: ok"};
  probe.bypass_usable = false;
  probe.bypass_reason = "missing accept direct (masked)";
  const std::string text = DescribeProbe(WithIo("auto"), tiers_, probe, 0);
  EXPECT_EQ(text.substr(0, text.find("kernel TLS: ")),
            "io_uring_setup: ok\n"
            "bypass tier: unusable (missing accept direct (masked))\n"
            "uring tier: usable (every opcode)\n"
            "epoll tier: usable (readiness and a worker pool, available everywhere)\n"
            "--io=auto would choose uring: every opcode; not bypass: missing accept direct "
            "(masked)\n");
  EXPECT_NE(text.find("\nHTTP/2: on (h2 by ALPN"), std::string::npos) << text;
  Config off = WithIo("auto");
  off.http2 = false;
  EXPECT_NE(DescribeProbe(off, tiers_, probe, 0).find("\nHTTP/2: off"), std::string::npos);
}

// Sizes said at start-up, as nginx warns when worker_connections exceed the open-file limit:
// warnings naming both numbers, never a refusal.
TEST(SizingWarnings, ConnectionsBeyondTheDescriptorLimitAndShardsBeyondTheCpus) {
  Config c = WithIo("auto");
  EXPECT_TRUE(SizingWarnings(c, 1, 20000, 2).empty());  // 10032 of 20000
  EXPECT_TRUE(SizingWarnings(c, 2, 0, 2).empty());      // no limit
  std::vector<std::string> lines = SizingWarnings(c, 2, 20000, 2);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0],
            "--max-connections=10000 on 2 shards is up to 20064 connections (32 more per shard on "
            "their way out), more than the open-file limit of 20000 (RLIMIT_NOFILE): raise it "
            "(LimitNOFILE=, ulimit -n) or lower --max-connections");
  c.max_connections = 1000000;
  lines = SizingWarnings(c, 1, 20000, 2);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("--max-connections=1000000 on 1 shard is up to 1000032 connections"),
            std::string::npos)
      << lines[0];
  c.max_connections = 100;
  c.shards = 1000;
  lines = SizingWarnings(c, 1000, 1 << 20, 2);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0],
            "--shards=1000 is more than the 2 CPUs this process may run on: shards share CPUs, "
            "each with its own memory");
  EXPECT_EQ(SizingWarnings(c, 1000, 20000, 1).size(), 2u);
}

}  // namespace
}  // namespace ringd
