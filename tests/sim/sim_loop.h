// A simulated io::Loop for the deterministic shard simulator: sockets, files and time are all
// fake, owned by a SimWorld, and every choice (which completion runs first, where received bytes
// split, how much a send moves, which open fails) is drawn from one seeded PRNG, so a seed
// replays exactly. The contract it keeps is io/loop.h's, no more: the point is to drive the real
// server through every ordering that contract allows.
//
//   SimWorld world(seed);                        // clock, PRNG, file tree, sockets
//   auto loop = std::make_unique<SimLoop>(&world, options);
//   int s = world.Connect();                     // a client: queued on the listening socket
//   world.sockets[s].to_server += "GET / HTTP/1.1\r\n\r\n";
//   loop->Poll(10);                              // completions, in a random order
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/loop.h"

namespace ringd::sim {

// xoshiro256** seeded through splitmix64: small, fast, and the same everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  uint64_t Below(uint64_t n);                // [0, n); 0 when n == 0
  uint64_t Range(uint64_t lo, uint64_t hi);  // [lo, hi]
  bool Chance(uint32_t per_mille);           // true with probability per_mille / 1000

 private:
  uint64_t s_[4];
};

// A file's contents at one moment. In-place truncation makes a new version of the same inode.
struct Inode {
  uint64_t ino = 0;
  bool dir = false;
  bool unreadable = false;  // open fails with EACCES
  std::shared_ptr<const std::string> content = std::make_shared<const std::string>();
  int64_t mtime_sec = 0;
};

// One state a path was in, and when (simulated ms); to_ms is INT64_MAX while current.
// A moment of the world: its simulated time, then the order of the edits within it (several
// happen in one millisecond: a root switch, then a file replaced).
struct WorldInstant {
  int64_t ms = 0;
  uint64_t edit = UINT64_MAX;  // SimWorld::edits when it happened; UINT64_MAX: the ms's end
  bool operator<=(const WorldInstant& o) const {
    return ms < o.ms || (ms == o.ms && edit <= o.edit);
  }
};

struct PathVersion {
  int64_t from_ms = 0;
  int64_t to_ms = INT64_MAX;
  uint64_t from_edit = 0;         // SimWorld::edits when it began
  uint64_t to_edit = UINT64_MAX;  // and when it ended
  WorldInstant from() const { return {from_ms, from_edit}; }
  WorldInstant to() const { return {to_ms, to_edit}; }
  std::shared_ptr<const Inode> inode;  // null: missing; a snapshot (content is immutable)
};

