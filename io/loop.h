// The io interface: one Loop per shard thread, completion-based, never shared between threads.
// Server code depends on this header only; io_uring and epoll backends implement it.
//
// The caller owns every in-flight operation's Completion (TigerBeetle's model): it sets
// `callback` and `owner`, submits, and must keep the Completion alive until the callback has run
// with `more == false`. Callbacks run from Loop::Poll, one at a time, never from inside a submit
// call. A multishot operation (Accept, Recv) calls back once per event with `more == true` and
// ends with one call with `more == false` (an error, end of stream, or Cancel).
//
// No call here blocks the shard thread, except Poll while there is nothing to do.
//
//   Completion c;  c.callback = &OnAccept;  c.owner = this;
//   loop->Accept(listen_fd, &c);
//   while (running) loop->Poll(timeout_ms);
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>

#include <cerrno>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace ringd::io {

enum class Op : uint8_t { kNone, kAccept, kRecv, kSend, kSendFile, kOpen, kRead, kWake };

// What Open reports about the file it opened, written where the caller says (not into the
// Completion: every connection holds one for its receive, which would carry it unused).
struct FileStat {
  uint64_t size = 0;
  int64_t mtime_sec = 0;
  uint64_t inode = 0;
  uint32_t mode = 0;  // st_mode: type and permission bits
  uint64_t dev = 0;   // the file system's device number (makedev of statx's major, minor)
  int64_t mtime_nsec = 0;
};

struct Completion;
class FaultPlan;  // io/fault.h: faults a test injects under a backend
using Callback = void (*)(Completion* c);

struct Completion {
  // Set by the caller.
  Callback callback = nullptr;
  void* owner = nullptr;

  // Set by the backend before the callback runs.
  int64_t result = 0;          // >= 0: bytes, or a file descriptor; < 0: -errno
  const char* data = nullptr;  // Recv: the bytes received, valid only during the callback
  // Send/SendFile: bytes sent so far by the operation in flight (0 when it starts). Owners may
  // read it as progress: a slow reader that keeps taking bytes is not a stalled one.
  uint64_t done = 0;
  bool more = false;  // multishot: more callbacks will follow

  // Backend state: callers neither read nor write it (server code keeps its own record of
  // what it started and what has ended). (Every connection holds a Completion for its
  // receive, idle or not: fields are ordered to leave no padding.)
  Op op = Op::kNone;
  bool in_flight = false;
  bool cancelled = false;  // Cancel was called: no transparent re-arm
  bool paused = false;     // Recv: PauseRecv was called; no data callbacks until ResumeRecv
  bool corked = false;     // SendFile: TCP_CORK is on for this body's inline sendfiles
  int fd = -1;
  int file_fd = -1;
  // What the operation in flight works on (each operation sets its own before it starts).
  union {
    uint64_t offset = 0;  // SendFile, Read: the file offset
    FileStat* stat;       // Open: where the opened file's metadata goes
  };
  uint64_t remaining = 0;  // SendFile: bytes still to send; Send: bytes of iov left
  union {
    iovec* iov = nullptr;  // Send: advanced in place on partial sends
    char* buf;             // Read
    const char* path;      // Open
  };
  union {
    int iovcnt = 0;  // Send
    int dir_fd;      // Open
  };
  int send_flags = 0;       // Send: MSG_NOSIGNAL, plus MSG_MORE when asked; SendFile: MSG_MORE
  uint64_t turn = 0;        // SendFile: the Poll call it last sent file bytes in,
  uint64_t turn_bytes = 0;  // and how many (kept across operations on this Completion)
  // One backend's own state per operation, laid out as that backend alone knows (uring:
  // OpState in io/uring_loop.h, which asserts that it fits); zeroed when the Completion is made.
  static constexpr size_t kBackendBytes = 24, kBackendAlign = 8;
  alignas(kBackendAlign) unsigned char backend[kBackendBytes] = {};
  int64_t pending_result = 0;  // the result a completion queued inside its starting call reports
  Completion* next_ready = nullptr;  // a backend's queue of finished operations
};

