// ringd-load: the perf harness's HTTP/1.1 load generator. epoll, non-blocking, one thread per
// --threads, no allocation per request, and as few system calls per request as it can manage
// (no epoll_ctl or extra recv per request), so that one client core can saturate one server core.
//
//   ringd-load --port 8080 --connections 100 --duration-s 5 --path /index.html
//   ringd-load --port 8080 --connections 10 --bulk --path /4mb.bin  # discards bodies
//   ringd-load --port 8080 --connections 50 --rate 20000 --path /a   # open loop
//   ringd-load --port 8080 --idle 10000 --connections 100 ...        # hold idle connections
//   ringd-load --port 8443 --tls --close --tls-resume --path /a       # HTTPS, resumed handshakes
//
// Prints one JSON object: requests, rps, bytes, latency percentiles (microseconds; also for the
// responses under 1 MiB alone), errors by kind and status counts. Latency in open-loop mode is
// measured from when each request was *due*, so a stalled server cannot hide its queueing
// (coordinated omission). With --tls every connection is a TLS session (perf/loadgen_tls.h) and
// the JSON also counts handshakes, full and resumed; the plaintext paths do not change.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/objects.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "perf/histogram.h"
#include "perf/loadgen_options.h"
#include "perf/loadgen_report.h"
#include "perf/loadgen_tls.h"
#include "perf/zipf.h"
#include "server/http/decimal.h"

namespace ringd::perf {
namespace {

uint64_t NowUs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
}

struct Conn {
  int fd = -1;
  enum State { kClosed, kHandshaking, kActive, kWaitingEof } state = kClosed;
  bool fresh = false;     // nothing received yet on this socket
  uint32_t watching = 0;  // the epoll events registered now: changed only when they must change
  std::string_view out;   // request bytes still to send
  size_t out_off = 0;
  char head[16384];
  size_t head_len = 0;
  bool in_body = false;
  uint64_t body_left = 0;
  uint64_t body_length = 0;  // of the response being read
  int status = 0;
  bool server_closing = false;  // the response said "Connection: close"
  int outstanding = 0;
  uint64_t sent_at[64];  // due (open loop) or sent (closed loop) time of each outstanding request
  int sent_head = 0;
  uint64_t next_due = 0;
  uint64_t deadline = 0;
  size_t path_index = 0;
  SSL* ssl = nullptr;              // --tls: the session on fd
  SSL_SESSION* session = nullptr;  // --tls-resume: the newest ticket it was sent (offered once)
  uint64_t connected_at = 0;       // --tls: when connect() was called (the handshake's start)
};

class Worker {
 public:
  Worker(const Options& o, int connections, int first_index, uint64_t start_us, uint64_t end_us,
         const ZipfSampler* zipf = nullptr, const TlsClient* tls = nullptr)
      : o_(o),
        zipf_(zipf),
        tls_(tls),
        rng_(o.seed * 0x9e3779b97f4a7c15ULL + static_cast<uint64_t>(first_index)),
        conns_(static_cast<size_t>(connections)),
        first_index_(first_index),
        start_us_(start_us),
        end_us_(end_us) {
    // Requests are prebuilt: one string per path, repeated `pipeline` times.
    for (const std::string& p : o.paths) {
      std::string one = "GET " + p + " HTTP/1.1\r\n" + HostLine(o);
      for (const std::string& h : o.headers) one += h + "\r\n";
      if (o.close) one += "Connection: close\r\n";
      one += "\r\n";
      std::string batch;
      for (int i = 0; i < o.pipeline; ++i) batch += one;
      requests_.push_back(batch);
    }
    addr_.sin_family = AF_INET;
    addr_.sin_port = htons(static_cast<uint16_t>(o.port));
    inet_pton(AF_INET, o.host.c_str(), &addr_.sin_addr);
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    scratch_.resize(1 << 20);
    if (!o.size_classes.empty()) result.by_size.resize(o.size_classes.size() + 1);
    result.tls = tls != nullptr;
  }
  ~Worker() {
    for (Conn& c : conns_) {
      if (c.ssl != nullptr) TlsEnd(c.ssl);
      if (c.session != nullptr) SSL_SESSION_free(c.session);
      if (c.fd >= 0) ::close(c.fd);
    }
    ::close(epfd_);
  }

