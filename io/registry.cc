#include "io/registry.h"

#include "io/probe.h"

namespace ringd::io {
namespace {

// The optional features of the io_uring tiers, each kept only where the probe found it.
void AdaptUring(bool direct, const ProbeReport& probe, LoopOptions* o, std::string* features) {
  o->uring.recv_incremental = o->uring.recv_incremental && probe.recv_incremental;
  *features +=
      o->uring.recv_incremental
          ? "; incremental receive buffers (" +
                std::to_string(uint64_t{o->recv_buffer_count} * o->recv_buffer_size / 1024) +
                " KiB per shard)"
          : "; whole receive buffers (incremental receive: unavailable)";
  o->uring.skip_unread_cqes = o->uring.skip_unread_cqes && probe.cqe_skip;
  *features += o->uring.skip_unread_cqes ? "; closes and cancels post no completion"
                                         : "; closes and cancels complete (CQE skip: unavailable)";
  if (!direct) {
    // Process descriptors: sendfile works on every socket, and no ring table is to be gained.
    o->uring.bypass_sendfile = false;
    o->uring.register_ring_fd = false;
    return;
  }
  // Cached file bodies: sendfile on a process fd installed for the socket (inline, without a hop
  // to io-wq and a pipe per body: docs/PERFORMANCE.md), where the kernel can.
  o->uring.bypass_sendfile = o->uring.bypass_sendfile && probe.fd_install;
  *features += o->uring.bypass_sendfile ? "; cached bodies with sendfile on an installed fd"
                                        : "; every body spliced";
  o->uring.register_ring_fd = o->uring.register_ring_fd && probe.registered_ring;
  *features += o->uring.register_ring_fd ? "; registered ring fd"
                                         : "; ring entered by fd (registered ring fd: unavailable)";
}

}  // namespace

TierTable BuiltinTiers() {
  TierTable table;
  TierCapabilities ring;
  ring.sqpoll = false;
  ring.busy_poll = true;
  ring.batch_wait = true;
  ring.splice_pipes = true;

  Tier bypass;
  bypass.name = "bypass";
  bypass.summary = "io_uring with direct descriptors: connections live in the ring's file table";
  bypass.can = ring;
  bypass.can.names_clients = false;  // a direct descriptor has no fd for getpeername
  bypass.can.file_table_per_connection = true;
  bypass.can.sqpoll = true;
  bypass.usable = [](const ProbeReport& p, std::string* why) {
    *why = p.bypass_reason;
    return p.bypass_usable;
  };
  bypass.adapt = [](const ProbeReport& p, LoopOptions* o, std::string* f) {
    AdaptUring(/*direct=*/true, p, o, f);
  };
  bypass.make = &MakeBypassLoop;
  table.Register(std::move(bypass));

  Tier uring;
  uring.name = "uring";
  uring.summary = "io_uring with process descriptors";
  uring.can = ring;
  uring.usable = [](const ProbeReport& p, std::string* why) {
    *why = p.reason;
    return p.usable;
  };
  uring.adapt = [](const ProbeReport& p, LoopOptions* o, std::string* f) {
    AdaptUring(/*direct=*/false, p, o, f);
  };
  uring.make = &MakeUringLoop;
  table.Register(std::move(uring));

  Tier epoll;
  epoll.name = "epoll";
  epoll.summary = "epoll readiness and a worker pool for file work: runs where io_uring is refused";
  epoll.usable = [](const ProbeReport&, std::string* why) {
    *why = "readiness and a worker pool, available everywhere";
    return true;
  };
  epoll.adapt = [](const ProbeReport&, LoopOptions* o, std::string*) {
    o->uring.recv_incremental = false;
    o->uring.skip_unread_cqes = false;
    o->uring.bypass_sendfile = false;
    o->uring.register_ring_fd = false;
  };
  epoll.make = &MakeEpollLoop;
  table.Register(std::move(epoll));
  return table;
}

}  // namespace ringd::io
