#include "server/observe/admin.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/http/decimal.h"

namespace ringd {
namespace {

ListenAddress Loopback(uint16_t port) {
  ListenAddress a;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&a.addr);
  v4->sin_family = AF_INET;
  v4->sin_port = htons(port);
  v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.len = sizeof(sockaddr_in);
  a.text = "127.0.0.1:" + std::to_string(port);
  return a;
}

uint16_t PortOf(const std::string& address) {
  uint64_t port = 0;
  EXPECT_TRUE(http::ParseDecimal(address.substr(address.rfind(':') + 1), 65535, &port)) << address;
  return static_cast<uint16_t>(port);
}

// A connected socket to the admin port; -1 if connect fails. `rcvbuf`: SO_RCVBUF, if not 0.
int Connect(uint16_t port, int rcvbuf = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (rcvbuf != 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  // Answers come within a second; a failing server is a failed test, not a hung one.
  const timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Everything the server sends until it closes (or 5 s pass with nothing).
std::string ReadAll(int fd) {
  std::string out;
  char buf[65536];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

void Send(int fd, std::string_view bytes) { ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL); }

std::string Exchange(uint16_t port, const std::string& request) {
  const int fd = Connect(port);
  if (fd < 0) return "connect failed";
  Send(fd, request);
  std::string out = ReadAll(fd);
  ::close(fd);
  return out;
}

// Whether the server has closed `fd` (EOF or reset) within `limit_ms`; what it sent is dropped.
bool ClosedWithin(int fd, int limit_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(limit_ms);
  for (;;) {
    const auto left =
        std::chrono::ceil<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, std::max(0, static_cast<int>(left.count()))) <= 0) return false;
    char buf[4096];
    if (::recv(fd, buf, sizeof buf, MSG_DONTWAIT) <= 0) return true;
  }
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class AdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<AdminServer>> admin = AdminServer::Listen(Loopback(0));
    ASSERT_TRUE(admin.ok()) << admin.status();
    admin_ = *std::move(admin);
    AdminHandlers h;
    h.metrics = [this] {
      const size_t big = big_metrics_bytes_;
      return big == 0 ? std::string("ringd_up 1\n") : std::string(big, '#');
    };
    h.debug_shards = [] { return std::string("{}\n"); };
    h.healthz = [] { return AdminResponse{200, "text/plain; charset=utf-8", "ok\n"}; };
    h.readyz = [this] {
      return ready_ ? AdminResponse{200, "text/plain; charset=utf-8", "ready\n"}
                    : AdminResponse{503, "text/plain; charset=utf-8", "draining\n"};
    };
    admin_->Start(h);
    port_ = PortOf(admin_->address());
  }
  std::unique_ptr<AdminServer> admin_;
  uint16_t port_ = 0;
  std::atomic<bool> ready_{true};
  std::atomic<size_t> big_metrics_bytes_{0};  // /metrics answers this many bytes when not 0
};

