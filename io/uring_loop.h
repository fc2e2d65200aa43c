// The io_uring backend's class, shared by its three source files: uring_loop.cc (the ring, its
// set-up, submission, completion dispatch, opens and closes), uring_recv.cc (multishot receives,
// the provided buffer ring, bytes kept for paused receives) and uring_send.cc (sends and file
// bodies: inline sendfile, splice through the pipe pool). Nothing outside the backend includes it.
#pragma once

#include <liburing.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "io/assert.h"
#include "io/backend_util.h"
#include "io/fault.h"
#include "io/loop.h"

namespace ringd::io::uring {

// Where a SendFile is: which of its operations the next completion (if any) belongs to.
//
//   SendFile -> [kInstallingFd] -> inline sendfile (kInlineWaitWritable while the socket is full)
//            -> or, for what is not cached: [kWaitingPipe] -> kSpliceIn <-> kSpliceOut
//               (kSpliceWaitWritable while the socket is full)
//            -> or, through a body buffer (bypass, --body-buffers): kReadBody <-> kSendBody
enum class FilePhase : uint8_t {
  kNone,
  kInstallingFd,        // FIXED_FD_INSTALL of the socket's process fd, for inline sendfile
  kInlineWaitWritable,  // the inline path's socket was full: a poll for POLLOUT
  kWaitingPipe,         // every pipe busy: queued in pipe_wait_ (no operation in flight)
  kSpliceIn,            // file -> pipe
  kSpliceOut,           // pipe -> socket (in_pipe bytes)
  kSpliceWaitWritable,  // the splice's socket was full: a poll for POLLOUT, in_pipe bytes held
  kReadBody,            // file -> body buffer
  kSendBody,            // body buffer -> socket (in_pipe bytes)
};

// What this backend keeps per operation, in its Completion's backend area (Completion::backend,
// zeroed when the Completion is made: `initialized` false until Begin fills in the defaults).
// It carries over from one operation to the next on the same Completion: an operation ends
// having given back its slot and pipe, and a receive's held copies are dropped with it; `phase`
// means something only while a SendFile is in flight (each SendFile starts it at kNone).
struct OpState {
  uint32_t in_pipe = 0;    // SendFile: bytes spliced into the pipe (or read into the body
                           // buffer), not yet out
  int32_t slot = -1;       // Open, Send of several buffers, SendFile through a body buffer: the
                           // backend's per-operation memory (slots_ or body_free_)
  int32_t held_head = -1;  // Recv: copies of bytes received while paused, oldest
  int32_t held_tail = -1;
  int32_t held_end = 1;     // Recv: a final result that arrived while paused (<= 0)
  int16_t pipe_index = -1;  // SendFile: the pipe borrowed from the pool (--pipes <= 4096)
  FilePhase phase = FilePhase::kNone;  // SendFile
  bool armed : 1 = false;              // Recv: a multishot receive is in the kernel
  // Recv: cancelled while paused or with bytes kept: bytes still to come are dropped too (they
  // would break the pause, or arrive after kept ones that were dropped); and whether any were,
  // which its last callback says (kRecvCancelledWithInput).
  bool discard : 1 = false;
  bool dropped : 1 = false;
  bool initialized : 1 = true;
};
static_assert(sizeof(OpState) <= Completion::kBackendBytes);
static_assert(alignof(OpState) <= Completion::kBackendAlign);
static_assert(std::is_trivially_copyable_v<OpState>);

// A Completion's OpState (an implicit-lifetime type living in the Completion's byte area).
inline OpState& St(Completion* c) { return *std::launder(reinterpret_cast<OpState*>(c->backend)); }
inline const OpState& St(const Completion* c) {
  return *std::launder(reinterpret_cast<const OpState*>(c->backend));
}

constexpr uint16_t kRecvGroup = 0;
constexpr uint64_t kInlineChunk = 1 << 20;  // sendfile per call on the inline path
// The part of the receive pool the kernel is given at start; the rest as receives run it dry.
// Two 64 KiB buffers of incremental receive serve many connections' small requests at a time:
// the kernel fills one while the other comes back.
constexpr uint64_t kFirstRecvBytes = 128 << 10;
constexpr int kBatch = 256;

class UringLoop final : public Loop {
 public:
  ~UringLoop() override;

  bool Init(const LoopOptions& o, std::string* error);

  const char* Name() const override { return direct_ ? "bypass" : "uring"; }
  int RingFd() const override { return ring_.ring_fd; }

  void Accept(int listen_fd, Completion* c) override;

  void Recv(int fd, Completion* c) override;

  void Send(int fd, iovec* iov, int iovcnt, Completion* c, bool more) override;

  void SendFile(int sock_fd, int file_fd, uint64_t offset, uint64_t length, Completion* c,
                bool more) override;