// Results that are no errno. An errno is at most 4095 (MAX_ERRNO), so these lie below every
// -errno and no code that reads errors can take one for another.
constexpr int64_t kFirstLoopResult = -(int64_t{1} << 16);
// The last result of a cancelled receive that ended with bytes waiting in the socket, unread
// (the kernel had no free buffer for them when the cancel came), or with bytes received that it
// dropped (it was paused, or held bytes kept while paused, when the cancel came: PauseRecv):
// cancelled, as -ECANCELED, but its owner knows the client has sent more.
constexpr int64_t kRecvCancelledWithInput = kFirstLoopResult - 1;
static_assert(kRecvCancelledWithInput < -4095);

// Marks a connection handle that names a slot of the ring's registered file table (bypass
// tier), so it can never be taken for a process fd: fds stay below 2^30 (RLIMIT_NOFILE).
constexpr int kDirectHandle = 1 << 30;

// Receive buffers per loop at most: io_uring names a provided buffer with 16 bits.
constexpr uint32_t kMaxRecvBuffers = 32768;
static_assert(kMaxRecvBuffers <= 65536);

// What the bypass and uring tiers read (io/uring_loop.h); the epoll tier ignores it.
struct UringOptions {
  uint32_t ring_entries = 4096;  // submission queue size
  // The kernel consumes provided buffers incrementally (IOU_PBUF_RING_INC): a receive takes only
  // the bytes it fills, so the pool can be a few large buffers. Each receive then delivers at
  // most LoopOptions::recv_max_bytes.
  bool recv_incremental = false;
  uint32_t pipe_pool_size = 64;  // reusable pipes for splice
  uint32_t pipe_size = 1 << 20;  // F_SETPIPE_SZ for each pipe
  bool send_zc = false;          // IORING_OP_SEND_ZC for large buffers
  uint32_t send_zc_min_bytes = 8192;
  // The bypass tier (uring with direct descriptors): connections live in the ring's registered
  // file table, never in the process's fd table; `direct_files` slots (clamped to the
  // RLIMIT_NOFILE the kernel holds the table to). Connection handles then are table indices
  // marked with kDirectHandle, opaque to the caller like any handle.
  bool direct_descriptors = false;
  uint32_t direct_files = 0;
  // bypass: a connection's first file body installs a process fd for its socket
  // (IORING_OP_FIXED_FD_INSTALL, 6.8), so that cached pages go out with an inline sendfile(2) as
  // on the uring tier; false: every body splices through the ring.
  bool bypass_sendfile = false;
  // Bodies of at least this many bytes splice through the ring even when their pages are cached
  // (0: never).
  uint64_t splice_min_bytes = 0;
  // bypass: io_uring_enter names the ring by its index in the shard thread's table of registered
  // rings (IORING_REGISTER_RING_FDS, 5.18), not by its fd, so no enter looks the ring up in the
  // process's fd table (fget/fput, atomic in a process of several threads). The loop must be
  // made and used on one thread (the shard's); it is destroyed after that thread has exited,
  // whose exit drops the registration. Where the kernel refuses it (an old
  // kernel, or a thread with every slot of its table taken) the loop enters by fd as before.
  bool register_ring_fd = false;
  // The operations whose completions nothing reads (closes, cancels) ask the kernel for none when
  // they succeed (IOSQE_CQE_SKIP_SUCCESS, 5.17), so a close does not wake a waiting shard for a
  // completion it would drop (one io_uring_enter per Connection: close request).
  bool skip_unread_cqes = false;
  bool sqpoll = false;             // a kernel thread submits: no io_uring_enter to submit
  int sqpoll_cpu = -1;             // pin the SQ thread (IORING_SETUP_SQ_AFF)
  uint32_t sqpoll_idle_ms = 1000;  // the SQ thread sleeps after this long without work
  // Another loop's ring (Loop::RingFd) whose SQ thread and io-wq this ring shares
  // (IORING_SETUP_ATTACH_WQ): with SQPOLL, one kernel thread polls every shard's ring. -1: none.
  int attach_ring_fd = -1;
  // NAPI busy polling (IORING_REGISTER_NAPI, 6.9): while waiting for completions, poll the
  // receive queues of the NICs the ring's sockets arrived on for this long. 0: off.
  uint32_t busy_poll_us = 0;
  // Without SQPOLL: a wait for completions returns once `batch_wait_count` have arrived, or once
  // `batch_wait_us` have passed with at least one (io_uring_enter's min_wait_usec, 6.12), and
  // every wait runs the ring's deferred completions: a shard that keeps up takes several
  // completions a turn instead of one, for fewer system calls and wake-ups, at up to
  // batch_wait_us of added latency. 0: off.
  uint32_t batch_wait_us = 0;
  uint32_t batch_wait_count = 32;
  // io-wq workers per ring, for bounded (file) and unbounded (socket, splice) work; 0 leaves the
  // kernel's default (a worker per blocked request, up to RLIMIT_NPROC).
  uint32_t iowq_max_workers = 0;
  // bypass: file bodies are read into registered buffers (IORING_OP_READ_FIXED) and sent from
  // there, `body_buffers` of `body_buffer_size` per loop (the loop maps and registers them); a
  // SendFile that finds none free splices through a pipe as before. 0: always splice.
  uint32_t body_buffers = 0;
  uint32_t body_buffer_size = 128 << 10;
  // Memory to register as fixed buffers (the shard's small-file pool), each on its first use.
  const char* registered_region = nullptr;
  size_t registered_buffer_size = 0;
  uint32_t registered_buffer_count = 0;
};

