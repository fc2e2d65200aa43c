// The harness's ceiling: a minimal io_uring responder that parses nothing and answers every
// request (each blank line it sees) with one fixed in-memory 612-byte response. Whatever a real
// server does beyond this costs CPU; this is the practical upper bound on a machine.
//   ceiling --port P [--body-bytes 612]
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "perf/tool_flags.h"

ABSL_FLAG(int, port, 0, "the port to listen on");
ABSL_FLAG(int, body_bytes, 612, "bytes in each response's body (--body-bytes)");

namespace {

constexpr unsigned kBufCount = 1024, kBufSize = 4096;
constexpr int kMaxConns = 65536;

enum Kind : uint64_t { kAccept = 1, kRecv = 2, kSend = 3 };
uint64_t Tag(Kind k, int fd) { return (static_cast<uint64_t>(fd) << 8) | k; }

struct ConnState {
  uint32_t tail = 0;  // the last bytes seen, to find "\r\n\r\n" across reads
  int pending = 0;    // responses owed
  bool sending = false;
  bool close_after = false;  // the client sent "Connection: close"
};

struct Options {
  int port;
  int body_bytes;
};

// The flags, or nothing (the usage printed) when they are not usable.
std::optional<Options> ParseOptions(int argc, char** argv) {
  constexpr char kUsage[] = "usage: ceiling --port P [--body-bytes N]";
  if (ringd::ParseToolFlags(argc, argv, kUsage).size() > 1) {
    std::fprintf(stderr, "%s\n", kUsage);
    return std::nullopt;
  }
  const Options o{absl::GetFlag(FLAGS_port), absl::GetFlag(FLAGS_body_bytes)};
  if (o.port <= 0 || o.body_bytes < 0) {
    std::fprintf(stderr, "%s\n", kUsage);
    return std::nullopt;
  }
  return o;
}

// A listening socket on 127.0.0.1:port, or -1 (the error printed).
int Listen(int port) {
  const int lfd = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(lfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(lfd, 4096) != 0) {
    std::perror("ceiling: bind");
    return -1;
  }
  return lfd;
}

struct Responder {
  int lfd = -1;
  std::string one_response;
  std::string responses;  // up to 64 back to back, for pipelined requests
  io_uring ring{};
  io_uring_buf_ring* br = nullptr;
  std::vector<char> bufs;
  std::vector<ConnState> conns;

  Responder(int listen_fd, int body_bytes) : lfd(listen_fd), conns(kMaxConns) {
    one_response =
        "HTTP/1.1 200 OK\r\nServer: ceiling\r\nContent-Type: text/html\r\nContent-Length: " +
        std::to_string(body_bytes) + "\r\n\r\n" + std::string(static_cast<size_t>(body_bytes), 'x');
    for (int i = 0; i < 64; ++i) responses += one_response;
  }

  // The ring and its provided buffers (group 0); false (the error printed) if either fails.
  bool StartRing() {
    io_uring_params p{};
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    if (io_uring_queue_init_params(4096, &ring, &p) < 0) {
      std::fprintf(stderr, "ceiling: io_uring unavailable\n");
      return false;
    }
    br = static_cast<io_uring_buf_ring*>(mmap(nullptr, kBufCount * sizeof(io_uring_buf),
                                              PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                                              -1, 0));
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<uint64_t>(br);
    reg.ring_entries = kBufCount;
    reg.bgid = 0;
    if (br == MAP_FAILED || io_uring_register_buf_ring(&ring, &reg, 0) != 0) {
      std::fprintf(stderr, "ceiling: cannot register the buffer ring\n");
      return false;
    }
    io_uring_buf_ring_init(br);
    bufs.resize(static_cast<size_t>(kBufCount) * kBufSize);
    for (unsigned i = 0; i < kBufCount; ++i) {
      io_uring_buf_ring_add(br, bufs.data() + i * kBufSize, kBufSize,
                            static_cast<unsigned short>(i), io_uring_buf_ring_mask(kBufCount),
                            static_cast<int>(i));
    }
    io_uring_buf_ring_advance(br, kBufCount);
    return true;
  }

