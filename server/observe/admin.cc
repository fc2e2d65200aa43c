#include "server/observe/admin.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "io/assert.h"
#include "server/http/request_parser.h"
#include "server/http/response_plan.h"
#include "server/ops/listeners.h"

namespace ringd {
namespace {

std::string BoundAddress(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return AddressText(a);
}

using Clock = std::chrono::steady_clock;

// One admin connection: the request head as it arrives, then the answer as it leaves.
struct AdminConnection {
  int fd = -1;
  Clock::time_point deadline;  // its accept + kIoTimeoutMs: for the whole exchange
  std::string head;            // kMaxRequestHead bytes, of which head_len are received
  size_t head_len = 0;
  std::string answer;  // empty while the head is read
  size_t answer_sent = 0;
};

std::string AnswerText(const AdminResponse& r, bool head_only) {
  std::string text = "HTTP/1.1 " + std::to_string(r.status) + " " +
                     std::string(http::ReasonPhrase(r.status)) +
                     "\r\nContent-Type: " + r.content_type +
                     "\r\nContent-Length: " + std::to_string(r.body.size()) +
                     "\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n";
  if (!head_only) text += r.body;
  return text;
}

// Sends what is left of the answer. false: the connection is done (all sent, or the peer is
// gone); true: the socket is full, wait for POLLOUT.
bool SendAnswer(AdminConnection& c) {
  while (c.answer_sent < c.answer.size()) {
    const ssize_t w = ::send(c.fd, c.answer.data() + c.answer_sent, c.answer.size() - c.answer_sent,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (w <= 0) return false;
    c.answer_sent += static_cast<size_t>(w);
  }
  ::shutdown(c.fd, SHUT_WR);
  return false;
}

// Reads what has arrived and, once the head is complete (or cannot be), answers it on this
// thread. false: close the connection; true: wait for more bytes or for room to send.
bool ReadHead(const AdminServer& admin, AdminConnection& c) {
  const ssize_t n =
      ::recv(c.fd, c.head.data() + c.head_len, c.head.size() - c.head_len, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
  if (n <= 0) return false;  // closed or reset before a whole head: nothing to answer
  const size_t prev = c.head_len;
  c.head_len += static_cast<size_t>(n);
  http::Header headers[64];
  http::Request req;
  http::ParserLimits limits;
  limits.max_head_bytes = c.head.size();
  limits.max_request_line = c.head.size();
  AdminResponse r;
  bool head_only = false;
  const http::ParseResult pr = http::ParseRequest(std::string_view(c.head.data(), c.head_len), prev,
                                                  limits, headers, 64, &req);
  if (pr.status == http::ParseStatus::kNeedMore) {
    if (c.head_len < c.head.size()) return true;
    r.status = 431;
    r.body = "request head too large\n";
  } else if (pr.status == http::ParseStatus::kError) {
    r.status = pr.error_status;
    r.body = std::string(pr.error_reason) + "\n";
  } else {
    head_only = req.method == http::Method::kHead;
    r = admin.Handle(req.method_text, req.target);
  }
  c.answer = AnswerText(r, head_only);
  return SendAnswer(c);
}

// Moves a connection on after poll said it is ready (or failed). false: close it.
bool Step(const AdminServer& admin, AdminConnection& c) {
  return c.answer.empty() ? ReadHead(admin, c) : SendAnswer(c);
}

}  // namespace

absl::StatusOr<std::unique_ptr<AdminServer>> AdminServer::Listen(const ListenAddress& a,
                                                                 bool share) {
  std::string error;
  // SO_REUSEPORT would otherwise let a second ringd silently share a running one's address.
  if (!share && !AddressFree(a, &error)) {
    return absl::FailedPreconditionError("--admin-listen: " + error);
  }
  const int fd = ::socket(a.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    return absl::FailedPreconditionError("--admin-listen: socket: " + std::string(strerror(errno)));
  }
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // TIME_WAIT leftovers
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);  // --takeover's next process
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
  if (listen_fd_ >= 0) ::close(listen_fd_);
  ::close(wake_fd_);
}

bool AdminServer::LeaveToTheNewProcess() {
  if (listener_closed_.load(std::memory_order_acquire) || ListenersOnAddressOf(listen_fd_) < 2)
    return false;
  if (!thread_.joinable()) {  // not started: nothing polls the listener
    ::close(listen_fd_);
    listen_fd_ = -1;
    listener_closed_.store(true, std::memory_order_release);
    return true;
  }
  close_listener_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
  // The admin thread closes it at its next wake-up (it polls it); a thread blocked for a second
  // on shard snapshots is waited for, no longer.
  for (int waited_ms = 0; waited_ms < 2000; ++waited_ms) {
    if (listener_closed_.load(std::memory_order_acquire)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
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
  // In accept order, so front() is the oldest and the deadlines are ascending.
  std::vector<AdminConnection> open;
  open.reserve(kMaxConnections);
  std::array<pollfd, kMaxConnections + 2> p;
  Clock::time_point accept_paused_until{};  // after running out of descriptors
  while (!stop_.load(std::memory_order_acquire)) {
    Clock::time_point now = Clock::now();
    size_t expired = 0;
    while (expired < open.size() && open[expired].deadline <= now) ::close(open[expired++].fd);
    open.erase(open.begin(), open.begin() + static_cast<ptrdiff_t>(expired));

    const bool accepting = now >= accept_paused_until;
    Clock::time_point wake_at = Clock::time_point::max();
    if (!open.empty()) wake_at = open.front().deadline;
    if (!accepting) wake_at = std::min(wake_at, accept_paused_until);
    int timeout_ms = -1;
    if (wake_at != Clock::time_point::max()) {
      // Rounded up, so that the wait ends at or after the deadline, not just before it.
      timeout_ms = std::max(
          0, static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(wake_at - now).count()));
    }
    p[0] = {wake_fd_, POLLIN, 0};
    p[1] = {accepting ? listen_fd_ : -1, POLLIN, 0};  // poll skips a negative fd (or closed: -1)
    for (size_t i = 0; i < open.size(); ++i) {
      p[i + 2] = {open[i].fd, static_cast<short>(open[i].answer.empty() ? POLLIN : POLLOUT), 0};
    }
    if (::poll(p.data(), open.size() + 2, timeout_ms) < 0) continue;  // EINTR
    if (p[0].revents != 0) {
      if (stop_.load(std::memory_order_acquire)) break;
      uint64_t count;
      [[maybe_unused]] ssize_t n = ::read(wake_fd_, &count, sizeof count);
      if (close_listener_.load(std::memory_order_acquire) && listen_fd_ >= 0) {
        ::close(listen_fd_);
        listen_fd_ = -1;
        p[1].revents = 0;
        listener_closed_.store(true, std::memory_order_release);
      }
    }

    size_t kept = 0;
    for (size_t i = 0; i < open.size(); ++i) {
      if (p[i + 2].revents != 0 && !Step(*this, open[i])) {
        ::close(open[i].fd);
        continue;
      }
      if (kept != i) open[kept] = std::move(open[i]);
      ++kept;
    }
    open.resize(kept);

    // One accept a round: the connections already open get their turn between accepts.
    if ((p[1].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      // Out of descriptors: do not spin on the same error.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
      continue;
    }
    if (open.size() == kMaxConnections) {  // full: the oldest makes room
      ::close(open.front().fd);
      open.erase(open.begin());
    }
    RINGD_ASSERT(open.size() < kMaxConnections);  // p holds every open connection
    now = Clock::now();
    AdminConnection& c = open.emplace_back();
    c.fd = fd;
    c.deadline = now + std::chrono::milliseconds(kIoTimeoutMs);
    c.head.resize(kMaxRequestHead);
    // A health check usually sends its request with the handshake: answer it without a wait.
    if (!Step(*this, c)) {
      ::close(fd);
      open.pop_back();
    }
  }
  for (const AdminConnection& c : open) ::close(c.fd);
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

}  // namespace ringd