  void Open(int dir_fd, const char* path, FileStat* stat, Completion* c) override;

  void Read(int fd, char* buf, uint64_t length, uint64_t offset, Completion* c) override;

  void Cancel(Completion* c) override;

  void PauseRecv(Completion* c) override;

  void ResumeRecv(Completion* c) override;

  void Shutdown(int fd, int how) override;

  void Close(int fd) override;
  void Quiesce() override { quiesced_ = true; }

  void Poll(int timeout_ms) override;

  void Wake() override {
    const uint64_t one = 1;
    ssize_t r = ::write(wake_fd_, &one, sizeof one);
    (void)r;
  }

  LoopStats Stats() const override;

 private:
  // One io_uring_enter that submits and waits with LoopOptions::batch_wait_us; returns its result
  // or -errno.
  int SubmitAndWaitBatch(const __kernel_timespec* ts);
  struct Pipe {
    int r = -1, w = -1;
    bool busy = false;
  };

  struct Event {
    uint64_t user_data;
    int32_t res;
    uint32_t flags;
  };

  io_uring_sqe* Sqe();

  int TakeSlot();

  void GiveSlot(Completion* c) {
    if (St(c).slot < 0) return;
    free_slots_.push_back(St(c).slot);
    St(c).slot = -1;
  }

  bool IsDirect(int handle) const { return direct_ && (handle & kDirectHandle) != 0; }

  // user_data of a direct shutdown: the slot, tagged odd (Completions are aligned: never odd).
  static constexpr uint64_t kShutdownTag = 1;

  // An SQE whose completion nothing reads (a close, a cancel): user_data 0, which Dispatch drops,
  // and where the kernel can, no completion at all when it succeeds.
  void Unread(io_uring_sqe* sqe) const {
    io_uring_sqe_set_data(sqe, nullptr);
    if (options_.uring.skip_unread_cqes) sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
  }

  void CloseSlot(uint32_t slot) {
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_close_direct(sqe, slot);
    Unread(sqe);
    // The socket's process fd, if a body installed one: the socket goes with the last of the two.
    SlotState& st = slot_state_[slot];
    if (st.fd >= 0) {
      sqe = Sqe();
      io_uring_prep_close(sqe, st.fd);
      Unread(sqe);
      st.fd = -1;
    }
    st.fd_refused = false;
  }

  // The process fd that sendfile(2) can use for a connection handle: the handle itself, or for a
  // direct descriptor the fd installed for it (-1: none).
  int SocketFd(int handle) const {
    if (!IsDirect(handle)) return handle;
    return slot_state_[static_cast<uint32_t>(handle & ~kDirectHandle)].fd;
  }

  void ShutdownDone(uint32_t slot);

  void Target(io_uring_sqe* sqe, int handle) const;

  void Submit();

  // Operations that finished inside the call that started them: their callbacks run from Poll
  // (never from inside the starting call, which may itself be in a callback).
  void Ready(Completion* c, int64_t result) {
    c->pending_result = result;
    ready_.Push(c);
  }

  void RunReady() {
    while (Completion* c = ready_.Pop()) Finish(c, c->pending_result);
  }

  void Finish(Completion* c, int64_t result);

  // Every operation on a Completion starts and ends through these (stats_.in_flight).
  void Begin(Completion* c, Op op, int fd) {
    OpState& st = St(c);
    if (!st.initialized) st = OpState{};  // the Completion's first operation on this backend
    internal::BeginOp(c, op, fd);
    ++stats_.in_flight;
  }
  void Ended(Completion* c) {
    if (c->in_flight) --stats_.in_flight;
    c->in_flight = false;
  }

  void ArmRecv(Completion* c);

  // Receives that wait for Poll with nothing in the kernel to bring them back (waiting_recvs_),
  // each queued once however many reasons it has; one whose last callback runs elsewhere leaves
  // the queue then (EndRecv), so the queue never names a receive its owner may have freed.
  void WaitForPoll(Completion* c) {
    if (!waiting_recvs_.Holds(c)) waiting_recvs_.Push(c);
  }
  void EndRecv(Completion* c) {
    Ended(c);
    if (waiting_recvs_.Holds(c)) waiting_recvs_.Remove(c);
  }
  void RunWaitingRecvs();

  void CancelInKernel(Completion* c) {
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_cancel64(sqe, reinterpret_cast<uint64_t>(c), 0);
    Unread(sqe);
  }

  char* RecvBuffer(uint16_t bid) const {
    return recv_bufs_ + static_cast<size_t>(bid) * options_.recv_buffer_size;
  }

  void RecycleBuffer(uint16_t bid) {
    if (faults_ != nullptr) [[unlikely]] {
      if (faults_->Inject(Fault::kEnobufs, "recv buffer recycle"))
        return withheld_bufs_.push_back(bid);
    }
    io_uring_buf_ring_add(buf_ring_, RecvBuffer(bid), options_.recv_buffer_size, bid,
                          io_uring_buf_ring_mask(options_.recv_buffer_count), 0);
    io_uring_buf_ring_advance(buf_ring_, 1);
  }