  void ArmAccept() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_multishot_accept(sqe, lfd, nullptr, nullptr, 0);
    io_uring_sqe_set_data64(sqe, Tag(kAccept, lfd));
  }

  void ArmRecv(int fd) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_recv_multishot(sqe, fd, nullptr, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = 0;
    io_uring_sqe_set_data64(sqe, Tag(kRecv, fd));
  }

  // Sends up to 64 of the responses owed, unless a send is in flight.
  void SendOwed(int fd) {
    ConnState& c = conns[static_cast<size_t>(fd)];
    if (c.sending || c.pending == 0) return;
    const int n = c.pending > 64 ? 64 : c.pending;
    c.pending -= n;
    c.sending = true;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_send(sqe, fd, responses.data(), one_response.size() * static_cast<size_t>(n),
                       MSG_NOSIGNAL);
    io_uring_sqe_set_data64(sqe, Tag(kSend, fd));
  }

  void OnAccept(const io_uring_cqe* cqe) {
    if (cqe->res >= 0 && cqe->res < kMaxConns) {
      conns[static_cast<size_t>(cqe->res)] = ConnState{};
      ArmRecv(cqe->res);
    }
    if (!(cqe->flags & IORING_CQE_F_MORE)) ArmAccept();
  }

  // Counts the requests (blank lines) in what arrived, gives the buffer back and answers.
  void OnRecv(int fd, const io_uring_cqe* cqe) {
    if (cqe->res <= 0) {
      if (!(cqe->flags & IORING_CQE_F_MORE)) {
        if (cqe->res == -ENOBUFS) {
          ArmRecv(fd);
        } else {
          close(fd);
        }
      }
      return;
    }
    const unsigned bid = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
    const char* data = bufs.data() + bid * kBufSize;
    ConnState& c = conns[static_cast<size_t>(fd)];
    if (memmem(data, static_cast<size_t>(cqe->res), "onnection: close", 16) != nullptr)
      c.close_after = true;
    for (int i = 0; i < cqe->res; ++i) {
      c.tail = (c.tail << 8) | static_cast<unsigned char>(data[i]);
      if (c.tail == 0x0d0a0d0a) ++c.pending;
    }
    io_uring_buf_ring_add(br, const_cast<char*>(data), kBufSize, static_cast<unsigned short>(bid),
                          io_uring_buf_ring_mask(kBufCount), 0);
    io_uring_buf_ring_advance(br, 1);
    if (!(cqe->flags & IORING_CQE_F_MORE)) ArmRecv(fd);
    SendOwed(fd);
  }

  void OnSend(int fd, const io_uring_cqe* cqe) {
    ConnState& c = conns[static_cast<size_t>(fd)];
    c.sending = false;
    if (cqe->res > 0 && c.close_after && c.pending == 0) {
      shutdown(fd, SHUT_RDWR);  // the multishot recv then ends and the fd is closed there
    } else if (cqe->res > 0) {
      SendOwed(fd);
    }
  }

  // Reaps completions and acts on each, for ever.
  [[noreturn]] void Run() {
    while (true) {
      io_uring_submit_and_wait(&ring, 1);
      io_uring_cqe* cqe;
      unsigned head, seen = 0;
      io_uring_for_each_cqe(&ring, head, cqe) {
        ++seen;
        const uint64_t tag = cqe->user_data;
        const int fd = static_cast<int>(tag >> 8);
        switch (static_cast<Kind>(tag & 0xff)) {
          case kAccept:
            OnAccept(cqe);
            break;
          case kRecv:
            OnRecv(fd, cqe);
            break;
          case kSend:
            OnSend(fd, cqe);
            break;
        }
      }
      io_uring_cq_advance(&ring, seen);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Options> o = ParseOptions(argc, argv);
  if (!o) return 2;
  std::signal(SIGPIPE, SIG_IGN);
  const int lfd = Listen(o->port);
  if (lfd < 0) return 1;
  Responder responder(lfd, o->body_bytes);
  if (!responder.StartRing()) return 1;
  responder.ArmAccept();
  std::fprintf(stderr, "ceiling: listening on 127.0.0.1:%d\n", o->port);
  responder.Run();
}