// One simulated TCP connection, seen from both ends.
struct SimSocket {
  int fd = -1;            // the server's descriptor once accepted
  bool accepted = false;  // handed to the server by an Accept
  bool refused = false;   // reset while still in the backlog (the listener shut down)
  int64_t connect_ms = 0;
  // Client -> server.
  std::string to_server;  // written by the client, not yet received by the server
  uint64_t received = 0;  // bytes the server's receive has delivered (not those its loop holds)
  uint64_t received_before_abort = UINT64_MAX;  // `received` when the server cancelled, closed,
                                                // or shut its side down (FIN)
  bool client_fin = false;                      // the client shut its sending side
  bool client_reset = false;                    // the client reset the connection
  bool client_closed = false;                   // the client closed (sends to it now fail)
  // Server -> client.
  std::string to_client;    // sent by the server, not yet read by the client (or corked)
  uint64_t window = 65536;  // most unread bytes toward the client before sends stall
  uint64_t sent_total = 0;  // bytes the server has sent
  bool server_shut_wr = false, server_shut_rd = false;
  // The simulator's check of lingering closes (Sim::CheckLingering): when it first saw the client
  // done sending while the server, its side shut (SHUT_WR), still held the connection.
  int64_t fin_while_lingering_ms = -1;
  bool server_closed = false;  // Close: a FIN, or
  bool server_reset = false;   // a reset, when it closed with unread input: unread bytes lost
  // Where the client's first request that asked to close ends in its stream (UINT64_MAX: none
  // yet), and whether the server closed the connection at once although it knew the client was
  // still sending after it: its side had taken bytes past that request from the socket before it
  // ended its receive, or its receive ended cancelled with bytes left unread
  // (kRecvCancelledWithInput). Such a client's next bytes reset the connection, and the reset
  // destroys the last response in flight: the server must linger (Sim::CheckLingering).
  uint64_t close_request_end = UINT64_MAX;
  uint64_t taken_before_cancel = UINT64_MAX;  // delivered or held when its receive was cancelled
  bool told_input_left = false;
  bool closed_on_talker = false;
  bool response_cut = false;  // a file shrank under a SendFile: the response cannot be finished
  // A SendFile that asked to keep the socket corked (`more`) and sent every byte promised the
  // same body's next piece: until a SendFile starts, a shutdown or a close, the client cannot
  // read the last `corked` bytes of to_client (the cork's partly filled segment), and a Send
  // on the socket breaks the promise. A promise the server forgets leaves a response unfinished.
  bool promised = false;
  uint64_t corked = 0;
  int64_t promised_ms = 0;  // when, and the piece that must follow: its file and offset
  int promised_file = -1;
  uint64_t promised_offset = 0;
  uint64_t Readable() const { return to_client.size() - corked; }
  // TLS (sim_tls.h): the client speaks the stand-in's records. to_server and to_client then
  // hold records; `received` counts the plaintext the server's session handed the shard (what
  // the server read, as on a plain socket), `wire_received` the record bytes its loop took, and
  // `client_records` maps the client's records to its plaintext stream (PlainAt).
  bool tls = false;
  int listener = -1;  // the listener the client connected to (-1: any of them)
  int64_t accept_ms = -1;
  uint64_t wire_received = 0;
  std::vector<std::pair<uint64_t, uint64_t>> client_records;  // (wire offset, plaintext end)
  // The plaintext a server that has taken `wire` record bytes knows of: every record it has
  // a byte of counts whole (its session holds the rest, and says so).
  uint64_t PlainAt(uint64_t wire) const;
  // The server's session as the checks see it (set by SimTlsSession).
  bool tls_handshake_done = false;
  bool tls_bad_input = false;                  // refused input
  bool tls_alert_queued = false;               // and queued an alert (unless close_notify was)
  uint64_t tls_queued = 0;                     // record bytes the session queued in all
  uint64_t tls_bad_input_end = UINT64_MAX;     // tls_queued once it refused input (the alert last)
  uint64_t tls_close_notify_end = UINT64_MAX;  // tls_queued once close_notify was queued
  bool tls_close_checked = false;
  // What the server's side had taken from the socket (delivered, or held from a pause) when its
  // receive ended.
  uint64_t TakenBeforeEnd() const {
    return taken_before_cancel != UINT64_MAX ? taken_before_cancel : received_before_abort;
  }
  void Uncork() { promised = false, corked = 0; }
};

// What kinds of trouble the world makes, per mille unless named otherwise; drawn per seed.
struct SimFaults {
  uint32_t deliver = 700;       // a ready operation makes progress in a given Poll
  uint32_t recv_split = 500;    // a receive delivers a random prefix, not all it can
  uint32_t send_partial = 500;  // a send moves a random part of what fits
  uint32_t open_slow = 100;     // an open completes open_slow_max_ms later at most
  int64_t open_slow_max_ms = 200;
  uint32_t open_transient = 10;  // an open fails with EMFILE or ENFILE
  uint32_t accept_error = 5;     // an accept ends with ENFILE, EMFILE or EPERM (the server retries)
  uint32_t accept_end = 20;      // an accept ends of its own accord (the kernel's multishot)
  uint32_t cancel_reset = 300;   // a cancelled receive of a reset peer ends with ECONNRESET
  uint32_t data_after_cancel = 300;  // a cancelled receive still delivers bytes it had
  uint32_t held_at_pause = 300;      // a pause finds bytes the kernel had received: the loop
                                     // keeps them for ResumeRecv, and Cancel drops them (uring)
  uint32_t cancel_input_left = 300;  // a cancelled receive with bytes waiting ends with
                                     // kRecvCancelledWithInput (uring: no buffer was free)
  uint32_t read_slow = 100;          // a file read completes a little later
  uint32_t recv_tiny = 0;  // a receive delivers 1-3 bytes (TLS seeds: records split to a byte)
};

