// The shard simulator's driver, inside: what one seed's run holds (its configuration, file tree,
// clients and their requests) and the Sim that runs it. shard_sim.cc builds and drives a seed;
// shard_sim_checks.cc holds the oracle (is each response right for what was asked, given the
// files' history) and the invariants checked after every step. Not for use outside tests/sim.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/core/config.h"
#include "server/core/document_root.h"
#include "server/core/shard.h"
#include "server/http/mime_types.h"
#include "server/tls/tls_loop.h"
#include "tests/sim/shard_sim.h"
#include "tests/sim/sim_h2.h"
#include "tests/sim/sim_loop.h"
#include "tests/sim/sim_tls.h"

namespace ringd::sim::internal {

constexpr int64_t kLingerMs = 5000;       // server/core/shard.cc's lingering close
constexpr int64_t kCloseNoticeMs = 1000;  // a "Connection: close" response, then EOF within this
constexpr int64_t kBacklogWaitMs = 1000;  // a newcomer waits no longer while others idle

// What a request target resolves to in the simulated tree (which never changes shape: only
// the contents of some files, and whether flap.txt exists, change).
struct Route {
  std::string target;
  enum Kind { kFile, kRedirect, kStatus } kind = kFile;
  std::string path;      // kFile: the file, relative to the root
  std::string location;  // kRedirect
  int status = 0;        // kStatus
  bool has_gz = false;   // kFile: a precompressed sibling path + ".gz" exists
};

enum class Style : uint8_t {
  kNormal,           // valid requests, pipelined batches, reads everything
  kSlow,             // dribbles its requests a few bytes at a time (may meet the header timeout)
  kNoRead,           // stops reading: the server's sends stall until its send timeout
  kResetter,         // resets the connection mid-transfer
  kHalfClose,        // sends a batch, then shuts its sending side down; still reads the answers
  kMalformed,        // ends with a malformed request: 400 and close
  kBigHead,          // ends with a head over the limit: 431 and close
  kBigBody,          // ends with a body over max_discarded_body: 413 and close
  kBodyStall,        // ends with a body it never finishes sending (discard timeout)
  kChunked,          // ends with a chunked body: answered, then close
  kIdler,            // connects and says nothing (header timeout), or idles between batches
  kTalksAfterClose,  // ends with Connection: close, then sends another request anyway (which
                     // must go unanswered; the server may linger, or reset once it has closed)
  kSitter,  // a flooded seed's: one request, then it sits idle and never reads again (a FIN
            // goes unnoticed, so it never closes) until every client leaves
};

struct Req {
  const Route* route = nullptr;  // null: not a plain GET/HEAD of a route
  bool head = false;
  std::string range;
  std::string inm;  // If-None-Match
  bool gzip = false;
  bool closes = false;        // asked for Connection: close, or its framing ends the connection
  int expect_status = 0;      // a fixed answer (405, 413, 431, 200 for OPTIONS), or
  bool expect_error = false;  // any of 400/414/431/501/505, with close
  bool options = false;
  uint64_t start_offset = 0, end_offset = 0;  // in the client -> server byte stream
  int64_t sent_ms = 0;
  uint64_t root_generation = 0;  // the roots switched before it was sent (Sim::MaybeSwitchRoot)
  uint64_t transient_at_send = 0, refused_at_send = 0;
  uint32_t nth = 0;        // its number on the connection, from 1
  int32_t stream_id = 0;   // HTTP/2: its stream
  bool cancelled = false;  // HTTP/2: the client reset its stream (RST_STREAM CANCEL)
};

struct Resp {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;
  bool close = false;
};

struct Client {
  uint32_t id = 0;
  size_t sock = 0;
  Style style = Style::kNormal;
  std::string outbox;
  std::deque<Req> pending;
  std::string inbox;
  int64_t next_write_ms = 0;
  int64_t next_read_ms = 0;
  int64_t reset_at_ms = INT64_MAX;
  int batches_left = 1;
  uint64_t stream_offset = 0;
  uint32_t requests = 0;
  bool misbehaved = false;
  bool fin_sent = false;
  bool stopped_reading = false;
  bool close_response = false;
  std::string after_close;  // kTalksAfterClose: written once its close request is out
  int64_t close_response_ms = 0;
  bool ended = false;
  int64_t last_progress_ms = 0;
  std::map<std::string, std::string> etags;
  int64_t idle_since_ms = INT64_MAX;  // every answer in, nothing to send: idle keep-alive
  // TLS: the client's end of the record layer (null: plaintext), and its fault.
  std::unique_ptr<SimTlsClient> tls;
  enum class TlsFault : uint8_t { kNone, kStall, kGarbageFirst, kGarbageLater, kRenegotiate };
  TlsFault tls_fault = TlsFault::kNone;
  bool waits_for_end = false;  // sent a record the server refuses: reads until the end
  // HTTP/2: the client's nghttp2 session (null: it speaks HTTP/1.1). Its requests are streams,
  // answered in any order; `pending` holds them until each stream closes.
  std::unique_ptr<SimH2Client> h2;
  // Requests whose streams it cancelled: a file of theirs that changed may still end the
  // connection (the server frames a stream's data before it hears of the cancel).
  std::vector<Req> h2_cancelled;
};

std::string Lower(std::string s);
// Parses one response from the front of `in`. 0: need more; 1: done (`*consumed`); -1: garbage.
int ParseResponse(const std::string& in, bool head_request, Resp* r, size_t* consumed,
                  std::string* why);
std::string ErrorPage(int status);  // the body ringd's error page for `status` has

class Sim {
 public:
  Sim(uint64_t seed, const SimOptions& options, bool trace);
  SeedResult Run();