  void Run() {
    const double per_conn_interval_us =
        o_.rate > 0 ? 1e6 * static_cast<double>(o_.connections) / o_.rate : 0;
    for (size_t i = 0; i < conns_.size(); ++i) {
      Conn& c = conns_[i];
      c.path_index = (first_index_ + i) % requests_.size();
      // Spread the first due times over one interval, so an open-loop run starts smoothly.
      c.next_due =
          start_us_ + static_cast<uint64_t>(per_conn_interval_us *
                                            static_cast<double>(first_index_ + i) / o_.connections);
      Connect(c);
    }
    epoll_event events[256];
    uint64_t next_scan = 0;
    while (true) {
      const uint64_t now = NowUs();
      if (now >= end_us_ || (o_.max_requests > 0 && result.requests >= o_.max_requests)) break;
      // Open loop: start the requests that are due and find the next due time. Closed loop:
      // only look for timed-out requests, every 100 ms.
      uint64_t next_wake = end_us_;
      const bool scan = o_.rate > 0 || now >= next_scan;
      if (scan && o_.rate == 0) next_scan = now + 100000;
      for (Conn& c : conns_) {
        if (!scan) break;
        if (c.state == Conn::kClosed && c.fd < 0) Connect(c);
        if (c.state == Conn::kActive && c.outstanding == 0 && c.out.empty()) {
          if (c.next_due <= now) {
            StartRequest(c, now);
          } else {
            next_wake = std::min(next_wake, c.next_due);
          }
        }
        if ((c.outstanding > 0 || c.state == Conn::kHandshaking) && c.deadline <= now) {
          ++result.errors.timeout;
          Reconnect(c);
        }
      }
      const int timeout_ms =
          static_cast<int>(std::min<uint64_t>((next_wake - std::min(next_wake, now)) / 1000, 100));
      const int n = epoll_wait(epfd_, events, 256, o_.rate > 0 ? timeout_ms : 100);
      for (int i = 0; i < n; ++i) {
        Conn& c = conns_[events[i].data.u32];
        if (c.fd < 0) continue;
        if (c.state == Conn::kHandshaking) {
          Handshake(c);
          continue;
        }
        if (events[i].events & EPOLLOUT) Flush(c);
        if (c.fd < 0) continue;
        if (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) Read(c);
      }
    }
  }

