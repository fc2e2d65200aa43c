#include "io/probe.h"

#include <errno.h>
#include <liburing.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <fstream>

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

}  // namespace

ProbeReport ProbeUring() {
  ProbeReport r;
  io_uring ring;
  io_uring_params p{};
  int rc = io_uring_queue_init_params(8, &ring, &p);
  if (rc < 0) {
    const int err = -rc;
    r.reason = "io_uring_setup: " + ErrnoName(err);
    const std::string disabled = ReadSysctl("/proc/sys/kernel/io_uring_disabled");
    if (err == EPERM && !disabled.empty() && disabled != "0") {
      r.reason += " (kernel.io_uring_disabled=" + disabled + ")";
    } else if (err == ENOSYS) {
      r.reason += " (blocked by seccomp, or a kernel without io_uring)";
    } else if (err == EPERM) {
      r.reason += " (not permitted: a seccomp profile or LSM policy?)";
    }
    r.lines.push_back(r.reason);
    return r;
  }
  r.lines.push_back("io_uring_setup: ok (features 0x" + [&] {
    char b[16];
    std::snprintf(b, sizeof b, "%x", p.features);
    return std::string(b);
  }() + ")");

  // A NOP round trip: setup can succeed where submission is filtered.
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  io_uring_prep_nop(sqe);
  io_uring_cqe* cqe = nullptr;
  rc = io_uring_submit_and_wait(&ring, 1);
  if (rc < 0 || io_uring_peek_cqe(&ring, &cqe) != 0 || cqe->res < 0) {
    r.reason = "io_uring_enter: NOP round trip failed (" + ErrnoName(rc < 0 ? -rc : EIO) + ")";
    r.lines.push_back(r.reason);
    io_uring_queue_exit(&ring);
    return r;
  }
  io_uring_cqe_seen(&ring, cqe);
  r.lines.push_back("NOP round trip: ok");

  std::string missing;
  io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  if (probe == nullptr) {
    missing = "IORING_REGISTER_PROBE";
  } else {
    for (const Needed& n : kOpcodes) {
      const bool ok = io_uring_opcode_supported(probe, n.opcode);
      r.lines.push_back(std::string(n.name) + (ok ? ": ok" : ": missing"));
      if (!ok && missing.empty()) missing = n.name;
    }
    io_uring_free_probe(probe);
  }
  if ((p.features & IORING_FEAT_NODROP) == 0) {
    r.lines.push_back("IORING_FEAT_NODROP: missing");
    if (missing.empty()) missing = "IORING_FEAT_NODROP";
  }

  // Provided buffer rings (kernel 5.19) are what multishot recv draws from.
  const size_t bytes = 4096;
  void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uint64_t>(mem);
  reg.ring_entries = 8;
  reg.bgid = 7;
  rc = mem == MAP_FAILED ? -ENOMEM : io_uring_register_buf_ring(&ring, &reg, 0);
  r.lines.push_back(std::string("provided buffer ring: ") + (rc == 0 ? "ok" : ErrnoName(-rc)));
  if (rc != 0 && missing.empty()) missing = "IORING_REGISTER_PBUF_RING";
  if (rc == 0) io_uring_unregister_buf_ring(&ring, 7);
  if (mem != MAP_FAILED) ::munmap(mem, bytes);
  io_uring_queue_exit(&ring);

  // SINGLE_ISSUER and DEFER_TASKRUN are optimisations: the backend runs without them.
  p = io_uring_params{};
  p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
  rc = io_uring_queue_init_params(8, &ring, &p);
  r.lines.push_back(std::string("SINGLE_ISSUER + DEFER_TASKRUN: ") +
                    (rc == 0 ? "ok" : "unavailable (optional)"));
  if (rc == 0) io_uring_queue_exit(&ring);

  if (!missing.empty()) {
    r.reason = "missing " + missing;
    return r;
  }
  r.usable = true;
  r.reason = "io_uring has every opcode and feature the uring backend needs";
  return r;
}

Selection Select(IoMode mode, const ProbeReport& report, bool* error) {
  *error = false;
  Selection s;
  switch (mode) {
    case IoMode::kEpoll:
      s.use_uring = false;
      s.reason = "epoll: chosen with --io=epoll";
      return s;
    case IoMode::kUring:
      if (!report.usable) {
        *error = true;
        s.reason = "--io=uring, but io_uring is unusable: " + report.reason;
        return s;
      }
      s.use_uring = true;
      s.reason = "uring: chosen with --io=uring";
      return s;
    case IoMode::kAuto:
      s.use_uring = report.usable;
      s.reason = report.usable ? "uring: " + report.reason : "epoll: " + report.reason;
      return s;
  }
  return s;
}

}  // namespace ringd::io
