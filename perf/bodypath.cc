// bodypath: the candidate ways to put a cached file's bytes on a TCP socket, measured alone.
// One process sends the same file over and over on one loopback connection to a child process
// that discards what it receives (MSG_TRUNC), for each method in turn, interleaved over rounds;
// it reports the sender's CPU (every thread of the process, io-wq workers included) per body and
// the bytes per second. No HTTP, no ringd: just the body path, so its cost can be read directly.
//
//   bodypath --size 65536 [--seconds 2] [--rounds 3] [--server-cpu 1] [--client-cpu 0]
//
// Methods:
//   sendfile      sendfile(2) on the socket, inline (the uring tier's path for cached pages)
//   splice        IORING_OP_SPLICE file -> pipe -> socket through the ring (the bypass tier)
//   read-send     IORING_OP_READ_FIXED into a registered buffer, then IORING_OP_SEND (a copy)
//   read-send-zc  the same, then IORING_OP_SEND_ZC from the registered buffer (fixed)
//   mmap-send-zc  IORING_OP_SEND_ZC straight from a mapping of the file's page-cache pages
//   memory-send   IORING_OP_SEND from memory already holding the body (the floor: no file)
#include <fcntl.h>
#include <liburing.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "perf/bench_util.h"
#include "perf/tool_flags.h"

ABSL_FLAG(uint64_t, size, 65536, "bytes per body");
ABSL_FLAG(double, seconds, 2, "seconds per method and round");
ABSL_FLAG(int, rounds, 3, "rounds of every method");
ABSL_FLAG(int, server_cpu, 1, "the sender's CPU (--server-cpu)");
ABSL_FLAG(int, client_cpu, 0, "the receiver's CPU (--client-cpu)");

namespace {

using ringd::perf::Now;
using ringd::perf::Pin;

constexpr size_t kChunk = 1 << 20;  // per operation, as ringd's pipes and inline sendfile

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "bodypath: %s\n", what.c_str());
  std::exit(1);
}

double ProcessCpu() {  // every thread of this process: io-wq workers are threads of it
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// The receiving child: discards everything until the connection closes.
void Sink(uint16_t port, int cpu) {
  Pin(cpu);
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) _exit(1);
  // TCP with MSG_TRUNC drops up to `len` bytes without copying them anywhere.
  static char buf[4 << 20];
  while (recv(s, buf, sizeof buf, MSG_TRUNC) > 0) {
  }
  _exit(0);
}

struct Sender {
  io_uring ring{};
  int sock = -1;
  int file = -1;
  size_t size = 0;
  int pipe_r = -1, pipe_w = -1;
  char* fixed = nullptr;    // registered buffer (kChunk)
  char* mapping = nullptr;  // the file mapped
  std::string memory;       // the body in memory

  // Submits what is queued and waits for `n` completions, each of which must be >= 0 (a
  // zero-copy notification counts as one).
  void Complete(unsigned n) {
    io_uring_submit_and_wait(&ring, n);
    for (unsigned i = 0; i < n; ++i) {
      io_uring_cqe* cqe = nullptr;
      if (io_uring_wait_cqe(&ring, &cqe) != 0) Die("io_uring_wait_cqe");
      if (cqe->res < 0) Die(std::string("operation failed: ") + strerror(-cqe->res));
      io_uring_cqe_seen(&ring, cqe);
    }
  }

  // Sends exactly `len` bytes from `buf` with IORING_OP_SEND (retrying a short send).
  void SendAll(const char* buf, size_t len, bool zc, bool fixed_buf) {
    while (len > 0) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (zc && fixed_buf) {
        io_uring_prep_send_zc_fixed(sqe, sock, buf, len, MSG_NOSIGNAL, 0, 0);
      } else if (zc) {
        io_uring_prep_send_zc(sqe, sock, buf, len, MSG_NOSIGNAL, 0);
      } else {
        io_uring_prep_send(sqe, sock, buf, len, MSG_NOSIGNAL);
      }
      io_uring_submit_and_wait(&ring, 1);
      int sent = -1;
      bool notif_due = false;
      for (;;) {  // a zero-copy send completes twice: the result, then its notification
        io_uring_cqe* cqe = nullptr;
        if (io_uring_wait_cqe(&ring, &cqe) != 0) Die("io_uring_wait_cqe");
        if (cqe->flags & IORING_CQE_F_NOTIF) {
          io_uring_cqe_seen(&ring, cqe);
          break;
        }
        sent = cqe->res;
        notif_due = (cqe->flags & IORING_CQE_F_MORE) != 0;
        io_uring_cqe_seen(&ring, cqe);
        if (!notif_due) break;
      }
      if (sent <= 0) Die(std::string("send: ") + strerror(-sent));
      buf += sent;
      len -= static_cast<size_t>(sent);
    }
  }

  void Body(const std::string& method) {
    for (size_t off = 0; off < size; off += kChunk) {
      const size_t n = std::min(kChunk, size - off);
      if (method == "sendfile") {
        off_t o = static_cast<off_t>(off);
        size_t left = n;
        while (left > 0) {
          const ssize_t r = sendfile(sock, file, &o, left);
          if (r <= 0) Die(std::string("sendfile: ") + strerror(errno));
          left -= static_cast<size_t>(r);
        }
      } else if (method == "splice") {
        size_t in_pipe = 0;
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        io_uring_prep_splice(sqe, file, static_cast<int64_t>(off), pipe_w, -1,
                             static_cast<unsigned>(n), SPLICE_F_MOVE);
        Complete(1);
        in_pipe = n;
        while (in_pipe > 0) {
          sqe = io_uring_get_sqe(&ring);
          io_uring_prep_splice(sqe, pipe_r, -1, sock, -1, static_cast<unsigned>(in_pipe),
                               SPLICE_F_MOVE);
          io_uring_submit_and_wait(&ring, 1);
          io_uring_cqe* cqe = nullptr;
          io_uring_wait_cqe(&ring, &cqe);
          if (cqe->res <= 0) Die("splice to the socket failed");
          in_pipe -= static_cast<size_t>(cqe->res);
          io_uring_cqe_seen(&ring, cqe);
        }
      } else if (method == "read-send" || method == "read-send-zc") {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        io_uring_prep_read_fixed(sqe, file, fixed, static_cast<unsigned>(n), off, 0);
        Complete(1);
        SendAll(fixed, n, method == "read-send-zc", true);
      } else if (method == "mmap-send-zc") {
        SendAll(mapping + off, n, true, false);
      } else if (method == "memory-send") {
        SendAll(memory.data() + off, n, false, false);
      } else {
        Die("unknown method " + method);
      }
    }
  }
};