  // Opens `count` connections, completes one request on each, and keeps them open and unwatched.
  // All at once (non-blocking, through epoll), bounded by a 30 s deadline: a server that cannot
  // take them all simply holds fewer. Returns how many are held.
  int HoldIdle(int count) {
    struct Pending {
      int fd;
      size_t sent = 0;
      std::string got;
      size_t need = SIZE_MAX;
      SSL* ssl = nullptr;  // --tls
      bool handshaken = false;
    };
    const std::string req = "GET " + o_.paths[0] + " HTTP/1.1\r\n" + HostLine(o_) + "\r\n";
    std::vector<Pending> pending;
    pending.reserve(static_cast<size_t>(count));
    const int ep = epoll_create1(EPOLL_CLOEXEC);
    // At most --idle-setup connections are being set up at once (100), as a client population
    // arriving over time would; 0: every one at once, a burst, whose simultaneous first requests
    // also measure the server's high-water mark for it.
    const int kSetupConcurrency = o_.idle_setup > 0 ? o_.idle_setup : count;
    int opened = 0, in_setup = 0;
    auto open_more = [&] {
      while (opened < count && in_setup < kSetupConcurrency) {
        ++opened;
        const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
          ++result.errors.connect;
          continue;
        }
        if (::connect(fd, reinterpret_cast<sockaddr*>(&addr_), sizeof addr_) != 0 &&
            errno != EINPROGRESS) {
          ++result.errors.connect;
          ::close(fd);
          continue;
        }
        pending.push_back(Pending{fd, 0, std::string(), SIZE_MAX});
        if (tls_ != nullptr && (pending.back().ssl = tls_->Start(fd, nullptr)) == nullptr) {
          ++result.errors.tls;
          ::close(fd);
          pending.pop_back();
          continue;
        }
        ++in_setup;
        epoll_event ev{};
        ev.events = EPOLLOUT | EPOLLIN;
        ev.data.u32 = static_cast<uint32_t>(pending.size() - 1);
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
      }
    };
    // A response's bytes arrived; true when the whole response is in.
    auto take = [](Pending& p, const char* data, size_t n) {
      p.got.append(data, n);
      const size_t end = p.got.find("\r\n\r\n");
      if (end != std::string::npos && p.need == SIZE_MAX) {
        uint64_t length = 0;
        bool closing = false;
        ScanHeaders(std::string_view(p.got).substr(0, end + 2), &length, &closing);
        p.need = end + 4 + length;
      }
      return p.got.size() >= p.need;
    };
    size_t done = 0;
    // One whole response: now it is an idle connection, unwatched. A TLS session's state is let
    // go here (no close_notify): the server holds an idle TLS connection; the client, a socket.
    auto hold = [&](Pending& p) {
      epoll_ctl(ep, EPOLL_CTL_DEL, p.fd, nullptr);
      if (p.ssl != nullptr) TlsEnd(p.ssl);
      p.ssl = nullptr;
      idle_fds_.push_back(p.fd);
      p.fd = -1;
      p.got.clear();
      p.got.shrink_to_fit();
      ++done;
      --in_setup;
    };
    auto drop = [&](Pending& p) {
      if (p.ssl != nullptr) TlsEnd(p.ssl);
      p.ssl = nullptr;
      ::close(p.fd);
      p.fd = -1;
      ++done;
      --in_setup;
    };
    auto watch = [&](Pending& p, uint32_t index, uint32_t events) {
      epoll_event ev{};
      ev.events = events;
      ev.data.u32 = index;
      epoll_ctl(ep, EPOLL_CTL_MOD, p.fd, &ev);
    };
    // --tls: handshake, request, response, each step where the socket lets it go on.
    auto step_tls = [&](Pending& p, uint32_t index) {
      auto wait = [&](TlsIo r) {
        if (r == TlsIo::kWantRead || r == TlsIo::kWantWrite) {
          watch(p, index, r == TlsIo::kWantWrite ? EPOLLIN | EPOLLOUT : EPOLLIN);
          return true;
        }
        return false;
      };
      if (!p.handshaken) {
        const TlsIo r = TlsStatus(p.ssl, SSL_do_handshake(p.ssl));
        if (r != TlsIo::kDone) {
          if (!wait(r)) {
            ++result.errors.tls;
            drop(p);
          }
          return;
        }
        p.handshaken = true;
      }
      if (p.sent < req.size()) {
        const TlsIo r =
            TlsStatus(p.ssl, SSL_write(p.ssl, req.data(), static_cast<int>(req.size())));
        if (r != TlsIo::kDone) {
          if (!wait(r)) drop(p);
          return;
        }
        p.sent = req.size();
        watch(p, index, EPOLLIN);
      }
      while (true) {
        const int n = SSL_read(p.ssl, scratch_.data(), static_cast<int>(scratch_.size()));
        if (n > 0) {
          if (take(p, scratch_.data(), static_cast<size_t>(n))) return hold(p);
          continue;
        }
        if (!wait(TlsStatus(p.ssl, n))) drop(p);
        return;
      }
    };
    open_more();
    const uint64_t deadline = NowUs() + 30000000;
    epoll_event events[256];
    while ((done < pending.size() || opened < count) && NowUs() < deadline) {
      const int n = epoll_wait(ep, events, 256, 100);
      for (int i = 0; i < n; ++i) {
        Pending& p = pending[events[i].data.u32];
        if (p.fd < 0) continue;
        if (p.ssl != nullptr) {
          step_tls(p, events[i].data.u32);
          continue;
        }
        if (p.sent < req.size() && (events[i].events & EPOLLOUT)) {
          const ssize_t w = ::send(p.fd, req.data() + p.sent, req.size() - p.sent, MSG_NOSIGNAL);
          if (w > 0) p.sent += static_cast<size_t>(w);
          if (p.sent == req.size()) {
            epoll_event ev{};
            ev.events = EPOLLIN;
            ev.data.u32 = events[i].data.u32;
            epoll_ctl(ep, EPOLL_CTL_MOD, p.fd, &ev);
          }
        }
        if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
          const ssize_t r = ::recv(p.fd, scratch_.data(), scratch_.size(), 0);
          if (r <= 0 && !(r < 0 && errno == EAGAIN)) {
            drop(p);
            continue;
          }
          if (take(p, scratch_.data(), r > 0 ? static_cast<size_t>(r) : 0)) hold(p);
        }
      }
      open_more();
    }
    for (Pending& p : pending) {  // never answered in time
      if (p.fd >= 0) {
        ++result.errors.timeout;
        if (p.ssl != nullptr) TlsEnd(p.ssl);
        ::close(p.fd);
      }
    }
    ::close(ep);
    return static_cast<int>(idle_fds_.size());
  }

  Result result;

 private:
  void Watch(Conn& c, uint32_t events) {
    if (c.watching == events) return;
    c.watching = events;
    epoll_event ev{};
    ev.events = events;
    ev.data.u32 = static_cast<uint32_t>(&c - conns_.data());
    epoll_ctl(epfd_, EPOLL_CTL_MOD, c.fd, &ev);
  }

  void Connect(Conn& c) {
    c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c.fd < 0) {
      ++result.errors.connect;
      c.state = Conn::kClosed;
      return;
    }
    const int one = 1;
    setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c.head_len = 0;
    c.in_body = false;
    c.outstanding = 0;
    c.out = {};
    c.out_off = 0;
    const int r = ::connect(c.fd, reinterpret_cast<sockaddr*>(&addr_), sizeof addr_);
    if (r != 0 && errno != EINPROGRESS) {
      ++result.errors.connect;
      ::close(c.fd);
      c.fd = -1;
      c.state = Conn::kClosed;
      return;
    }
    // The first request goes out at once: on loopback the handshake has finished by the time
    // connect() returns, and elsewhere send() says EAGAIN and Flush waits for EPOLLOUT. No
    // round trip through epoll_wait per connection, as wrk does it.
    c.state = Conn::kActive;
    c.fresh = true;
    c.watching = EPOLLIN;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(&c - conns_.data());
    epoll_ctl(epfd_, EPOLL_CTL_ADD, c.fd, &ev);
    if (tls_ != nullptr) return StartTls(c);
    if (o_.rate == 0) StartRequest(c, NowUs());
  }

  // Ends the connection's TLS session (its slot keeps the ticket it was sent, for --tls-resume)
  // and its socket.
  void CloseConn(Conn& c) {
    if (c.ssl != nullptr) TlsEnd(c.ssl);
    c.ssl = nullptr;
    if (c.fd >= 0) ::close(c.fd);
    c.fd = -1;
  }

  void Reconnect(Conn& c) {
    CloseConn(c);
    if (NowUs() < end_us_) Connect(c);
  }

  // --tls: the ClientHello goes out at once (or when the socket is writable).
  void StartTls(Conn& c) {
    c.ssl = tls_->Start(c.fd, o_.tls_resume ? &c.session : nullptr);
    if (c.ssl == nullptr) {
      ++result.errors.tls;
      CloseConn(c);
      c.state = Conn::kClosed;
      return;
    }
    c.state = Conn::kHandshaking;
    c.connected_at = NowUs();
    c.deadline = c.connected_at + o_.timeout_us;
    Handshake(c);
  }

  void Handshake(Conn& c) {
    switch (TlsStatus(c.ssl, SSL_do_handshake(c.ssl))) {
      case TlsIo::kDone:
        break;
      case TlsIo::kWantRead:
        return Watch(c, EPOLLIN);
      case TlsIo::kWantWrite:
        return Watch(c, EPOLLIN | EPOLLOUT);
      default:
        // Refused or broken: closed here, opened again by the next scan (never by recursion).
        ++result.errors.tls;
        CloseConn(c);
        c.state = Conn::kClosed;
        return;
    }
    const uint64_t now = NowUs();
    if (now <= end_us_) {
      ++result.tls_counts.handshakes;
      if (SSL_session_reused(c.ssl)) ++result.tls_counts.resumed;
      if (result.tls_counts.version.empty()) {
        result.tls_counts.version = SSL_get_version(c.ssl);
        result.tls_counts.cipher = SSL_get_cipher_name(c.ssl);
        const char* group = OBJ_nid2sn(SSL_get_negotiated_group(c.ssl) & ~TLSEXT_nid_unknown);
        result.tls_counts.group = group != nullptr ? group : "";
      }
    }
    c.state = Conn::kActive;
    Watch(c, EPOLLIN);
    // The first request's latency counts from connect(), as the plaintext path's does.
    if (o_.rate == 0) StartRequest(c, c.connected_at);
  }

  void StartRequest(Conn& c, uint64_t now) {
    const std::string& req = requests_[zipf_ ? zipf_->Sample(rng_.Next()) : c.path_index];
    c.path_index = (c.path_index + 1) % requests_.size();
    c.out = req;
    c.out_off = 0;
    const uint64_t stamp = o_.rate > 0 ? std::min(c.next_due, now) : now;
    for (int i = 0; i < o_.pipeline; ++i) c.sent_at[(c.sent_head + c.outstanding + i) % 64] = stamp;
    c.outstanding += o_.pipeline;
    c.deadline = now + o_.timeout_us;
    if (o_.rate > 0) {
      c.next_due += static_cast<uint64_t>(1e6 * static_cast<double>(o_.connections) / o_.rate);
    }
    Flush(c);
  }

  void Flush(Conn& c) {
    if (c.ssl != nullptr) return FlushTls(c);
    while (c.out_off < c.out.size()) {
      const ssize_t n =
          ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EAGAIN) {  // a full socket buffer, or still connecting
          Watch(c, EPOLLIN | EPOLLOUT);
          return;
        }
        if (c.fresh) {  // refused, say: retried by the next scan, not by recursion from here
          CountError(errno);
          CloseConn(c);
          c.state = Conn::kClosed;
          return;
        }
        CountError(errno);
        return Reconnect(c);
      }
      c.out_off += static_cast<size_t>(n);
    }
    c.out = {};
    c.out_off = 0;
    Watch(c, EPOLLIN);
  }

  // SSL_write writes a whole request or asks to be called again with the same bytes.
  void FlushTls(Conn& c) {
    if (c.out_off < c.out.size()) {
      const int n = SSL_write(c.ssl, c.out.data(), static_cast<int>(c.out.size()));
      switch (TlsStatus(c.ssl, n)) {
        case TlsIo::kDone:
          break;
        case TlsIo::kWantRead:
        case TlsIo::kWantWrite:
          return Watch(c, EPOLLIN | EPOLLOUT);
        default:
          ++result.errors.reset;
          return Reconnect(c);
      }
    }
    c.out = {};
    c.out_off = 0;
    Watch(c, EPOLLIN);
  }

  void Read(Conn& c) {
    if (c.state == Conn::kWaitingEof) {  // Connection: close: wait for the server's FIN
      AwaitEof(c);
      return;
    }
    if (c.ssl != nullptr) return ReadTls(c);
    // epoll is level-triggered: a read that leaves bytes behind gets another event, so a read
    // that came back short ends the turn without a second recv() to learn it would block.
    while (true) {
      ssize_t n;
      size_t asked;
      if (c.in_body && o_.bulk) {
        // Discard body bytes in the kernel: no copy, so large files are not capped by the client.
        asked = std::min<uint64_t>(c.body_left, 1 << 30);
        n = ::recv(c.fd, nullptr, asked, MSG_TRUNC | MSG_DONTWAIT);
        if (n > 0) {
          c.fresh = false;
          result.bytes += static_cast<uint64_t>(n);
          c.body_left -= static_cast<uint64_t>(n);
          if (c.body_left == 0 && !Complete(c)) return AwaitEof(c);
          if (static_cast<size_t>(n) < asked && c.in_body) return;
          continue;
        }
      } else {
        asked = scratch_.size();
        n = ::recv(c.fd, scratch_.data(), asked, MSG_DONTWAIT);
        if (n > 0) {
          c.fresh = false;
          if (!Consume(c, scratch_.data(), static_cast<size_t>(n))) return AwaitEof(c);
          if (static_cast<size_t>(n) < asked) return;
          continue;
        }
      }
      if (n < 0 && errno == EAGAIN) return;
      if (n == 0) {
        ++result.errors.eof;
      } else {
        CountError(errno);
      }
      return Reconnect(c);
    }
  }

  // SSL_read returns one record's plaintext at most; OpenSSL may hold more records than the one
  // returned (read-ahead), which no epoll event would announce: read until it asks for the socket.
  void ReadTls(Conn& c) {
    while (true) {
      const int n = SSL_read(c.ssl, scratch_.data(), static_cast<int>(scratch_.size()));
      if (n > 0) {
        c.fresh = false;
        if (!Consume(c, scratch_.data(), static_cast<size_t>(n))) return AwaitEof(c);
        if (c.state != Conn::kActive) return;  // replaced by a new connection meanwhile
        continue;
      }
      switch (TlsStatus(c.ssl, n)) {
        case TlsIo::kWantRead:
          return;
        case TlsIo::kWantWrite:
          return Watch(c, EPOLLIN | EPOLLOUT);
        case TlsIo::kClosed:
          ++result.errors.eof;
          return Reconnect(c);
        default:
          ++result.errors.reset;
          return Reconnect(c);
      }
    }
  }

  // Connection: close: the response is complete and the server must end the connection. Its FIN
  // has usually arrived with the response, so look now rather than after another epoll_wait.
  void AwaitEof(Conn& c) {
    if (c.fd < 0 || c.state != Conn::kWaitingEof) return;
    if (c.ssl != nullptr) {  // close_notify, or a plain FIN (SSL_OP_IGNORE_UNEXPECTED_EOF)
      while (true) {
        const int n = SSL_read(c.ssl, scratch_.data(), static_cast<int>(scratch_.size()));
        if (n > 0) continue;
        const TlsIo r = TlsStatus(c.ssl, n);
        if (r == TlsIo::kWantRead || r == TlsIo::kWantWrite) return;
        return Reconnect(c);
      }
    }
    const ssize_t n = ::recv(c.fd, scratch_.data(), scratch_.size(), MSG_DONTWAIT);
    if (n > 0 || (n < 0 && errno == EAGAIN)) return;
    Reconnect(c);
  }

  void CountError(int err) {
    if (err == ECONNREFUSED) {
      ++result.errors.connect;
    } else {
      ++result.errors.reset;
    }
  }

  // Feeds received bytes through the response parser; false if the connection was replaced.
  bool Consume(Conn& c, const char* p, size_t n) {
    result.bytes += n;
    while (n > 0) {
      if (c.in_body) {
        const size_t take = static_cast<size_t>(std::min<uint64_t>(c.body_left, n));
        c.body_left -= take;
        p += take;
        n -= take;
        if (c.body_left == 0 && !Complete(c)) return false;
        continue;
      }
      const size_t room = sizeof c.head - c.head_len;
      const size_t take = std::min(room, n);
      std::memcpy(c.head + c.head_len, p, take);
      const size_t before = c.head_len;
      c.head_len += take;
      const std::string_view head(c.head, c.head_len);
      const size_t end = head.find("\r\n\r\n", before >= 3 ? before - 3 : 0);
      if (end == std::string_view::npos) {
        if (c.head_len == sizeof c.head) {
          ++result.errors.parse;
          Reconnect(c);
          return false;
        }
        return true;
      }
      // The bytes after the head belong to the body (or to the next response).
      const size_t used = end + 4 - before;
      p += used;
      n -= used;
      if (head.substr(0, 9) != "HTTP/1.1 " || head.size() < 12) {
        ++result.errors.parse;
        Reconnect(c);
        return false;
      }
      uint64_t status;
      uint64_t length = 0;
      c.server_closing = false;
      if (!http::ParseDecimal(head.substr(9, 3), &status) ||
          !ScanHeaders(head.substr(0, end + 2), &length, &c.server_closing)) {
        ++result.errors.parse;
        Reconnect(c);
        return false;
      }
      c.status = static_cast<int>(status);
      c.head_len = 0;
      c.in_body = true;
      c.body_left = c.status == 304 ? 0 : length;
      c.body_length = c.body_left;
      if (c.body_left == 0 && !Complete(c)) return false;
      if (o_.bulk && c.in_body && n == 0) return true;  // let Read discard the body in the kernel
    }
    return true;
  }

  // One pass over the header lines for the two fields the client needs; the first byte of each
  // line rules most lines out before any case-insensitive comparison. False when Content-Length
  // is not a number.
  static bool ScanHeaders(std::string_view head, uint64_t* length, bool* closing) {
    constexpr std::string_view kLength = "content-length:", kConnection = "connection:";
    size_t pos = head.find('\n');
    while (pos != std::string_view::npos && pos + 1 < head.size()) {
      const std::string_view line = head.substr(pos + 1);
      const char first = static_cast<char>(line[0] | 0x20);
      if (first == 'c' && line.size() > kLength.size() &&
          strncasecmp(line.data(), kLength.data(), kLength.size()) == 0) {
        std::string_view v = line.substr(kLength.size());
        v = v.substr(0, v.find('\r'));
        while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
        while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
        if (!http::ParseDecimal(v, length)) return false;
      } else if (first == 'c' && line.size() > kConnection.size() &&
                 strncasecmp(line.data(), kConnection.data(), kConnection.size()) == 0) {
        std::string_view v = line.substr(kConnection.size());
        v = v.substr(0, v.find('\r'));
        while (!v.empty() && v[0] == ' ') v.remove_prefix(1);
        *closing = v.size() >= 5 && strncasecmp(v.data(), "close", 5) == 0;
      }
      pos = head.find('\n', pos + 1);
    }
    return true;
  }

  // A response finished; false if the connection was closed (close mode).
  bool Complete(Conn& c) {
    const uint64_t now = NowUs();
    c.in_body = false;
    ++result.status[c.status];
    if (now <= end_us_) {
      ++result.requests;
      result.latency.Record(now - c.sent_at[c.sent_head]);
      (c.body_length < kSmallBody ? result.latency_small : result.latency_large)
          .Record(now - c.sent_at[c.sent_head]);
      if (!result.by_size.empty()) {
        const auto& bounds = o_.size_classes;
        const size_t k = static_cast<size_t>(
            std::upper_bound(bounds.begin(), bounds.end(), c.body_length) - bounds.begin());
        result.by_size[k].Record(now - c.sent_at[c.sent_head]);
      }
    }
    c.sent_head = (c.sent_head + 1) % 64;
    --c.outstanding;
    if (c.outstanding > 0 && !c.server_closing) return true;
    if (o_.close || c.server_closing) {  // the server ends this connection: open another after
      c.outstanding = 0;
      c.state = Conn::kWaitingEof;
      return false;
    }
    if (o_.rate == 0 && now < end_us_) StartRequest(c, now);
    return true;
  }

  const Options& o_;
  const ZipfSampler* zipf_;  // null: paths in turn
  const TlsClient* tls_;     // null: plaintext
  SplitMix64 rng_;
  std::vector<Conn> conns_;
  int first_index_;
  uint64_t start_us_, end_us_;
  std::vector<std::string> requests_;
  sockaddr_in addr_{};
  int epfd_ = -1;
  std::vector<char> scratch_;
  std::vector<int> idle_fds_;
};