TEST_F(AdminTest, Routes) {
  std::string r = Exchange(port_, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
            std::string::npos);
  EXPECT_NE(r.find("Content-Length: 11\r\n"), std::string::npos);
  EXPECT_NE(r.find("\r\n\r\nringd_up 1\n"), std::string::npos);

  r = Exchange(port_, "GET /debug/shards HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(r.find("Content-Type: application/json\r\n"), std::string::npos) << r;

  r = Exchange(port_, "GET /healthz HTTP/1.0\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;

  r = Exchange(port_, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(r.find("\r\n\r\nready\n"), std::string::npos) << r;
  ready_ = false;
  r = Exchange(port_, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0), 0u) << r;

  r = Exchange(port_, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(r.find("Content-Length: 11\r\n"), std::string::npos) << r;
  EXPECT_EQ(r.find("ringd_up"), std::string::npos) << r;

  r = Exchange(port_, "GET /files/index.html HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u) << r;
  r = Exchange(port_, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 405 ", 0), 0u) << r;
  r = Exchange(port_, "GARBAGE\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 400 ", 0), 0u) << r;
}

TEST_F(AdminTest, SilentConnectionsDelayNoHealthCheck) {
  std::vector<int> silent;
  for (int i = 0; i < 5; ++i) silent.push_back(Connect(port_));
  const auto start = std::chrono::steady_clock::now();
  std::string r = Exchange(port_, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  r = Exchange(port_, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  // Served one at a time, each silent connection would hold them for its 2 s: 10 s.
  EXPECT_LT(SecondsSince(start), 1.0);
  for (const int fd : silent) ::close(fd);
}

TEST_F(AdminTest, EachConnectionIsClosedTwoSecondsAfterItsAccept) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> fds;
  for (int i = 0; i < 3; ++i) fds.push_back(Connect(port_));
  const int trickle = Connect(port_);  // one byte of a head that never ends every 100 ms
  fds.push_back(trickle);
  const std::string head = "GET /healthz HTTP/1.1\r\nX-Slow: " + std::string(100, 'a');
  std::vector<double> closed_at(fds.size(), -1);
  size_t sent = 0;
  while (SecondsSince(start) < 2.0 * AdminServer::kIoTimeoutMs / 1000) {
    if (closed_at.back() < 0 && sent < head.size()) Send(trickle, head.substr(sent++, 1));
    for (size_t i = 0; i < fds.size(); ++i) {
      if (closed_at[i] < 0 && ClosedWithin(fds[i], 0)) closed_at[i] = SecondsSince(start);
    }
    ::poll(nullptr, 0, 100);
  }
  // Not before the deadline, and each by its own: not one after the other, not refreshed by
  // every byte that arrives.
  for (size_t i = 0; i < fds.size(); ++i) {
    EXPECT_GE(closed_at[i], AdminServer::kIoTimeoutMs / 1000.0) << "connection " << i;
    EXPECT_LT(closed_at[i], AdminServer::kIoTimeoutMs / 1000.0 + 1.0) << "connection " << i;
    ::close(fds[i]);
  }
}

TEST_F(AdminTest, AFullListenerClosesItsOldestConnectionForANewOne) {
  std::vector<int> silent;
  for (size_t i = 0; i < AdminServer::kMaxConnections + 1; ++i) silent.push_back(Connect(port_));
  EXPECT_TRUE(ClosedWithin(silent[0], 500));
  EXPECT_FALSE(ClosedWithin(silent[1], 0));
  // The listener is still full of silent connections: a health check still gets in.
  const auto start = std::chrono::steady_clock::now();
  const std::string r = Exchange(port_, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_LT(SecondsSince(start), 1.0);
  EXPECT_TRUE(ClosedWithin(silent[1], 500));
  EXPECT_FALSE(ClosedWithin(silent[2], 0));
  for (const int fd : silent) ::close(fd);
}

TEST_F(AdminTest, HeadsSplitAcrossSendsAreEachAnsweredWhenComplete) {
  const int a = Connect(port_);
  const int b = Connect(port_);
  Send(a, "GET /rea");
  Send(b, "GET /hea");
  ::poll(nullptr, 0, 50);
  Send(b, "lthz HTTP/1.1\r\nHo");
  ::poll(nullptr, 0, 50);
  Send(b, "st: x\r\n\r\n");
  // b is answered while a's head is still incomplete.
  const timeval one_second{1, 0};
  ::setsockopt(b, SOL_SOCKET, SO_RCVTIMEO, &one_second, sizeof one_second);
  std::string r = ReadAll(b);
  EXPECT_NE(r.find("\r\n\r\nok\n"), std::string::npos) << r;
  Send(a, "dyz HTTP/1.1\r\nHost: x\r\n\r\n");
  r = ReadAll(a);
  EXPECT_NE(r.find("\r\n\r\nready\n"), std::string::npos) << r;
  ::close(a);
  ::close(b);
}

TEST_F(AdminTest, AnAnswerTheClientReadsSlowlyDelaysNoOne) {
  // Far more than the socket buffers hold: the answer leaves in pieces as the client reads.
  constexpr size_t kBody = 8 << 20;
  big_metrics_bytes_ = kBody;
  const int slow = Connect(port_, 16384);
  Send(slow, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  ::poll(nullptr, 0, 100);  // the answer fills the buffers; the client reads none of it yet
  const auto start = std::chrono::steady_clock::now();
  const std::string r = Exchange(port_, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_LT(SecondsSince(start), 1.0);
  // The rest of the answer is sent as the client makes room, within its 2 s.
  const std::string big = ReadAll(slow);
  EXPECT_NE(big.find("Content-Length: " + std::to_string(kBody) + "\r\n"), std::string::npos);
  EXPECT_EQ(big.size() - big.find("\r\n\r\n") - 4, kBody);
  ::close(slow);
}

TEST_F(AdminTest, StopClosesOpenConnectionsAndReturnsPromptly) {
  std::vector<int> open;
  for (int i = 0; i < 5; ++i) open.push_back(Connect(port_));
  const int partial = Connect(port_);
  Send(partial, "GET /healthz HTTP/1.1\r\n");
  open.push_back(partial);
  ::poll(nullptr, 0, 100);  // accepted
  const auto start = std::chrono::steady_clock::now();
  admin_->Stop();
  EXPECT_LT(SecondsSince(start), 0.5);
  admin_.reset();  // closes the listener too, with anything not yet accepted
  for (const int fd : open) {
    EXPECT_TRUE(ClosedWithin(fd, 500));
    ::close(fd);
  }
}

TEST(Admin, AnAddressInUseIsOneClearError) {
  absl::StatusOr<std::unique_ptr<AdminServer>> first = AdminServer::Listen(Loopback(0));
  ASSERT_TRUE(first.ok()) << first.status();
  const uint16_t port = PortOf((*first)->address());
  const absl::StatusOr<std::unique_ptr<AdminServer>> second = AdminServer::Listen(Loopback(port));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().message(), "--admin-listen: cannot listen on 127.0.0.1:" +
                                           std::to_string(port) + ": Address already in use");
}

// --takeover: the new process shares the address; when the old one drains it leaves the address
// to the new one, whose answers every new connection then gets.
TEST_F(AdminTest, ATakeoverSharesTheAddressAndTheOldListenerLeavesItOnDrain) {
  EXPECT_FALSE(admin_->LeaveToTheNewProcess());  // alone on the address: it keeps answering
  ListenAddress a = Loopback(port_);
  absl::StatusOr<std::unique_ptr<AdminServer>> next = AdminServer::Listen(a, /*share=*/true);
  ASSERT_TRUE(next.ok()) << next.status();
  AdminHandlers h;
  h.readyz = [] { return AdminResponse{200, "text/plain; charset=utf-8", "new\n"}; };
  (*next)->Start(h);
  EXPECT_TRUE(admin_->LeaveToTheNewProcess());
  for (int i = 0; i < 20; ++i) {
    const std::string r = Exchange(port_, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_TRUE(r.ends_with("\r\n\r\nnew\n")) << r;
  }
  EXPECT_FALSE(admin_->LeaveToTheNewProcess());  // once
}

}  // namespace
}  // namespace ringd
