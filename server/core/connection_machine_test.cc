// The connection state machine alone, with nothing of a shard but its parts and a host that
// hears when a slot frees: what the shard's connection limit relies on.
#include <sys/socket.h>

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/core/connection.h"
#include "server/core/scripted_loop.h"

namespace ringd {
namespace {

class CountingHost final : public ConnectionHost {
 public:
  void RoomMayHaveChanged() override { ++calls; }
  int calls = 0;
};

class ConnectionMachineTest : public ::testing::Test {
 protected:
  static constexpr int kFd = 9;

  void SetUp() override {
    config_.max_connections = 4;
    config_.open_file_cache_entries = 16;
    config_.small_file_max = 0;
    config_.keepalive_timeout_ms = 2000;
    Configure();
    input_ = std::make_unique<mem::BufferPool>(
        config_.max_request_head + http::kMaxLeadingEmptyBytes + config_.recv_buffer_size,
        config_.max_connections);
    ConnectionParts parts;
    parts.config = &config_;
    parts.loop = &loop_;
    parts.input_pool = input_.get();
    parts.capacity = config_.max_connections;
    parts.https_port_suffix = std::string(":8443");  // the parts go; the machine keeps its own
    parts.stats = &stats_;
    parts.host = &host_;
    parts.sites_word = sites_word_;
    machine_ = std::make_unique<ConnectionMachine>(std::move(parts));
    machine_->Tick(now_ms_, loop_.RealtimeSec());
  }

  virtual void Configure() {}  // a test's own settings, before the machine copies them

  void Complete(io::Completion* c, int64_t result, bool more, const std::string* data = nullptr) {
    loop_.Then([=] {
      c->result = result;
      c->more = more;
      c->data = data != nullptr ? data->data() : nullptr;
      c->callback(c);
    });
    loop_.Poll(0);
  }

  // A connection that made one keep-alive request, had its answer, and is idle now.
  io::Completion* IdleConnection() {
    EXPECT_NE(machine_->Open(kFd, false), nullptr);
    EXPECT_EQ(loop_.recvs.size(), 1u);
    io::Completion* recv = loop_.recvs.back();
    Complete(recv, static_cast<int64_t>(request_.size()), true, &request_);
    EXPECT_EQ(loop_.sends.size(), 1u);
    const int before = host_.calls;
    Complete(loop_.sends.back().first, static_cast<int64_t>(loop_.sends.back().second), false);
    EXPECT_EQ(host_.calls, before + 1) << "the host hears that a connection went idle";
    return recv;
  }