struct Result {
  double bodies = 0, seconds = 0, cpu = 0;
};

}  // namespace

int main(int argc, char** argv) {
  constexpr char kUsage[] =
      "usage: bodypath --size BYTES [--seconds S] [--rounds N] [--server-cpu C] [--client-cpu C]";
  const bool stray = ringd::ParseToolFlags(argc, argv, kUsage).size() > 1;
  const size_t size = absl::GetFlag(FLAGS_size);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int server_cpu = absl::GetFlag(FLAGS_server_cpu);
  const int client_cpu = absl::GetFlag(FLAGS_client_cpu);
  if (stray || size == 0) Die(kUsage);
  const std::vector<std::string> methods = {"sendfile",     "splice",       "read-send",
                                            "read-send-zc", "mmap-send-zc", "memory-send"};

  // The file, written and so in the page cache.
  char path[] = "/tmp/bodypath-XXXXXX";
  Sender s;
  s.size = size;
  s.file = mkstemp(path);
  if (s.file < 0) Die("mkstemp");
  unlink(path);
  s.memory.assign(size, 'x');
  for (size_t i = 0; i < size; ++i) s.memory[i] = static_cast<char>('a' + i % 26);
  if (write(s.file, s.memory.data(), size) != static_cast<ssize_t>(size)) Die("write");
  s.mapping = static_cast<char*>(mmap(nullptr, size, PROT_READ, MAP_SHARED, s.file, 0));
  if (s.mapping == MAP_FAILED) Die("mmap");

  uint16_t port = 0;
  const int l = ringd::perf::ListenLoopback(&port);
  if (l < 0) Die("listen");
  const pid_t child = fork();
  if (child == 0) Sink(port, client_cpu);
  Pin(server_cpu);
  s.sock = accept(l, nullptr, nullptr);
  if (s.sock < 0) Die("accept");

  if (io_uring_queue_init(64, &s.ring, 0) != 0) Die("io_uring_queue_init");
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) Die("pipe2");
  s.pipe_r = fds[0];
  s.pipe_w = fds[1];
  fcntl(s.pipe_w, F_SETPIPE_SZ, static_cast<int>(kChunk));
  s.fixed = static_cast<char*>(
      mmap(nullptr, kChunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  iovec iov{s.fixed, kChunk};
  if (io_uring_register_buffers(&s.ring, &iov, 1) != 0) Die("io_uring_register_buffers");

  std::vector<Result> results(methods.size());
  for (int round = 0; round < rounds; ++round) {
    for (size_t m = 0; m < methods.size(); ++m) {
      const double t0 = Now(), c0 = ProcessCpu();
      double bodies = 0;
      while (Now() - t0 < seconds) {
        for (int k = 0; k < 16; ++k) s.Body(methods[m]);
        bodies += 16;
      }
      results[m].bodies += bodies;
      results[m].seconds += Now() - t0;
      results[m].cpu += ProcessCpu() - c0;
    }
  }
  std::printf(
      "| method | size | CPU us per body | MB/s | sender busy |\n| --- | --- | --- | --- | --- "
      "|\n");
  for (size_t m = 0; m < methods.size(); ++m) {
    const Result& r = results[m];
    std::printf("| %s | %zu | %.2f | %.0f | %.0f%% |\n", methods[m].c_str(), size,
                r.cpu / r.bodies * 1e6, r.bodies * static_cast<double>(size) / r.seconds / 1e6,
                100 * r.cpu / r.seconds);
  }
  close(s.sock);
  waitpid(child, nullptr, 0);
  io_uring_queue_exit(&s.ring);
  return 0;
}
