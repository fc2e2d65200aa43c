#include "tests/sim/shard_sim.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>

#include "io/assert.h"
#include "io/tier.h"
#include "server/core/config.h"
#include "server/core/shard.h"
#include "server/http/conditional.h"
#include "server/http/mime_types.h"
#include "server/http/range.h"
#include "server/http/response_plan.h"
#include "tests/sim/shard_sim_internal.h"
#include "tests/sim/sim_loop.h"

namespace ringd::sim {
namespace {

// The crash reporter's view of the seed in progress.
uint64_t g_seed = 0;
SimOptions g_options;
SimWorld* g_world = nullptr;

}  // namespace

namespace internal {

std::string RandomContent(Rng& rng, size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + rng.Below(26));
  return s;
}

const char* StyleName(Style s) {
  static const char* names[] = {
      "normal",  "slow",      "noread",  "resetter", "halfclose",       "malformed", "bighead",
      "bigbody", "bodystall", "chunked", "idler",    "talksafterclose", "sitter"};
  return names[static_cast<int>(s)];
}

Sim::Sim(uint64_t seed, const SimOptions& options, bool trace)
    : seed_(seed),
      options_(options),
      world_(seed),
      rng_(world_.rng),
      tls_rng_(seed ^ 0x7a5d1e55c0ffee11ull),
      root_rng_(seed ^ 0x5eed0f7007d1e5ull),
      h2_rng_(seed ^ 0x4832c0ffee5eed11ull),
      proxy_rng_(seed ^ 0x50524f5859c0de11ull),
      site_rng_(seed ^ 0x517e5c40ffee5eedull) {
  sites_on_ = site_rng_.Chance(250);
  if (h2_rng_.Chance(333)) h2_clients_ = static_cast<uint32_t>(h2_rng_.Range(200, 1000));
  world_.tracing = trace;
  world_.one_buffer_max = Exchange::kHeadBytes;
}

void Sim::Fail(const char* fmt, ...) {
  if (!result_.ok) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  result_.ok = false;
  result_.failure = buf;
  world_.Trace("FAILED: %s", buf);
}

void Sim::BuildConfig() {
  Config& c = config_;
  c.pin = false;
  c.shards = 1;
  c.max_connections = static_cast<uint32_t>(rng_.Range(16, options_.quick ? 32 : 64));
  static const uint32_t kRecvSizes[] = {1024, 2048, 4096};
  c.recv_buffer_size = kRecvSizes[rng_.Below(3)];
  c.recv_buffers = 64;
  c.max_request_head = static_cast<uint32_t>(rng_.Range(1024, 4096));
  c.max_request_line = std::min<uint32_t>(c.max_request_head, 2048);
  c.max_headers = 32;
  static const uint64_t kBodies[] = {0, 100, 1024, 4096};
  c.max_discarded_body = kBodies[rng_.Below(4)];
  static const uint32_t kSmall[] = {0, 512, 4096, 16384};
  c.small_file_max = kSmall[rng_.Below(4)];
  static const uint64_t kCache[] = {16 << 10, 64 << 10, 256 << 10};
  c.small_file_cache_bytes = kCache[rng_.Below(3)];
  c.open_file_cache_entries = static_cast<uint32_t>(rng_.Range(8, 256));
  static const uint32_t kValid[] = {0, 0, 5, 100, 1000};
  c.open_file_cache_valid_ms = kValid[rng_.Below(5)];
  c.header_timeout_ms = static_cast<uint32_t>(rng_.Range(300, 3000));
  c.keepalive_timeout_ms = static_cast<uint32_t>(rng_.Range(200, 5000));
  c.send_timeout_ms = static_cast<uint32_t>(rng_.Range(500, 4000));
  c.discard_body_timeout_ms = static_cast<uint32_t>(rng_.Range(200, 2000));
  c.shutdown_timeout_ms = static_cast<uint32_t>(rng_.Range(200, 3000));
  static const uint32_t kMaxRequests[] = {2, 5, 1000};
  c.max_requests_per_connection = kMaxRequests[rng_.Below(3)];
  static const uint32_t kRanges[] = {1, 2, 16};
  c.max_ranges = kRanges[rng_.Below(3)];
  c.precompressed = rng_.Chance(700);
  c.send_turn_bytes = static_cast<uint32_t>(rng_.Range(16 << 10, 256 << 10));
  // The send queue: mostly SRPT with few slots and a low short-response bar, so that file bodies
  // queue, overtake each other, age past the bound, and end (resets, timeouts) while waiting.
  c.send_srpt = rng_.Chance(800);
  c.send_slots = static_cast<uint32_t>(rng_.Range(1, 4));
  static const uint64_t kShort[] = {0, 0, 1024, 16 << 10, 256 << 10};
  c.send_short_bytes = kShort[rng_.Below(5)];
  c.send_max_wait_ms = static_cast<uint32_t>(rng_.Range(1, c.send_timeout_ms / 2));
  c.send_slot_hold_ms = static_cast<uint32_t>(rng_.Range(1, c.send_timeout_ms / 2));

  SimFaults& f = world_.faults;
  f.deliver = static_cast<uint32_t>(rng_.Range(300, 1000));
  f.recv_split = static_cast<uint32_t>(rng_.Range(0, 1000));
  f.send_partial = static_cast<uint32_t>(rng_.Range(0, 1000));
  f.open_slow = static_cast<uint32_t>(rng_.Range(0, 400));
  // Slow, but never so slow that a well-behaved client's request meets the send timeout (armed
  // while the server waits for file metadata).
  f.open_slow_max_ms = static_cast<int64_t>(rng_.Range(1, c.send_timeout_ms / 4));
  f.open_transient = rng_.Chance(300) ? static_cast<uint32_t>(rng_.Range(1, 100)) : 0;
  f.accept_error = rng_.Chance(200) ? static_cast<uint32_t>(rng_.Range(1, 100)) : 0;
  f.accept_end = static_cast<uint32_t>(rng_.Range(0, 100));
  f.cancel_reset = static_cast<uint32_t>(rng_.Range(0, 1000));
  f.data_after_cancel = static_cast<uint32_t>(rng_.Range(0, 1000));
  f.held_at_pause = static_cast<uint32_t>(rng_.Range(0, 1000));
  f.cancel_input_left = static_cast<uint32_t>(rng_.Range(0, 1000));
  f.read_slow = static_cast<uint32_t>(rng_.Range(0, 500));

  // Flooded: more sitters than the shard holds with its reserve (each makes one request, then
  // sits idle and never closes), then the seed's other clients, who are accepted at once only if
  // sitters give way for good. Sitters are not closed by the keep-alive timeout meanwhile. Drawn
  // from a generator of its own, so that a seed's other draws are the same whether it floods or
  // not.
  Rng flood(seed_ ^ 0x666c6f6f64ull);
  if (flood.Chance(50)) {
    sitters_left_ =
        c.max_connections + Shard::kReclaimReserve + static_cast<uint32_t>(flood.Range(8, 48));
    c.keepalive_timeout_ms = std::max<uint32_t>(c.keepalive_timeout_ms, 30000);
  }
  // HTTP/2's DATA path in plaintext: half the seeds send file payloads with SendFile behind
  // their frame headers (--http2-sendfile), the others read them into the batch. Drawn from a
  // generator of its own, so that a seed's other draws are the same either way.
  Rng h2_path(seed_ ^ 0x6832736e6466ull);
  c.http2_sendfile = h2_path.Chance(500);
  stall_limit_ms_ = static_cast<int64_t>(c.keepalive_timeout_ms) + c.header_timeout_ms +
                    c.send_timeout_ms + c.discard_body_timeout_ms + kLingerMs + 5000;
}

void Sim::BuildTree() {
  const bool quick = options_.quick;
  auto size = [&](uint64_t lo, uint64_t hi) { return static_cast<size_t>(rng_.Range(lo, hi)); };
  world_.MakeDir(".");
  world_.PutFile("index.html", RandomContent(rng_, size(0, 600)));
  world_.PutFile("a.txt", RandomContent(rng_, size(0, 3000)));
  world_.PutFile("small.txt", RandomContent(rng_, size(1, 512)));
  world_.PutFile("empty.txt", "");
  // One quick seed in ten gets a body of two send-queue chunks (256 KiB each), whose first says
  // the next follows (SendFile's `more`: the socket stays corked between them).
  const bool two_chunks = quick && rng_.Chance(100);  // per mille
  world_.PutFile("big.bin", RandomContent(rng_, two_chunks ? size(260 << 10, 300 << 10)
                                                : quick    ? size(8 << 10, 40 << 10)
                                                           : size(50 << 10, 400 << 10)));
  world_.PutFile("style.css", RandomContent(rng_, size(100, 5000)));
  world_.PutFile("style.css.gz", RandomContent(rng_, size(50, 2000)));
  world_.MakeDir("dir1");
  world_.PutFile("dir1/index.html", RandomContent(rng_, size(10, 2000)));
  world_.PutFile("dir1/page.html", RandomContent(rng_, size(10, 9000)));
  world_.MakeDir("dir1/sub");
  world_.PutFile("dir1/sub/x.bin", RandomContent(rng_, size(1, 20000)));
  world_.MakeDir("dir2");
  world_.PutFile("dir2/x.txt", RandomContent(rng_, size(1, 100)));
  world_.PutFile("secret.txt", "secret", /*unreadable=*/true);
  world_.PutFile("mut1.txt", RandomContent(rng_, size(0, 5000)));
  world_.PutFile("mut2.bin", RandomContent(rng_, quick ? size(1000, 30000) : size(1000, 200000)));
  world_.PutFile("flap.txt", RandomContent(rng_, size(0, 3000)));
  mutable_files_ = {"mut1.txt", "mut2.bin"};

  auto file = [&](const std::string& target, const std::string& path, bool gz = false) {
    Route r;
    r.target = target;
    r.kind = Route::kFile;
    r.path = path;
    r.has_gz = gz;
    routes_.push_back(r);
  };
  auto redirect = [&](const std::string& target, const std::string& location) {
    Route r;
    r.target = target;
    r.kind = Route::kRedirect;
    r.location = location;
    routes_.push_back(r);
  };
  auto status = [&](const std::string& target, int code) {
    Route r;
    r.target = target;
    r.kind = Route::kStatus;
    r.status = code;
    routes_.push_back(r);
  };
  file("/", "index.html");
  file("/index.html", "index.html");
  file("/a.txt", "a.txt");
  file("/%61.txt", "a.txt");
  file("/a.txt?q=1", "a.txt");
  file("/small.txt", "small.txt");
  file("/empty.txt", "empty.txt");
  file("/big.bin", "big.bin");
  file("/style.css", "style.css", /*gz=*/true);
  file("/style.css.gz", "style.css.gz");
  redirect("/dir1", "/dir1/");
  redirect("/dir1?x=y", "/dir1/?x=y");
  file("/dir1/", "dir1/index.html");
  file("/dir1/page.html", "dir1/page.html");
  redirect("/dir1/sub", "/dir1/sub/");
  status("/dir1/sub/", 403);
  file("/dir1/sub/x.bin", "dir1/sub/x.bin");
  status("/dir2/", 403);
  file("/dir2/x.txt", "dir2/x.txt");
  status("/missing.txt", 404);
  status("/a.txt/", 404);
  status("/a.txt/x", 404);
  status("/nodir/x.txt", 404);
  status("/secret.txt", 403);
  status("/secret.txt/", 404);  // an unreadable file asked as a directory: not one (as nginx)
  file("/mut1.txt", "mut1.txt");
  file("/mut2.bin", "mut2.bin");
  file("/mut2.bin", "mut2.bin");
  file("/flap.txt", "flap.txt");
  file("/big.bin", "big.bin");
}

void Sim::MutateFiles() {
  if (!rng_.Chance(options_.quick ? 20 : 10)) return;
  if (rng_.Chance(300)) {
    if (flap_present_) {
      world_.Remove("flap.txt");
    } else {
      world_.PutFile("flap.txt", RandomContent(rng_, rng_.Below(3000)));
      world_.Trace("file flap.txt created");
    }
    flap_present_ = !flap_present_;
    return;
  }
  const std::string& path = mutable_files_[rng_.Below(mutable_files_.size())];
  const size_t old_size = world_.tree[path]->content->size();
  if (rng_.Chance(500) && old_size > 0) {
    world_.TruncateInPlace(path, rng_.Below(old_size));
  } else {
    const size_t max = path == "mut2.bin" ? (options_.quick ? 30000 : 200000) : 5000;
    world_.ReplaceFile(path, RandomContent(rng_, rng_.Below(max)));
  }
}

void Sim::MaybeSwitchRoot() {
  if (root_switch_ == 0 || root_generation_ >= 400 || !root_rng_.Chance(root_switch_)) return;
  // Numbers of the simulation's own: below AllocFd's, and never a real descriptor it holds.
  const int fd = 500 + static_cast<int>(++root_generation_);
  world_.SwitchRoot(fd);
  // After the new root's copies of the files: an edit later in the same millisecond is after
  // the switch.
  root_switch_at_.push_back(WorldInstant{world_.now_ms, world_.edits});
  root_word_.store(DocumentRoot::State(root_generation_, fd), std::memory_order_release);
  result_.coverage["sim.root_switched"] += 1;
}

// A third of the seeds serve TLS: the one listener, or one or both of two. Its draws come from
// tls_rng_ alone.
void Sim::SetUpTls() {
  tls_ = tls_rng_.Chance(333);
  if (!tls_) return;
  const std::vector<int>& fds = world_.listen_fds;
  if (fds.size() == 1 || tls_rng_.Chance(500)) {
    world_.tls_listeners = fds;
  } else {
    world_.tls_listeners.push_back(fds[tls_rng_.Below(fds.size())]);
  }
  tls_sessions_ = std::make_unique<SimTlsFactory>(&world_, &tls_rng_, &tls_counters_);
  world_.faults.recv_tiny = static_cast<uint32_t>(tls_rng_.Range(0, 300));
  tls_stall_ = static_cast<uint32_t>(tls_rng_.Range(0, 80));
  tls_garbage_ = static_cast<uint32_t>(tls_rng_.Range(0, 80));
  tls_renegotiate_ = static_cast<uint32_t>(tls_rng_.Range(0, 50));
  if (tls_rng_.Chance(400))
    hello_burst_ = tls::TlsLoop::kHellosPerTurn + static_cast<uint32_t>(tls_rng_.Range(1, 16));
  world_.Trace("TLS on %zu of %zu listeners", world_.tls_listeners.size(), fds.size());
}

// A quarter of the seeds read the PROXY protocol on every listener. The simulated descriptors
// are no sockets: the shard is told to trust every peer (--proxy-from all) and asks none.
void Sim::SetUpProxy() {
  proxy_ = proxy_rng_.Chance(250);
  if (!proxy_) return;
  config_.proxy_from_all = true;
  proxy_bad_ = static_cast<uint32_t>(proxy_rng_.Range(0, 100));
  world_.Trace("PROXY protocol on every listener");
}

// A client of a PROXY seed: its header, at the front of what it sends (before its TLS hello);
// or, for a few plain HTTP/1.1 clients, none or a malformed one, after which it only waits for
// the server to close.
void Sim::SetUpProxyClient(Client& c) {
  SimSocket& s = world_.sockets[c.sock];
  std::string header;
  if (c.tls == nullptr && c.h2 == nullptr && c.style == Style::kNormal &&
      proxy_rng_.Below(1000) < proxy_bad_) {
    header = proxy_rng_.Chance(500) ? "GET / HTTP/1.1\r\nHost: t\r\n\r\n"  // no header
                                    : "PROXY TCP4 192.0.2.1 192.0.2.2 99999 80\r\n";
    c.misbehaved = true;
    c.waits_for_end = true;
    ++result_.coverage["proxy.bad_clients"];
  } else if (proxy_rng_.Chance(500)) {
    header = "PROXY TCP4 192.0.2." + std::to_string(proxy_rng_.Below(256)) + " 198.51.100.1 " +
             std::to_string(proxy_rng_.Range(1, 65535)) + " 443\r\n";
  } else {
    // v2: PROXY over IPv6 with a TLV, or LOCAL.
    const bool local = proxy_rng_.Chance(200);
    std::string body;
    if (!local) {
      body.assign(36, '\0');
      body[0] = 0x20;
      body[1] = 0x01;
      body[15] = static_cast<char>(proxy_rng_.Below(256));
      body += std::string("\x01\x00\x02h2", 5);
    }
    header = std::string("\r\n\r\n\0\r\nQUIT\n", 12);
    header += static_cast<char>(local ? 0x20 : 0x21);
    header += static_cast<char>(local ? 0x00 : 0x21);
    header += static_cast<char>(body.size() >> 8);
    header += static_cast<char>(body.size() & 0xff);
    header += body;
  }
  // Nothing has been received yet: the header goes in front of what the client has written, and
  // every offset into its stream moves past it (the server's receive counts its bytes).
  RINGD_ASSERT(s.received == 0 && s.wire_received == 0);
  s.to_server.insert(0, header);
  if (c.tls != nullptr) {
    c.tls->Precede(&s, header.size());
    ++result_.coverage["proxy.tls_clients"];
  } else {
    c.stream_offset += header.size();
  }
  ++result_.coverage["proxy.clients"];
}

// A client of a TLS seed: which listener it connects to (with one TLS listener of two), then,
// speaking TLS, its hello and its fault.
void Sim::SetUpTlsClient(Client& c) {
  SimSocket& s = world_.sockets[c.sock];
  const std::vector<int>& tls_fds = world_.tls_listeners;
  if (tls_fds.size() == world_.listen_fds.size()) {
    s.tls = true;
  } else {
    s.tls = tls_rng_.Chance(600);
    for (int fd : world_.listen_fds) {
      const bool is_tls = std::find(tls_fds.begin(), tls_fds.end(), fd) != tls_fds.end();
      if (is_tls == s.tls) s.listener = fd;
    }
  }
  if (!s.tls) return;
  c.tls = std::make_unique<SimTlsClient>();
  const uint64_t roll = tls_rng_.Below(1000);
  if (roll < tls_stall_) {
    // A handshake it never finishes: part of its hello, or nothing; the header timeout ends it.
    c.tls_fault = Client::TlsFault::kStall;
    c.misbehaved = true;
    c.tls->Hello(&s, tls_rng_.Below(kRecordHeader + 5));
    ++tls_counters_.stalled_handshakes;
    return;
  }
  if (roll < tls_stall_ + tls_garbage_ / 3) {
    c.tls_fault = Client::TlsFault::kGarbageFirst;
    c.misbehaved = true;
    c.waits_for_end = true;
    c.tls->Garbage(tls_rng_, /*renegotiate=*/false, &s);
    return;
  }
  if (hold_hellos_) {
    c.next_write_ms = INT64_MAX;  // nothing before its hello
    held_hellos_.push_back(c.id);
  } else {
    c.tls->Hello(&s);
  }
  if (roll < tls_stall_ + tls_garbage_) {
    c.tls_fault = Client::TlsFault::kGarbageLater;
  } else if (roll < tls_stall_ + tls_garbage_ + tls_renegotiate_) {
    c.tls_fault = Client::TlsFault::kRenegotiate;
  }
}

void Sim::SpawnClient() {
  auto c = std::make_unique<Client>();
  c->id = static_cast<uint32_t>(clients_.size());
  static const uint64_t kWindows[] = {512, 4096, 65536, 1 << 20};
  c->sock = world_.Connect(kWindows[rng_.Below(4)]);
  if (sitters_left_ > 0) {
    --sitters_left_;
    c->style = Style::kSitter;
  } else if (rng_.Below(1000) < 550) {
    c->style = Style::kNormal;
  } else {
    c->style = static_cast<Style>(1 + rng_.Below(11));
  }
  c->batches_left = static_cast<int>(rng_.Range(1, options_.quick ? 3 : 6));
  if (c->style == Style::kSitter) c->batches_left = 1;
  c->next_write_ms = world_.now_ms + static_cast<int64_t>(rng_.Below(20));
  c->last_progress_ms = world_.now_ms;
  switch (c->style) {
    case Style::kSlow:
    case Style::kNoRead:
    case Style::kResetter:
    case Style::kBodyStall:
    case Style::kTalksAfterClose:
      c->misbehaved = true;
      break;
    case Style::kIdler:
      c->misbehaved = true;
      c->next_write_ms = world_.now_ms + static_cast<int64_t>(rng_.Below(3000));
      break;
    default:
      break;
  }
  if (c->style == Style::kResetter) {
    c->reset_at_ms = world_.now_ms + static_cast<int64_t>(rng_.Range(1, 500));
  }
  // HTTP/2 clients keep reading what they asked for (a half-closed one could not send the
  // WINDOW_UPDATEs its answers wait for).
  const bool h2_style = c->style == Style::kNormal || c->style == Style::kSlow ||
                        c->style == Style::kNoRead || c->style == Style::kResetter ||
                        c->style == Style::kIdler;
  if (h2_clients_ > 0 && h2_style && h2_rng_.Chance(h2_clients_)) {
    static const uint32_t kH2Windows[] = {1024, 16384, 65535, 1 << 20};
    c->h2 = std::make_unique<SimH2Client>(kH2Windows[h2_rng_.Below(4)]);
    c->outbox = c->h2->Output();  // the preface and SETTINGS
  }
  if (tls_) SetUpTlsClient(*c);
  if (proxy_) SetUpProxyClient(*c);
  if (c->h2 != nullptr && c->tls != nullptr) ++result_.coverage["h2.tls_clients"];
  world_.Trace("client %u connects (socket %zu, %s, window %llu%s%s)", c->id, c->sock,
               StyleName(c->style), static_cast<unsigned long long>(world_.sockets[c->sock].window),
               c->tls != nullptr ? ", TLS" : "", c->h2 != nullptr ? ", HTTP/2" : "");
  clients_.push_back(std::move(c));
  ++result_.connections;
}

void Sim::AddRequest(Client& c, Req q, const std::string& text) {
  q.start_offset = c.stream_offset;
  c.stream_offset += text.size();
  q.end_offset = c.stream_offset;
  SimSocket& s = world_.sockets[c.sock];
  if (q.closes && s.close_request_end == UINT64_MAX) s.close_request_end = q.end_offset;
  q.sent_ms = world_.now_ms;
  q.root_generation = root_generation_;
  q.transient_at_send = world_.counters.open_transient;
  q.refused_at_send = Refused();
  q.nth = ++c.requests;
  c.idle_since_ms = INT64_MAX;
  if (c.h2 != nullptr) {  // frames: the stream and the target say which request it is
    world_.Trace("client %u queues request %u: stream %d %s", c.id, q.nth, q.stream_id,
                 q.route != nullptr ? q.route->target.c_str() : "-");
  } else {
    world_.Trace("client %u queues request %u: %.*s", c.id, q.nth,
                 static_cast<int>(std::min<size_t>(text.find('\r'), 60)), text.c_str());
  }
  c.outbox += text;
  c.pending.push_back(std::move(q));
  ++result_.requests;
}

void Sim::StartBatch(Client& c) {
  if (c.h2 != nullptr) return StartH2Batch(c);
  --c.batches_left;
  const bool last_batch = c.batches_left == 0;
  uint32_t n = static_cast<uint32_t>(rng_.Range(1, 4));
  if (c.style == Style::kSitter) n = 1;
  for (uint32_t i = 0; i < n; ++i) {
    const bool last = i + 1 == n;
    // The misbehaving kinds end their last batch with their special request.
    if (last && last_batch && AddMisbehavingRequest(c)) return;
    if (AddRequestOfTheMix(c, last, last_batch)) return;
  }
}

// A misbehaving client's special request, its last; false for a client of another style.
bool Sim::AddMisbehavingRequest(Client& c) {
  std::string text;
  Req q;
  switch (c.style) {
    case Style::kMalformed: {
      static const char* kForms[] = {
          "GET /a.txt HTTP/1.1\r\nHost: sim\r\nNoColonHere\r\n\r\n",
          "GET /a.txt HTTP/1.1\r\nHost: sim\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
          "G(T /a.txt HTTP/1.1\r\nHost: sim\r\n\r\n",
          "GET /a.txt HTTP/1.1\r\nHost: sim\r\nContent-Length: -1\r\n\r\n",
      };
      text = kForms[rng_.Below(4)];
      q.expect_error = true;
      q.closes = true;
      AddRequest(c, q, text);
      return true;
    }
    case Style::kBigHead:
      text = "GET /a.txt HTTP/1.1\r\nHost: sim\r\nX-Big: " +
             std::string(config_.max_request_head + rng_.Range(1, 3000), 'b') + "\r\n\r\n";
      q.expect_status = 431;
      q.closes = true;
      AddRequest(c, q, text);
      return true;
    case Style::kBigBody: {
      const uint64_t len = config_.max_discarded_body + rng_.Range(1, 5000);
      text = "GET /a.txt HTTP/1.1\r\nHost: sim\r\nContent-Length: " + std::to_string(len) +
             "\r\n\r\n" + std::string(rng_.Below(len + 1), 'x');
      q.expect_status = 413;
      q.closes = true;
      AddRequest(c, q, text);
      return true;
    }
    case Style::kChunked: {
      const Route& route = routes_[rng_.Below(routes_.size())];
      text = "GET " + route.target +
             " HTTP/1.1\r\nHost: sim\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
      q.route = &route;
      q.closes = true;
      AddRequest(c, q, text);
      return true;
    }
    case Style::kTalksAfterClose: {
      const Route& route = routes_[rng_.Below(routes_.size())];
      q.route = &route;
      q.closes = true;
      // Sometimes with a body the server skips: behind a response in flight, enough of
      // them in the input buffer pauses the receive (the loop may then hold what follows).
      const uint64_t body = config_.max_discarded_body > 0 && rng_.Chance(500)
                                ? rng_.Range(1, config_.max_discarded_body)
                                : 0;
      AddRequest(c, q,
                 "GET " + route.target + " HTTP/1.1\r\nHost: sim\r\nConnection: close\r\n" +
                     (body > 0 ? "Content-Length: " + std::to_string(body) + "\r\n" : "") + "\r\n" +
                     std::string(body, 'z'));
      c.after_close = "GET /a.txt HTTP/1.1\r\nHost: sim\r\n\r\n";
      return true;
    }
    case Style::kBodyStall: {
      const Route& route = routes_[rng_.Below(routes_.size())];
      const uint64_t len = std::max<uint64_t>(config_.max_discarded_body, 1);
      text = "GET " + route.target +
             " HTTP/1.1\r\nHost: sim\r\nContent-Length: " + std::to_string(len) + "\r\n\r\n";
      q.route = &route;
      if (len > config_.max_discarded_body) {
        q.route = nullptr;
        q.expect_status = 413;
        q.closes = true;
      }
      AddRequest(c, q, text);
      c.outbox += std::string(rng_.Below(len), 'y');  // never all of it
      return true;
    }
    default:
      return false;
  }
}

// A request of the ordinary mix (GET, HEAD, ranges, conditionals, POST, OPTIONS); true if it
// closes the connection.
void Sim::DrawRequest(Req* q, std::string* method, std::string* target,
                      std::vector<std::pair<std::string, std::string>>* fields, uint64_t* body,
                      const Client& c) {
  const uint64_t kind = rng_.Below(1000);
  *body = 0;
  if (kind < 40) {
    *method = "POST";
    *target = "/a.txt";
    q->expect_status = 405;
    *body = rng_.Below(config_.max_discarded_body + 1);
  } else if (kind < 60) {
    *method = "OPTIONS";
    *target = "*";
    q->expect_status = 200;
    q->options = true;
  } else {
    const Route& route = routes_[rng_.Below(routes_.size())];
    q->route = &route;
    q->head = rng_.Chance(150);
    *method = q->head ? "HEAD" : "GET";
    *target = route.target;
    if (route.kind == Route::kFile && rng_.Chance(250)) {
      static const char* kRanges[] = {"bytes=0-0", "bytes=0-99",      "bytes=10-",
                                      "bytes=-50", "bytes=5-9,20-29", "bytes=100000-",
                                      "bytes=abc", "bytes=0-0,-1",    "bytes=1-2,1-3"};
      q->range = kRanges[rng_.Below(9)];
      fields->emplace_back("Range", q->range);
    }
    if (route.kind == Route::kFile && rng_.Chance(200)) {
      auto it = c.etags.find(route.path);
      if (it != c.etags.end()) {
        q->inm = it->second;
        fields->emplace_back("If-None-Match", q->inm);
      }
    }
    if (rng_.Chance(300)) {
      q->gzip = true;
      fields->emplace_back("Accept-Encoding", "gzip");
    }
    if (config_.max_discarded_body > 0 && rng_.Chance(50)) {
      *body = rng_.Range(1, config_.max_discarded_body);
    }
  }
  if (*body > 0) fields->emplace_back("Content-Length", std::to_string(*body));
}

const char* Sim::DrawHost() {
  if (!sites_on_) return "sim";
  if (site_rng_.Chance(100)) return "other.example";  // no site: the default one
  return site_rng_.Chance(100) ? "a.sim" : "sim";
}

bool Sim::AddRequestOfTheMix(Client& c, bool last, bool last_batch) {
  Req q;
  std::string method, target;
  std::vector<std::pair<std::string, std::string>> fields;
  uint64_t body = 0;
  DrawRequest(&q, &method, &target, &fields, &body, c);
  std::string text = method + " " + target + " HTTP/1.1\r\nHost: " + DrawHost() + "\r\n";
  std::string extra;
  for (const auto& [name, value] : fields) extra += name + ": " + value + "\r\n";
  if (last && (last_batch ? rng_.Chance(300) : rng_.Chance(30)) && c.style != Style::kSitter) {
    extra += "Connection: close\r\n";
    q.closes = true;
  }
  if (rng_.Chance(100)) extra += "X-Pad: " + std::string(rng_.Below(300), 'p') + "\r\n";
  text += extra + "\r\n" + std::string(body, 'z');
  AddRequest(c, q, text);
  return q.closes;
}

// An HTTP/2 client's batch: up to eight streams at once, each a request of the mix.
void Sim::StartH2Batch(Client& c) {
  --c.batches_left;
  const uint32_t n = static_cast<uint32_t>(h2_rng_.Range(1, 8));
  for (uint32_t i = 0; i < n; ++i) {
    Req q;
    std::string method, target;
    std::vector<std::pair<std::string, std::string>> fields;
    uint64_t body = 0;
    DrawRequest(&q, &method, &target, &fields, &body, c);
    std::vector<std::pair<std::string, std::string>> h2_fields = {
        {":method", method}, {":scheme", "http"}, {":path", target}, {":authority", DrawHost()}};
    for (auto& [name, value] : fields) h2_fields.emplace_back(Lower(name), value);
    if (h2_rng_.Chance(100)) h2_fields.emplace_back("x-pad", std::string(h2_rng_.Below(300), 'p'));
    q.stream_id = c.h2->Submit(h2_fields, body);
    AddRequest(c, q, c.h2->Output());
  }
  // Now and then a stream is cancelled, before or while its answer comes (rapid resets in
  // small, its exchange released mid-body).
  if (h2_rng_.Chance(150) && !c.pending.empty()) {
    Req& q = c.pending[h2_rng_.Below(c.pending.size())];
    q.cancelled = true;
    c.h2->Cancel(q.stream_id);
    c.outbox += c.h2->Output();
    world_.Trace("client %u cancels stream %d", c.id, q.stream_id);
  }
}

void Sim::ClientStep(Client& c) {
  if (c.ended) return;
  SimSocket& s = world_.sockets[c.sock];
  const int64_t now = world_.now_ms;
  if (s.refused) return EndConnection(c, "refused");
  if (now >= c.reset_at_ms) {
    s.client_reset = true;
    world_.Trace("client %u resets", c.id);
    c.ended = true;
    return;
  }
  if (c.stopped_reading) {
    if (s.server_closed || s.server_reset) EndConnection(c, "closed while not reading");
    return;
  }
  // Read.
  if (s.server_reset) {
    s.to_client.clear();  // a reset: whatever was not read yet is lost
    return EndConnection(c, "reset by the server");
  }
  if (s.Readable() > 0 && now >= c.next_read_ms) {
    ClientRead(c, s, now);
    if (!result_.ok || c.stopped_reading) return;  // a sitter now sits
  }
  if ((s.server_shut_wr || s.server_closed) && s.to_client.empty()) {
    if (c.tls != nullptr) TlsStreamEnd(c, s);
    if (!result_.ok) return;
    return EndConnection(c, "end of stream");
  }
  if (c.close_response || c.waits_for_end) return;  // waiting for the end of stream
  if (!c.outbox.empty() && now >= c.next_write_ms) return ClientWrite(c, s, now);
  if (c.outbox.empty() && c.pending.empty() && now >= c.next_write_ms && !c.fin_sent) {
    ClientNext(c, s, now);
  }
}

// Takes some or all of what the server sent (through the client's TLS, if any) and reads the
// responses in it.
void Sim::ClientRead(Client& c, SimSocket& s, int64_t now) {
  size_t n = s.Readable();
  if (rng_.Chance(300)) n = 1 + rng_.Below(n);
  if (c.tls != nullptr) {
    std::string why;
    if (!c.tls->Take(tls_rng_, std::string_view(s.to_client).substr(0, n), &s, &c.inbox, &why))
      return Fail("client %u (TLS): %s", c.id, why.c_str());
  } else {
    c.inbox.append(s.to_client, 0, n);
  }
  s.to_client.erase(0, n);
  c.last_progress_ms = now;
  if (rng_.Chance(50)) c.next_read_ms = now + static_cast<int64_t>(rng_.Range(1, 100));
  if (c.h2 != nullptr) return ReadH2Responses(c, s);
  ReadResponses(c);
}

// Sends some or all of the outbox; then what a client of its style does once it is empty.
void Sim::ClientWrite(Client& c, SimSocket& s, int64_t now) {
  size_t n = c.outbox.size();
  if (c.style == Style::kSlow) {
    n = std::min<size_t>(n, 1 + rng_.Below(16));
    c.next_write_ms = now + static_cast<int64_t>(rng_.Range(10, 300));
  }
  if (c.tls != nullptr) {
    c.tls->Write(tls_rng_, std::string_view(c.outbox).substr(0, n), &s);
  } else if (!s.server_closed) {
    s.to_server.append(c.outbox, 0, n);
  }
  c.outbox.erase(0, n);
  c.last_progress_ms = now;
  // A TLS client that breaks the protocol after its handshake: a record the server must
  // refuse, then nothing more; it reads until the end (the alert, then the close).
  if (c.tls != nullptr && c.tls->server_hello() &&
      (c.tls_fault == Client::TlsFault::kGarbageLater ||
       c.tls_fault == Client::TlsFault::kRenegotiate) &&
      tls_rng_.Chance(400)) {
    c.tls->Garbage(tls_rng_, c.tls_fault == Client::TlsFault::kRenegotiate, &s);
    c.tls_fault = Client::TlsFault::kNone;
    c.misbehaved = true;
    c.waits_for_end = true;
    c.outbox.clear();
    c.after_close.clear();
    c.batches_left = 0;
    world_.Trace("client %u sends a record the server must refuse", c.id);
    return;
  }
  if (c.outbox.empty() && c.style == Style::kHalfClose && c.batches_left == 0) {
    s.client_fin = true;
    c.fin_sent = true;
    world_.Trace("client %u shuts its sending side", c.id);
  }
  if (c.outbox.empty() && !c.after_close.empty()) {  // the next write step, or one soon after
    c.outbox = std::move(c.after_close);
    c.after_close.clear();
    c.next_write_ms = now + static_cast<int64_t>(rng_.Below(3));
    world_.Trace("client %u talks after its close request", c.id);
  }
  if (c.outbox.empty() && c.style == Style::kNoRead) {
    c.stopped_reading = true;
    world_.Trace("client %u stops reading", c.id);
  }
}

// Nothing to send or wait for: the next batch, a pause (an idler), or the end (a close, sometimes
// a reset).
void Sim::ClientNext(Client& c, SimSocket& s, int64_t now) {
  if (c.style == Style::kIdler && c.batches_left > 0 && rng_.Chance(300)) {
    c.next_write_ms = now + static_cast<int64_t>(rng_.Range(100, 4000));
    c.batches_left = 0;
    return;
  }
  // An HTTP/2 connection the server has sent GOAWAY on takes no new stream: the client goes.
  if (c.h2 != nullptr && c.h2->goaway_last_stream() >= 0) c.batches_left = 0;
  if (c.batches_left > 0) return StartBatch(c);
  // Done: close, as clients do (sometimes with a reset).
  if (rng_.Chance(200)) {
    s.client_reset = true;
    world_.Trace("client %u done: resets", c.id);
  } else {
    if (c.tls != nullptr && c.tls->server_hello() && !c.tls->broke) {
      if (tls_rng_.Chance(500)) {
        c.tls->CloseNotify(&s);
        ++tls_counters_.client_close_notify;
      } else {
        ++tls_counters_.client_no_close_notify;
      }
    }
    s.client_fin = true;
    s.client_closed = true;
    world_.Trace("client %u done: closes", c.id);
  }
  c.ended = true;
  c.idle_since_ms = INT64_MAX;
}

int64_t Sim::NextClientDeadline() const {
  int64_t next = INT64_MAX;
  for (const auto& cp : clients_) {
    const Client& c = *cp;
    if (c.ended) continue;
    const SimSocket& s = world_.sockets[c.sock];
    if (c.reset_at_ms != INT64_MAX) next = std::min(next, c.reset_at_ms);
    if (!c.stopped_reading && s.Readable() > 0) next = std::min(next, c.next_read_ms);
    if (c.close_response || c.stopped_reading) continue;  // writes nothing more
    if (!c.outbox.empty() || (c.pending.empty() && !c.fin_sent))
      next = std::min(next, c.next_write_ms);
  }
  return next;
}

void Sim::EndPhase() {
  // Every client goes away.
  for (auto& cp : clients_) {
    Client& c = *cp;
    if (c.ended) continue;
    SimSocket& s = world_.sockets[c.sock];
    if (rng_.Chance(300)) {
      s.client_reset = true;
    } else {
      s.client_fin = true;
      s.client_closed = true;
    }
    c.ended = true;
  }
  draining_ = true;
  world_.external_deadline_ms = INT64_MAX;
  world_.Trace("all clients gone");
  // Time passes beyond every timeout: the shard must end up holding nothing.
  const int64_t until = world_.now_ms + stall_limit_ms_;
  while (world_.now_ms < until) {
    shard_->Step();
    ++result_.steps;
    const ShardUsage u = shard_->Usage();
    if (u.connections == 0 && loop_->OpsInFlightExcept(io::Op::kAccept) == 0) break;
  }
  const ShardUsage u = shard_->Usage();
  if (u.connections != 0 || u.exchanges != 0 || u.input_buffers != 0) {
    return Fail(
        "after every client left and %lld ms passed: %u connections, %u exchanges, %u "
        "input buffers still held; operations:\n%s",
        static_cast<long long>(stall_limit_ms_), u.connections, u.exchanges, u.input_buffers,
        loop_->DescribeOps().c_str());
  }
  if (loop_->OpsInFlightExcept(io::Op::kAccept) != 0) {
    return Fail("no connections left, but operations in flight:\n%s", loop_->DescribeOps().c_str());
  }
  if (!world_.socket_fds.empty()) {
    return Fail("no connections left, but %zu sockets still open (fd %d first)",
                world_.socket_fds.size(), world_.socket_fds.begin()->first);
  }
  if (tls_loop_ != nullptr && tls_loop_->connections() != 0) {
    return Fail("no connections left, but the TlsLoop still holds %zu", tls_loop_->connections());
  }
  if (u.cache_pinned != 0) {
    return Fail("no connections left, but %u cache entries still pinned", u.cache_pinned);
  }
  if (u.h2_library_bytes != 0) {
    return Fail("no connections left, but nghttp2 still holds %llu bytes",
                static_cast<unsigned long long>(u.h2_library_bytes));
  }
  if (world_.file_fds.size() > u.cache_entries) {
    return Fail("%zu files open, but only %u cache entries", world_.file_fds.size(),
                u.cache_entries);
  }
  // A graceful stop completes within its deadline and a second.
  shard_->RequestStop();
  const int64_t deadline = world_.now_ms + config_.shutdown_timeout_ms + 1000;
  bool stopped = false;
  while (world_.now_ms <= deadline) {
    ++result_.steps;
    if (!shard_->Step()) {
      stopped = true;
      break;
    }
  }
  if (!stopped) return Fail("the shard did not stop within shutdown_timeout_ms + 1 s");
  if (loop_->OpsInFlight() != 0) {
    return Fail("stopped with operations in flight:\n%s", loop_->DescribeOps().c_str());
  }
  CollectShardStats();
  shard_.reset();
  loop_ = nullptr;
  tls_loop_ = nullptr;
  if (!world_.file_fds.empty()) {
    Fail("the shard is gone and %zu file descriptors are still open", world_.file_fds.size());
  }
  if (tls_counters_.live_sessions != 0) {
    Fail("the shard is gone and %llu TLS sessions are still alive",
         static_cast<unsigned long long>(tls_counters_.live_sessions));
  }
}

void Sim::CollectShardStats() {
  if (shard_ == nullptr || stats_collected_) return;
  stats_collected_ = true;
  const ShardStats& st = shard_->Stats();
  auto& cov = result_.coverage;
  cov["shard.accepted"] += st.accepted;
  cov["shard.requests"] += st.requests;
  cov["shard.accept_paused"] += st.accept_paused;
  cov["shard.overloaded"] += st.overloaded;
  cov["shard.header_timeouts"] += st.header_timeouts;
  cov["shard.idle_timeouts"] += st.idle_timeouts;
  cov["shard.send_timeouts"] += st.send_timeouts;
  cov["shard.truncated"] += st.truncated;
  cov["shard.discard_timeouts"] += st.discard_timeouts;
  cov["shard.idle_reclaimed"] += st.idle_reclaimed;
  cov["h2.connections"] += st.h2_connections;
  cov["h2.streams"] += st.h2_streams;
  cov["h2.streams_refused"] += st.h2_streams_refused;
  cov["h2.connection_errors"] += st.h2_connection_errors;
  cov["h2.resets_received"] += st.h2_resets_received;
  cov["h2.resets_sent"] += st.h2_resets_sent;
  cov["h2.goaways_sent"] += st.h2_goaways_sent;
  cov["h2.stalls"] += st.h2_stalls_connection_window + st.h2_stalls_stream_window;
  cov["h2.frame_buffers_released"] += st.h2_frame_buffers_released;
  if (config_.http2_sendfile) cov["h2.sendfile_streams"] += st.h2_streams;
  cov["shard.silent_reclaimed"] += st.silent_reclaimed;
  cov["shard.gave_way_closed"] += st.gave_way_closed;
  cov["shard.parked"] += st.parked;
  cov["shard.lookup_refused"] += st.lookup_refused;
  cov["shard.input_buffers_released"] += st.input_buffers_released;
  cov["shard.exchanges_released"] += st.exchanges_released;
  cov["proxy.refused"] += st.proxy_missing + st.proxy_malformed;
  if (sites_on_) {
    ++cov["sites.seeds"];
    cov["sites.requests"] += shard_->SiteRequests();
  }
  if (tls_loop_ != nullptr) {
    cov["proxy.refused"] +=
        tls_loop_->tls_stats().proxy_missing + tls_loop_->tls_stats().proxy_malformed;
  }
  cov["shard.recv_errors"] += st.recv_errors;
  cov["shard.recv_ended_early"] += st.recv_ended_early;
  cov["shard.recv_rearmed_to_linger"] += st.recv_rearmed_to_linger;
  cov["shard.send_errors"] += st.send_errors;
  cov["shard.sends_queued"] += shard_->send_queue().stats().queued;
  cov["shard.sends_aged"] += shard_->send_queue().stats().aged;
  cov["shard.sends_slow"] += shard_->send_queue().stats().slow;
  if (tls_loop_ != nullptr) {
    const tls::TlsLoopStats& t = tls_loop_->tls_stats();
    cov["tls.loop_handshakes"] += t.handshakes;
    cov["tls.loop_handshake_failures"] += t.handshake_failures;
    cov["tls.loop_bad_records"] += t.bad_records;
    cov["tls.loop_close_notify_sent"] += t.close_notify_sent;
    cov["tls.loop_hellos_deferred"] += t.hellos_deferred;
  }
}

SeedResult Sim::Run() {
  g_world = &world_;
  world_.print_trace = options_.verbose;
  BuildConfig();
  BuildTree();
  // One listener, or two (two --listen addresses); the shard ::close()s them.
  const int listeners = rng_.Chance(250) ? 2 : 1;
  for (int i = 0; i < listeners; ++i)
    world_.listen_fds.push_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  SetUpTls();
  SetUpProxy();
  MakeShard();
  if (!shard_->Setup()) {
    Fail("Setup failed: %s", shard_->error().c_str());
    result_.trace = world_.RecentTrace();
    return result_;
  }
  uint64_t max_steps = 0;
  int64_t run_until_ms = 0;
  PickClients(&max_steps, &run_until_ms);
  for (uint64_t step = 0;
       (step < max_steps || (world_.now_ms < run_until_ms && step < 20 * max_steps)) && result_.ok;
       ++step) {
    if (!RunStep(step)) break;
  }
  if (result_.ok) EndPhase();
  result_.simulated_ms = world_.now_ms;
  if (!result_.ok) result_.trace = world_.RecentTrace();
  CollectShardStats();
  // A failed seed's shard may be mid-flight: destroying it would trip the pools' own checks and
  // hide the report. Leave it (a failing run ends soon).
  if (!result_.ok) (void)shard_.release();
  CollectCoverage();
  shard_.reset();
  g_world = nullptr;
  return result_;
}

// The shard, on the simulator's loop registered as a tier of its own.
void Sim::MakeShard() {
  // The simulated loop is an io tier from outside io/, chosen from a tier table by name like
  // the built-in ones (io/tier.h): the shard serves through whatever the table hands it.
  io::TierTable tiers;
  io::Tier sim;
  sim.name = "sim";
  sim.summary = "the simulator's loop: sockets, files and time from one seeded PRNG";
  sim.usable = [](const io::ProbeReport&, std::string* why) {
    *why = "simulated";
    return true;
  };
  sim.adapt = [](const io::ProbeReport&, io::LoopOptions*, std::string*) {};
  // TLS seeds wrap it in the production TlsLoop, with the stand-in's sessions (as ringd_main's
  // WithTls does); every seed checks that callbacks come only from Poll.
  sim.make = [this](const io::LoopOptions& o) -> absl::StatusOr<std::unique_ptr<io::Loop>> {
    auto sim_loop = std::make_unique<SimLoop>(&world_, o);
    loop_ = sim_loop.get();
    std::unique_ptr<io::Loop> loop = std::move(sim_loop);
    if (tls_) {
      const uint32_t recv_max = o.recv_max_bytes != 0 ? o.recv_max_bytes : o.recv_buffer_size;
      auto tls_loop = std::make_unique<tls::TlsLoop>(
          std::move(loop), tls_sessions_.get(), world_.tls_listeners, recv_max,
          config_.max_connections, config_.tls_max_handshakes);
      if (proxy_) tls_loop->ReadProxyHeaders(world_.tls_listeners, &config_.client_rules);
      tls_loop_ = tls_loop.get();
      loop = std::move(tls_loop);
    }
    return std::make_unique<CallbackCheckLoop>(std::move(loop));
  };
  tiers.Register(std::move(sim));
  const io::TierChoice choice = tiers.Choose("sim", io::ProbeReport{}, io::TierNeeds{});
  RINGD_ASSERT(choice.tier != nullptr);
  shard_ = std::make_unique<Shard>(0, config_, world_.listen_fds, world_.root_fd, &mime_,
                                   choice.tier->make, /*cpu=*/-1);
  if (proxy_) {
    std::vector<Shard::ProxyHeader> proxy;
    for (int fd : world_.listen_fds) {
      const std::vector<int>& tls_fds = world_.tls_listeners;
      const bool is_tls = std::find(tls_fds.begin(), tls_fds.end(), fd) != tls_fds.end();
      proxy.push_back(is_tls ? Shard::ProxyHeader::kBeforeTls : Shard::ProxyHeader::kPlain);
    }
    shard_->SetProxyListeners(std::move(proxy));
  }
  root_switch_ = root_rng_.Chance(150) ? static_cast<uint32_t>(root_rng_.Range(1, 5)) : 0;
  if (root_switch_ != 0) shard_->SetDocumentRoot(&root_word_);
  if (sites_on_) {
    // The site's root is the default site's, and moves with it (a root switch).
    sites_ = std::make_unique<Sites>();
    std::string error;
    RINGD_ASSERT(sites_->table.Add({"sim", "*.sim"}, &error));
    sites_->sites.push_back(SiteRuntime{"sim", root_switch_ != 0 ? &root_word_ : nullptr,
                                        world_.root_fd, "", nullptr, nullptr, std::nullopt,
                                        std::nullopt});
    sites_word_.store(sites_.get(), std::memory_order_release);
    shard_->SetSites(&sites_word_);
  }
  shard_->SetBoundarySeed(seed_ | 1);
}

// How many clients, at once and in all, and how many steps the seed runs.
void Sim::PickClients(uint64_t* max_steps_out, int64_t* run_until_out) {
  max_clients_ = static_cast<uint32_t>(rng_.Range(4, options_.quick ? 24 : 120));
  target_clients_ = static_cast<uint32_t>(
      rng_.Range(1, std::min<uint32_t>(max_clients_, config_.max_connections + 8)));
  if (rng_.Chance(300)) {
    // Crowded: more clients at once than the shard takes, so connections wait in the backlog
    // and idle ones must give way.
    target_clients_ = config_.max_connections + static_cast<uint32_t>(rng_.Range(1, 16));
    max_clients_ = std::max<uint32_t>(max_clients_, target_clients_ + 8);
  }
  uint64_t max_steps = options_.quick ? rng_.Range(200, 1500) : rng_.Range(2000, 30000);
  // A flooded seed runs on for 3 simulated seconds at least, so that a newcomer kept waiting
  // behind the sitters is seen to wait (CheckBacklog).
  int64_t run_until_ms = 0;
  if (sitters_left_ > 0) {
    target_clients_ += sitters_left_;
    max_clients_ += sitters_left_;
    max_steps += 8 * sitters_left_;
    run_until_ms = world_.now_ms + 3000;
    result_.coverage["sim.flooded"] += 1;
  }
  world_.Trace(
      "seed %llu: max_connections %u, recv_buffer %u, head %u, small_file_max %u, "
      "valid_ms %u, clients %u (%u at once, %u sitters)",
      static_cast<unsigned long long>(seed_), config_.max_connections, config_.recv_buffer_size,
      config_.max_request_head, config_.small_file_max, config_.open_file_cache_valid_ms,
      max_clients_, target_clients_, sitters_left_);
  *max_steps_out = max_steps;
  *run_until_out = run_until_ms;
}

// One step: files change, clients come, every client acts, the shard takes one turn, then the
// checks. False when the seed is done (a failure, or every client has ended).
bool Sim::RunStep(uint64_t step) {
  MutateFiles();
  MaybeSwitchRoot();
  uint32_t active = 0;
  for (const auto& c : clients_) active += !c->ended;
  if (hello_burst_ > 0 && step == 1) {
    max_clients_ =
        std::max<uint32_t>(max_clients_, static_cast<uint32_t>(clients_.size()) + hello_burst_ + 8);
    hold_hellos_ = true;
    hello_burst_ms_ = world_.now_ms;
    for (uint32_t i = 0; i < hello_burst_; ++i) SpawnClient();
    hold_hellos_ = false;
  } else if (!held_hellos_.empty() &&
             (world_.now_ms >= hello_burst_ms_ + kHelloHoldMs ||
              std::all_of(held_hellos_.begin(), held_hellos_.end(), [&](uint32_t id) {
                return world_.sockets[clients_[id]->sock].accepted;
              }))) {
    for (const uint32_t id : held_hellos_) {  // all in one step, for one turn of the loop
      Client& c = *clients_[id];
      c.tls->Hello(&world_.sockets[c.sock]);
      c.next_write_ms = world_.now_ms;
    }
    held_hellos_.clear();
  } else if (sitters_left_ > 0) {
    SpawnClient();  // a flood: one a step
  } else if (active < target_clients_ && clients_.size() < max_clients_ && rng_.Chance(200)) {
    SpawnClient();
  }
  for (auto& c : clients_) {
    ClientStep(*c);
    if (!result_.ok) break;
  }
  if (!result_.ok) return false;
  if (clients_.size() >= max_clients_ && active == 0) return false;
  world_.external_deadline_ms = NextClientDeadline();
  shard_->Step();
  ++result_.steps;
  for (auto& c : clients_) CheckStall(*c);
  CheckBacklog();
  CheckLingering();
  CheckSendQueue();
  CheckPromises();
  if (tls_) CheckTls();
  if (rng_.Chance(300)) ++world_.now_ms;
  return true;
}

void Sim::CollectCoverage() {
  const SimCounters& k = world_.counters;
  auto& cov = result_.coverage;
  cov["sim.open_transient"] += k.open_transient;
  cov["sim.pauses"] += k.pauses;
  cov["sim.resumes"] += k.resumes;
  cov["sim.cancels"] += k.cancels;
  cov["sim.data_after_cancel"] += k.data_after_cancel;
  cov["sim.held_at_pause"] += k.held_at_pause;
  cov["sim.held_dropped"] += k.held_dropped;
  cov["sim.cancel_input_left"] += k.cancel_input_left;
  cov["sim.short_sendfiles"] += k.short_sendfiles;
  cov["sim.corked_pieces"] += k.corked_pieces;
  cov["sim.peer_errors"] += k.peer_errors;
  cov["sim.callbacks"] += k.callbacks;
  if (tls_) {
    const SimTlsCounters& t = tls_counters_;
    cov["tls.seeds"] += 1;
    cov["tls.sessions"] += t.sessions;
    cov["tls.handshakes"] += t.handshakes;
    cov["tls.one_byte_feeds"] += t.one_byte_feeds;
    cov["tls.coalesced_feeds"] += t.coalesced_feeds;
    cov["tls.bad_input"] += t.bad_input;
    cov["tls.renegotiations"] += t.renegotiations;
    cov["tls.alerts_seen"] += t.alerts_seen;
    cov["tls.close_notify_queued"] += t.close_notify_queued;
    cov["tls.close_notify_seen"] += t.close_notify_seen;
    cov["tls.client_close_notify"] += t.client_close_notify;
    cov["tls.client_no_close_notify"] += t.client_no_close_notify;
    cov["tls.stalled_handshakes"] += t.stalled_handshakes;
    cov["tls.stalled_closed"] += t.stalled_closed;
  }
}

}  // namespace internal