int Main(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, &o)) {
    Usage();
    return 2;
  }
  rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  setrlimit(RLIMIT_NOFILE, &rl);

  std::unique_ptr<TlsClient> tls;
  if (o.tls) {
    tls = std::make_unique<TlsClient>();
    std::string why;
    if (!tls->Init(o, &why)) {
      std::fprintf(stderr, "ringd-load: %s\n", why.c_str());
      return 2;
    }
  }
  Result total;
  total.tls = o.tls;
  int idle_held = 0;
  std::unique_ptr<Worker> idle_worker;
  if (o.idle > 0) {
    idle_worker = std::make_unique<Worker>(o, 0, 0, 0, 0, nullptr, tls.get());
    idle_held = idle_worker->HoldIdle(o.idle);
    total.errors.connect += idle_worker->result.errors.connect;
    total.errors.timeout += idle_worker->result.errors.timeout;
    total.errors.tls += idle_worker->result.errors.tls;
    if (o.idle_settle_s > 0) {  // held idle this long first: an idle connection has waited
      timespec ts{static_cast<time_t>(o.idle_settle_s),
                  static_cast<long>((o.idle_settle_s - static_cast<long>(o.idle_settle_s)) * 1e9)};
      nanosleep(&ts, nullptr);
    }
    std::printf("IDLE_READY %d\n", idle_held);  // the harness samples server memory now
    std::fflush(stdout);
    if (o.connections == 0) {
      timespec ts{static_cast<time_t>(o.idle_hold_s),
                  static_cast<long>((o.idle_hold_s - static_cast<long>(o.idle_hold_s)) * 1e9)};
      nanosleep(&ts, nullptr);
    }
  }

  const uint64_t start = NowUs();
  const uint64_t end = start + static_cast<uint64_t>(o.duration_s * 1e6);
  std::vector<std::unique_ptr<Worker>> workers;
  std::unique_ptr<ZipfSampler> zipf;
  if (o.zipf > 0 || o.uniform)  // s = 0 is the uniform distribution
    zipf = std::make_unique<ZipfSampler>(o.paths.size(), o.uniform ? 0.0 : o.zipf);
  if (!o.size_classes.empty()) total.by_size.resize(o.size_classes.size() + 1);
  if (o.connections > 0) {
    int first = 0;
    for (int t = 0; t < o.threads; ++t) {
      const int n = o.connections / o.threads + (t < o.connections % o.threads ? 1 : 0);
      workers.push_back(std::make_unique<Worker>(o, n, first, start, end, zipf.get(), tls.get()));
      first += n;
    }
    std::vector<std::thread> threads;
    for (auto& w : workers) threads.emplace_back([&w] { w->Run(); });
    for (auto& t : threads) t.join();
  }
  const double elapsed = static_cast<double>(NowUs() - start) / 1e6;
  for (auto& w : workers) total.Merge(w->result);
  const double seconds = o.connections > 0 ? std::min(elapsed, o.duration_s) : elapsed;
  PrintReport(total, seconds, idle_held, o.size_classes);
  return 0;
}

}  // namespace
}  // namespace ringd::perf

int main(int argc, char** argv) { return ringd::perf::Main(argc, argv); }