// What the epoll tier reads (io/epoll_loop.cc); the uring tiers ignore it.
struct EpollOptions {
  uint32_t worker_threads = 4;   // blocking file work
  uint32_t worker_queue = 1024;  // queued file jobs before backpressure
};

// A loop's options: what every tier reads, then each backend's own.
struct LoopOptions {
  uint32_t recv_buffer_count = 1024;  // buffers for receiving (a power of two)
  uint32_t recv_buffer_size = 8192;
  // The most one receive delivers (0: recv_buffer_size; less only with
  // UringOptions::recv_incremental, where a buffer is larger than a receive).
  uint32_t recv_max_bytes = 0;
  // Memory for the receive buffers (recv_buffer_count x recv_buffer_size), carved by the shard
  // from its own mapping; the loop maps its own when null.
  char* recv_region = nullptr;
  // File bytes one SendFile Completion may send inline per Poll call; then it waits for the next
  // turn (a POLL_ADD, or EPOLLOUT) and the loop serves everything else first. Without it a few
  // fast large downloads (each next chunk starts from the last one's callback) hold the loop
  // while small requests wait (nginx's sendfile_max_chunk). 1 MiB: a download in a site's mix
  // takes 4 turns, not 13 (docs/PERFORMANCE.md, "Downloads in a mix").
  uint64_t send_turn_bytes = 1 << 20;
  // A turn's first this many file bytes are shared among the connections sending (up to 1 MiB
  // each, at least send_turn_bytes; so only a send_turn_bytes below 1 MiB is raised): a few
  // downloads send in fewer, larger calls (internal::SendTurns).
  uint64_t send_turn_share_bytes = 8 << 20;
  // How long a "these pages are cached" answer is trusted before a file range is asked about
  // again (internal::ResidentFiles); 0: ask before every inline send.
  uint32_t page_cache_trust_ms = 100;
  // TCP_CORK while a body's inline sendfiles run (internal::CorkBody), as nginx's tcp_nopush.
  bool tcp_nopush = true;
  UringOptions uring;
  EpollOptions epoll;
  // Tests only: faults the backend injects where its system calls and completions return
  // (io/fault.h). It must outlive the loop. Null (always, in ringd): none.
  FaultPlan* faults = nullptr;
};