struct SimCounters {
  uint64_t callbacks = 0, opens = 0, open_transient = 0, reads = 0, sends = 0, sendfiles = 0;
  uint64_t accepts = 0, recv_deliveries = 0, bytes_to_server = 0, bytes_to_client = 0;
  uint64_t pauses = 0, resumes = 0, cancels = 0, data_after_cancel = 0, short_sendfiles = 0;
  uint64_t held_at_pause = 0, held_dropped = 0, cancel_input_left = 0;
  uint64_t peer_errors = 0;    // sends and receives ended by a client's reset or close
  uint64_t corked_pieces = 0;  // SendFiles that sent every byte and promised the next piece
};

// Everything outside the shard: time, the PRNG, files, sockets, descriptors. Outlives the loop.
struct SimWorld {
  explicit SimWorld(uint64_t seed) : rng(seed) {}

  Rng rng;
  int64_t now_ms = 1000;
  int64_t realtime_base_sec = 1700000000;
  SimFaults faults;
  SimCounters counters;
  // The shard's listeners (one, or two as with two --listen addresses), which share one backlog;
  // a listener shut down takes no more, and once every one is, the backlog is refused.
  std::vector<int> listen_fds;
  std::vector<int> shut_listeners;
  std::vector<int> tls_listeners;  // those of listen_fds that speak TLS (sim_tls.h)
  bool listen_shut = false;        // every listener shut down
  bool IsListener(int fd) const;
  bool ListenerShut(int fd) const;
  std::deque<size_t> backlog;  // sockets connected, not yet accepted (indices into `sockets`)
  // The first socket in the backlog that `listen_fd` may accept (one that connected to it, or
  // to any listener), as a position in `backlog`; -1: none.
  int BacklogFor(int listen_fd) const;
  // The socket an accept is handing to the server while its callback runs (SimTlsFactory
  // makes that connection's session then); SIZE_MAX otherwise.
  size_t accepting = SIZE_MAX;
  // Sockets accepted on which no receive has started yet: newcomers the shard has taken from
  // the backlog and parked until a connection slot frees (they wait as in the backlog).
  std::set<size_t> accepted_unread;
  std::vector<SimSocket> sockets;
  // The file tree: path relative to the root ("." is the root) -> inode.
  std::map<std::string, std::shared_ptr<Inode>> tree;
  // The root's directory descriptor (a number of the simulation's own, below AllocFd's), and the
  // trees of the roots served before, as they were when the root moved (SwitchRoot): opens
  // beneath an old root's descriptor still find its files, as in a directory renamed away.
  int root_fd = 7;
  std::map<int, std::map<std::string, std::shared_ptr<Inode>>> old_roots;
  std::map<std::string, std::vector<PathVersion>> history;
  uint64_t edits = 0;  // file tree edits so far: their order within a millisecond
  uint64_t next_ino = 100;
  // Descriptors the server holds: sockets (-> index in `sockets`) and files (-> inode).
  std::map<int, size_t> socket_fds;
  std::map<int, std::shared_ptr<Inode>> file_fds;
  int64_t external_deadline_ms = INT64_MAX;  // the next client action: Poll sleeps no longer
  std::vector<std::string> trace;            // a ring of recent events, for failure reports
  size_t trace_next = 0;
  bool tracing = true;
  bool print_trace = false;  // every event to stdout as it happens (--verbose)
  // A head and a body sent as two buffers when both fit in this many bytes: the shard should
  // have copied the body behind the head (0: not checked).
  size_t one_buffer_max = 0;