  Config config_;
  int64_t now_ms_ = 1000;
  ScriptedLoop loop_{&now_ms_};
  std::unique_ptr<mem::BufferPool> input_;
  ShardStats stats_;
  CountingHost host_;
  std::unique_ptr<ConnectionMachine> machine_;
  const std::atomic<const Sites*>* sites_word_ = nullptr;  // Configure may set it
  const std::string request_ = "OPTIONS / HTTP/1.1\r\nHost: t\r\n\r\n";
};

TEST_F(ConnectionMachineTest, ServesAndFreesTheSlotOnItsLastCallback) {
  io::Completion* recv = IdleConnection();
  EXPECT_EQ(machine_->live(), 1u);
  EXPECT_TRUE(machine_->HasIdle());
  now_ms_ += config_.keepalive_timeout_ms;
  machine_->Tick(now_ms_, loop_.RealtimeSec());
  EXPECT_EQ(stats_.idle_timeouts, 1u);
  EXPECT_EQ(loop_.cancels, std::vector<io::Completion*>{recv});
  EXPECT_TRUE(loop_.closes.empty()) << "closed before the receive's last callback";
  const int before = host_.calls;
  Complete(recv, -ECANCELED, false);
  EXPECT_EQ(loop_.closes, std::vector<int>{kFd});
  EXPECT_EQ(machine_->live(), 0u);
  EXPECT_EQ(stats_.closed, 1u);
  EXPECT_EQ(host_.calls, before + 1) << "the host hears that a slot is free";
}

// A connection accepted in a Poll that slept gets its whole header timeout: its deadline counts
// from the loop's clock when it came, not from the Tick before that Poll.
TEST_F(ConnectionMachineTest, AHeaderTimeoutCountsFromTheAcceptNotTheTickBefore) {
  const int64_t ticked = now_ms_;
  now_ms_ += 900;  // the Poll slept 900 ms, then the accept completed
  ASSERT_NE(machine_->Open(kFd, false), nullptr);
  now_ms_ = ticked + config_.header_timeout_ms + 100;
  machine_->Tick(now_ms_, loop_.RealtimeSec());
  EXPECT_EQ(stats_.header_timeouts, 0u) << "timed out 800 ms early";
  now_ms_ = ticked + 900 + config_.header_timeout_ms;
  machine_->Tick(now_ms_, loop_.RealtimeSec());
  EXPECT_EQ(stats_.header_timeouts, 1u);
  ASSERT_EQ(loop_.cancels.size(), 1u);
  Complete(loop_.cancels.back(), -ECANCELED, false);  // the receive's last callback
  EXPECT_EQ(machine_->live(), 0u);
}

// Giving way lingers (FIN, then reads until the client closes) and takes the connection out of
// those the limit counts at once; once it has lingered kGaveWayLingerMs, a parked newcomer can
// close it.
TEST_F(ConnectionMachineTest, AnIdleConnectionGivesWayLingeringOutsideTheLimit) {
  io::Completion* recv = IdleConnection();
  EXPECT_EQ(machine_->Serving(), 1u);
  ASSERT_TRUE(machine_->GiveWayOldestIdle());
  EXPECT_FALSE(machine_->GiveWayOldestIdle()) << "only one was idle";
  EXPECT_EQ(loop_.shutdowns, (std::vector<std::pair<int, int>>{{kFd, SHUT_WR}}));
  EXPECT_EQ(machine_->Serving(), 0u);
  EXPECT_EQ(machine_->live(), 1u);
  // Its client may still be reading the last response, and sending: it lingers a while first.
  EXPECT_FALSE(machine_->CloseOldestGaveWay()) << "closed before it could linger";
  EXPECT_EQ(machine_->NextGaveWayClosableMs(), now_ms_ + ConnectionMachine::kGaveWayLingerMs);
  now_ms_ += ConnectionMachine::kGaveWayLingerMs;
  machine_->Tick(now_ms_, loop_.RealtimeSec());
  ASSERT_TRUE(machine_->CloseOldestGaveWay());
  EXPECT_EQ(machine_->Closing(), 1u);
  Complete(recv, -ECANCELED, false);
  EXPECT_EQ(loop_.closes, std::vector<int>{kFd});
  EXPECT_EQ(stats_.idle_reclaimed, 1u);
  EXPECT_EQ(stats_.gave_way_closed, 1u);
}

// A connection that has said nothing for kSilentGiveWayMs may give way; one that has sent part of
// a head never does.
TEST_F(ConnectionMachineTest, OnlyASilentConnectionGivesWayAfterItsTime) {
  ASSERT_NE(machine_->Open(kFd, false), nullptr);
  ASSERT_NE(machine_->Open(kFd + 1, false), nullptr);
  const std::string part = "GET / HT";
  Complete(loop_.recvs.at(1), static_cast<int64_t>(part.size()), true, &part);
  EXPECT_FALSE(machine_->HasSilent());
  EXPECT_EQ(machine_->NextSilentGiveWayMs(), now_ms_ + ConnectionMachine::kSilentGiveWayMs);
  now_ms_ += ConnectionMachine::kSilentGiveWayMs;
  machine_->Tick(now_ms_, loop_.RealtimeSec());
  EXPECT_TRUE(machine_->HasSilent());
  ASSERT_TRUE(machine_->AbortOldestSilent());
  EXPECT_EQ(loop_.cancels, std::vector<io::Completion*>{loop_.recvs.at(0)});
  EXPECT_FALSE(machine_->AbortOldestSilent()) << "the other sent part of a head";
  Complete(loop_.recvs.at(0), -ECANCELED, false);
  EXPECT_EQ(loop_.closes, std::vector<int>{kFd});
  EXPECT_EQ(stats_.silent_reclaimed, 1u);
  // The drain's deadline ends the other.
  machine_->AbortAll();
  Complete(loop_.recvs.at(1), -ECANCELED, false);
  EXPECT_EQ(machine_->live(), 0u);
}

// A connection accepted on a --redirect-https listener is answered with a redirect to the TLS
// port, whose suffix the machine keeps for its whole life.
TEST_F(ConnectionMachineTest, ARedirectListenersRequestsGoToTheTlsPort) {
  ASSERT_NE(machine_->Open(kFd, true), nullptr);
  const std::string get = "GET /a?b=1 HTTP/1.1\r\nHost: example.com\r\n\r\n";
  std::string sent;
  loop_.on_send = [&](const iovec* iov, int iovcnt) {
    for (int i = 0; i < iovcnt; ++i)
      sent.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
  };
  Complete(loop_.recvs.at(0), static_cast<int64_t>(get.size()), true, &get);
  ASSERT_EQ(loop_.sends.size(), 1u);
  EXPECT_EQ(sent.rfind("HTTP/1.1 301 ", 0), 0u) << sent;
  EXPECT_NE(sent.find("\r\nLocation: https://example.com:8443/a?b=1\r\n"), std::string::npos)
      << sent;
  Complete(loop_.sends[0].first, static_cast<int64_t>(loop_.sends[0].second), false);
  machine_->AbortAll();
  Complete(loop_.recvs.at(0), -ECANCELED, false);
  EXPECT_EQ(machine_->live(), 0u);
}

// A new generation of origin headers (a SIGHUP reload) is taken up at the machine's next Tick:
// a request planned before it gets the old headers, one planned after gets the new.
TEST_F(ConnectionMachineTest, NewOriginHeadersServeFromTheNextTick) {
  http::OriginHeaders one, two;
  std::string error;
  ASSERT_TRUE(one.AddHeader("X-Generation", "one", &error)) << error;
  ASSERT_TRUE(two.AddHeader("X-Generation", "two", &error)) << error;
  std::atomic<const http::OriginHeaders*> word{&one};
  ConnectionParts parts;
  parts.config = &config_;
  parts.loop = &loop_;
  parts.input_pool = input_.get();
  parts.capacity = config_.max_connections;
  parts.stats = &stats_;
  parts.host = &host_;
  parts.origin_word = &word;
  machine_ = std::make_unique<ConnectionMachine>(std::move(parts));
  machine_->Tick(now_ms_, loop_.RealtimeSec());
  std::string sent;
  loop_.on_send = [&](const iovec* iov, int iovcnt) {
    for (int i = 0; i < iovcnt; ++i)
      sent.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
  };
  ASSERT_NE(machine_->Open(kFd, false), nullptr);
  auto exchange = [&] {
    sent.clear();
    const size_t sends = loop_.sends.size();
    Complete(loop_.recvs.back(), static_cast<int64_t>(request_.size()), true, &request_);
    EXPECT_EQ(loop_.sends.size(), sends + 1);
    Complete(loop_.sends.back().first, static_cast<int64_t>(loop_.sends.back().second), false);
    return sent;
  };
  EXPECT_NE(exchange().find("\r\nX-Generation: one\r\n"), std::string::npos) << sent;
  word.store(&two, std::memory_order_release);
  EXPECT_NE(exchange().find("\r\nX-Generation: one\r\n"), std::string::npos)
      << "taken up before the machine's next Tick: " << sent;
  machine_->Tick(now_ms_, loop_.RealtimeSec());
  EXPECT_NE(exchange().find("\r\nX-Generation: two\r\n"), std::string::npos) << sent;
  machine_->AbortAll();
  Complete(loop_.recvs.back(), -ECANCELED, false);
  EXPECT_EQ(machine_->live(), 0u);
}

// A ",proxy" listener's connection: its PROXY header, a byte per receive, then its last byte
// and a request in one; the request is answered as if the header had never been there, and the
// input buffer that held the header's prefix is given back.
TEST_F(ConnectionMachineTest, AProxyHeaderSplitByteByByteIsStrippedBeforeTheRequest) {
  ASSERT_NE(machine_->Open(kFd, false, /*proxy_header=*/true), nullptr);
  io::Completion* recv = loop_.recvs.back();
  const std::string header = "PROXY TCP4 192.0.2.7 198.51.100.1 56324 80\r\n";
  std::vector<std::string> pieces;
  for (size_t i = 0; i + 1 < header.size(); ++i) pieces.push_back(header.substr(i, 1));
  pieces.push_back(header.substr(header.size() - 1) + request_);
  for (const std::string& piece : pieces) {
    Complete(recv, static_cast<int64_t>(piece.size()), true, &piece);
  }
  ASSERT_EQ(loop_.sends.size(), 1u) << "the request after the header was answered";
  EXPECT_EQ(input_->Available(), input_->count()) << "the header's prefix was given back";
  EXPECT_EQ(stats_.proxy_malformed + stats_.proxy_missing, 0u);
  Complete(loop_.sends[0].first, static_cast<int64_t>(loop_.sends[0].second), false);
  machine_->AbortAll();
  Complete(recv, -ECANCELED, false);
  EXPECT_EQ(machine_->live(), 0u);
}

TEST_F(ConnectionMachineTest, AMissingOrMalformedProxyHeaderCloses) {
  const std::string missing = request_;
  const std::string malformed = "PROXY TCP4 192.0.2.7 198.51.100.1 99999 80\r\n" + request_;
  for (const std::string* bytes : {&missing, &malformed}) {
    ASSERT_NE(machine_->Open(kFd, false, /*proxy_header=*/true), nullptr);
    io::Completion* recv = loop_.recvs.back();
    Complete(recv, static_cast<int64_t>(bytes->size()), true, bytes);
    EXPECT_TRUE(loop_.sends.empty()) << "nothing answered";
    ASSERT_FALSE(loop_.cancels.empty());
    Complete(loop_.cancels.back(), -ECANCELED, false);
    EXPECT_EQ(machine_->live(), 0u);
  }
  EXPECT_EQ(stats_.proxy_missing, 1u);
  EXPECT_EQ(stats_.proxy_malformed, 1u);
  EXPECT_EQ(input_->Available(), input_->count());
}

// Every entry of the open-file cache loading (each connection's lookup of a file of its own, its
// open never completed), so that one more lookup is refused.
class RefusedLookupTest : public ConnectionMachineTest {
 protected:
  void Configure() override {
    config_.max_connections = config_.open_file_cache_entries + 1;
    config_.precompressed = false;  // one lookup per request, no siblings prefetched
    loop_.record_opens = true;
  }