struct LoopStats {
  uint64_t submitted = 0;  // operations handed to the kernel (or started, for epoll)
  uint64_t completed = 0;  // callbacks run
  // Operations started and not yet ended (their last callback not run); a multishot receive or
  // accept counts once however many callbacks it runs.
  uint64_t in_flight = 0;
  uint64_t recv_nobufs = 0;  // times the receive buffers ran out (multishot recv re-armed)
  // Receive memory the kernel has been given (uring tiers: the pool's first buffers, more each
  // time it ran dry; epoll: its one read buffer); pages beyond it were never touched.
  uint64_t recv_pool_bytes = 0;
  uint64_t recv_held = 0;  // receives copied aside because their connection was paused
  uint64_t pipes_in_use = 0;
  uint64_t pipe_capacity = 0;    // pipes for splicing bodies (0: the tier never splices)
  uint64_t sendfile_bytes = 0;   // file body bytes sent with sendfile(2) (page-cache hits)
  uint64_t splice_bytes = 0;     // file body bytes spliced through the ring (uring tiers)
  uint64_t read_send_bytes = 0;  // file body bytes read into registered buffers, then sent (bypass)
  uint64_t page_cache_asks = 0;  // times an inline send asked the page cache (not trusted)
  uint64_t send_zc = 0;          // zero-copy sends issued (--send-zc)
  uint64_t send_zc_fixed = 0;    // of which from registered buffers (IORING_RECVSEND_FIXED_BUF)
  // uring tiers: fixed buffers registered with the ring (each on its first use) and so pinned.
  uint64_t fixed_buffers_registered = 0;
  uint64_t opens_inline = 0;        // epoll: opens resolved from the kernel's caches, no worker
  uint64_t stats_on_shard = 0;      // uring tiers: opens statx-ed on the shard (local file system)
  bool ring_fd_registered = false;  // uring tiers: the ring enters by its registered index
  uint64_t cqes = 0;                // uring tiers: completions reaped from the ring
  // uring tiers: what operations in flight hold, all given back when they end: per-operation
  // slots (Open, Send of several buffers), body buffers (bypass), and chunks of bytes kept for
  // paused receives.
  uint64_t op_slots_in_use = 0;
  uint64_t body_buffers_in_use = 0;
  uint64_t recv_held_in_use = 0;
  // A loop that runs TLS connections (server/tls's TlsLoop around a tier's loop).
  uint64_t tls_connections = 0;         // open now (or sending their close_notify)
  uint64_t tls_handshakes = 0;          // completed
  uint64_t tls_resumed = 0;             // of which resumed a session
  uint64_t tls_handshake_failures = 0;  // bad input before the handshake completed
  uint64_t tls_bad_records = 0;         // bad input after it
  uint64_t tls_plain_http = 0;          // plaintext HTTP sent to a TLS port (answered 400)
  uint64_t tls_handshakes_refused = 0;  // closed at accept: too many handshakes under way
  uint64_t tls_hellos_deferred = 0;     // ClientHellos answered in a later turn (a flood of them)
  // TLS listeners with ",proxy": connections closed for their PROXY protocol header (none, or
  // malformed) or for the client it named (--allow/--deny).
  uint64_t proxy_missing = 0, proxy_malformed = 0, clients_denied = 0;
};

// What the transport under a connection says of it, for the access log: all empty for plain TCP.
// The views stay valid until the connection is closed.
struct TransportInfo {
  std::string_view protocol;     // "TLSv1.3"
  std::string_view cipher;       // "TLS_AES_128_GCM_SHA256"
  std::string_view server_name;  // the name the client asked for (SNI)
  bool resumed = false;          // the session was resumed (a ticket)
  // A TLS port's connection that sent plaintext HTTP instead: the start of it. Its receive ended
  // with -EPROTO; the owner may answer in plaintext (Send on it sends the bytes as they are),
  // then the connection ends.
  std::string_view plain_http_request;
  // The client a PROXY protocol header named before TLS ("192.0.2.7"); empty: the socket's peer.
  std::string_view client;
};

class Loop {
 public:
  virtual ~Loop() = default;
  // The tier's name, for logs and metrics only: what the loop can do is asked of its io::Tier.
  virtual const char* Name() const = 0;