  size_t Connect(uint64_t window);  // a new client socket, queued on the listener
  // File tree edits (they record history).
  void PutFile(const std::string& path, std::string content, bool unreadable = false);
  void MakeDir(const std::string& path);
  void ReplaceFile(const std::string& path, std::string content);  // a new inode (rename over)
  void TruncateInPlace(const std::string& path, uint64_t size);    // same inode, shorter
  void Remove(const std::string& path);
  // A deploy: another directory, `fd`, with every path of this one, each a new inode of the
  // same contents, takes the root's name; the old tree stays beneath the old descriptor.
  void SwitchRoot(int fd);
  int64_t RealtimeSec() const { return realtime_base_sec + now_ms / 1000; }
  void Trace(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
  std::vector<std::string> RecentTrace() const;
  int AllocFd();  // the lowest free number from 1000 up, as the kernel reuses numbers

 private:
  void Record(const std::string& path);
};

class SimLoop final : public io::Loop {
 public:
  SimLoop(SimWorld* world, const io::LoopOptions& options);
  ~SimLoop() override;

  const char* Name() const override { return "sim"; }
  void Accept(int listen_fd, io::Completion* c) override;
  void Recv(int fd, io::Completion* c) override;
  void Send(int fd, iovec* iov, int iovcnt, io::Completion* c, bool more) override;
  void SendFile(int sock_fd, int file_fd, uint64_t offset, uint64_t length, io::Completion* c,
                bool more) override;
  void Open(int dir_fd, const char* path, io::FileStat* stat, io::Completion* c) override;
  void Read(int fd, char* buf, uint64_t length, uint64_t offset, io::Completion* c) override;
  void Cancel(io::Completion* c) override;
  void PauseRecv(io::Completion* c) override;
  void ResumeRecv(io::Completion* c) override;
  void Shutdown(int fd, int how) override;
  void Close(int fd) override;
  int64_t MonotonicMs() const override { return w_->now_ms; }
  int64_t RealtimeSec() const override { return w_->RealtimeSec(); }
  void Poll(int timeout_ms) override;
  void Wake() override { woken_ = true; }
  void Quiesce() override { quiesced_ = true; }
  io::LoopStats Stats() const override { return stats_; }

  // For the simulator's checks.
  size_t OpsInFlight() const { return ops_.size(); }
  size_t OpsInFlightExcept(io::Op kind) const;
  uint64_t polls() const { return polls_; }
  uint32_t max_callbacks_per_poll() const { return max_callbacks_per_poll_; }
  std::string DescribeOps() const;

 private:
  struct OpState {
    io::Completion* c = nullptr;
    io::Op kind = io::Op::kNone;
    int64_t ready_at_ms = 0;             // Open, Read: not before this
    uint64_t length = 0;                 // SendFile: asked; Read: asked
    bool more = false;                   // SendFile: the body's next piece follows
    uint8_t data_after_cancel = 0;       // deliveries after a cancel
    bool cancelled_beside_send = false;  // Recv: cancelled while a send on its socket was in flight
    bool held_dropped = false;  // Recv: cancelled holding bytes a pause kept, which went with it
    std::string held;           // Recv: bytes taken from the socket as it was paused
  };

  uint64_t Begin(io::Completion* c, io::Op kind, int fd);
  bool Ready(const OpState& op) const;
  void Progress(uint64_t seq);
  void Finish(uint64_t seq, int64_t result, const char* data = nullptr);
  void Deliver(io::Completion* c, int64_t result, bool more, const char* data);
  void ProgressAccept(uint64_t seq);
  void ProgressRecv(uint64_t seq);
  void ProgressSend(uint64_t seq);
  void EndPiece(const OpState& op, SimSocket* s);
  void ProgressOpen(uint64_t seq);
  void ProgressRead(uint64_t seq);
  SimSocket* SocketOf(int fd);
  bool RunPass();  // one pass over a snapshot of the operations; true if any was ready

  SimWorld* w_;
  io::LoopOptions options_;
  io::LoopStats stats_;
  std::map<uint64_t, OpState> ops_;  // by submission order: iteration is deterministic
  std::unordered_map<const io::Completion*, uint64_t> seq_of_;  // lookups only, never iterated
  uint64_t next_seq_ = 1;
  uint64_t polls_ = 0;
  uint32_t callbacks_this_poll_ = 0;
  uint32_t max_callbacks_per_poll_ = 0;
  bool in_poll_ = false;
  bool woken_ = false;
  bool quiesced_ = false;
  std::vector<char> recv_buf_;
};

}  // namespace ringd::sim
