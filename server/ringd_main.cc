// ringd: flags, the io probe, listening sockets, one thread per shard, and graceful shutdown on
// SIGTERM/SIGINT. Everything on the request path lives in the shards.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "io/probe.h"
#include "io/registry.h"
#include "server/config.h"
#include "server/http/mime_types.h"
#include "server/observability.h"
#include "server/privileges.h"
#include "server/shard.h"
#include "server/systemd.h"
#include "server/version.h"

namespace ringd {
namespace {

// One line on stderr, always: a control byte from a flag's value (a CR or LF in --add-header)
// is written as \xHH.
[[noreturn]] void Die(int code, const std::string& message) {
  std::string line;
  for (const char ch : message) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      line += hex;
    } else {
      line += ch;
    }
  }
  std::fprintf(stderr, "ringd: %s\n", line.c_str());
  std::exit(code);
}

std::string AddressText(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    port = ntohs(v4->sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
  inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
  port = ntohs(v6->sin6_port);
  return "[" + std::string(host) + "]:" + std::to_string(port);
}

// SO_REUSEPORT would let us bind a port another process (of this user) is serving with
// SO_REUSEPORT too, and silently share its traffic. So first see whether the address is free
// with a plain socket, which any listener makes fail with EADDRINUSE.
bool AddressFree(const ListenAddress& a, std::string* error) {
  const int fd = ::socket(a.addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;  // the real bind below reports the problem
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // TIME_WAIT leftovers are fine
  if (a.addr.ss_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&a.addr), a.len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok && err == EADDRINUSE) {
    *error = "cannot listen on " + a.text + ": " + strerror(err);
    return false;
  }
  return true;
}

// One SO_REUSEPORT socket per shard and address: the kernel spreads connections across shards.
int Listen(ListenAddress& a, std::string* error) {
  const int fd = ::socket(a.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = "socket for " + a.text + ": " + strerror(errno);
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // inherited by accepted sockets
  if (a.addr.ss_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a.addr), a.len) != 0) {
    *error = "cannot listen on " + a.text + ": " + strerror(errno);
    ::close(fd);
    return -1;
  }
  if (::listen(fd, 4096) != 0) {
    *error = "listen on " + a.text + ": " + strerror(errno);
    ::close(fd);
    return -1;
  }
  // Port 0: every further shard binds the port the kernel chose for the first.
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  a.addr = bound;
  a.len = len;
  return fd;
}

// Sockets systemd passed, grouped by the address they are bound to (ListenStream= given once, or
// several times with ReusePort=yes: one SO_REUSEPORT socket each).
std::vector<std::vector<int>> GroupByAddress(const std::vector<int>& fds) {
  std::vector<std::vector<int>> groups;
  std::vector<std::string> keys;
  for (const int fd : fds) {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    const std::string key(reinterpret_cast<const char*>(&a), len);
    size_t g = 0;
    while (g < keys.size() && keys[g] != key) ++g;
    if (g == keys.size()) {
      keys.push_back(key);
      groups.emplace_back();
    }
    groups[g].push_back(fd);
  }
  return groups;
}

// Which passed sockets each shard accepts on, as descriptors of its own (dups: a shard closes
// its own, and the originals are closed once every shard has its copies). Per address: with at
// least as many sockets as shards (ListenStream= repeated with ReusePort=yes), the sockets are
// dealt out and each shard accepts on its own, so the kernel spreads connections across shards as
// with --listen; with fewer, shards share them. Every socket is accepted on by some shard.
std::vector<std::vector<int>> AssignInheritedSockets(const std::vector<int>& fds, uint32_t shards,
                                                     std::string* error) {
  std::vector<std::vector<int>> by_shard(shards);
  for (const std::vector<int>& group : GroupByAddress(fds)) {
    const size_t k = group.size();
    for (size_t j = 0; j < std::max<size_t>(k, shards); ++j) {
      const int fd = ::fcntl(group[j % k], F_DUPFD_CLOEXEC, 3);
      if (fd < 0) {
        *error = std::string("LISTEN_FDS: dup: ") + strerror(errno);
        return {};
      }
      by_shard[j % shards].push_back(fd);
    }
  }
  return by_shard;
}

std::string InheritedSharing(const std::vector<int>& fds, uint32_t shards) {
  const std::vector<std::vector<int>> groups = GroupByAddress(fds);
  bool own = true;
  for (const auto& g : groups) own = own && g.size() >= shards;
  if (shards == 1) return "one shard";
  if (own) return "each shard accepting on its own (SO_REUSEPORT spreads connections)";
  return "shared by the shards (fewer sockets than shards per address; repeat ListenStream= with "
         "ReusePort=yes to give each shard its own)";
}