  // Multishot accept on a listening socket: result is each new connection's fd.
  virtual void Accept(int listen_fd, Completion* c) = 0;
  // Multishot receive: each callback carries bytes in `data`/`result` (at most the options'
  // recv_max_bytes, else recv_buffer_size); result 0 is end of stream.
  // An idle connection holds no receive buffer: the bytes live in a shared pool until the callback
  // returns.
  virtual void Recv(int fd, Completion* c) = 0;
  // Sends every byte of iov[0..iovcnt) (advancing iov in place); result is the total, or -errno.
  // `more`: the caller sends more or shuts the socket down straight after, so the kernel may hold
  // a partly filled last segment back (MSG_MORE) to share it with what follows: a response and
  // its FIN leave as one segment.
  virtual void Send(int fd, iovec* iov, int iovcnt, Completion* c, bool more = false) = 0;
  // Sends `length` bytes of file_fd from `offset` without copying them through user space.
  // result is the bytes sent; fewer than `length` means the file ended early (it was truncated).
  // `more`: the same body's next piece follows on this Completion, as another SendFile on the
  // same socket (perhaps after other connections' turns), or the connection closes: a backend
  // that corks the socket for a body (LoopOptions::tcp_nopush) may leave it corked when every
  // byte went out, so that this piece's partly filled last segment fills up with the next
  // piece's first bytes.
  virtual void SendFile(int sock_fd, int file_fd, uint64_t offset, uint64_t length, Completion* c,
                        bool more = false) = 0;
  // Opens `path` read-only beneath dir_fd (symlinks may not leave it) and stats it into `*stat`.
  // result is the fd, or -errno (then `*stat` is unspecified). `path` and `stat` must stay valid
  // until the callback.
  virtual void Open(int dir_fd, const char* path, FileStat* stat, Completion* c) = 0;
  // Reads up to `length` bytes at `offset` into `buf`; result is the bytes read.
  virtual void Read(int fd, char* buf, uint64_t length, uint64_t offset, Completion* c) = 0;
  // Ends a multishot operation; its last callback arrives with more == false. A cancelled
  // receive's last callback is -ECANCELED, kRecvCancelledWithInput (cancelled, and the client
  // sent bytes the receive did not deliver: the client is still sending), bytes received
  // before the cancel took effect (never for a receive paused when cancelled, which delivers
  // nothing more), end of stream (0), or an error of the socket itself (a reset): never the
  // backend's own want of buffers as an error.
  virtual void Cancel(Completion* c) = 0;
  // Backpressure for a Recv in flight: after PauseRecv returns, no callback with data comes until
  // ResumeRecv (bytes the kernel had already received are kept, in order, by the backend), so a
  // caller that pauses while it still has room for one more delivery never has to drop bytes.
  // The Recv stays in flight: Cancel still ends it with one last callback. ResumeRecv delivers
  // what was kept from Poll, never from inside the call. Both may be called from a callback.
  virtual void PauseRecv(Completion* c) = 0;
  virtual void ResumeRecv(Completion* c) = 0;
  // shutdown(2) on a connection; operations in flight on it end with an error or end of stream.
  virtual void Shutdown(int fd, int how) = 0;
  // Closes a descriptor with no operation in flight on it.
  virtual void Close(int fd) = 0;

  // The loop's clock: a simulated loop has its own. MonotonicMs for deadlines, RealtimeSec for
  // the Date header.
  virtual int64_t MonotonicMs() const {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  }
  virtual int64_t RealtimeSec() const {
    timespec ts;
    clock_gettime(CLOCK_REALTIME_COARSE, &ts);
    return ts.tv_sec;
  }

  // Runs ready callbacks, waiting up to timeout_ms for at least one event when none is ready.
  virtual void Poll(int timeout_ms) = 0;
  // Makes a Poll in progress on this loop's thread return soon; safe from any thread.
  virtual void Wake() = 0;
  // Before the owner frees what operations point into (cache entries, buffers): afterwards no
  // callback runs and no background thread touches caller memory; only Close may be called,
  // from any thread (the owner's destructor may run on another: Close then closes at once).
  virtual void Quiesce() {}

  virtual LoopStats Stats() const = 0;
  // The transport of the connection on `fd` (a loop that wraps it in TLS says which).
  virtual TransportInfo Transport(int fd) const {
    (void)fd;
    return {};
  }
  // The kernel object another loop may share (io_uring's ring fd, for ATTACH_WQ); -1: none.
  virtual int RingFd() const { return -1; }
};

// Creates the loop for a shard, or an error of one line.
using LoopFactory = std::function<absl::StatusOr<std::unique_ptr<Loop>>(const LoopOptions&)>;
absl::StatusOr<std::unique_ptr<Loop>> MakeUringLoop(const LoopOptions& options);
// The bypass tier: MakeUringLoop with direct descriptors (options.direct_descriptors set).
absl::StatusOr<std::unique_ptr<Loop>> MakeBypassLoop(const LoopOptions& options);
absl::StatusOr<std::unique_ptr<Loop>> MakeEpollLoop(const LoopOptions& options);

}  // namespace ringd::io
