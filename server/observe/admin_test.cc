#include "server/observe/admin.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

std::string Exchange(uint16_t port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return "connect failed";
  }
  ::send(fd, request.data(), request.size(), 0);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

class AdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<AdminServer>> admin = AdminServer::Listen(Loopback(0));
    ASSERT_TRUE(admin.ok()) << admin.status();
    admin_ = *std::move(admin);
    AdminHandlers h;
    h.metrics = [] { return std::string("ringd_up 1\n"); };
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

TEST_F(AdminTest, AClientThatSaysNothingIsDroppedAfterTheTimeout) {
  const int idle = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port_);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(idle, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  // Served one at a time: the next scrape waits for the idle client's timeout, then succeeds.
  const auto start = std::chrono::steady_clock::now();
  const std::string r = Exchange(port_, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_LT(std::chrono::steady_clock::now() - start,
            std::chrono::milliseconds(AdminServer::kIoTimeoutMs + 2000));
  ::close(idle);
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

}  // namespace
}  // namespace ringd
