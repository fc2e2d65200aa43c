#include "io/probe.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "io/uring_uapi.h"

namespace ringd::io {
namespace {

std::string ErrnoName(int err) {
  switch (err) {
    case EPERM:
      return "EPERM";
    case ENOSYS:
      return "ENOSYS";
    case EINVAL:
      return "EINVAL";
    case ENOMEM:
      return "ENOMEM";
    case EACCES:
      return "EACCES";
    case EMFILE:
      return "EMFILE";
    default:
      return strerror(err);
  }
}

std::string ReadSysctl(const char* path) {
  std::ifstream f(path);
  std::string v;
  if (!(f >> v)) return "";
  return v;
}

struct Needed {
  int opcode;
  const char* name;
};

constexpr Needed kOpcodes[] = {
    {IORING_OP_NOP, "IORING_OP_NOP"},         {IORING_OP_ACCEPT, "IORING_OP_ACCEPT"},
    {IORING_OP_RECV, "IORING_OP_RECV"},       {IORING_OP_SEND, "IORING_OP_SEND"},
    {IORING_OP_SENDMSG, "IORING_OP_SENDMSG"}, {IORING_OP_SPLICE, "IORING_OP_SPLICE"},
    {IORING_OP_OPENAT2, "IORING_OP_OPENAT2"}, {IORING_OP_STATX, "IORING_OP_STATX"},
    {IORING_OP_READ, "IORING_OP_READ"},       {IORING_OP_READ_FIXED, "IORING_OP_READ_FIXED"},
    {IORING_OP_CLOSE, "IORING_OP_CLOSE"},     {IORING_OP_ASYNC_CANCEL, "IORING_OP_ASYNC_CANCEL"},
};

// What the bypass tier adds, each with the kernel that brought it; probed by using it.
constexpr const char* kBypassFeatures[] = {
    "registered file table",  // io_uring_register_files_sparse, 5.19
    "accept direct",          // multishot accept into the table (IORING_FILE_INDEX_ALLOC), 5.19
    "IORING_OP_SHUTDOWN",     // 5.11: shutdown(2) for a descriptor without an fd number
};
constexpr const char* kOptionalFeatures[] = {"SQPOLL",
                                             "SINGLE_ISSUER + DEFER_TASKRUN",
                                             "incremental receive",
                                             "NAPI busy poll",
                                             "batched waits",
                                             "fd install",
                                             "registered ring fd",
                                             "CQE skip"};

// A NOP submitted and its completion reaped: 0, or the errno that stopped it (EIO for a NOP
// that completed with an error).
int NopRoundTrip(io_uring* ring) {
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  io_uring_prep_nop(sqe);
  io_uring_cqe* cqe = nullptr;
  const int rc = io_uring_submit_and_wait(ring, 1);
  if (rc < 0) return -rc;
  if (io_uring_peek_cqe(ring, &cqe) != 0 || cqe->res < 0) return EIO;
  io_uring_cqe_seen(ring, cqe);
  return 0;
}

bool Masked(const std::vector<std::string>& masked, const std::string& name) {
  return std::find(masked.begin(), masked.end(), name) != masked.end();
}

// A listening socket on 127.0.0.1 with one connection waiting to be accepted, for probing accept
// direct. Returns the listener; `client` the connecting socket. -1 when sockets are unavailable.
int ListenerWithPendingConnection(int* client) {
  *client = -1;
  const int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(l, 1) != 0 ||
      ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(l);
    return -1;
  }
  *client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (*client < 0 || ::connect(*client, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    if (*client >= 0) ::close(*client);
    ::close(l);
    return -1;
  }
  return l;
}

// Probes the bypass tier's features on a ring of its own; the first missing one is the reason.
void ProbeBypass(const std::vector<std::string>& masked, bool shutdown_op, ProbeReport* r) {
  std::string missing;
  auto note = [&](const char* name, bool ok, const std::string& why) {
    r->lines.push_back(std::string("bypass: ") + name + ": " + (ok ? "ok" : why));
    if (!ok && missing.empty()) missing = std::string(name) + " (" + why + ")";
  };
  io_uring ring;
  if (io_uring_queue_init(8, &ring, 0) < 0) return note("registered file table", false, "no ring");
  const bool table_masked = Masked(masked, "registered file table");
  const int rc = table_masked ? -ENOSYS : io_uring_register_files_sparse(&ring, 4);
  note("registered file table", rc == 0,
       table_masked ? "masked" : ErrnoName(-rc) + ": needs kernel 5.19");
  if (rc == 0) {
    bool accepted = false;
    std::string why = "masked";
    if (!Masked(masked, "accept direct")) {
      int client = -1;
      const int l = ListenerWithPendingConnection(&client);
      why = "no loopback socket to try it on";
      if (l >= 0) {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        io_uring_prep_multishot_accept_direct(sqe, l, nullptr, nullptr, 0);
        __kernel_timespec ts{1, 0};
        io_uring_cqe* cqe = nullptr;
        io_uring_submit(&ring);
        if (io_uring_wait_cqe_timeout(&ring, &cqe, &ts) == 0) {
          accepted = cqe->res >= 0;
          why = accepted ? "" : ErrnoName(-cqe->res) + ": needs kernel 5.19";
          io_uring_cqe_seen(&ring, cqe);
        } else {
          why = "no completion: needs kernel 5.19";
        }
        ::close(client);
        ::close(l);
      }
    }
    note("accept direct", accepted, why);
  }
  const bool shutdown_masked = Masked(masked, "IORING_OP_SHUTDOWN");
  note("IORING_OP_SHUTDOWN", shutdown_op && !shutdown_masked,
       shutdown_masked ? "masked" : "missing: needs kernel 5.11");
  io_uring_queue_exit(&ring);
  r->bypass_usable = missing.empty();
  r->bypass_reason = missing.empty()
                         ? "direct descriptors: accept, receive, send and close through the "
                           "ring's registered file table"
                         : "missing " + missing;
}

// Incremental buffer consumption (IOU_PBUF_RING_INC, 6.12) with a capped multishot receive (a
// length on IORING_OP_RECV multishot, 6.15): 100 bytes into a socket, a receive capped at 16
// must complete with 16 bytes and say that the kernel keeps filling the same buffer.
std::string ProbeIncrementalReceive() {
  io_uring ring;
  if (io_uring_queue_init(8, &ring, 0) < 0) return "no ring";
  constexpr unsigned kEntries = 2;
  constexpr size_t kBuf = 4096;
  void* mem = ::mmap(nullptr, 4096 + kEntries * kBuf, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  std::string why;
  int sv[2] = {-1, -1};
  if (mem == MAP_FAILED) {
    why = "mmap failed";
  } else {
    auto* br = static_cast<io_uring_buf_ring*>(mem);
    char* bufs = static_cast<char*>(mem) + 4096;
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<uint64_t>(br);
    reg.ring_entries = kEntries;
    reg.bgid = 3;
    reg.pad = uapi::kPbufRingInc;
    int rc = io_uring_register_buf_ring(&ring, &reg, 0);
    if (rc != 0) {
      why = ErrnoName(-rc) + ": incremental buffers need kernel 6.12";
    } else {
      io_uring_buf_ring_init(br);
      for (unsigned i = 0; i < kEntries; ++i)
        io_uring_buf_ring_add(br, bufs + i * kBuf, kBuf, static_cast<uint16_t>(i),
                              io_uring_buf_ring_mask(kEntries), static_cast<int>(i));
      io_uring_buf_ring_advance(br, kEntries);
      char data[100] = {};
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 ||
          ::write(sv[1], data, sizeof data) != static_cast<ssize_t>(sizeof data)) {
        why = "no socket pair to try it on";
      } else {
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        io_uring_prep_recv_multishot(sqe, sv[0], nullptr, 16, 0);
        sqe->flags |= IOSQE_BUFFER_SELECT;
        sqe->buf_group = 3;
        io_uring_submit(&ring);
        __kernel_timespec ts{1, 0};
        io_uring_cqe* cqe = nullptr;
        if (io_uring_wait_cqe_timeout(&ring, &cqe, &ts) != 0) {
          why = "no completion";
        } else {
          if (cqe->res < 0) {
            why = ErrnoName(-cqe->res) + ": a capped multishot receive needs kernel 6.15";
          } else if (cqe->res != 16) {
            why = "the receive was not capped (" + std::to_string(cqe->res) +
                  " bytes): needs kernel 6.15";
          } else if ((cqe->flags & uapi::kCqeBufMore) == 0) {
            why = "no IORING_CQE_F_BUF_MORE: needs kernel 6.12";
          }
          io_uring_cqe_seen(&ring, cqe);
        }
      }
    }
  }
  io_uring_queue_exit(&ring);  // ends the receive before its buffers go
  if (sv[0] >= 0) ::close(sv[0]);
  if (sv[1] >= 0) ::close(sv[1]);
  if (mem != MAP_FAILED) ::munmap(mem, 4096 + kEntries * kBuf);
  return why;
}

// IORING_REGISTER_NAPI (6.9): registering and unregistering on a ring of its own.
std::string ProbeNapi() {
  io_uring ring;
  if (io_uring_queue_init(8, &ring, 0) < 0) return "no ring";
  uapi::Napi napi;
  napi.busy_poll_to = 10;
  int rc = io_uring_register(ring.ring_fd, uapi::kRegisterNapi, &napi, 1);
  std::string why;
  if (rc < 0) {
    why = ErrnoName(-rc) + ": needs kernel 6.9";
  } else {
    io_uring_register(ring.ring_fd, uapi::kUnregisterNapi, &napi, 1);
  }
  io_uring_queue_exit(&ring);
  return why;
}

// io_uring_enter's min_wait_usec (IORING_FEAT_MIN_TIMEOUT, 6.12): a wait with it on an empty
// ring of its own ends at its 1 ms timeout (ETIME); a kernel that reads the field as padding
// refuses it (EINVAL).
std::string ProbeBatchWait() {
  io_uring ring;
  io_uring_params p{};
  if (io_uring_queue_init_params(8, &ring, &p) < 0) return "no ring";
  std::string why;
  if ((p.features & uapi::kFeatMinTimeout) == 0) {
    why = "no IORING_FEAT_MIN_TIMEOUT: needs kernel 6.12";
  } else {
    __kernel_timespec ts{0, 1000000};
    io_uring_getevents_arg arg{};
    arg.sigmask_sz = _NSIG / 8;
    arg.pad = 100;  // min_wait_usec
    arg.ts = reinterpret_cast<uint64_t>(&ts);
    long rc;
    do {
      rc = ::syscall(__NR_io_uring_enter, ring.ring_fd, 0, 2,
                     IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG, &arg, sizeof(arg));
    } while (rc < 0 && errno == EINTR);
    if (rc >= 0) {
      why = "io_uring_enter with min_wait_usec returned before its timeout";
    } else if (errno != ETIME) {
      why = "io_uring_enter with min_wait_usec: " + ErrnoName(errno) + " (needs kernel 6.12)";
    }
  }
  io_uring_queue_exit(&ring);
  return why;
}

// IORING_REGISTER_RING_FDS (5.18): the ring registered in this thread's table of rings, then a
// NOP round trip through it (liburing then enters by the table index,
// IORING_ENTER_REGISTERED_RING).
std::string ProbeRegisteredRing() {
  io_uring ring;
  if (io_uring_queue_init(8, &ring, 0) < 0) return "no ring";
  std::string why;
  const int rc = io_uring_register_ring_fd(&ring);
  if (rc != 1) {
    why = "IORING_REGISTER_RING_FDS: " + ErrnoName(rc < 0 ? -rc : EIO) + " (needs kernel 5.18)";
  } else if (NopRoundTrip(&ring) != 0) {
    why = "a NOP through the registered ring failed";
  }
  io_uring_queue_exit(&ring);  // unregisters it too
  return why;
}

// IOSQE_CQE_SKIP_SUCCESS (5.17): a NOP that asks for no completion when it succeeds, then one
// that does; only the second may complete.
std::string ProbeCqeSkip() {
  io_uring ring;
  io_uring_params p{};
  if (io_uring_queue_init_params(8, &ring, &p) < 0) return "no ring";
  std::string why;
  if ((p.features & IORING_FEAT_CQE_SKIP) == 0) {
    why = "no IORING_FEAT_CQE_SKIP: needs kernel 5.17";
  } else {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_nop(sqe);
    sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
    io_uring_sqe_set_data64(sqe, 1);
    sqe = io_uring_get_sqe(&ring);
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data64(sqe, 2);
    io_uring_cqe* cqe = nullptr;
    if (io_uring_submit_and_wait(&ring, 1) < 0 || io_uring_peek_cqe(&ring, &cqe) != 0) {
      why = "no completion for the second NOP";
    } else if (cqe->user_data != 2 || io_uring_cq_ready(&ring) != 1) {
      why = "the skipped NOP completed";
    }
  }
  io_uring_queue_exit(&ring);
  return why;
}

// IORING_OP_FIXED_FD_INSTALL (6.8): a pipe's read end registered in a table slot of a ring of
// its own, then a process fd installed for the slot; the new fd must be the same pipe.
std::string ProbeFdInstall() {
  io_uring ring;
  if (io_uring_queue_init(8, &ring, 0) < 0) return "no ring";
  std::string why = "no pipe to try it on";
  int p[2];
  if (::pipe2(p, O_CLOEXEC) == 0) {
    const int rc = io_uring_register_files(&ring, &p[0], 1);
    if (rc < 0) {
      why = "registered file table: " + ErrnoName(-rc);
    } else {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      io_uring_prep_rw(uapi::kOpFixedFdInstall, sqe, 0, nullptr, 0, 0);
      sqe->flags |= IOSQE_FIXED_FILE;
      io_uring_submit(&ring);
      io_uring_cqe* cqe = nullptr;
      __kernel_timespec ts{1, 0};
      if (io_uring_wait_cqe_timeout(&ring, &cqe, &ts) != 0) {
        why = "no completion: needs kernel 6.8";
      } else {
        const int fd = cqe->res;
        io_uring_cqe_seen(&ring, cqe);
        if (fd < 0) {
          why = ErrnoName(-fd) + ": needs kernel 6.8";
        } else {
          // The installed fd reads what the pipe's write end wrote.
          char c = 0;
          why = ::write(p[1], "x", 1) == 1 && ::read(fd, &c, 1) == 1 && c == 'x'
                    ? ""
                    : "the installed fd is not the registered file";
          ::close(fd);
        }
      }
    }
    ::close(p[0]);
    ::close(p[1]);
  }
  io_uring_queue_exit(&ring);
  return why;
}

}  // namespace

bool KnownFeature(const std::string& name) {
  for (const Needed& n : kOpcodes)
    if (name == n.name) return true;
  for (const char* f : kBypassFeatures)
    if (name == f) return true;
  for (const char* f : kOptionalFeatures)
    if (name == f) return true;
  return name == "provided buffer ring" || name == "io_uring";
}

namespace {

// io_uring itself: a ring can be set up here and a NOP goes round; false with r->reason set.
bool ProbeSetup(io_uring* ring, io_uring_params* params, ProbeReport* r) {
  int rc = io_uring_queue_init_params(8, ring, params);
  if (rc < 0) {
    const int err = -rc;
    r->reason = "io_uring_setup: " + ErrnoName(err);
    const std::string disabled = ReadSysctl("/proc/sys/kernel/io_uring_disabled");
    if (err == EPERM && !disabled.empty() && disabled != "0") {
      r->reason += " (kernel.io_uring_disabled=" + disabled + ")";
    } else if (err == ENOSYS) {
      r->reason += " (blocked by seccomp, or a kernel without io_uring)";
    } else if (err == EPERM) {
      r->reason += " (not permitted: a seccomp profile or LSM policy?)";
    }
    r->lines.push_back(r->reason);
    return false;
  }
  r->lines.push_back("io_uring_setup: ok (features 0x" + [&] {
    char b[16];
    std::snprintf(b, sizeof b, "%x", params->features);
    return std::string(b);
  }() + ")");

  // A NOP round trip: setup can succeed where submission is filtered.
  if (const int err = NopRoundTrip(ring); err != 0) {
    r->reason = "io_uring_enter: NOP round trip failed (" + ErrnoName(err) + ")";
    r->lines.push_back(r->reason);
    io_uring_queue_exit(ring);
    return false;
  }
  r->lines.push_back("NOP round trip: ok");

  return true;
}

// What the uring tiers cannot run without: every opcode they use, NODROP, provided buffer rings.
// The first one missing, or empty.
std::string ProbeRequired(const std::vector<std::string>& masked, io_uring* ring,
                          const io_uring_params& params, bool* shutdown_op, ProbeReport* r) {
  std::string missing;
  io_uring_probe* probe = io_uring_get_probe_ring(ring);
  if (probe == nullptr) {
    missing = "IORING_REGISTER_PROBE";
  } else {
    for (const Needed& n : kOpcodes) {
      const bool ok = io_uring_opcode_supported(probe, n.opcode) && !Masked(masked, n.name);
      r->lines.push_back(std::string(n.name) + (ok ? ": ok" : ": missing"));
      if (!ok && missing.empty()) missing = n.name;
    }
    *shutdown_op = io_uring_opcode_supported(probe, IORING_OP_SHUTDOWN);
    io_uring_free_probe(probe);
  }
  if ((params.features & IORING_FEAT_NODROP) == 0) {
    r->lines.push_back("IORING_FEAT_NODROP: missing");
    if (missing.empty()) missing = "IORING_FEAT_NODROP";
  }

  // Provided buffer rings (kernel 5.19) are what multishot recv draws from.
  const size_t bytes = 4096;
  void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uint64_t>(mem);
  reg.ring_entries = 8;
  reg.bgid = 7;
  const int rc = mem == MAP_FAILED ? -ENOMEM
                 : Masked(masked, "provided buffer ring")
                     ? -ENOSYS
                     : io_uring_register_buf_ring(ring, &reg, 0);
  r->lines.push_back(std::string("provided buffer ring: ") + (rc == 0 ? "ok" : ErrnoName(-rc)));
  if (rc != 0 && missing.empty()) missing = "IORING_REGISTER_PBUF_RING";
  if (rc == 0) io_uring_unregister_buf_ring(ring, 7);
  if (mem != MAP_FAILED) ::munmap(mem, bytes);

  return missing;
}

// The uring tiers' optional features, each lost alone where the kernel lacks it.
// SINGLE_ISSUER and DEFER_TASKRUN are optimisations: the backend runs without them.
void ProbeSingleIssuer(ProbeReport* r) {
  io_uring ring;
  io_uring_params p{};
  p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  const int rc = io_uring_queue_init_params(8, &ring, &p);
  r->lines.push_back(std::string("SINGLE_ISSUER + DEFER_TASKRUN: ") +
                     (rc == 0 ? "ok" : "unavailable (optional)"));
  if (rc == 0) io_uring_queue_exit(&ring);
}

void ProbeOptional(const std::vector<std::string>& masked, ProbeReport* r) {
  // SQPOLL (optional, --sqpoll): unprivileged since 5.11.
  io_uring ring;
  io_uring_params p{};
  p.flags = IORING_SETUP_SQPOLL;
  p.sq_thread_idle = 10;
  const int rc = Masked(masked, "SQPOLL") ? -ENOSYS : io_uring_queue_init_params(8, &ring, &p);
  r->sqpoll_usable = rc == 0;
  r->lines.push_back(std::string("SQPOLL: ") +
                     (rc == 0 ? "ok (optional, --sqpoll)" : ErrnoName(-rc) + " (optional)"));
  if (rc == 0) io_uring_queue_exit(&ring);

  // Optional features of the uring tiers, each lost alone where the kernel lacks it.
  auto optional = [&](const char* name, std::string (*probe)(), const char* use, bool* ok) {
    const std::string why = Masked(masked, name) ? "masked" : probe();
    *ok = why.empty();
    r->lines.push_back(std::string(name) + ": " +
                       (*ok ? std::string("ok (") + use + ")" : why + " (optional)"));
  };
  optional("incremental receive", &ProbeIncrementalReceive,
           "uring tiers: a small receive pool, --recv-pool-kib", &r->recv_incremental);
  optional("NAPI busy poll", &ProbeNapi, "--busy-poll-us", &r->napi);
  optional("batched waits", &ProbeBatchWait, "--batch-wait-us", &r->batch_wait);
  optional("fd install", &ProbeFdInstall, "bypass: cached bodies with sendfile", &r->fd_install);
  optional("registered ring fd", &ProbeRegisteredRing, "bypass: no fd lookup per io_uring_enter",
           &r->registered_ring);
  optional("CQE skip", &ProbeCqeSkip, "uring tiers: closes and cancels post no completion",
           &r->cqe_skip);
}

}  // namespace

ProbeReport ProbeUring(const std::vector<std::string>& masked) {
  ProbeReport r;
  if (Masked(masked, "io_uring")) {
    r.reason = "io_uring: masked";
    r.lines.push_back(r.reason);
    return r;
  }
  io_uring ring;
  io_uring_params p{};
  if (!ProbeSetup(&ring, &p, &r)) return r;
  bool shutdown_op = false;
  const std::string missing = ProbeRequired(masked, &ring, p, &shutdown_op, &r);
  io_uring_queue_exit(&ring);
  ProbeSingleIssuer(&r);
  if (!missing.empty()) {
    r.reason = "missing " + missing;
    r.bypass_reason = "needs the uring tier, which is " + r.reason;
    return r;
  }
  r.usable = true;
  r.reason = "io_uring has every opcode and feature the uring backend needs";
  ProbeBypass(masked, shutdown_op, &r);
  ProbeOptional(masked, &r);
  return r;
}

}  // namespace ringd::io
