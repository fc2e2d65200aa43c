// The io tiers as one table: each tier's name, what it can do, whether it runs here, the optional
// features it takes up, and its factory. The composition root (server/ringd_main.cc) chooses a
// tier from the table by name or by `--io=auto`; everything after that asks the Tier's
// capabilities or the loop, never its name. A tier that lives outside io/ (the shard simulator's
// loop) registers itself the same way the built-in ones do (io/registry.h).
//
//   io::TierTable tiers = io::BuiltinTiers();
//   io::TierChoice c = tiers.Choose("auto", probe, needs);   // c.tier (null on error), c.reason
//   io::LoopOptions o;  o.uring.recv_incremental = true;      // what the server would like
//   c.tier->adapt(probe, &o, &features);                      // what the tier can do here
//   std::unique_ptr<io::Loop> loop = c.tier->make(o, &error);
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "io/loop.h"
#include "io/probe_report.h"

namespace ringd::io {

// What a tier can do, for the flags and the server to ask instead of comparing names.
struct TierCapabilities {
  // A connection handle is a process descriptor: getpeername works (the access log's client).
  bool names_clients = true;
  // Each shard registers a file table with a slot per connection: the descriptor limit
  // (RLIMIT_NOFILE) must hold it.
  bool file_table_per_connection = false;
  bool sqpoll = false;        // a kernel thread can submit for the shard (--sqpoll)
  bool busy_poll = false;     // NAPI busy polling while it waits (--busy-poll-us)
  bool batch_wait = false;    // waits for completions can be batched (--batch-wait-us)
  bool splice_pipes = false;  // bodies may splice through a pool of pipes (--pipes)
};

struct Tier {
  std::string name;     // what --io takes
  std::string summary;  // one line for --help and the docs
  TierCapabilities can;
  // Whether the tier runs here; `why` gets one line either way (what it uses, or what is missing).
  std::function<bool(const ProbeReport& probe, std::string* why)> usable;
  // Clears, in `options`, each optional feature the server asked for that this tier cannot use
  // here, and appends "; phrase" to `features` for each it decided on (the start-up line).
  std::function<void(const ProbeReport& probe, LoopOptions* options, std::string* features)> adapt;
  LoopFactory make;
};

// What the server needs of a tier, beyond the tier working at all.
struct TierNeeds {
  bool names_clients = false;     // auto only: the access log wants client addresses
  uint64_t file_table_slots = 0;  // per shard, for tiers with a file table per connection
  uint64_t descriptor_limit = 0;  // RLIMIT_NOFILE; 0: unlimited
};

struct TierChoice {
  const Tier* tier = nullptr;  // null: none could be chosen, and `reason` says why
  std::string reason;          // one line: "NAME: why" (and why not each tier before it)
};

class TierTable {
 public:
  // Adds a tier; under --io=auto earlier tiers are preferred. A name may be registered once.
  void Register(Tier tier);
  const Tier* Find(std::string_view name) const;  // null for an unknown name
  const std::vector<Tier>& tiers() const { return tiers_; }
  // "auto, bypass, uring or epoll": the values --io takes.
  std::string NamesForHelp() const;

  // `asked` is a tier's name or "auto" (the first tier, in order, that works here and meets
  // `needs`). An unknown name or a tier that cannot run here is an error: a null tier.
  TierChoice Choose(std::string_view asked, const ProbeReport& probe, const TierNeeds& needs) const;
  // Whether `tier` runs here and meets `needs`, with the one-line reason either way.
  bool Usable(const Tier& tier, const ProbeReport& probe, const TierNeeds& needs,
              std::string* why) const;

 private:
  std::vector<Tier> tiers_;
};

}  // namespace ringd::io