  void FillTheCache() {
    for (uint32_t i = 0; i < config_.open_file_cache_entries; ++i) {
      ASSERT_NE(machine_->Open(kFd + 1 + static_cast<int>(i), false), nullptr);
      const std::string get = "GET /f" + std::to_string(i) + " HTTP/1.1\r\nHost: t\r\n\r\n";
      Complete(loop_.recvs.back(), static_cast<int64_t>(get.size()), true, &get);
    }
    ASSERT_EQ(loop_.opens.size(), config_.open_file_cache_entries);
    ASSERT_TRUE(loop_.sends.empty());
  }
};

// A request refused with 503 whose body is still on its way is answered as any response whose
// body ringd does not read: the 503 is the last response, and the connection lingers (FIN, then
// reads until the client closes) rather than close with the body arriving, which would reset the
// connection and could destroy the 503 before the client reads it.
TEST_F(RefusedLookupTest, A503WhoseBodyIsStillArrivingLingers) {
  FillTheCache();
  ASSERT_NE(machine_->Open(kFd, false), nullptr);
  io::Completion* recv = loop_.recvs.back();
  // A client that asks to close, and whose body has not come when the 503 is out: nothing but
  // the body's framing says that it will send more.
  const std::string head =
      "GET /other HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 10000\r\n\r\n";
  std::string sent;
  loop_.on_send = [&](const iovec* iov, int iovcnt) {
    for (int i = 0; i < iovcnt; ++i)
      sent.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
  };
  Complete(recv, static_cast<int64_t>(head.size()), true, &head);
  EXPECT_EQ(stats_.lookup_refused, 1u);
  ASSERT_EQ(loop_.sends.size(), 1u);
  EXPECT_EQ(sent.rfind("HTTP/1.1 503 ", 0), 0u) << sent;
  EXPECT_NE(sent.find("\r\nConnection: close\r\n"), std::string::npos) << sent;
  Complete(loop_.sends[0].first, static_cast<int64_t>(loop_.sends[0].second), false);
  EXPECT_EQ(loop_.shutdowns, (std::vector<std::pair<int, int>>{{kFd, SHUT_WR}}));
  EXPECT_TRUE(loop_.cancels.empty()) << "the receive ended with the body on its way";
  EXPECT_TRUE(loop_.closes.empty()) << "closed with the body on its way";
  const std::string body(5000, 'b');
  Complete(recv, static_cast<int64_t>(body.size()), true, &body);  // read and dropped
  Complete(recv, static_cast<int64_t>(body.size()), true, &body);
  EXPECT_TRUE(loop_.closes.empty());
  Complete(recv, 0, false);  // the client closes
  EXPECT_EQ(loop_.closes, std::vector<int>{kFd});
  machine_->AbortAll();
  for (io::Completion* c : loop_.recvs) {
    if (c != recv) Complete(c, -ECANCELED, false);
  }
  for (io::Completion* c : loop_.opens) Complete(c, -ENOENT, false);
  EXPECT_EQ(machine_->live(), 0u);
}

// --site: the machine chooses each request's site by its host, plans it beneath that site's root,
// and takes up a new generation of sites at a Tick while a request of the one before still waits
// for its lookup (it is answered from the site it chose).
class SitesTest : public ConnectionMachineTest {
 protected:
  static constexpr int kRootA = 101, kRootB = 202;

