// A flood of TLS ClientHellos, the cheap attack on a TLS server: each connection sends one
// ClientHello, waits for the first bytes of the server's answer (its ServerHello, after it chose
// a key share and, in TLS 1.3, signed its certificate's possession), and closes. The ClientHello
// is made once at start by OpenSSL (TLS 1.3, X25519, the SNI given) and sent as is on every
// connection: the server pays for an ECDHE and a signature each time, the flood for a connect.
// One thread, epoll, --connections at once. Prints one JSON line in ringd-load's shape
// ("requests" are the answered ClientHellos), so the harness reads it as a background load.
//   hello_flood --port P --connections 100 --duration-s 5
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "perf/bench_util.h"
#include "perf/tool_flags.h"

ABSL_FLAG(int, port, 0, "the TLS server's port (on 127.0.0.1)");
ABSL_FLAG(int, connections, 100, "connections at once");
ABSL_FLAG(double, duration_s, 5, "seconds to run");
ABSL_FLAG(std::string, sni, "localhost", "the server name the ClientHello asks for");

namespace {

using ringd::perf::Now;

// OpenSSL's first flight as a client: the ClientHello record, over memory BIOs.
std::string MakeClientHello(const std::string& sni) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set1_groups_list(ctx, "X25519");
  SSL* ssl = SSL_new(ctx);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, in, out);
  SSL_set_tlsext_host_name(ssl, sni.c_str());
  SSL_connect(ssl);  // wants to read: the ClientHello is in `out`
  std::string hello;
  char buf[4096];
  int n;
  while ((n = BIO_read(out, buf, sizeof buf)) > 0) hello.append(buf, static_cast<size_t>(n));
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return hello;
}

struct Slot {
  int fd = -1;
  bool sent = false;
};

struct Counts {
  uint64_t answered = 0, connect_errors = 0, resets = 0;
};

// The connections, each sending the same ClientHello, waiting for an answer and starting over.
struct Flood {
  std::string hello;
  sockaddr_in addr{};
  int ep = epoll_create1(EPOLL_CLOEXEC);
  std::vector<Slot> slots;
  Counts counts;
  char buf[16384];  // the answers' first bytes, read and dropped

  Flood(std::string client_hello, int port, int connections)
      : hello(std::move(client_hello)), slots(static_cast<size_t>(connections)) {
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  }

  void OpenSlot(size_t i) {
    Slot& s = slots[i];
    s.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    s.sent = false;
    const int one = 1;
    setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 &&
        errno != EINPROGRESS) {
      ++counts.connect_errors;
    }
    epoll_event ev{};
    ev.events = EPOLLOUT | EPOLLIN;
    ev.data.u64 = i;
    epoll_ctl(ep, EPOLL_CTL_ADD, s.fd, &ev);
  }

  void CloseSlot(size_t i) {
    // An abortive close (RST), as a flood does: nothing lingers here or there.
    const linger abort{1, 0};
    setsockopt(slots[i].fd, SOL_SOCKET, SO_LINGER, &abort, sizeof abort);
    close(slots[i].fd);
    slots[i].fd = -1;
  }

  // Slot i is ready (`what`): sends the ClientHello once it can, or counts the answer or the
  // reset and starts the slot over.
  void OnEvent(size_t i, uint32_t what) {
    Slot& s = slots[i];
    if (!s.sent && (what & EPOLLOUT) != 0 && (what & (EPOLLERR | EPOLLHUP)) == 0) {
      if (send(s.fd, hello.data(), hello.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(hello.size())) {
        s.sent = true;
        epoll_event ev{};
        ev.events = EPOLLIN;
        ev.data.u64 = i;
        epoll_ctl(ep, EPOLL_CTL_MOD, s.fd, &ev);
        return;
      }
    }
    if (s.sent && (what & EPOLLIN) != 0) {
      const ssize_t got = recv(s.fd, buf, sizeof buf, 0);
      if (got > 0) {
        ++counts.answered;
      } else {
        ++counts.resets;
      }
    } else if ((what & (EPOLLERR | EPOLLHUP)) != 0) {
      ++counts.resets;
    } else {
      return;
    }
    CloseSlot(i);
    OpenSlot(i);
  }

  // Floods for `duration` seconds; returns the seconds it ran.
  double Run(double duration) {
    const double start = Now();
    for (size_t i = 0; i < slots.size(); ++i) OpenSlot(i);
    std::vector<epoll_event> events(slots.size());
    while (Now() - start < duration) {
      const int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), 100);
      for (int k = 0; k < n; ++k) {
        const epoll_event& e = events[static_cast<size_t>(k)];
        OnEvent(e.data.u64, e.events);
      }
    }
    return Now() - start;
  }
};

}  // namespace

int main(int argc, char** argv) {
  ringd::ParseToolFlags(argc, argv,
                        "usage: hello_flood --port P [--connections N] [--duration-s S]");
  const int port = absl::GetFlag(FLAGS_port);
  const int connections = absl::GetFlag(FLAGS_connections);
  const double duration = absl::GetFlag(FLAGS_duration_s);
  if (port <= 0 || connections <= 0 || duration <= 0) {
    std::fprintf(stderr, "hello_flood: --port, --connections and --duration-s must be positive\n");
    return 1;
  }
  std::string hello = MakeClientHello(absl::GetFlag(FLAGS_sni));
  if (hello.empty()) {
    std::fprintf(stderr, "hello_flood: OpenSSL made no ClientHello\n");
    return 1;
  }
  Flood flood(std::move(hello), port, connections);
  const double seconds = flood.Run(duration);
  const Counts& c = flood.counts;
  std::printf(
      "{\"requests\": %llu, \"seconds\": %.3f, \"rps\": %.1f, \"bytes\": 0, \"bytes_per_s\": 0, "
      "\"errors\": {\"connect\": %llu, \"reset\": %llu}, \"status\": {}}\n",
      static_cast<unsigned long long>(c.answered), seconds,
      static_cast<double>(c.answered) / seconds, static_cast<unsigned long long>(c.connect_errors),
      static_cast<unsigned long long>(c.resets));
  return 0;
}
