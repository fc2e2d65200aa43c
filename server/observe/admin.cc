#include "server/observe/admin.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "server/http/request_parser.h"
#include "server/http/response_plan.h"

namespace ringd {
namespace {

std::string BoundAddress(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  char host[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(v4->sin_port));
  }
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
  inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
  return "[" + std::string(host) + "]:" + std::to_string(ntohs(v6->sin6_port));
}

bool SendAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<AdminServer>> AdminServer::Listen(const ListenAddress& a) {
  const int fd = ::socket(a.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::FailedPreconditionError("--admin-listen: socket: " + std::string(strerror(errno)));
  }
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // TIME_WAIT leftovers only
  if (a.addr.ss_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&a.addr), a.len) != 0 || ::listen(fd, 64) != 0) {
    const std::string why = "--admin-listen: cannot listen on " + a.text + ": " + strerror(errno);
    ::close(fd);
    return absl::FailedPreconditionError(why);
  }
  const int wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    const std::string why = "--admin-listen: eventfd: " + std::string(strerror(errno));
    ::close(fd);
    return absl::ResourceExhaustedError(why);
  }
  return std::unique_ptr<AdminServer>(new AdminServer(fd, wake, BoundAddress(fd)));
}

AdminServer::~AdminServer() {
  Stop();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void AdminServer::Start(AdminHandlers handlers) {
  handlers_ = std::move(handlers);
  thread_ = std::thread([this] { Run(); });
}

void AdminServer::Stop() {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
  thread_.join();
}

void AdminServer::Run() {
  while (!stop_.load(std::memory_order_acquire)) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) continue;  // EINTR
    if (p[1].revents != 0) break;
    if ((p[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors: do not spin on the same error.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        ::poll(p, 0, 100);
      continue;
    }
    Serve(fd);
    ::close(fd);
  }
}

AdminResponse AdminServer::Handle(std::string_view method, std::string_view target) const {
  AdminResponse r;
  if (method != "GET" && method != "HEAD") {
    r.status = 405;
    r.body = "only GET and HEAD\n";
    return r;
  }
  const size_t q = target.find('?');
  const std::string_view path = target.substr(0, q);
  if (path == "/metrics" && handlers_.metrics) {
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = handlers_.metrics();
  } else if (path == "/healthz" && handlers_.healthz) {
    r = handlers_.healthz();
  } else if (path == "/readyz" && handlers_.readyz) {
    r = handlers_.readyz();
  } else if (path == "/debug/shards" && handlers_.debug_shards) {
    r.content_type = "application/json";
    r.body = handlers_.debug_shards();
  } else {
    r.status = 404;
    r.body = "not found; try /metrics, /healthz, /readyz or /debug/shards\n";
  }
  return r;
}

void AdminServer::Serve(int fd) const {
  timeval tv{kIoTimeoutMs / 1000, (kIoTimeoutMs % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  char buf[kMaxRequestHead];
  size_t len = 0;
  http::Header headers[64];
  http::Request req;
  http::ParserLimits limits;
  limits.max_head_bytes = sizeof buf;
  limits.max_request_line = sizeof buf;
  AdminResponse r;
  bool head_only = false;
  for (;;) {
    const ssize_t n = ::recv(fd, buf + len, sizeof buf - len, 0);
    if (n <= 0) return;  // closed, reset, or the timeout passed: nothing to answer
    const size_t prev = len;
    len += static_cast<size_t>(n);
    const http::ParseResult pr =
        http::ParseRequest(std::string_view(buf, len), prev, limits, headers, 64, &req);
    if (pr.status == http::ParseStatus::kNeedMore) {
      if (len == sizeof buf) {
        r.status = 431;
        r.body = "request head too large\n";
        break;
      }
      continue;
    }
    if (pr.status == http::ParseStatus::kError) {
      r.status = pr.error_status;
      r.body = std::string(pr.error_reason) + "\n";
      break;
    }
    head_only = req.method == http::Method::kHead;
    r = Handle(req.method_text, req.target);
    break;
  }
  std::string head = "HTTP/1.1 " + std::to_string(r.status) + " " +
                     std::string(http::ReasonPhrase(r.status)) +
                     "\r\nContent-Type: " + r.content_type +
                     "\r\nContent-Length: " + std::to_string(r.body.size()) +
                     "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";
  if (!head_only) head += r.body;
  if (SendAll(fd, head.data(), head.size())) ::shutdown(fd, SHUT_WR);
}

}  // namespace ringd