  void Configure() override {
    config_.precompressed = false;  // one lookup per request, no siblings
    loop_.record_opens = true;
    first_ = MakeSites("a.test", kRootA);
    word_.store(first_.get());
    sites_word_ = &word_;
    loop_.on_send = [this](const iovec* iov, int n) {
      for (int i = 0; i < n; ++i)
        sent_.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
    };
  }

  static std::unique_ptr<Sites> MakeSites(const std::string& name, int root_fd) {
    auto sites = std::make_unique<Sites>();
    std::string error;
    EXPECT_TRUE(sites->table.Add({name}, &error)) << error;
    sites->sites.push_back(
        SiteRuntime{name, nullptr, root_fd, "", nullptr, nullptr, std::nullopt, std::nullopt});
    sites->unknown = UnknownSite::kMisdirected;
    return sites;
  }

  // A request on a new connection; the connection's receive.
  io::Completion* Ask(const std::string* get) {
    EXPECT_NE(machine_->Open(kFd + static_cast<int>(loop_.recvs.size()), false), nullptr);
    io::Completion* recv = loop_.recvs.back();
    Complete(recv, static_cast<int64_t>(get->size()), true, get);
    return recv;
  }

  // Every send completes, every connection ends, every receive has its last callback.
  void Finish() {
    for (size_t i = sends_done_; i < loop_.sends.size(); ++i)
      Complete(loop_.sends[i].first, static_cast<int64_t>(loop_.sends[i].second), false);
    sends_done_ = loop_.sends.size();
    machine_->AbortAll();
    for (io::Completion* recv : loop_.recvs) Complete(recv, -ECANCELED, false);
    EXPECT_EQ(machine_->live(), 0u);
  }
  void SendsDone() {
    for (size_t i = sends_done_; i < loop_.sends.size(); ++i)
      Complete(loop_.sends[i].first, static_cast<int64_t>(loop_.sends[i].second), false);
    sends_done_ = loop_.sends.size();
  }