  // Where a receive's bytes start: a whole buffer, or with incremental consumption the part of
  // it after what earlier receives took (the kernel fills each buffer front to back).
  const char* Received(uint16_t bid) const {
    return RecvBuffer(bid) + (incremental_ ? consumed_[bid] : 0);
  }

  void Consumed(uint16_t bid, int32_t len, uint32_t flags);

  void Hold(Completion* c, const char* data, int32_t len);

  int32_t PopHeld(Completion* c);

  void ReleaseHeld(Completion* c) {
    while (St(c).held_head >= 0) held_free_.push_back(PopHeld(c));
  }

  void Deliver(Completion* c, const char* data, int32_t len);

  void Redeliver(Completion* c);

  void ArmWake() {
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_read(sqe, wake_fd_, &wake_value_, sizeof wake_value_, 0);
    io_uring_sqe_set_data(sqe, &wake_);
  }

  void SubmitSend(Completion* c);

  bool SendCached(Completion* c);

  void WaitWritable(Completion* c);

  void Splice(Completion* c);

  static constexpr int kNoPipeFree = -1;

  bool SetupRing(const LoopOptions& o, std::string* error);
  bool SetupFileTable(const LoopOptions& o, std::string* error);
  bool SetupRecvBuffers(const LoopOptions& o, std::string* error);
  void GiveRecvBuffers(uint32_t count);
  bool GrowRecvPool();
  bool SetupFixedBuffers(const LoopOptions& o, std::string* error);

  int TakePipe();
  int OpenPipe(Pipe* p);  // 0, or -errno

  void GivePipe(int index, bool dirty);

  void SpliceIn(Completion* c);
  void ReadBody(Completion* c);
  void SendBody(Completion* c);
  void OnBody(Completion* c, int32_t res);
  char* BodyBuffer(int index) const {
    return body_base_ + static_cast<size_t>(index) * options_.uring.body_buffer_size;
  }

  void SpliceOut(Completion* c);

  int FixedIndex(const char* buf, uint64_t length) const;
  // `index` if that fixed buffer is registered (registering it on its first use), else -1; -1
  // stays -1.
  int RegisteredIndex(int index);

  void Dispatch(uint64_t user_data, int32_t res, uint32_t flags) {
    if (faults_ != nullptr) [[unlikely]] {
      if (Intercept(Event{user_data, res, flags})) return;
    }
    DispatchEvent(user_data, res, flags);
  }
  void DispatchEvent(uint64_t user_data, int32_t res, uint32_t flags);

  // Test faults (LoopOptions::faults, io/fault.h); nothing here runs without a plan.
  bool Inject(Fault f, const char* site) { return faults_ != nullptr && faults_->Inject(f, site); }
  uint64_t Shorten(const char* site, uint64_t n) {
    return faults_ == nullptr ? n : faults_->Shorten(site, n);
  }
  // The SQE just prepared for `c` fails with -err before the kernel does anything (as the
  // operation can, having moved nothing): it becomes a NOP whose completion nothing reads, and
  // `c`'s completion with -err reaches the next Poll.
  bool FailSqe(io_uring_sqe* sqe, Completion* c, Fault f, int err, const char* site) {
    if (!Inject(f, site)) return false;
    io_uring_prep_nop(sqe);
    Unread(sqe);
    held_back_.push_back(Event{reinterpret_cast<uint64_t>(c), -err, 0});
    return true;
  }
  // A completion on its way to Dispatch: true when a fault takes it, to reach the loop later.
  bool Intercept(const Event& e);
  // Poll's first step under a plan: withheld receive buffers back to the ring, and the
  // completions held back by the last Poll dispatched, older than any it reaps.
  void ReleaseFaults();
  bool IsNextTurn(uint64_t user_data) const;  // an inline body's writable poll

  void OnRecv(Completion* c, int32_t res, uint32_t flags);

  void OnSend(Completion* c, int32_t res, uint32_t flags);

  void OnSendFile(Completion* c, int32_t res);
  void OnFdInstalled(Completion* c, int32_t res);
  void OnSpliceOut(Completion* c, int32_t res);

  void OnOpen(Completion* c, int32_t res);

