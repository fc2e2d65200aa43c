// The simulator as a test: a few thousand quick seeds, each a whole run of the real shard on the
// simulated loop with its invariants checked after every step, in four parts that Bazel runs as
// parallel shards. A failure prints the seed's replay command.
#include "tests/sim/shard_sim.h"

#include <cstdio>
#include <map>
#include <string>

#include "gtest/gtest.h"

namespace ringd::sim {
namespace {

constexpr uint64_t kSeeds = 2000;
// The seeds run as kParts tests of every kParts-th seed, which Bazel's shards (shard_count in
// BUILD.bazel) run side by side; each part must reach every path below on its own.
constexpr uint64_t kParts = 4;

class QuickSeeds : public testing::TestWithParam<uint64_t> {};

TEST_P(QuickSeeds, PassAndReachEveryPath) {
  InstallCrashReporter();
  SimOptions options;
  options.quick = true;
  uint64_t requests = 0;
  uint64_t seeds = 0;
  std::map<std::string, uint64_t> coverage;
  for (uint64_t seed = 1 + GetParam(); seed <= kSeeds; seed += kParts) {
    ++seeds;
    const SeedResult r = RunSeed(seed, options);
    requests += r.requests;
    for (const auto& [what, n] : r.coverage) coverage[what] += n;
    if (!r.ok) {
      std::string trace;
      for (const std::string& line : r.trace) trace += "  " + line + "\n";
      FAIL() << "seed " << seed << ": " << r.failure << "\nlast events:\n"
             << trace << "replay: " << ReplayCommand(seed, options);
    }
  }
  std::printf("%llu seeds, %llu simulated requests\n", static_cast<unsigned long long>(seeds),
              static_cast<unsigned long long>(requests));
  // Paths these seeds must reach for their checks to say anything about them: a receive ended
  // beside the last response (a client that asked to close), and one re-armed because its
  // client talked on after all (the connection then lingers, and CheckLingering holds it to
  // reading until the client closes).
  EXPECT_GT(coverage["shard.recv_ended_early"], 0u);
  EXPECT_GT(coverage["shard.recv_rearmed_to_linger"], 0u);
  // Input buffers a stashed head held, and exchanges, back to the kernel once idle a whole
  // period.
  EXPECT_GT(coverage["shard.input_buffers_released"], 0u);
  EXPECT_GT(coverage["shard.exchanges_released"], 0u);
  // And the loop's side of them: bytes a pause held (uring), and a cancelled receive that said
  // bytes were left unread (kRecvCancelledWithInput).
  EXPECT_GT(coverage["sim.held_at_pause"], 0u);
  EXPECT_GT(coverage["sim.cancel_input_left"], 0u);
  // HTTP/2 (a third of the seeds, some clients each; h2c and through TLS): streams answered,
  // streams the clients cancelled (RST_STREAM received), GOAWAY (idle timeouts, drains), and
  // bodies that waited for a window the client had not opened yet (1 KiB windows), and
  // connections idle long enough to hand their frame buffers back.
  EXPECT_GT(coverage["h2.streams"], 0u);
  EXPECT_GT(coverage["h2.stalls"], 0u);
  EXPECT_GT(coverage["h2.frame_buffers_released"], 0u);
  EXPECT_GT(coverage["h2.sendfile_streams"], 0u);  // --http2-sendfile's path, on half the seeds
  EXPECT_GT(coverage["h2.tls_clients"], 0u);
  EXPECT_GT(coverage["h2.resets_received"], 0u);
  EXPECT_GT(coverage["h2.goaways_sent"], 0u);
  // The PROXY protocol (a quarter of the seeds, every client): headers in front of plain and TLS
  // streams, split wherever the receives split them, and missing or malformed ones refused.
  EXPECT_GT(coverage["proxy.clients"], 0u);
  EXPECT_GT(coverage["proxy.tls_clients"], 0u);
  EXPECT_GT(coverage["proxy.refused"], 0u);
  // Sites (a quarter of the seeds): requests chosen for the site by Host or :authority, each
  // answered from the site's own cache beneath the same files, as the default site answers.
  EXPECT_GT(coverage["sites.seeds"], 0u);
  EXPECT_GT(coverage["sites.requests"], 0u);
  // TLS (a third of the seeds, through TlsLoop and the stand-in session): records split down to
  // one byte, bad input (an alert, then the close), clients closing without close_notify, and
  // handshakes that never finish (closed by the header timeout).
  EXPECT_GT(coverage["tls.seeds"], 0u);
  EXPECT_GT(coverage["tls.handshakes"], 0u);
  EXPECT_GT(coverage["tls.loop_hellos_deferred"], 0u);
  EXPECT_GT(coverage["tls.one_byte_feeds"], 0u);
  EXPECT_GT(coverage["tls.coalesced_feeds"], 0u);
  EXPECT_GT(coverage["tls.bad_input"], 0u);
  EXPECT_GT(coverage["tls.renegotiations"], 0u);
  EXPECT_GT(coverage["tls.alerts_seen"], 0u);
  EXPECT_GT(coverage["tls.close_notify_seen"], 0u);
  EXPECT_GT(coverage["tls.client_close_notify"], 0u);
  EXPECT_GT(coverage["tls.client_no_close_notify"], 0u);
  EXPECT_GT(coverage["tls.stalled_handshakes"], 0u);
  EXPECT_GT(coverage["tls.stalled_closed"], 0u);
  // Floods of sitters past the limit: newcomers parked for a slot, and connections that gave way
  // closed for them before their lingering ended.
  EXPECT_GT(coverage["sim.flooded"], 0u);
  // Deploys: the root moved under requests (each path a new inode beneath a new directory).
  EXPECT_GT(coverage["sim.root_switched"], 0u);
  EXPECT_GT(coverage["shard.parked"], 0u);
  EXPECT_GT(coverage["shard.gave_way_closed"], 0u);
  std::string reached;
  for (const auto& [what, n] : coverage) reached += " " + what + "=" + std::to_string(n);
  std::printf("reached:%s\n", reached.c_str());
}

INSTANTIATE_TEST_SUITE_P(EveryFourthSeed, QuickSeeds, testing::Range<uint64_t>(0, kParts));

// Seeds known to reach the scenarios below, each replayed as it runs: long runs' seeds
// (shard_sim --minutes=M) and quick ones'. Each must pass every check.
TEST(ShardSim, SeedsThatOnceFailed) {
  InstallCrashReporter();
  struct Case {
    uint64_t seed;
    bool quick;
  };
  for (const Case& c : {
           // A content read finds the file truncated under it and marks the entry out of date:
           // the open-file cache's grace must not answer from it while it revalidates.
           Case{6944899924303142946u, false},
           // HTTP/2 over TLS: a file truncated under one stream while another waits behind it;
           // every byte nghttp2 counted against the connection's window must reach the client
           // as DATA, or the stream behind stalls.
           Case{521732695015794570u, false},
           // TlsLoop: a shutdown from the send's callback sends close_notify before the FIN.
           Case{5, true},
           // TlsLoop: a send the session refuses after bad input does not keep the alert from
           // going out.
           Case{42, true},
           // TlsLoop: a slow reader taking a 64 KiB chunk's records shows the shard progress, so
           // it does not meet the send timeout.
           Case{57, true},
           // Out of descriptors twice in one turn: a connection that gave way (skipping a
           // POST's body after its 405) must linger before the next EMFILE closes it, or the
           // reset destroys the 405 its client has not read.
           Case{5143, false},
           // A TLS client silent for the whole header timeout sends its hello just before it
           // ends: the server's hello and close_notify are going out when the receive ends with
           // input left, and the close resets. No byte of a request was read, so no response is
           // owed: not a close on a talking client.
           Case{1896233154203648878u, false},
           // The root moves while a revalidation of /small.txt runs beneath the old one: taken
           // up when it finished, it answered a request sent after the switch from the old
           // release (FileCache::Ready must drop what was opened beneath a root since moved).
           Case{536, false},
           // A file opened beneath the new root just after a switch, then replaced in the same
           // millisecond: its version was there after the switch, and may answer a request
           // sent after it (the oracle's window starts at the switch's edit). Found with
           // --precompressed's lone .gz siblings.
           Case{2688128786950051447u, false},
       }) {
    SimOptions options;
    options.quick = c.quick;
    const uint64_t seed = c.seed;
    const SeedResult r = RunSeed(seed, options);
    if (!r.ok) {
      std::string trace;
      for (const std::string& line : r.trace) trace += "  " + line + "\n";
      FAIL() << "seed " << seed << ": " << r.failure << "\nlast events:\n"
             << trace << "replay: " << ReplayCommand(seed, options);
    }
  }
}

// The same seed runs the same way: counts and simulated time agree.
TEST(ShardSim, Deterministic) {
  SimOptions options;
  options.quick = true;
  for (uint64_t seed : {7u, 1234u}) {
    const SeedResult a = RunSeed(seed, options);
    const SeedResult b = RunSeed(seed, options);
    EXPECT_EQ(a.requests, b.requests);
    EXPECT_EQ(a.responses, b.responses);
    EXPECT_EQ(a.steps, b.steps);
    EXPECT_EQ(a.simulated_ms, b.simulated_ms);
  }
}

}  // namespace
}  // namespace ringd::sim