  size_t sends_done_ = 0;
  std::atomic<const Sites*> word_{nullptr};
  std::unique_ptr<Sites> first_, second_;
  std::string sent_;
};

TEST_F(SitesTest, AHostOfNoSiteIs421WithoutALookup) {
  const std::string get = "GET /x HTTP/1.1\r\nHost: nowhere.test\r\n\r\n";
  Ask(&get);
  EXPECT_TRUE(loop_.opens.empty());
  ASSERT_EQ(loop_.sends.size(), 1u);
  EXPECT_TRUE(sent_.starts_with("HTTP/1.1 421 Misdirected Request\r\n")) << sent_;
  Finish();
}

TEST_F(SitesTest, ALookupWaitingAcrossANewGenerationIsAnsweredFromItsSite) {
  const std::string get_a = "GET /x HTTP/1.1\r\nHost: A.Test.:8080\r\n\r\n";
  Ask(&get_a);
  ASSERT_EQ(loop_.opens.size(), 1u);
  EXPECT_EQ(loop_.open_dirs, std::vector<int>{kRootA});
  // A reload: site a.test leaves, b.test comes; the machine takes it up at its next turn.
  second_ = MakeSites("b.test", kRootB);
  word_.store(second_.get());
  machine_->Tick(now_ms_, loop_.RealtimeSec());
  EXPECT_EQ(machine_->site_files().size(), 1u);
  EXPECT_EQ(machine_->site_files()[0]->name, "b.test");
  // The waiting request's lookup ends in its site's (retired) cache: a 404 from site a.test.
  io::Completion* open = loop_.opens[0];
  open->result = -ENOENT;
  open->callback(open);
  machine_->RunWakeups();
  ASSERT_EQ(loop_.sends.size(), 1u);
  EXPECT_TRUE(sent_.starts_with("HTTP/1.1 404 Not Found\r\n")) << sent_;
  SendsDone();
  machine_->Tick(now_ms_, loop_.RealtimeSec());  // the retired site goes (nothing uses it)
  // The new generation: a.test names no site now, b.test opens beneath its own root.
  sent_.clear();
  const std::string again_a = "GET /x HTTP/1.1\r\nHost: a.test\r\n\r\n";
  Ask(&again_a);
  EXPECT_TRUE(sent_.starts_with("HTTP/1.1 421 ")) << sent_;
  const std::string get_b = "GET /y HTTP/1.1\r\nHost: b.test\r\n\r\n";
  Ask(&get_b);
  EXPECT_EQ(loop_.open_dirs, (std::vector<int>{kRootA, kRootB}));
  loop_.opens[1]->result = -ENOENT;
  loop_.opens[1]->callback(loop_.opens[1]);
  machine_->RunWakeups();
  Finish();
}

// A site's --allow / --deny judge each of its requests' client (here the one a PROXY header
// names): a refused one is answered 403 without a lookup, and its connection stays for the next
// request; an allowed one is planned beneath the site's root.
class SiteRulesTest : public SitesTest {
 protected:
  void Configure() override {
    SitesTest::Configure();
    rules_.Add(false, *http::ParseCidr("192.0.2.0/28"));
    rules_.Add(true, *http::ParseCidr("192.0.2.0/24"));
    rules_.Add(false, *http::ParseCidr("all"));
    first_->sites[0].client_rules = &rules_;
    // The process started with a site's rules: the machine keeps each connection's client.
    SiteConfig site;
    site.names = {"a.test"};
    site.client_rules = rules_;
    config_.sites.push_back(site);
  }