  LoopOptions options_;
  io_uring ring_{};
  bool ring_ready_ = false;
  bool direct_ = false;  // bypass tier: connections are registered file table slots
  bool sqpoll_ = false;
  bool fd_install_ = false;     // bypass: cached bodies go out with sendfile on an installed fd
  uint32_t batch_wait_us_ = 0;  // LoopOptions::batch_wait_us, where the kernel has it
  uint32_t direct_slots_ = 0;
  struct SlotState {
    uint16_t shutdowns = 0;      // IORING_OP_SHUTDOWNs in flight on the slot
    bool close_pending = false;  // Close was called: close once they are done
    bool fd_refused = false;     // installing a process fd failed (EMFILE): splice instead
    int fd = -1;                 // a process fd for the socket (FIXED_FD_INSTALL), for sendfile
  };
  std::vector<SlotState> slot_state_;  // per registered file table slot (bypass)
  io_uring_buf_ring* buf_ring_ = nullptr;
  size_t buf_ring_bytes_ = 0;
  char* recv_bufs_ = nullptr;
  size_t recv_bufs_bytes_ = 0;
  uint32_t recv_given_ = 0;                // buffers 0..recv_given_-1 have been given to the kernel
  uint64_t recv_grown_turn_ = UINT64_MAX;  // the Poll (turn_) that last grew the pool
  // bypass: registered buffers file bodies are read into and sent from (fixed indices after the
  // small-file pool's); free ones by index.
  char* body_base_ = nullptr;
  size_t body_bytes_ = 0;
  std::vector<int> body_free_;
  uint32_t body_count_ = 0;
  const char* fixed_base_ = nullptr;
  size_t fixed_size_ = 0;
  uint32_t fixed_count_ = 0;
  // Every fixed buffer (the small-file pool's, then the body buffers) and whether its slot in
  // the ring's buffer table holds it yet.
  enum : uint8_t { kFixedEmpty, kFixedRegistered, kFixedRefused };
  std::vector<iovec> fixed_iovs_;
  std::vector<uint8_t> fixed_state_;
  // Per Open, or Send of several buffers, in flight: what the kernel reads or writes through
  // pointers in its SQEs.
  struct OpSlot {
    open_how how;
    struct statx stx;
    msghdr msg;
  };
  std::deque<OpSlot> slots_;
  std::vector<Event> deferred_;  // completions reaped by Submit, dispatched by the next Poll
  // Writable sockets of file bodies that had their turn: dispatched after everything else this
  // Poll reaped, so requests and small responses do not wait behind every download's next turn.
  std::vector<Event> next_turns_;
  // After Quiesce: the owner is tearing down, maybe on another thread than the ring's, and a
  // single-issuer ring refuses any other thread's submit (EEXIST), so Close goes around it.
  bool quiesced_ = false;
  std::vector<int> free_slots_;
  std::vector<Pipe> pipes_;
  internal::CompletionQueue ready_;      // finished inside the call that started them
  internal::CompletionQueue pipe_wait_;  // SendFiles waiting for a free pipe
  internal::ColdTransfers cold_;         // transfers whose next chunk splices at once
  internal::ResidentFiles resident_{0};  // page-cache answers trusted for a while
  internal::LocalDirs local_dirs_;       // where an open's statx runs on the shard
  // Receives for Poll to attend to after the completions it reaped (RunWaitingRecvs): resumed
  // ones with bytes kept while paused, ones the kernel ended to re-arm, ones cancelled while
  // none was in the kernel. Linked through Completion::next_ready (a receive is on no other
  // queue): no allocation, and membership is known without a search.
  internal::CompletionQueue waiting_recvs_;
  // Test faults (io/fault.h), all empty without a plan: completions held back to the next Poll
  // (and the operations they belong to, whose later completions follow them there); multishot
  // receives being ended early (the kernel cancelled, their completions kept until its last);
  // receive buffers withheld from the ring until the next Poll.
  FaultPlan* faults_ = nullptr;
  std::vector<Event> held_back_;
  std::vector<uint64_t> held_ops_;
  bool buffers_held_ = false;  // incremental buffers: a receive's held back, so all that follow
  struct Ending {
    uint64_t user_data;
    std::vector<Event> events;
  };
  std::vector<Ending> endings_;
  std::vector<uint16_t> withheld_bufs_;
  bool incremental_ = false;        // the kernel consumes receive buffers incrementally
  uint32_t recv_max_ = 0;           // bytes per receive completion at most
  std::vector<uint32_t> consumed_;  // incremental: per buffer, the bytes receives took so far
  // Copies of bytes received for paused receives: per chunk, its memory (recv_max_ bytes), the
  // next chunk kept for the same receive, and the bytes in it; free chunks.
  std::vector<std::unique_ptr<char[]>> held_mem_;
  std::vector<int32_t> held_next_;
  std::vector<int32_t> held_len_;
  std::vector<int32_t> held_free_;
  uint64_t turn_ = 0;  // Poll calls so far: SendFile's per-turn budget
  internal::SendTurns send_turns_;
  int wake_fd_ = -1;
  uint64_t wake_value_ = 0;
  Completion wake_;
  LoopStats stats_;
};

}  // namespace ringd::io::uring
