// The io_uring backend: one ring per shard thread (SINGLE_ISSUER, DEFER_TASKRUN where the kernel
// has them), multishot accept, multishot recv into a provided buffer ring, splice through a pool
// of pipes for file bodies, openat2 (RESOLVE_BENEATH) and statx through the ring.
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "io/backend_util.h"
#include "io/loop.h"
#include "io/uring_uapi.h"

namespace ringd::io {
namespace {

constexpr uint16_t kRecvGroup = 0;
constexpr uint64_t kInlineChunk = 1 << 20;  // sendfile per call on the inline path
constexpr int kBatch = 256;

class UringLoop final : public Loop {
 public:
  ~UringLoop() override {
    for (Pipe& p : pipes_) {
      if (p.r >= 0) ::close(p.r);
      if (p.w >= 0) ::close(p.w);
    }
    if (ring_ready_) io_uring_queue_exit(&ring_);
    if (buf_ring_ != nullptr) ::munmap(buf_ring_, buf_ring_bytes_);
    if (recv_bufs_ != nullptr && options_.recv_region == nullptr)
      ::munmap(recv_bufs_, recv_bufs_bytes_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  bool Init(const LoopOptions& o, std::string* error) {
    options_ = o;
    direct_ = o.direct_descriptors;
    io_uring_params p{};
    if (o.sqpoll) {
      // A kernel thread polls the submission queue. DEFER_TASKRUN needs the submitter to be the
      // task that waits, which the SQ thread is not.
      p.flags = IORING_SETUP_SQPOLL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_CQSIZE |
                IORING_SETUP_SUBMIT_ALL;
      p.sq_thread_idle = o.sqpoll_idle_ms;
      if (o.sqpoll_cpu >= 0) {
        p.flags |= IORING_SETUP_SQ_AFF;
        p.sq_thread_cpu = static_cast<uint32_t>(o.sqpoll_cpu);
      }
      if (o.attach_ring_fd >= 0) {  // share the first shard's SQ thread (and io-wq)
        p.flags |= IORING_SETUP_ATTACH_WQ;
        p.wq_fd = static_cast<uint32_t>(o.attach_ring_fd);
      }
    } else {
      p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE |
                IORING_SETUP_SUBMIT_ALL;
    }
    p.cq_entries = o.ring_entries * 4;  // room for multishot bursts; NODROP covers the rest
    int rc = io_uring_queue_init_params(o.ring_entries, &ring_, &p);
    if (rc == -EINVAL) {  // older kernel: no SINGLE_ISSUER / DEFER_TASKRUN
      p.flags &=
          ~(IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SUBMIT_ALL);
      rc = io_uring_queue_init_params(o.ring_entries, &ring_, &p);
    }
    if (rc < 0) {
      *error =
          std::string(o.sqpoll ? "io_uring_setup (SQPOLL): " : "io_uring_setup: ") + strerror(-rc);
      return false;
    }
    ring_ready_ = true;
    sqpoll_ = o.sqpoll;
    if (o.busy_poll_us != 0) {
      uapi::Napi napi;
      napi.busy_poll_to = o.busy_poll_us;
      rc = io_uring_register(ring_.ring_fd, uapi::kRegisterNapi, &napi, 1);
      if (rc < 0) {
        *error = std::string("IORING_REGISTER_NAPI: ") + strerror(-rc);
        return false;
      }
    }

    if (direct_) {
      // The registered file table that accepted connections go into. The kernel holds its size
      // to RLIMIT_NOFILE.
      rlimit rl{};
      ::getrlimit(RLIMIT_NOFILE, &rl);
      const uint32_t slots = o.direct_files != 0 ? o.direct_files : 1024;
      if (rl.rlim_cur != RLIM_INFINITY && slots > rl.rlim_cur) {
        *error = "registered file table: " + std::to_string(slots) +
                 " slots exceed RLIMIT_NOFILE (" + std::to_string(rl.rlim_cur) + ")";
        return false;
      }
      rc = io_uring_register_files_sparse(&ring_, slots);
      if (rc < 0) {
        *error = std::string("io_uring_register_files_sparse: ") + strerror(-rc);
        return false;
      }
      direct_slots_ = slots;
      slot_state_.assign(slots, SlotState{});
    }
    if (o.iowq_max_workers != 0) {
      unsigned workers[2] = {o.iowq_max_workers, o.iowq_max_workers};  // bounded, unbounded
      rc = io_uring_register_iowq_max_workers(&ring_, workers);
      if (rc < 0) {
        *error = std::string("io_uring_register_iowq_max_workers: ") + strerror(-rc);
        return false;
      }
    }

    // The provided buffer ring for multishot recv.
    const uint32_t n = o.recv_buffer_count;
    if (n == 0 || (n & (n - 1)) != 0 || n > kMaxRecvBuffers) {
      *error = "recv buffer count must be a power of two up to " + std::to_string(kMaxRecvBuffers);
      return false;
    }
    buf_ring_bytes_ = n * sizeof(io_uring_buf);
    buf_ring_ = static_cast<io_uring_buf_ring*>(::mmap(
        nullptr, buf_ring_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    recv_bufs_bytes_ = static_cast<size_t>(n) * o.recv_buffer_size;
    recv_bufs_ = o.recv_region != nullptr
                     ? o.recv_region  // the shard's memory
                     : static_cast<char*>(::mmap(nullptr, recv_bufs_bytes_, PROT_READ | PROT_WRITE,
                                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (buf_ring_ == MAP_FAILED || recv_bufs_ == MAP_FAILED) {
      buf_ring_ = nullptr;
      recv_bufs_ = nullptr;
      *error = "mmap for the receive buffer ring failed";
      return false;
    }
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<uint64_t>(buf_ring_);
    reg.ring_entries = n;
    reg.bgid = kRecvGroup;
    // Incremental consumption: each receive takes only the bytes it fills from the current
    // buffer (capped at recv_max_bytes by the SQE's length), so a few large buffers serve as
    // many small receives as a pool many times their size. liburing 2.3 names the flags `pad`.
    incremental_ = o.recv_incremental;
    recv_max_ = o.recv_max_bytes != 0 ? o.recv_max_bytes : o.recv_buffer_size;
    if (recv_max_ > o.recv_buffer_size || (!incremental_ && recv_max_ != o.recv_buffer_size)) {
      *error = "receive cap " + std::to_string(recv_max_) + " does not fit the receive buffers";
      return false;
    }
    if (incremental_) reg.pad = uapi::kPbufRingInc;
    rc = io_uring_register_buf_ring(&ring_, &reg, 0);
    if (rc < 0) {
      *error = std::string("io_uring_register_buf_ring: ") + strerror(-rc);
      return false;
    }
    io_uring_buf_ring_init(buf_ring_);
    for (uint32_t i = 0; i < n; ++i) {
      io_uring_buf_ring_add(buf_ring_, recv_bufs_ + static_cast<size_t>(i) * o.recv_buffer_size,
                            o.recv_buffer_size, static_cast<uint16_t>(i), io_uring_buf_ring_mask(n),
                            static_cast<int>(i));
    }
    io_uring_buf_ring_advance(buf_ring_, static_cast<int>(n));

    // Fixed buffers: the shard's I/O buffer pool, so file reads into it skip page pinning.
    if (o.registered_region != nullptr && o.registered_buffer_count > 0) {
      std::vector<iovec> iovs(o.registered_buffer_count);
      for (uint32_t i = 0; i < o.registered_buffer_count; ++i) {
        iovs[i].iov_base = const_cast<char*>(o.registered_region) + i * o.registered_buffer_size;
        iovs[i].iov_len = o.registered_buffer_size;
      }
      rc = io_uring_register_buffers(&ring_, iovs.data(), static_cast<unsigned>(iovs.size()));
      if (rc < 0) {
        *error = std::string("io_uring_register_buffers: ") + strerror(-rc);
        return false;
      }
      fixed_base_ = o.registered_region;
      fixed_size_ = o.registered_buffer_size;
      fixed_count_ = o.registered_buffer_count;
    }

    slots_.resize(o.ring_entries);
    deferred_.reserve(o.ring_entries * 4);
    for (uint32_t i = 0; i < o.ring_entries; ++i) free_slots_.push_back(static_cast<int>(i));
    pipes_.resize(o.pipe_pool_size);
    rearm_.reserve(o.recv_buffer_count);  // cleared every Poll: no allocation in steady state
    resume_.reserve(o.recv_buffer_count);
    if (incremental_) consumed_.assign(n, 0);

    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) {
      *error = std::string("eventfd: ") + strerror(errno);
      return false;
    }
    wake_.op = Op::kWake;
    ArmWake();
    return true;
  }

  const char* Name() const override { return direct_ ? "bypass" : "uring"; }
  int RingFd() const override { return ring_.ring_fd; }

  void Accept(int listen_fd, Completion* c) override {
    internal::BeginOp(c, Op::kAccept, listen_fd);
    io_uring_sqe* sqe = Sqe();
    if (direct_) {  // straight into a free slot of the registered file table
      io_uring_prep_multishot_accept_direct(sqe, listen_fd, nullptr, nullptr, 0);
    } else {
      io_uring_prep_multishot_accept(sqe, listen_fd, nullptr, nullptr,
                                     SOCK_CLOEXEC | SOCK_NONBLOCK);
    }
    io_uring_sqe_set_data(sqe, c);
  }

  void Recv(int fd, Completion* c) override {
    internal::BeginOp(c, Op::kRecv, fd);
    c->armed = false;
    c->held_head = c->held_tail = -1;
    c->held_end = 1;
    ArmRecv(c);
  }

  void Send(int fd, iovec* iov, int iovcnt, Completion* c, bool more) override {
    internal::BeginOp(c, Op::kSend, fd);
    c->send_flags = MSG_NOSIGNAL | (more ? MSG_MORE : 0);
    c->iov = iov;
    c->iovcnt = iovcnt;
    c->remaining = 0;
    for (int i = 0; i < iovcnt; ++i) c->remaining += iov[i].iov_len;
    SubmitSend(c);
  }

  void SendFile(int sock_fd, int file_fd, uint64_t offset, uint64_t length,
                Completion* c) override {
    internal::BeginOp(c, Op::kSendFile, sock_fd);
    c->file_fd = file_fd;
    c->offset = offset;
    c->remaining = length;
    c->in_pipe = 0;
    c->pipe_index = -1;
    c->polling = false;
    // Pages already in the page cache go out with sendfile on the (non-blocking) socket right
    // here: no kernel worker hop, and it cannot block on the disk. Anything else is spliced
    // through the ring, where a cold read blocks an io-wq worker, never this thread.
    if (!SendCached(c)) Splice(c);
  }

  void Open(int dir_fd, const char* path, Completion* c) override {
    internal::BeginOp(c, Op::kOpen, -1);
    c->dir_fd = dir_fd;
    c->path = path;
    c->file_fd = -1;
    // The open's slot holds its open_how (read by the kernel whenever the SQE is submitted, so
    // it must outlive this call), then its statx buffer. More opens in flight than SQ entries
    // (a cold burst) add slots; a deque never moves the ones in use.
    c->slot = TakeSlot();
    OpSlot& slot = slots_[static_cast<size_t>(c->slot)];
    slot.how = open_how{};
    slot.how.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;  // a FIFO must not block
    slot.how.resolve = RESOLVE_BENEATH;  // a symlink can never lead outside dir_fd
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_openat2(sqe, dir_fd, path, &slot.how);
    io_uring_sqe_set_data(sqe, c);
  }

  void Read(int fd, char* buf, uint64_t length, uint64_t offset, Completion* c) override {
    internal::BeginOp(c, Op::kRead, fd);
    io_uring_sqe* sqe = Sqe();
    const int index = FixedIndex(buf, length);
    if (index >= 0) {
      io_uring_prep_read_fixed(sqe, fd, buf, static_cast<unsigned>(length), offset, index);
    } else {
      io_uring_prep_read(sqe, fd, buf, static_cast<unsigned>(length), offset);
    }
    io_uring_sqe_set_data(sqe, c);
  }

  void Cancel(Completion* c) override {
    if (!c->in_flight || c->cancelled) return;
    c->cancelled = true;
    if (c->op == Op::kRecv) {
      ReleaseHeld(c);  // bytes kept for a paused receive go nowhere now
      if (!c->armed) {
        // Parked (paused, ended for lack of buffers, or waiting to redeliver): nothing in the
        // kernel will end it, so its last callback comes from Poll's re-arm pass.
        rearm_.push_back(c);
        return;
      }
    }
    CancelInKernel(c);
  }

  // The multishot receive is cancelled in the kernel; what it had already received arrives as
  // CQEs and is kept in order (HoldBuffer) until ResumeRecv hands it over from Poll.
  void PauseRecv(Completion* c) override {
    RINGD_ASSERT(c->op == Op::kRecv);
    if (!c->in_flight || c->cancelled || c->paused) return;
    c->paused = true;
    if (c->armed) CancelInKernel(c);
  }

  void ResumeRecv(Completion* c) override {
    RINGD_ASSERT(c->op == Op::kRecv);
    if (!c->in_flight || c->cancelled || !c->paused) return;
    c->paused = false;
    resume_.push_back(c);
  }

  void Shutdown(int fd, int how) override {
    if (!IsDirect(fd)) {
      ::shutdown(fd, how);
      return;
    }
    // A direct descriptor has no fd number for shutdown(2), so it goes through the ring. The
    // kernel always runs IORING_OP_SHUTDOWN on an io-wq worker, which resolves the slot only
    // when it runs: a Close of the slot must wait for it, or a new connection accepted into the
    // freed slot could be the one shut down (Close defers; ShutdownDone closes).
    const uint32_t slot = static_cast<uint32_t>(fd & ~kDirectHandle);
    RINGD_ASSERT(slot < direct_slots_);
    ++slot_state_[slot].shutdowns;
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_shutdown(sqe, 0, how);
    Target(sqe, fd);
    io_uring_sqe_set_data64(sqe, (uint64_t{slot} << 1) | kShutdownTag);
  }

  void Close(int fd) override {
    if (IsDirect(fd)) {
      const uint32_t slot = static_cast<uint32_t>(fd & ~kDirectHandle);
      RINGD_ASSERT(slot < direct_slots_ && !slot_state_[slot].close_pending);
      if (slot_state_[slot].shutdowns > 0) {
        slot_state_[slot].close_pending = true;  // after the shutdowns in flight (ShutdownDone)
        return;
      }
      return CloseSlot(slot);
    }
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_close(sqe, fd);
    io_uring_sqe_set_data(sqe, nullptr);
  }

  void Poll(int timeout_ms) override {
    ++turn_;
    // Work already waiting (finished inside a call, resumed, parked, or reaped by a busy submit)
    // runs now: do not sleep first.
    if (!ready_.empty() || !resume_.empty() || !rearm_.empty() || !deferred_.empty()) {
      timeout_ms = 0;
    }
    __kernel_timespec ts{};
    ts.tv_sec = timeout_ms / 1000;
    ts.tv_nsec = (timeout_ms % 1000) * 1000000L;
    io_uring_cqe* cqe = nullptr;
    const int rc =
        io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, timeout_ms >= 0 ? &ts : nullptr, nullptr);
    // -ETIME and -EINTR mean "nothing yet"; -EBUSY and -EAGAIN a full completion queue, which
    // the reaping below empties; anything else cannot happen.
    RINGD_ASSERT_MSG(rc >= 0 || rc == -ETIME || rc == -EINTR || rc == -EBUSY || rc == -EAGAIN,
                     "io_uring_submit_and_wait: %s", strerror(-rc));
    while (true) {
      // Completions reaped while a submit found the ring busy come first: they are older than
      // anything still in the completion queue (a multishot receive's bytes stay in order).
      for (size_t i = 0; i < deferred_.size(); ++i) {
        const Event e = deferred_[i];
        Dispatch(e.user_data, e.res, e.flags);
      }
      deferred_.clear();
      io_uring_cqe* cqes[kBatch];
      const unsigned n = io_uring_peek_batch_cqe(&ring_, cqes, kBatch);
      if (n == 0 && deferred_.empty()) break;
      // Copy out and advance first: callbacks may submit, and must not see a half-consumed CQ.
      Event events[kBatch];
      for (unsigned i = 0; i < n; ++i)
        events[i] = {cqes[i]->user_data, cqes[i]->res, cqes[i]->flags};
      io_uring_cq_advance(&ring_, n);
      for (unsigned i = 0; i < n; ++i)
        Dispatch(events[i].user_data, events[i].res, events[i].flags);
      if (n < static_cast<unsigned>(kBatch) && deferred_.empty()) break;
    }
    RunReady();
    // Resumed receives: the bytes kept while paused, in order, then the end that came while
    // paused, or a fresh multishot receive.
    for (size_t i = 0; i < resume_.size(); ++i) Redeliver(resume_[i]);
    resume_.clear();
    // Multishot receives the kernel ended (for lack of buffers, or of its own accord): re-arm now
    // that callbacks have returned their buffers. One cancelled while parked here was not in the
    // kernel for the cancellation to find, so its last callback comes from here; without it the
    // owner would wait for that callback forever. (An entry may appear twice, or have been
    // finished or re-armed since it was queued: in_flight and armed tell.)
    for (size_t i = 0; i < rearm_.size(); ++i) {
      Completion* c = rearm_[i];
      if (!c->in_flight || c->armed) continue;
      if (c->cancelled) {
        c->data = nullptr;
        Finish(c, -ECANCELED);
      } else if (!c->paused && c->held_head < 0) {
        ArmRecv(c);
      }
    }
    rearm_.clear();
  }

  void Wake() override {
    const uint64_t one = 1;
    ssize_t r = ::write(wake_fd_, &one, sizeof one);
    (void)r;
  }

  LoopStats Stats() const override {
    LoopStats s = stats_;
    s.pipes_in_use = 0;
    for (const Pipe& p : pipes_) s.pipes_in_use += p.busy ? 1 : 0;
    return s;
  }

 private:
  struct Pipe {
    int r = -1, w = -1;
    bool busy = false;
  };

  struct Event {
    uint64_t user_data;
    int32_t res;
    uint32_t flags;
  };

  io_uring_sqe* Sqe() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    while (sqe == nullptr) {  // the submission queue is full: hand it to the kernel and retry
      Submit();
      // With SQPOLL the kernel thread takes entries when it gets to them: wait for room.
      if (sqpoll_) io_uring_sqring_wait(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    ++stats_.submitted;
    return sqe;
  }

  // Per-operation memory the kernel reads through an SQE's pointers (see OpSlot). More
  // operations in flight than ever before add slots; a deque never moves the ones in use.
  int TakeSlot() {
    if (free_slots_.empty()) {
      slots_.emplace_back();
      free_slots_.push_back(static_cast<int>(slots_.size() - 1));
    }
    const int slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }

  void GiveSlot(Completion* c) {
    if (c->slot < 0) return;
    free_slots_.push_back(c->slot);
    c->slot = -1;
  }

  bool IsDirect(int handle) const { return direct_ && (handle & kDirectHandle) != 0; }

  // user_data of a direct shutdown: the slot, tagged odd (Completions are aligned: never odd).
  static constexpr uint64_t kShutdownTag = 1;

  void CloseSlot(uint32_t slot) {
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_close_direct(sqe, slot);
    io_uring_sqe_set_data(sqe, nullptr);
  }

  void ShutdownDone(uint32_t slot) {
    RINGD_ASSERT(slot < direct_slots_ && slot_state_[slot].shutdowns > 0);
    SlotState& st = slot_state_[slot];
    if (--st.shutdowns == 0 && st.close_pending) {
      st.close_pending = false;
      CloseSlot(slot);
    }
  }

  // Points an SQE prepared with a connection handle at the descriptor: a direct one is the
  // registered file table's slot (IOSQE_FIXED_FILE).
  void Target(io_uring_sqe* sqe, int handle) const {
    if (!IsDirect(handle)) return;
    const int slot = handle & ~kDirectHandle;
    RINGD_ASSERT_MSG(static_cast<uint32_t>(slot) < direct_slots_, "direct slot %d", slot);
    sqe->fd = slot;
    sqe->flags |= IOSQE_FIXED_FILE;
  }

  // Hands the queued SQEs to the kernel. A ring too busy to take them (its completion queue
  // full: EBUSY, EAGAIN) has its completions reaped into deferred_, to be dispatched by the next
  // Poll (never from here: we may be inside a callback), and the submit is retried.
  void Submit() {
    for (int attempt = 0;; ++attempt) {
      const int rc = io_uring_submit(&ring_);
      if (rc >= 0) return;
      if (rc == -EINTR) continue;
      RINGD_ASSERT_MSG(rc == -EBUSY || rc == -EAGAIN, "io_uring_submit: %s", strerror(-rc));
      RINGD_ASSERT_MSG(attempt < 100000, "io_uring_submit: busy with nothing to reap");
      io_uring_cqe* cqe = nullptr;
      while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe != nullptr) {
        deferred_.push_back(Event{cqe->user_data, cqe->res, cqe->flags});
        io_uring_cqe_seen(&ring_, cqe);
      }
    }
  }

  // Operations that finished inside the call that started them: their callbacks run from Poll
  // (never from inside the starting call, which may itself be in a callback).
  void Ready(Completion* c, int64_t result) {
    c->pending_result = result;
    ready_.Push(c);
  }

  void RunReady() {
    while (Completion* c = ready_.Pop()) Finish(c, c->pending_result);
  }

  void Finish(Completion* c, int64_t result) {
    c->in_flight = false;
    c->more = false;
    c->result = result;
    ++stats_.completed;
    c->callback(c);
  }

  void ArmRecv(Completion* c) {
    RINGD_ASSERT(!c->armed && !c->paused && c->held_head < 0);
    c->armed = true;
    io_uring_sqe* sqe = Sqe();
    // With incremental consumption the length caps each completion (a buffer is larger than
    // one delivery may be); otherwise it must be 0 and a completion fills at most a buffer.
    io_uring_prep_recv_multishot(sqe, c->fd, nullptr, incremental_ ? recv_max_ : 0, 0);
    Target(sqe, c->fd);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = kRecvGroup;
    io_uring_sqe_set_data(sqe, c);
  }

  void CancelInKernel(Completion* c) {
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_cancel64(sqe, reinterpret_cast<uint64_t>(c), 0);
    io_uring_sqe_set_data(sqe, nullptr);
  }

  char* RecvBuffer(uint16_t bid) const {
    return recv_bufs_ + static_cast<size_t>(bid) * options_.recv_buffer_size;
  }

  void RecycleBuffer(uint16_t bid) {
    io_uring_buf_ring_add(buf_ring_, RecvBuffer(bid), options_.recv_buffer_size, bid,
                          io_uring_buf_ring_mask(options_.recv_buffer_count), 0);
    io_uring_buf_ring_advance(buf_ring_, 1);
  }

  // Where a receive's bytes start: a whole buffer, or with incremental consumption the part of
  // it after what earlier receives took (the kernel fills each buffer front to back).
  const char* Received(uint16_t bid) const {
    return RecvBuffer(bid) + (incremental_ ? consumed_[bid] : 0);
  }

  // Once a receive's bytes have been delivered or copied: the buffer goes back to the kernel,
  // unless (incremental) the kernel is still filling it.
  void Consumed(uint16_t bid, int32_t len, uint32_t flags) {
    if (incremental_) {
      RINGD_ASSERT(bid < consumed_.size() &&
                   consumed_[bid] + static_cast<uint32_t>(len) <= options_.recv_buffer_size);
      if (flags & uapi::kCqeBufMore) {
        consumed_[bid] += static_cast<uint32_t>(len);
        return;
      }
      consumed_[bid] = 0;
    }
    RecycleBuffer(bid);
  }

  // Keeps a copy of bytes received for a paused receive (or behind ones kept earlier: order
  // matters), so that the receive buffer goes straight back: a paused connection never holds
  // the shard's receive pool. Copies come from a pool of chunks that grows only while paused
  // receives keep more bytes than ever before, and is reused after.
  void Hold(Completion* c, const char* data, int32_t len) {
    RINGD_ASSERT(len > 0 && static_cast<uint32_t>(len) <= recv_max_);
    if (held_free_.empty()) {
      held_mem_.push_back(std::make_unique<char[]>(recv_max_));
      held_next_.push_back(-1);
      held_len_.push_back(0);
      held_free_.push_back(static_cast<int32_t>(held_mem_.size() - 1));
    }
    const int32_t chunk = held_free_.back();
    held_free_.pop_back();
    std::memcpy(held_mem_[static_cast<size_t>(chunk)].get(), data, static_cast<size_t>(len));
    held_next_[static_cast<size_t>(chunk)] = -1;
    held_len_[static_cast<size_t>(chunk)] = len;
    if (c->held_tail >= 0) {
      held_next_[static_cast<size_t>(c->held_tail)] = chunk;
    } else {
      c->held_head = chunk;
    }
    c->held_tail = chunk;
    ++stats_.recv_held;
  }

  // Takes the oldest kept chunk off a receive's list; the caller frees it.
  int32_t PopHeld(Completion* c) {
    const int32_t chunk = c->held_head;
    c->held_head = held_next_[static_cast<size_t>(chunk)];
    if (c->held_head < 0) c->held_tail = -1;
    return chunk;
  }

  void ReleaseHeld(Completion* c) {
    while (c->held_head >= 0) held_free_.push_back(PopHeld(c));
  }

  // Hands bytes to the receive's owner; they are consumed during the callback.
  void Deliver(Completion* c, const char* data, int32_t len) {
    RINGD_ASSERT(len > 0 && static_cast<uint32_t>(len) <= recv_max_);
    c->data = data;
    c->result = len;
    ++stats_.completed;
    c->callback(c);
  }

  void Redeliver(Completion* c) {
    while (c->in_flight && !c->cancelled && !c->paused && c->held_head >= 0) {
      const int32_t chunk = PopHeld(c);
      c->more = true;
      Deliver(c, held_mem_[static_cast<size_t>(chunk)].get(),
              held_len_[static_cast<size_t>(chunk)]);
      held_free_.push_back(chunk);
    }
    if (!c->in_flight || c->cancelled || c->paused || c->held_head >= 0) return;
    if (c->held_end <= 0) {  // end of stream or an error came while paused: deliver it last
      const int64_t end = c->held_end;
      c->held_end = 1;
      c->data = nullptr;
      return Finish(c, end);
    }
    // Still armed: the pause's cancellation is on its way, and its completion re-arms.
    if (!c->armed) ArmRecv(c);
  }

  void ArmWake() {
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_read(sqe, wake_fd_, &wake_value_, sizeof wake_value_, 0);
    io_uring_sqe_set_data(sqe, &wake_);
  }

  void SubmitSend(Completion* c) {
    io_uring_sqe* sqe = Sqe();
    // send_zc pays for large buffers only: below the threshold the notification costs more than
    // the copy it saves.
    const bool zc = options_.send_zc && c->remaining >= options_.send_zc_min_bytes;
    if (zc) ++stats_.send_zc;
    if (c->iovcnt == 1) {
      // A buffer inside the registered region (the small-file cache) goes zero-copy from the
      // registered buffer (IORING_RECVSEND_FIXED_BUF): the kernel skips pinning its pages.
      const int fixed =
          zc ? FixedIndex(static_cast<const char*>(c->iov[0].iov_base), c->iov[0].iov_len) : -1;
      if (fixed >= 0) {
        ++stats_.send_zc_fixed;
        io_uring_prep_send_zc_fixed(sqe, c->fd, c->iov[0].iov_base, c->iov[0].iov_len,
                                    c->send_flags, 0, static_cast<unsigned>(fixed));
      } else if (zc) {
        io_uring_prep_send_zc(sqe, c->fd, c->iov[0].iov_base, c->iov[0].iov_len, c->send_flags, 0);
      } else {
        io_uring_prep_send(sqe, c->fd, c->iov[0].iov_base, c->iov[0].iov_len, c->send_flags);
      }
    } else {
      // The msghdr lives in a slot until the send completes (an SQ thread may read it late).
      if (c->slot < 0) c->slot = TakeSlot();
      msghdr& msg = slots_[static_cast<size_t>(c->slot)].msg;
      msg = msghdr{};
      msg.msg_iov = c->iov;
      msg.msg_iovlen = static_cast<size_t>(c->iovcnt);
      if (zc) {
        io_uring_prep_sendmsg_zc(sqe, c->fd, &msg, c->send_flags);
      } else {
        io_uring_prep_sendmsg(sqe, c->fd, &msg, c->send_flags);
      }
    }
    Target(sqe, c->fd);
    io_uring_sqe_set_data(sqe, c);
  }

  // Tries the inline path; true if the operation is finished or waiting for socket space.
  bool SendCached(Completion* c) {
    // sendfile(2) needs the socket's fd number, which a direct descriptor does not have.
    if (IsDirect(c->fd)) return false;
    while (c->remaining > 0) {
      const uint64_t budget = internal::TurnBudget(c, turn_, options_.send_turn_bytes);
      if (budget == 0) {  // this connection had its turn: wait for the next Poll's
        WaitWritable(c);
        return true;
      }
      const uint64_t chunk = std::min({c->remaining, kInlineChunk, budget});
      if (!internal::PagesCached(c->file_fd, c->offset, chunk))
        return c->done > 0 ? (Splice(c), true) : false;
      off_t off = static_cast<off_t>(c->offset);
      const ssize_t n = ::sendfile(c->fd, c->file_fd, &off, chunk);
      if (n > 0) {
        c->offset += static_cast<uint64_t>(n);
        c->done += static_cast<uint64_t>(n);
        c->remaining -= static_cast<uint64_t>(n);
        c->turn_bytes += static_cast<uint64_t>(n);
        stats_.sendfile_bytes += static_cast<uint64_t>(n);
        continue;
      }
      if (n == 0) break;  // the file ended early: truncated
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {  // the socket is full: poll, then come back here
        WaitWritable(c);
        return true;
      }
      Ready(c, -errno);
      return true;
    }
    Ready(c, static_cast<int64_t>(c->done));
    return true;
  }

  // The inline path continues when the socket takes more (at once, if it already does: the CQE
  // then waits in the ring behind everything else that is ready).
  void WaitWritable(Completion* c) {
    c->polling = true;
    c->in_pipe = 0;
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_poll_add(sqe, c->fd, POLLOUT);
    Target(sqe, c->fd);
    io_uring_sqe_set_data(sqe, c);
  }

  // The splice path for what is left of a SendFile.
  void Splice(Completion* c) {
    const int pipe = TakePipe();
    if (pipe >= 0) {
      c->pipe_index = pipe;
      return SpliceIn(c);
    }
    // Every pipe busy: wait (intrusively) until one comes back. No pipe busy and none to be
    // made (out of descriptors): nothing would ever wake a waiter, so fail it now.
    if (pipe == kNoPipeFree) return pipe_wait_.Push(c);
    Ready(c, pipe);
  }

  static constexpr int kNoPipeFree = -1;

  // A free pipe's index; kNoPipeFree when every pipe is busy; -errno when a pipe was needed and
  // could not be created (EMFILE, ENFILE) while none is busy.
  int TakePipe() {
    int error = 0;
    bool any_busy = false;
    for (size_t i = 0; i < pipes_.size(); ++i) {
      Pipe& p = pipes_[i];
      if (p.busy) {
        any_busy = true;
        continue;
      }
      if (p.r < 0) {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
          error = -errno;
          continue;
        }
        ::fcntl(fds[1], F_SETPIPE_SZ, static_cast<int>(options_.pipe_size));  // best effort
        p.r = fds[0];
        p.w = fds[1];
      }
      p.busy = true;
      return static_cast<int>(i);
    }
    return any_busy || error == 0 ? kNoPipeFree : error;
  }

  // A pipe comes back empty, or (after an error with bytes stuck in it) is closed and replaced.
  void GivePipe(int index, bool dirty) {
    RINGD_ASSERT(index >= 0 && static_cast<size_t>(index) < pipes_.size() &&
                 pipes_[static_cast<size_t>(index)].busy);
    Pipe& p = pipes_[static_cast<size_t>(index)];
    if (dirty) {
      ::close(p.r);
      ::close(p.w);
      p.r = p.w = -1;
    }
    p.busy = false;
    // The pipe just freed serves the next waiter; if it was dirty and cannot be replaced, a
    // waiter fails now rather than wait for a pipe that may never come.
    while (Completion* c = pipe_wait_.Pop()) {
      const int pipe = TakePipe();
      if (pipe >= 0) {
        c->pipe_index = pipe;
        return SpliceIn(c);
      }
      RINGD_ASSERT(pipe != kNoPipeFree);  // this pipe is not busy
      Ready(c, pipe);
    }
  }

  void SpliceIn(Completion* c) {
    RINGD_ASSERT(c->pipe_index >= 0 && static_cast<size_t>(c->pipe_index) < pipes_.size());
    const Pipe& p = pipes_[static_cast<size_t>(c->pipe_index)];
    const uint64_t chunk = c->remaining < options_.pipe_size ? c->remaining : options_.pipe_size;
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_splice(sqe, c->file_fd, static_cast<int64_t>(c->offset), p.w, -1,
                         static_cast<unsigned>(chunk), SPLICE_F_MOVE);
    io_uring_sqe_set_data(sqe, c);
  }

  void SpliceOut(Completion* c) {
    RINGD_ASSERT(c->pipe_index >= 0 && static_cast<size_t>(c->pipe_index) < pipes_.size());
    const Pipe& p = pipes_[static_cast<size_t>(c->pipe_index)];
    io_uring_sqe* sqe = Sqe();
    // SPLICE_F_MORE (MSG_MORE) only while more of the body follows: on the last piece it would
    // hold the final partial segment back until the client's delayed ACK (40 ms) pushed it.
    const unsigned more = c->remaining > c->in_pipe ? SPLICE_F_MORE : 0;
    io_uring_prep_splice(sqe, p.r, -1, c->fd, -1, c->in_pipe, SPLICE_F_MOVE | more);
    Target(sqe, c->fd);  // the socket is splice's output, the SQE's own fd
    io_uring_sqe_set_data(sqe, c);
  }

  int FixedIndex(const char* buf, uint64_t length) const {
    if (fixed_base_ == nullptr || buf < fixed_base_) return -1;
    const size_t off = static_cast<size_t>(buf - fixed_base_);
    const size_t index = off / fixed_size_;
    if (index >= fixed_count_ || off + length > (index + 1) * fixed_size_) return -1;
    return static_cast<int>(index);
  }

  void Dispatch(uint64_t user_data, int32_t res, uint32_t flags) {
    if (user_data == 0) return;  // close and cancel requests
    if (user_data & kShutdownTag) return ShutdownDone(static_cast<uint32_t>(user_data >> 1));
    Completion* c = reinterpret_cast<Completion*>(user_data);
    switch (c->op) {
      case Op::kWake:
        ArmWake();
        return;
      case Op::kAccept:
        c->more = (flags & IORING_CQE_F_MORE) != 0;
        c->result = direct_ && res >= 0 ? (res | kDirectHandle) : res;
        if (!c->more) c->in_flight = false;
        ++stats_.completed;
        c->callback(c);
        return;
      case Op::kRecv:
        return OnRecv(c, res, flags);
      case Op::kSend:
        return OnSend(c, res, flags);
      case Op::kSendFile:
        return OnSendFile(c, res);
      case Op::kOpen:
        return OnOpen(c, res);
      case Op::kRead:
        return Finish(c, res);
      case Op::kNone:
        return;
    }
  }

  void OnRecv(Completion* c, int32_t res, uint32_t flags) {
    const bool kernel_more = (flags & IORING_CQE_F_MORE) != 0;
    if (!kernel_more) c->armed = false;
    // Paused, or bytes kept from a pause still waiting for Redeliver: keep these behind them.
    const bool hold = !c->cancelled && (c->paused || c->held_head >= 0);
    if (res > 0) {
      const uint16_t bid = static_cast<uint16_t>(flags >> IORING_CQE_BUFFER_SHIFT);
      if (hold) {
        Hold(c, Received(bid), res);
        Consumed(bid, res, flags);
        if (!kernel_more && !c->paused) rearm_.push_back(c);  // re-armed once redelivered
        return;
      }
      // Ended without an error (the kernel stops a multishot now and then): re-arm quietly.
      if (!kernel_more && !c->cancelled) rearm_.push_back(c);
      c->more = kernel_more || !c->cancelled;
      if (!c->more) c->in_flight = false;
      Deliver(c, Received(bid), res);
      Consumed(bid, res, flags);
      return;
    }
    if (res == -ENOBUFS && !c->cancelled) {  // every buffer was in use: re-arm after this batch
      ++stats_.recv_nobufs;
      if (!c->paused) rearm_.push_back(c);  // a paused one is re-armed by ResumeRecv
      return;
    }
    if (kernel_more) return;  // an error that does not end the multishot: ignore
    if (res == -ECANCELED && !c->cancelled) {
      // PauseRecv's cancellation: the receive stays in flight for its owner. Re-arm once
      // resumed and everything kept has been handed over.
      if (!c->paused) rearm_.push_back(c);
      return;
    }
    if (hold) {  // end of stream or an error while paused: after the bytes kept before it
      c->held_end = res;
      return;
    }
    c->data = nullptr;
    Finish(c, res);  // 0: end of stream; < 0: error or cancelled
  }

  void OnSend(Completion* c, int32_t res, uint32_t flags) {
    // Zero-copy sends complete twice: the result (with F_MORE), then a notification once the
    // kernel no longer reads our buffer. Only then may the caller reuse or release it.
    if (flags & IORING_CQE_F_NOTIF) {
      res = static_cast<int32_t>(c->pending_result);
    } else if (flags & IORING_CQE_F_MORE) {
      c->pending_result = res;
      return;
    }
    if (res < 0) return GiveSlot(c), Finish(c, res);
    if (res == 0 && c->remaining > 0) return GiveSlot(c), Finish(c, -EPIPE);
    c->done += static_cast<uint64_t>(res);
    c->remaining -= static_cast<uint64_t>(res);
    if (c->remaining == 0) return GiveSlot(c), Finish(c, static_cast<int64_t>(c->done));
    // A partial send: advance the iovecs and send the rest.
    internal::AdvanceIov(c, static_cast<size_t>(res));
    SubmitSend(c);
  }

  void OnSendFile(Completion* c, int32_t res) {
    if (c->polling) {  // the socket became writable (or failed)
      c->polling = false;
      if (c->pipe_index < 0) {  // the inline sendfile path: carry on there
        if (res < 0) return Finish(c, res);
        if (!SendCached(c)) Splice(c);
        return RunReady();
      }
      if (res < 0) {
        GivePipe(c->pipe_index, true);
        return Finish(c, res);
      }
      return SpliceOut(c);
    }
    if (c->in_pipe == 0) {  // file -> pipe finished
      if (res <= 0) {
        GivePipe(c->pipe_index, false);
        // 0: the file ended before `length` bytes: it was truncated under us.
        return Finish(c, res < 0 ? res : static_cast<int64_t>(c->done));
      }
      c->in_pipe = static_cast<uint32_t>(res);
      c->offset += static_cast<uint64_t>(res);
      return SpliceOut(c);
    }
    if (res == -EAGAIN) {
      // Splice runs on an io-wq worker and the socket is non-blocking: its buffer is full.
      // Wait for room with a poll rather than block a kernel worker per slow client.
      c->polling = true;
      io_uring_sqe* sqe = Sqe();
      io_uring_prep_poll_add(sqe, c->fd, POLLOUT);
      Target(sqe, c->fd);
      io_uring_sqe_set_data(sqe, c);
      return;
    }
    if (res <= 0) {  // pipe -> socket failed: the pipe still holds bytes, so it is replaced
      GivePipe(c->pipe_index, true);
      return Finish(c, res < 0 ? res : -EPIPE);
    }
    c->in_pipe -= static_cast<uint32_t>(res);
    c->done += static_cast<uint64_t>(res);
    stats_.splice_bytes += static_cast<uint64_t>(res);
    c->remaining -= static_cast<uint64_t>(res);
    if (c->in_pipe > 0) return SpliceOut(c);
    if (c->remaining > 0) return SpliceIn(c);
    GivePipe(c->pipe_index, false);
    Finish(c, static_cast<int64_t>(c->done));
  }

  void OnOpen(Completion* c, int32_t res) {
    if (c->file_fd < 0) {  // openat2 finished
      if (res < 0) {
        GiveSlot(c);
        return Finish(c, res);
      }
      c->file_fd = res;
      io_uring_sqe* sqe = Sqe();
      io_uring_prep_statx(sqe, res, "", AT_EMPTY_PATH, STATX_BASIC_STATS,
                          &slots_[static_cast<size_t>(c->slot)].stx);
      io_uring_sqe_set_data(sqe, c);
      return;
    }
    const struct statx stx = slots_[static_cast<size_t>(c->slot)].stx;
    GiveSlot(c);
    if (res < 0) {
      ::close(c->file_fd);
      return Finish(c, res);
    }
    c->stat = FileStat{stx.stx_size, stx.stx_mtime.tv_sec, stx.stx_ino, stx.stx_mode};
    // io_uring returns EAGAIN instead of waiting for the disk on an O_NONBLOCK regular file, and
    // only the open needed it: drop the flag (a non-blocking fcntl on an open descriptor).
    if (S_ISREG(stx.stx_mode)) ::fcntl(c->file_fd, F_SETFL, 0);
    Finish(c, c->file_fd);
  }

  LoopOptions options_;
  io_uring ring_{};
  bool ring_ready_ = false;
  bool direct_ = false;  // bypass tier: connections are registered file table slots
  bool sqpoll_ = false;
  uint32_t direct_slots_ = 0;
  struct SlotState {
    uint16_t shutdowns = 0;      // IORING_OP_SHUTDOWNs in flight on the slot
    bool close_pending = false;  // Close was called: close once they are done
  };
  std::vector<SlotState> slot_state_;  // per registered file table slot (bypass)
  io_uring_buf_ring* buf_ring_ = nullptr;
  size_t buf_ring_bytes_ = 0;
  char* recv_bufs_ = nullptr;
  size_t recv_bufs_bytes_ = 0;
  const char* fixed_base_ = nullptr;
  size_t fixed_size_ = 0;
  uint32_t fixed_count_ = 0;
  // Per Open, or Send of several buffers, in flight: what the kernel reads or writes through
  // pointers in its SQEs.
  struct OpSlot {
    open_how how;
    struct statx stx;
    msghdr msg;
  };
  std::deque<OpSlot> slots_;
  std::vector<Event> deferred_;  // completions reaped by Submit, dispatched by the next Poll
  std::vector<int> free_slots_;
  std::vector<Pipe> pipes_;
  internal::CompletionQueue ready_;      // finished inside the call that started them
  internal::CompletionQueue pipe_wait_;  // SendFiles waiting for a free pipe
  std::vector<Completion*> rearm_;
  std::vector<Completion*> resume_;  // resumed receives with kept bytes to hand over
  bool incremental_ = false;         // the kernel consumes receive buffers incrementally
  uint32_t recv_max_ = 0;            // bytes per receive completion at most
  std::vector<uint32_t> consumed_;   // incremental: per buffer, the bytes receives took so far
  // Copies of bytes received for paused receives: per chunk, its memory (recv_max_ bytes), the
  // next chunk kept for the same receive, and the bytes in it; free chunks.
  std::vector<std::unique_ptr<char[]>> held_mem_;
  std::vector<int32_t> held_next_;
  std::vector<int32_t> held_len_;
  std::vector<int32_t> held_free_;
  uint64_t turn_ = 0;  // Poll calls so far: SendFile's per-turn budget
  int wake_fd_ = -1;
  uint64_t wake_value_ = 0;
  Completion wake_;
  LoopStats stats_;
};

}  // namespace

std::unique_ptr<Loop> MakeUringLoop(const LoopOptions& options, std::string* error) {
  auto loop = std::make_unique<UringLoop>();
  if (!loop->Init(options, error)) return nullptr;
  return loop;
}

std::unique_ptr<Loop> MakeBypassLoop(const LoopOptions& options, std::string* error) {
  LoopOptions o = options;
  o.direct_descriptors = true;
  return MakeUringLoop(o, error);
}

}  // namespace ringd::io