  // A ",proxy" connection from `client` that asks for `get`; its receive.
  io::Completion* AskFrom(const std::string& client, const std::string& get) {
    bytes_.push_back("PROXY TCP4 " + client + " 198.51.100.1 56324 80\r\n" + get);
    EXPECT_NE(machine_->Open(kFd + static_cast<int>(loop_.recvs.size()), false, true), nullptr);
    io::Completion* recv = loop_.recvs.back();
    Complete(recv, static_cast<int64_t>(bytes_.back().size()), true, &bytes_.back());
    return recv;
  }

  http::ClientRules rules_;
  std::deque<std::string> bytes_;
};

TEST_F(SiteRulesTest, ARefusedClientIs403WithoutALookupAndKeepsItsConnection) {
  const std::string get_a = "GET /x HTTP/1.1\r\nHost: a.test\r\n\r\n";
  io::Completion* recv = AskFrom("192.0.2.7", get_a);  // in the denied /28: the first match
  EXPECT_TRUE(loop_.opens.empty()) << "refused before any lookup";
  ASSERT_EQ(loop_.sends.size(), 1u);
  EXPECT_TRUE(sent_.starts_with("HTTP/1.1 403 Forbidden\r\n")) << sent_;
  EXPECT_EQ(sent_.find("Connection: close"), std::string::npos) << sent_;
  EXPECT_EQ(stats_.site_clients_denied, 1u);
  SendsDone();
  // The same connection asks again: refused again, not closed.
  sent_.clear();
  Complete(recv, static_cast<int64_t>(get_a.size()), true, &get_a);
  ASSERT_EQ(loop_.sends.size(), 2u);
  EXPECT_TRUE(sent_.starts_with("HTTP/1.1 403 ")) << sent_;
  EXPECT_EQ(stats_.site_clients_denied, 2u);
  SendsDone();
  // Allowed by the /24: planned beneath a.test's root.
  AskFrom("192.0.2.99", get_a);
  EXPECT_EQ(loop_.open_dirs, std::vector<int>{kRootA});
  // deny all: any other client, IPv4 or not.
  AskFrom("203.0.113.1", get_a);
  EXPECT_EQ(loop_.open_dirs, std::vector<int>{kRootA});
  EXPECT_EQ(stats_.site_clients_denied, 3u);
  loop_.opens[0]->result = -ENOENT;
  loop_.opens[0]->callback(loop_.opens[0]);
  machine_->RunWakeups();
  Finish();
}

}  // namespace
}  // namespace ringd
