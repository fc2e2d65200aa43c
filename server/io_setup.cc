#include "server/io_setup.h"

#include <fstream>

#include "io/probe.h"
#include "server/core/shard.h"

namespace ringd {
namespace {

// Whether every connection's client comes in a PROXY header: every listener is ,proxy and every
// peer may send the header (--proxy-from all).
bool HeadersNameEveryClient(const Config& c) {
  if (!c.proxy_from_all) return false;
  for (const ListenAddress& a : c.listen)
    if (!a.proxy) return false;
  for (const ListenAddress& a : c.listen_tls)
    if (!a.proxy) return false;
  return true;
}

// Whether the limits per client or --real-ip-from need the sockets' peers: not when a PROXY
// header names every client.
bool NeedsPeersForLimits(const Config& c) {
  return (c.limits_clients() || !c.real_ip_from.empty()) && !HeadersNameEveryClient(c);
}

// The flags that need a capability some tiers lack: which, and whether the config sets it.
struct CapabilityFlag {
  const char* flag;
  bool io::TierCapabilities::*can;
  bool (*asked)(const Config&);
};

constexpr CapabilityFlag kCapabilityFlags[] = {
    {"--sqpoll", &io::TierCapabilities::sqpoll, [](const Config& c) { return c.sqpoll; }},
    {"--busy-poll-us", &io::TierCapabilities::busy_poll,
     [](const Config& c) { return c.busy_poll_us != 0; }},
    {"--batch-wait-us", &io::TierCapabilities::batch_wait,
     [](const Config& c) { return c.batch_wait_us != 0; }},
    // The peer's address is judged at accept (getpeername), which a direct descriptor lacks.
    {"--allow/--deny", &io::TierCapabilities::names_clients,
     [](const Config& c) { return !c.client_rules.empty(); }},
    // A site's rules judge each request's client, unless a PROXY header names every one.
    {"--allow/--deny in a --site without every listener ,proxy and --proxy-from all",
     &io::TierCapabilities::names_clients,
     [](const Config& c) { return c.any_site_rules() && !HeadersNameEveryClient(c); }},
    // The limits and --real-ip-from key on the client, unless a PROXY header names every one.
    {"--limit-conn, --limit-req or --real-ip-from without every listener ,proxy and --proxy-from "
     "all",
     &io::TierCapabilities::names_clients, [](const Config& c) { return NeedsPeersForLimits(c); }},
    // (Unless every peer is trusted, --proxy-from all: the header names the client.)
    {"--listen ADDR,proxy without --proxy-from all", &io::TierCapabilities::names_clients,
     [](const Config& c) { return c.any_proxy_listener() && !c.proxy_from_all; }},
};

// "--io=bypass or --io=uring": the tiers that can do what `f` needs.
std::string TiersThatCan(const io::TierTable& tiers, const CapabilityFlag& f) {
  std::string names;
  for (const io::Tier& t : tiers.tiers()) {
    if (!(t.can.*f.can)) continue;
    names += (names.empty() ? "" : " or ") + ("--io=" + t.name);
  }
  return names.empty() ? "a tier this build lacks" : names;
}

// The first flag that needs a capability `tier` lacks, as one line; empty when none.
std::string MissingCapability(const Config& config, const io::TierTable& tiers,
                              const io::Tier& tier) {
  for (const CapabilityFlag& f : kCapabilityFlags) {
    if (f.asked(config) && !(tier.can.*f.can))
      return std::string(f.flag) + " needs a tier that has it (" + TiersThatCan(tiers, f) +
             "); the " + tier.name + " tier does not";
  }
  return "";
}

io::TierNeeds NeedsOf(const Config& config, uint64_t descriptor_limit) {
  io::TierNeeds needs;
  needs.names_clients = !config.access_log.empty() || !config.client_rules.empty() ||
                        NeedsPeersForLimits(config) ||
                        (config.any_site_rules() && !HeadersNameEveryClient(config)) ||
                        (config.any_proxy_listener() && !config.proxy_from_all);
  needs.file_table_slots = uint64_t{config.max_connections} + Shard::kSpareSlots;
  needs.descriptor_limit = descriptor_limit;
  return needs;
}

}  // namespace

absl::Status CheckIoFlags(const Config& config, const io::TierTable& tiers) {
  for (const std::string& name : config.io_mask) {
    if (!io::KnownFeature(name)) {
      return absl::InvalidArgumentError("--io-mask: unknown feature '" + name +
                                        "' (names as ringd --probe prints)");
    }
  }
  if (config.io == "auto") return absl::OkStatus();
  const io::Tier* tier = tiers.Find(config.io);
  if (tier == nullptr) {
    return absl::InvalidArgumentError("--io: expected " + tiers.NamesForHelp() + ", got '" +
                                      config.io + "'");
  }
  const std::string missing = MissingCapability(config, tiers, *tier);
  return missing.empty() ? absl::OkStatus() : absl::InvalidArgumentError(missing);
}

absl::StatusOr<IoSetup> ChooseIo(const Config& config, const io::TierTable& tiers,
                                 const io::ProbeReport& probe, uint64_t descriptor_limit) {
  const io::TierChoice choice = tiers.Choose(config.io, probe, NeedsOf(config, descriptor_limit));
  if (choice.tier == nullptr) {
    return absl::FailedPreconditionError(choice.reason);
  }
  if (std::string missing = MissingCapability(config, tiers, *choice.tier); !missing.empty()) {
    return absl::FailedPreconditionError(missing);  // auto chose a tier without what a flag needs
  }
  if (config.sqpoll && !probe.sqpoll_usable) {
    return absl::FailedPreconditionError("--sqpoll: SQPOLL rings cannot be created here");
  }
  if (config.busy_poll_us != 0 && !probe.napi) {
    return absl::FailedPreconditionError(
        "--busy-poll-us: this kernel cannot busy-poll for io_uring (IORING_REGISTER_NAPI needs "
        "Linux 6.9; ringd --probe says more)");
  }
  if (config.batch_wait_us != 0 && !probe.batch_wait) {
    return absl::FailedPreconditionError(
        "--batch-wait-us: this kernel cannot bound a wait for completions (io_uring_enter's "
        "min_wait_usec needs Linux 6.12; ringd --probe says more)");
  }
  IoSetup setup;
  IoSetup* out = &setup;
  out->tier = choice.tier;
  out->line = choice.reason;
  if (config.sqpoll)
    out->line += config.sqpoll_per_shard ? "; SQPOLL, a thread per shard" : "; SQPOLL, one thread";
  // What the server would like; the tier keeps what it can use here and says so.
  io::LoopOptions& f = out->features;
  // Incremental receives share a --recv-pool-kib pool of large buffers.
  f.uring.recv_incremental = true;
  f.recv_buffer_size = IncrementalRecvBufferBytes(config);
  f.recv_buffer_count =
      static_cast<uint32_t>(uint64_t{config.recv_pool_kib} * 1024 / f.recv_buffer_size);
  f.uring.skip_unread_cqes = true;
  f.uring.register_ring_fd = true;
  f.uring.bypass_sendfile = config.bypass_sendfile;
  choice.tier->adapt(probe, &f, &out->line);
  if (config.splice_min_bytes != 0)
    out->line += "; bodies from " + std::to_string(config.splice_min_bytes) + " bytes spliced";
  if (config.batch_wait_us != 0)
    out->line += "; batched waits " + std::to_string(config.batch_wait_us) + " us";
  if (config.busy_poll_us != 0)
    out->line += "; NAPI busy poll " + std::to_string(config.busy_poll_us) + " us";
  return setup;
}

std::vector<std::string> SizingWarnings(const Config& config, uint32_t shards,
                                        uint64_t descriptor_limit, size_t usable_cpus) {
  std::vector<std::string> lines;
  // Each connection is a descriptor; the files it sends and the listeners take more.
  const uint64_t connections = uint64_t{shards} * (config.max_connections + Shard::kReclaimReserve);
  if (descriptor_limit != 0 && connections > descriptor_limit) {
    lines.push_back("--max-connections=" + std::to_string(config.max_connections) + " on " +
                    std::to_string(shards) + " shard" + (shards == 1 ? "" : "s") + " is up to " +
                    std::to_string(connections) + " connections (" +
                    std::to_string(Shard::kReclaimReserve) +
                    " more per shard on their way out), more than the open-file limit of " +
                    std::to_string(descriptor_limit) +
                    " (RLIMIT_NOFILE): raise it (LimitNOFILE=, ulimit -n) or lower "
                    "--max-connections");
  }
  if (shards > usable_cpus) {
    lines.push_back("--shards=" + std::to_string(shards) + " is more than the " +
                    std::to_string(usable_cpus) + " CPU" + (usable_cpus == 1 ? "" : "s") +
                    " this process may run on: shards share CPUs, each with its own memory");
  }
  return lines;
}

std::string DescribeProbe(const Config& config, const io::TierTable& tiers,
                          const io::ProbeReport& probe, uint64_t descriptor_limit) {
  std::string text;
  for (const std::string& line : probe.lines) text += line + "\n";
  const io::TierNeeds needs = NeedsOf(config, descriptor_limit);
  for (const io::Tier& t : tiers.tiers()) {
    std::string why;
    const bool ok = tiers.Usable(t, probe, needs, &why);
    text += t.name + " tier: " + (ok ? "usable (" : "unusable (") + why + ")\n";
  }
  text += "--io=auto would choose " + tiers.Choose("auto", probe, needs).reason + "\n";
  // Kernel TLS (the "tls" upper-layer protocol) would let TLS bodies go out with sendfile and
  // splice; without it they are encrypted in user space (docs/ARCHITECTURE.md, "HTTPS").
  std::ifstream ulp("/proc/sys/net/ipv4/tcp_available_ulp");
  std::string ulps;
  std::getline(ulp, ulps);
  text += ulps.find("tls") != std::string::npos
              ? "kernel TLS: available (tcp_available_ulp: " + ulps + "); not used yet\n"
              : "kernel TLS: unavailable (tcp_available_ulp: " +
                    (ulps.empty() ? std::string("none") : ulps) +
                    "): HTTPS bodies are encrypted in user space\n";
  text += config.http2 ? "HTTP/2: on (h2 by ALPN on --listen-tls, h2c by its preface on --listen; "
                         "--http2=false turns it off)\n"
                       : "HTTP/2: off (--http2=false): HTTP/1.1 alone\n";
  return text;
}

}  // namespace ringd