std::vector<int> UsableCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int i = 0; i < CPU_SETSIZE; ++i) {
      if (CPU_ISSET(i, &set)) cpus.push_back(i);
    }
  }
  if (cpus.empty()) cpus.push_back(-1);
  return cpus;
}

int Main(int argc, char** argv) {
  Config config;
  std::string error;
  bool exit_now = false;
  if (!ParseFlags(argc, argv, &config, &error, &exit_now)) Die(2, error);
  if (exit_now) return 0;
  if (!config.probe_only && !RootAllowed(config, &error)) Die(1, error);

  // Like nginx's worker_rlimit_nofile: use every descriptor the hard limit allows. The bypass
  // tier's registered file table is held to it as well.
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }
  io::ProbeReport probe = io::ProbeUring(config.io_mask);
  // Each bypass shard registers a file table with a slot for every connection it may hold.
  const uint64_t table = uint64_t{config.max_connections} + Shard::kSpareSlots;
  if (probe.bypass_usable && nofile.rlim_cur != RLIM_INFINITY && nofile.rlim_cur < table) {
    probe.bypass_usable = false;
    probe.bypass_reason = "RLIMIT_NOFILE (" + std::to_string(nofile.rlim_cur) +
                          ") is below the registered file table a shard needs (" +
                          std::to_string(table) + " slots for --max-connections)";
  }
  // A bypass connection has no descriptor to ask for the client's address, so its access log
  // lines say "-": with the log on, --io=auto prefers the uring tier, whose lines name the client.
  if (probe.bypass_usable && !config.access_log.empty() && config.io == io::IoMode::kAuto) {
    probe.bypass_usable = false;
    probe.bypass_reason = "the access log is on, and bypass connections cannot name the client";
  }
  if (config.probe_only) {
    for (const std::string& line : probe.lines) std::printf("%s\n", line.c_str());
    std::printf("bypass tier: %s (%s)\n", probe.bypass_usable ? "usable" : "unusable",
                probe.bypass_reason.c_str());
    std::printf("io_uring backend: %s (%s)\n", probe.usable ? "usable" : "unusable",
                probe.reason.c_str());
    bool unused = false;
    std::printf("--io=auto would choose %s\n",
                io::Select(io::IoMode::kAuto, probe, &unused).reason.c_str());
    return 0;
  }
  bool select_error = false;
  const io::Selection selection = io::Select(config.io, probe, &select_error);
  if (select_error) Die(1, selection.reason);
  if (config.sqpoll && !probe.sqpoll_usable)
    Die(1, "--sqpoll: SQPOLL rings cannot be created here");
  if (config.busy_poll_us != 0 && !probe.napi)
    Die(1,
        "--busy-poll-us: this kernel cannot busy-poll for io_uring (IORING_REGISTER_NAPI needs "
        "Linux 6.9; ringd --probe says more)");
  if (config.batch_wait_us != 0 && !probe.batch_wait)
    Die(1,
        "--batch-wait-us: this kernel cannot bound a wait for completions (io_uring_enter's "
        "min_wait_usec needs Linux 6.12; ringd --probe says more)");
  // Optional features of the chosen tier, each used only where the probe found it.
  const bool recv_incremental = selection.backend != "epoll" && probe.recv_incremental;
  std::string extras;
  if (config.sqpoll)
    extras += config.sqpoll_per_shard ? "; SQPOLL, a thread per shard" : "; SQPOLL, one thread";
  if (selection.backend != "epoll") {
    extras += recv_incremental ? "; incremental receive buffers (" +
                                     std::to_string(config.recv_pool_kib) + " KiB per shard)"
                               : "; whole receive buffers (incremental receive: unavailable)";
    extras += probe.cqe_skip ? "; closes and cancels post no completion"
                             : "; closes and cancels complete (CQE skip: unavailable)";
  }
  if (selection.backend == "bypass") {
    // Cached file bodies: sendfile on a process fd installed for the socket (measured faster
    // than splicing through io-wq on a site's mix: docs/PERFORMANCE.md), where the kernel can.
    if (config.bypass_sendfile && !probe.fd_install) config.bypass_sendfile = false;
    extras += config.bypass_sendfile ? "; cached bodies with sendfile on an installed fd"
                                     : "; every body spliced";
    extras += probe.registered_ring ? "; registered ring fd"
                                    : "; ring entered by fd (registered ring fd: unavailable)";
  }
  if (config.splice_min_bytes != 0)
    extras += "; bodies from " + std::to_string(config.splice_min_bytes) + " bytes spliced";
  if (config.batch_wait_us != 0)
    extras += "; batched waits " + std::to_string(config.batch_wait_us) + " us";
  if (config.busy_poll_us != 0)
    extras += "; NAPI busy poll " + std::to_string(config.busy_poll_us) + " us";
  std::fprintf(stderr, "ringd: io backend %s%s\n", selection.reason.c_str(), extras.c_str());
  if (selection.backend == "bypass" && !config.access_log.empty()) {
    std::fprintf(stderr, "ringd: --io=bypass: access log lines name no client address (\"-\")\n");
  }
  const io::LoopFactory make_loop = io::FactoryFor(selection.backend);

  const int root_fd = ::open(config.root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) Die(1, "--root: cannot open '" + config.root + "': " + strerror(errno));
  const http::MimeTypes mime = http::MimeTypes::Load(config.mime_types);

  const std::vector<int> cpus = UsableCpus();
  const uint32_t shards = config.shards != 0 ? config.shards : static_cast<uint32_t>(cpus.size());

  // Signals are handled by this thread alone, with sigwait; shard threads inherit the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGUSR1);  // reopen the access log
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // Socket activation: systemd bound the sockets (ringd.socket) and passed them, and a drain
  // leaves them open for the next process. Otherwise each shard binds its own SO_REUSEPORT socket
  // per --listen address and the kernel spreads connections across shards.
  std::vector<int> inherited;
  if (!TakeListenSockets(&inherited, &error)) Die(1, error);
  const std::vector<std::vector<int>> inherited_by_shard =
      AssignInheritedSockets(inherited, shards, &error);
  if (!error.empty()) Die(1, error);
  if (inherited.empty() && !config.takeover) {
    for (const ListenAddress& a : config.listen) {
      if (!AddressFree(a, &error)) Die(1, error);
    }
  }
  if (inherited.empty() && config.takeover) {
    // The old process shuts its listeners down when it drains; connections already queued on
    // them move to ours only with tcp_migrate_req (Linux 5.14), else they are reset.
    std::ifstream f("/proc/sys/net/ipv4/tcp_migrate_req");
    int migrate = 0;
    f >> migrate;
    std::fprintf(stderr, "ringd: --takeover: sharing the listening addresses (SO_REUSEPORT)%s\n",
                 migrate == 1 ? "; net.ipv4.tcp_migrate_req=1 moves the old listeners' queues here"
                              : "; net.ipv4.tcp_migrate_req=0: connections still queued on the "
                                "old process's listeners when it stops are reset (set it to 1)");
  }
  Observability observability;  // the access log and the admin listener (before the shards)
  if (!observability.Open(config, shards, &error)) Die(1, error);
  ServiceNotifier notifier;  // systemd's Type=notify; nothing without NOTIFY_SOCKET
  std::vector<std::unique_ptr<Shard>> shard_list;
  for (uint32_t i = 0; i < shards; ++i) {
    std::vector<int> fds;
    if (!inherited.empty()) {
      fds = inherited_by_shard[i];
    } else {
      for (ListenAddress& a : config.listen) {
        const int fd = Listen(a, &error);
        if (fd < 0) Die(1, error);
        fds.push_back(fd);
      }
    }
    shard_list.push_back(std::make_unique<Shard>(static_cast<int>(i), config, std::move(fds),
                                                 root_fd, &mime, make_loop, cpus[i % cpus.size()]));
    shard_list.back()->SetListenersShared(!inherited.empty());
    Shard::TierFeatures features;
    features.recv_incremental = recv_incremental;
    features.register_ring_fd = selection.backend == "bypass" && probe.registered_ring;
    features.skip_unread_cqes = selection.backend != "epoll" && probe.cqe_skip;
    shard_list.back()->SetTierFeatures(features);
    shard_list.back()->SetHeartbeat(notifier.watchdog_interval_ms() > 0);
    observability.Attach(shard_list.back().get(), static_cast<int>(i));
  }

  // Each shard creates its ring (and pools) on its own thread, then waits for `go`: ringd drops
  // root (--user) between the two, so that nothing is served, and no file opened, as root.
  std::vector<std::thread> threads;
  std::vector<std::promise<bool>> started(shards);
  std::promise<bool> go;
  std::shared_future<bool> go_future = go.get_future().share();
  // With one shared SQ thread (--sqpoll without --sqpoll-per-shard) the first shard's ring owns
  // it and the others attach to that ring (IORING_SETUP_ATTACH_WQ): it must exist first.
  const bool share_sq = config.sqpoll && !config.sqpoll_per_shard;
  std::promise<int> first_ring;
  std::future<int> first_ring_fd = first_ring.get_future();
  for (uint32_t i = 0; i < shards; ++i) {
    if (i == 1 && share_sq) {
      const int fd = first_ring_fd.get();
      for (uint32_t k = 1; k < shards; ++k) shard_list[k]->SetAttachRing(fd);
    }
    threads.emplace_back([&, i, go_future] {
      Shard& s = *shard_list[i];
      const bool ok = s.Setup();
      if (i == 0) first_ring.set_value(ok ? s.loop()->RingFd() : -1);
      started[i].set_value(ok);
      if (ok && go_future.get()) s.Serve();
    });
  }
  bool all_ok = true;
  std::string first_error;
  for (uint32_t i = 0; i < shards; ++i) {
    if (!started[i].get_future().get()) {
      all_ok = false;
      if (first_error.empty()) first_error = shard_list[i]->error();
    }
  }
  if (all_ok && !DropPrivileges(config, &first_error)) all_ok = false;
  go.set_value(all_ok);
  if (!all_ok) {
    for (auto& s : shard_list) s->RequestStop();
    for (auto& t : threads) t.join();
    Die(1, first_error);
  }
  if (config.has_user) {
    std::fprintf(stderr, "ringd: running as %s (uid %u, gid %u)\n", config.user.c_str(),
                 static_cast<unsigned>(::getuid()), static_cast<unsigned>(::getgid()));
  }
  std::vector<Shard*> serving;
  for (auto& s : shard_list) serving.push_back(s.get());
  observability.Start(serving, shard_list[0]->loop()->Name(), selection.reason);
  if (observability.has_admin())
    std::fprintf(stderr, "ringd: admin listener on %s\n", observability.admin_address().c_str());
  std::string where;
  if (!inherited.empty()) {
    for (const int fd : inherited) {
      ListenAddress a;
      a.len = sizeof a.addr;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a.addr), &a.len);
      where +=
          (where.empty() ? "" : ", ") + (a.addr.ss_family == AF_INET || a.addr.ss_family == AF_INET6
                                             ? AddressText(a.addr)
                                             : std::string("fd ") + std::to_string(fd));
    }
    std::fprintf(stderr,
                 "ringd: listening on %zu socket%s passed by systemd (LISTEN_FDS), %s; "
                 "--listen is not used\n",
                 inherited.size(), inherited.size() == 1 ? "" : "s",
                 InheritedSharing(inherited, shards).c_str());
    for (const int fd : inherited) ::close(fd);  // the shards hold duplicates
  } else {
    for (const ListenAddress& a : config.listen)
      where += (where.empty() ? "" : ", ") + AddressText(a.addr);
  }
  const std::string serving_line = "serving " + config.root + " on " + where + " with " +
                                   std::to_string(shards) + " shard" + (shards == 1 ? "" : "s") +
                                   " (ringd " + BuildVersion() + ", commit " + BuildCommit() + ")";
  std::fprintf(stderr, "ringd: %s\n", serving_line.c_str());
  notifier.Ready(serving_line);  // every shard's accept is armed

  // The main loop: signals, the once-a-second ticks, and the watchdog. Each watchdog period it
  // sends WATCHDOG=1 if every shard answered the question asked one period before (its loop
  // turned), then asks again.
  const int64_t watchdog_ms = static_cast<int64_t>(notifier.watchdog_interval_ms());
  const int64_t tick_ms = watchdog_ms > 0 && watchdog_ms < 1000 ? watchdog_ms : 1000;
  int sig = 0;
  for (;;) {
    const timespec wait{tick_ms / 1000, (tick_ms % 1000) * 1000000};
    sig = sigtimedwait(&signals, nullptr, &wait);
    if (sig == SIGUSR1) {
      observability.ReopenLog();
    } else if (sig == SIGINT || sig == SIGTERM) {
      break;
    } else {
      observability.Tick();  // a tick passed (or EINTR)
    }
    if (watchdog_ms > 0 && sig != SIGUSR1) {
      bool all_turned = true;
      for (auto& s : shard_list) all_turned = all_turned && s->heartbeat().Answered();
      if (all_turned) notifier.Watchdog();
      for (auto& s : shard_list) {
        if (s->heartbeat().Answered()) {
          s->heartbeat().Ask();
          s->loop()->Wake();
        }
      }
    }
  }
  observability.BeginDrain();  // /readyz answers 503 from here on
  notifier.Stopping("draining");
  std::fprintf(stderr, "ringd: %s: finishing responses in flight (up to %u ms)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", config.shutdown_timeout_ms);
  for (auto& s : shard_list) s->RequestStop();
  for (auto& t : threads) t.join();
  observability.Stop();  // the admin listener, then the log's last lines
  ShardStats total;
  for (auto& s : shard_list) {
    total.accepted += s->Stats().accepted;
    total.requests += s->Stats().requests;
  }
  std::fprintf(stderr, "ringd: stopped after %llu connections, %llu requests\n",
               static_cast<unsigned long long>(total.accepted),
               static_cast<unsigned long long>(total.requests));
  return 0;
}

}  // namespace
}  // namespace ringd

int main(int argc, char** argv) { return ringd::Main(argc, argv); }