 private:
  // Run's parts.
  void MakeShard();
  void PickClients(uint64_t* max_steps, int64_t* run_until_ms);
  bool RunStep(uint64_t step);
  void CollectCoverage();
  bool AddMisbehavingRequest(Client& c);
  void ClientRead(Client& c, SimSocket& s, int64_t now);
  void ClientWrite(Client& c, SimSocket& s, int64_t now);
  void ClientNext(Client& c, SimSocket& s, int64_t now);
  bool AddRequestOfTheMix(Client& c, bool last, bool last_batch);
  // A request of the mix: its method, target and fields (HTTP/1.1 names), and its body's size.
  void DrawRequest(Req* q, std::string* method, std::string* target,
                   std::vector<std::pair<std::string, std::string>>* fields, uint64_t* body,
                   const Client& c);
  void StartH2Batch(Client& c);
  void ReadH2Responses(Client& c, SimSocket& s);
  void Fail(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
  void BuildConfig();
  void BuildTree();
  void SpawnClient();
  void MutateFiles();
  void ClientStep(Client& c);
  void StartBatch(Client& c);
  void AddRequest(Client& c, Req q, const std::string& text);
  void ReadResponses(Client& c);
  void CheckResponse(Client& c, const Req& q, const Resp& r);
  void CheckFileResponse(Client& c, const Req& q, const Resp& r);
  bool MatchRanges(const Resp& r, const std::string& content, const http::RangeSet& set,
                   const Route& route, std::string* why) const;
  bool MatchVersion(const Req& q, const Resp& r, const PathVersion& v, const Route& route,
                    const std::string& selected, std::string* why);
  bool FileChanged(const Req& q, const std::string& path) const;
  WorldInstant WindowStart(const Req& q) const;
  bool AnyFileChanged(const Client& c) const;
  void CollectShardStats();
  void EndConnection(Client& c, const char* how);
  void CheckStall(Client& c);
  void CheckBacklog();
  void CheckLingering();
  void CheckSendQueue();
  void CheckPromises();
  void CheckTls();
  void SetUpTls();
  void SetUpTlsClient(Client& c);
  void SetUpProxy();
  void SetUpProxyClient(Client& c);
  void TlsStreamEnd(Client& c, SimSocket& s);
  void EndPhase();
  int64_t NextClientDeadline() const;
  uint64_t Refused() const { return shard_->Stats().lookup_refused; }

  uint64_t seed_;
  SimOptions options_;
  SimWorld world_;
  Rng& rng_;
  Config config_;
  http::MimeTypes mime_;
  std::unique_ptr<Shard> shard_;
  SimLoop* loop_ = nullptr;
  std::vector<Route> routes_;
  std::vector<std::string> mutable_files_;
  std::vector<std::unique_ptr<Client>> clients_;
  uint32_t target_clients_ = 1;
  uint32_t max_clients_ = 1;
  uint32_t sitters_left_ = 0;  // a flooded seed's sitters still to connect
  int64_t stall_limit_ms_ = 0;
  bool draining_ = false;
  bool flap_present_ = true;
  SeedResult result_;
  bool stats_collected_ = false;
  // TLS seeds: the TlsLoop around the SimLoop and the stand-in's sessions. Their draws come
  // from a generator of their own, so that a seed's other draws are the same with TLS or without.
  Rng tls_rng_;
  // Deploys (SwitchRoot): in some seeds the root moves now and then, to a directory of the same
  // paths; the shard takes it up from this word as ringd's shards do from DocumentRoot's. Their
  // draws come from a generator of their own, as TLS's do.
  Rng root_rng_;
  uint32_t root_switch_ = 0;  // per mille of steps (0: the root never moves)
  uint64_t root_generation_ = 0;
  std::vector<WorldInstant> root_switch_at_;  // when each switch happened, by generation - 1
  std::atomic<uint64_t> root_word_{DocumentRoot::State(0, 7)};
  void MaybeSwitchRoot();
  // HTTP/2: in some seeds some clients speak h2c (or h2 through the TLS stand-in), from a
  // generator of their own as TLS's draws are.
  Rng h2_rng_;
  uint32_t h2_clients_ = 0;  // per mille of clients
  // The PROXY protocol: in some seeds every listener is ",proxy" and every client sends a header
  // first (v1 or v2, before TLS on a TLS listener); a few plain clients send a missing or
  // malformed one. From a generator of its own, so that a seed's other draws stay the same.
  Rng proxy_rng_;
  // A quarter of the seeds serve a site (--site sim *.sim, the same files as the default site,
  // each with its own cache) chosen by every request's Host or :authority; a few requests name
  // another host (the default site), a few the wildcard. Its own generator, as proxy_rng_.
  Rng site_rng_;
  bool sites_on_ = false;
  std::unique_ptr<Sites> sites_;
  std::atomic<const Sites*> sites_word_{nullptr};
  const char* DrawHost();
  bool proxy_ = false;
  uint32_t proxy_bad_ = 0;  // per mille of plain HTTP/1.1 clients
  bool tls_ = false;
  uint32_t tls_stall_ = 0, tls_garbage_ = 0, tls_renegotiate_ = 0;  // per mille of clients
  // TLS clients that connect in one step, their ClientHellos in one turn: more than a turn
  // answers (TlsLoop::kHellosPerTurn), so that some wait for a later one. 0: no burst.
  uint32_t hello_burst_ = 0;
  // The burst's clients (by id) hold their ClientHellos (and all they would write after them)
  // until every one of their connections is accepted, then send them in one step (the sim's
  // listener hands over one connection a pass).
  // At most kHelloHoldMs: a connection silent for Shard::kSilentGiveWayMs may give way at the
  // limit, and one whose ClientHello comes as it does is closed with it unread (as designed).
  static constexpr int64_t kHelloHoldMs = 100;
  bool hold_hellos_ = false;
  int64_t hello_burst_ms_ = 0;
  std::vector<uint32_t> held_hellos_;
  SimTlsCounters tls_counters_;
  std::unique_ptr<SimTlsFactory> tls_sessions_;
  tls::TlsLoop* tls_loop_ = nullptr;
};

}  // namespace ringd::sim::internal