namespace {

void OnAbort(int) {
  std::fprintf(stderr, "\nshard_sim: seed %llu aborted (a server assertion?)\nreplay: %s\n",
               static_cast<unsigned long long>(g_seed), ReplayCommand(g_seed, g_options).c_str());
  if (g_world != nullptr && !g_world->tracing) {
    std::fprintf(stderr, "(no trace: this run was untraced; add --verbose to the replay)\n");
  } else if (g_world != nullptr) {
    for (const std::string& line : g_world->RecentTrace())
      std::fprintf(stderr, "  %s\n", line.c_str());
  }
  std::fflush(stderr);
  signal(SIGABRT, SIG_DFL);
}

}  // namespace

SeedResult RunSeed(uint64_t seed, const SimOptions& options) {
  g_seed = seed;
  g_options = options;
  {
    // Untraced first (formatting every event costs more than the simulation); a failing seed
    // runs again, identically, with its trace.
    internal::Sim sim(seed, options, /*trace=*/options.verbose);
    SeedResult r = sim.Run();
    if (r.ok || options.verbose) return r;
  }
  internal::Sim sim(seed, options, /*trace=*/true);
  return sim.Run();
}

std::string ReplayCommand(uint64_t seed, const SimOptions& options) {
  return "bazel run //tests/sim:shard_sim -- --seed=" + std::to_string(seed) +
         (options.quick ? " --quick" : "");
}

void InstallCrashReporter() { signal(SIGABRT, &OnAbort); }

}  // namespace ringd::sim
