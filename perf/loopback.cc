// The harness's loopback row for large files: what loopback TCP itself moves when the sender does
// nothing but send(2) the same bytes from memory. It answers every request (each blank line it
// sees) on a keep-alive connection with one fixed response whose body is a file of the data set,
// read into memory once at start; one thread, epoll (edge-triggered), non-blocking send(2) loops.
// No parsing, no files, no sendfile: a server's throughput over this one's, measured in the same
// run against the same MSG_TRUNC client, is its fraction of raw loopback.
//   loopback --port P --root DATA --file 4mb/file-0.bin     (--file is relative to --root)
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "absl/flags/flag.h"
#include "perf/tool_flags.h"

ABSL_FLAG(int, port, 0, "the port to listen on");
ABSL_FLAG(std::string, root, ".", "the data set's folder");
ABSL_FLAG(std::string, file, "", "the body's file, relative to --root");

namespace {

struct Conn {
  uint32_t tail = 0;  // the last bytes seen, to find "\r\n\r\n" across reads
  long pending = 0;   // responses owed, the one being sent included
  size_t offset = 0;  // bytes of the current response already sent
};

bool ReadFile(const char* path, std::string* out) {
  const int fd = open(path, O_RDONLY);
  if (fd < 0) return false;
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    return false;
  }
  out->resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out->size()) {
    const ssize_t n = read(fd, out->data() + got, out->size() - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  return got == out->size();
}

struct Options {
  int port;
  std::string path;  // the body's file: --root/--file
};

// The flags, or nothing (the usage printed) when they are not usable.
std::optional<Options> ParseOptions(int argc, char** argv) {
  constexpr char kUsage[] = "usage: loopback --port P [--root DIR] --file F";
  const bool stray = ringd::ParseToolFlags(argc, argv, kUsage).size() > 1;
  const int port = absl::GetFlag(FLAGS_port);
  const std::string root = absl::GetFlag(FLAGS_root), file = absl::GetFlag(FLAGS_file);
  if (stray || port <= 0 || file.empty()) {
    std::fprintf(stderr, "%s\n", kUsage);
    return std::nullopt;
  }
  return Options{port, root + "/" + file};
}

// The one response, head and body, or false if the body's file cannot be read.
bool MakeResponse(const std::string& path, std::string* response) {
  std::string body;
  if (!ReadFile(path.c_str(), &body)) return false;
  *response =
      "HTTP/1.1 200 OK\r\nServer: loopback\r\n"
      "Content-Type: application/octet-stream\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  return true;
}

// A non-blocking listening socket on 127.0.0.1:port, or -1 (the error printed).
int Listen(int port) {
  const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  const int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(lfd, 4096) != 0) {
    std::perror("loopback: bind");
    return -1;
  }
  return lfd;
}

struct Server {
  int lfd;
  int ep;
  std::string response;
  std::unordered_map<int, Conn> conns;

  Server(int listen_fd, std::string one_response)
      : lfd(listen_fd), ep(epoll_create1(0)), response(std::move(one_response)) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = lfd;
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  }

  void Drop(int fd) {
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
    conns.erase(fd);
  }

  // Sends what is owed until the socket is full; false if the connection is gone.
  bool SendOwed(int fd, Conn& c) {
    while (c.pending > 0) {
      const ssize_t n =
          send(fd, response.data() + c.offset, response.size() - c.offset, MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EINTR;
      c.offset += static_cast<size_t>(n);
      if (c.offset == response.size()) {
        c.offset = 0;
        --c.pending;
      }
    }
    return true;
  }

  // Accepts every waiting connection, edge-triggered for reading and writing.
  void AcceptAll() {
    const int one = 1;
    int cfd;
    while ((cfd = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK)) >= 0) {
      setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      conns[cfd] = Conn{};
      epoll_event cev{};
      cev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
      cev.data.fd = cfd;
      epoll_ctl(ep, EPOLL_CTL_ADD, cfd, &cev);
    }
  }

  // Reads until the socket is empty, counting the requests (blank lines); false if the
  // connection is gone.
  static bool ReadRequests(int fd, Conn& c) {
    char buf[4096];
    bool alive = true;
    while (true) {
      const ssize_t got = recv(fd, buf, sizeof buf, 0);
      if (got > 0) {
        for (ssize_t j = 0; j < got; ++j) {
          c.tail = (c.tail << 8) | static_cast<unsigned char>(buf[j]);
          if (c.tail == 0x0d0a0d0a) ++c.pending;
        }
        continue;
      }
      if (got == 0 || (errno != EAGAIN && errno != EINTR)) alive = false;
      if (got < 0 && errno == EINTR) continue;
      break;
    }
    return alive;
  }

  void OnConnEvent(int fd, uint32_t events) {
    auto it = conns.find(fd);
    if (it == conns.end()) return;
    Conn& c = it->second;
    bool alive = true;
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) alive = ReadRequests(fd, c);
    if (alive) alive = SendOwed(fd, c);
    if (!alive) Drop(fd);
  }

  [[noreturn]] void Run() {
    epoll_event events[256];
    while (true) {
      const int n = epoll_wait(ep, events, 256, -1);
      for (int i = 0; i < n; ++i) {
        if (events[i].data.fd == lfd) {
          AcceptAll();
        } else {
          OnConnEvent(events[i].data.fd, events[i].events);
        }
      }
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  const std::optional<Options> o = ParseOptions(argc, argv);
  if (!o) return 2;
  std::string response;
  if (!MakeResponse(o->path, &response)) {
    std::fprintf(stderr, "loopback: cannot read %s\n", o->path.c_str());
    return 1;
  }
  std::signal(SIGPIPE, SIG_IGN);
  const int lfd = Listen(o->port);
  if (lfd < 0) return 1;
  Server server(lfd, std::move(response));
  std::fprintf(stderr, "loopback: %zu-byte responses on 127.0.0.1:%d\n", server.response.size(),
               o->port);
  server.Run();
}
