// The io_uring backend: one ring per shard thread (SINGLE_ISSUER, DEFER_TASKRUN where the kernel
// has them), multishot accept, multishot recv into a provided buffer ring, splice through a pool
// of pipes for file bodies, openat2 (RESOLVE_BENEATH) and statx through the ring. This file: the
// ring's set-up, submission, completion dispatch, opens, reads and closes (uring_loop.h).
#include "io/uring_loop.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>

#include "io/uring_uapi.h"

namespace ringd::io {
namespace uring {

UringLoop::~UringLoop() {
  for (const SlotState& st : slot_state_) {  // fds installed for sockets still open (bypass)
    if (st.fd >= 0) ::close(st.fd);
  }
  for (Pipe& p : pipes_) {
    if (p.r >= 0) ::close(p.r);
    if (p.w >= 0) ::close(p.w);
  }
  if (ring_ready_) io_uring_queue_exit(&ring_);
  if (buf_ring_ != nullptr) ::munmap(buf_ring_, buf_ring_bytes_);
  if (recv_bufs_ != nullptr && options_.recv_region == nullptr)
    ::munmap(recv_bufs_, recv_bufs_bytes_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (body_base_ != nullptr) ::munmap(body_base_, body_bytes_);
}

bool UringLoop::Init(const LoopOptions& o, std::string* error) {
  options_ = o;
  resident_.set_trust_ms(o.page_cache_trust_ms);
  direct_ = o.uring.direct_descriptors;
  if (!SetupRing(o, error) || !SetupFileTable(o, error) || !SetupRecvBuffers(o, error) ||
      !SetupFixedBuffers(o, error)) {
    return false;
  }
  slots_.resize(o.uring.ring_entries);
  deferred_.reserve(o.uring.ring_entries * 4);
  next_turns_.reserve(o.uring.ring_entries * 4);  // cleared every Poll
  for (uint32_t i = 0; i < o.uring.ring_entries; ++i) free_slots_.push_back(static_cast<int>(i));
  if (o.uring.pipe_pool_size > INT16_MAX) {  // OpState::pipe_index
    *error = "too many pipes: " + std::to_string(o.uring.pipe_pool_size);
    return false;
  }
  pipes_.resize(o.uring.pipe_pool_size);
  // The first pipe is made now and kept for good (GivePipe drains a dirty pipe rather than
  // replacing it): out of descriptors later, a body that must splice waits for that pipe instead
  // of failing after its head went out.
  if (!pipes_.empty()) {
    const int rc = OpenPipe(&pipes_[0]);
    if (rc < 0) {
      *error = std::string("pipe2: ") + strerror(-rc);
      return false;
    }
  }
  if (incremental_) consumed_.assign(o.recv_buffer_count, 0);

  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    *error = std::string("eventfd: ") + strerror(errno);
    return false;
  }
  wake_.op = Op::kWake;
  ArmWake();
  faults_ = o.faults;  // from here on: set-up itself never fails for a test's fault
  return true;
}

// The ring itself, and what is registered on it whatever the tier: its fd in this thread's
// table, batched waits, NAPI busy polling.
bool UringLoop::SetupRing(const LoopOptions& o, std::string* error) {
  io_uring_params p{};
  if (o.uring.sqpoll) {
    // A kernel thread polls the submission queue. DEFER_TASKRUN needs the submitter to be the
    // task that waits, which the SQ thread is not.
    p.flags = IORING_SETUP_SQPOLL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_CQSIZE |
              IORING_SETUP_SUBMIT_ALL;
    p.sq_thread_idle = o.uring.sqpoll_idle_ms;
    if (o.uring.sqpoll_cpu >= 0) {
      p.flags |= IORING_SETUP_SQ_AFF;
      p.sq_thread_cpu = static_cast<uint32_t>(o.uring.sqpoll_cpu);
    }
    if (o.uring.attach_ring_fd >= 0) {  // share the first shard's SQ thread (and io-wq)
      p.flags |= IORING_SETUP_ATTACH_WQ;
      p.wq_fd = static_cast<uint32_t>(o.uring.attach_ring_fd);
    }
  } else {
    p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_CQSIZE |
              IORING_SETUP_SUBMIT_ALL;
  }
  p.cq_entries = o.uring.ring_entries * 4;  // room for multishot bursts; NODROP covers the rest
  int rc = io_uring_queue_init_params(o.uring.ring_entries, &ring_, &p);
  if (rc == -EINVAL) {  // older kernel: no SINGLE_ISSUER / DEFER_TASKRUN
    p.flags &= ~(IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_SUBMIT_ALL);
    rc = io_uring_queue_init_params(o.uring.ring_entries, &ring_, &p);
  }
  if (rc < 0) {
    *error = std::string(o.uring.sqpoll ? "io_uring_setup (SQPOLL): " : "io_uring_setup: ") +
             strerror(-rc);
    return false;
  }
  ring_ready_ = true;
  sqpoll_ = o.uring.sqpoll;
  if ((p.features & IORING_FEAT_CQE_SKIP) == 0) options_.uring.skip_unread_cqes = false;  // probed
  // Registered in this (the shard's) thread's table of rings: liburing then enters by the
  // index. Not a reason to fail: a ring entered by its fd works the same, one fd lookup dearer.
  if (o.uring.register_ring_fd) stats_.ring_fd_registered = io_uring_register_ring_fd(&ring_) == 1;
  if (o.uring.batch_wait_us != 0 && !o.uring.sqpoll) {
    if ((p.features & uapi::kFeatMinTimeout) == 0) {
      *error = "batched waits need IORING_FEAT_MIN_TIMEOUT (Linux 6.12)";
      return false;
    }
    batch_wait_us_ = o.uring.batch_wait_us;
  }
  if (o.uring.busy_poll_us != 0) {
    uapi::Napi napi;
    napi.busy_poll_to = o.uring.busy_poll_us;
    rc = io_uring_register(ring_.ring_fd, uapi::kRegisterNapi, &napi, 1);
    if (rc < 0) {
      *error = std::string("IORING_REGISTER_NAPI: ") + strerror(-rc);
      return false;
    }
  }

  return true;
}

// bypass: the registered file table connections are accepted into; io-wq's bounds.
bool UringLoop::SetupFileTable(const LoopOptions& o, std::string* error) {
  int rc = 0;
  if (direct_) {
    // The registered file table that accepted connections go into. The kernel holds its size
    // to RLIMIT_NOFILE.
    rlimit rl{};
    ::getrlimit(RLIMIT_NOFILE, &rl);
    const uint32_t slots = o.uring.direct_files != 0 ? o.uring.direct_files : 1024;
    if (rl.rlim_cur != RLIM_INFINITY && slots > rl.rlim_cur) {
      *error = "registered file table: " + std::to_string(slots) + " slots exceed RLIMIT_NOFILE (" +
               std::to_string(rl.rlim_cur) + ")";
      return false;
    }
    rc = io_uring_register_files_sparse(&ring_, slots);
    if (rc < 0) {
      *error = std::string("io_uring_register_files_sparse: ") + strerror(-rc);
      return false;
    }
    direct_slots_ = slots;
    fd_install_ = o.uring.bypass_sendfile;
    slot_state_.assign(slots, SlotState{});
  }
  if (o.uring.iowq_max_workers != 0) {
    unsigned workers[2] = {o.uring.iowq_max_workers,
                           o.uring.iowq_max_workers};  // bounded, unbounded
    rc = io_uring_register_iowq_max_workers(&ring_, workers);
    if (rc < 0) {
      *error = std::string("io_uring_register_iowq_max_workers: ") + strerror(-rc);
      return false;
    }
  }

  return true;
}

// The provided buffer ring for multishot recv.
bool UringLoop::SetupRecvBuffers(const LoopOptions& o, std::string* error) {
  const uint32_t n = o.recv_buffer_count;
  if (n == 0 || (n & (n - 1)) != 0 || n > kMaxRecvBuffers) {
    *error = "recv buffer count must be a power of two up to " + std::to_string(kMaxRecvBuffers);
    return false;
  }
  buf_ring_bytes_ = n * sizeof(io_uring_buf);
  buf_ring_ = static_cast<io_uring_buf_ring*>(
      ::mmap(nullptr, buf_ring_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
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
  incremental_ = o.uring.recv_incremental;
  recv_max_ = o.recv_max_bytes != 0 ? o.recv_max_bytes : o.recv_buffer_size;
  if (recv_max_ > o.recv_buffer_size || (!incremental_ && recv_max_ != o.recv_buffer_size)) {
    *error = "receive cap " + std::to_string(recv_max_) + " does not fit the receive buffers";
    return false;
  }
  if (incremental_) reg.pad = uapi::kPbufRingInc;
  int rc = io_uring_register_buf_ring(&ring_, &reg, 0);
  if (rc < 0) {
    *error = std::string("io_uring_register_buf_ring: ") + strerror(-rc);
    return false;
  }
  io_uring_buf_ring_init(buf_ring_);
  // The kernel is given the pool's first buffers only (kFirstRecvBytes' worth, at least two):
  // it fills the buffers it has in ring order, so a pool given whole would have all its pages
  // touched by the first connections' requests, however few bytes each brings. More are given
  // when the ring runs dry (GrowRecvPool), so what is touched is what bursts have needed.
  GiveRecvBuffers(std::max<uint32_t>(
      2, static_cast<uint32_t>(std::min<uint64_t>(n, kFirstRecvBytes / o.recv_buffer_size))));
  return true;
}

// Hands the pool's next `count` never-used buffers to the kernel (fewer if it has no more).
void UringLoop::GiveRecvBuffers(uint32_t count) {
  const uint32_t n = options_.recv_buffer_count;
  count = std::min(count, n - recv_given_);
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t bid = recv_given_ + i;
    io_uring_buf_ring_add(buf_ring_, RecvBuffer(static_cast<uint16_t>(bid)),
                          options_.recv_buffer_size, static_cast<uint16_t>(bid),
                          io_uring_buf_ring_mask(n), static_cast<int>(i));
  }
  io_uring_buf_ring_advance(buf_ring_, static_cast<int>(count));
  recv_given_ += count;
  stats_.recv_pool_bytes = uint64_t{recv_given_} * options_.recv_buffer_size;
}

// The ring ran dry (a receive ended with ENOBUFS): the kernel gets as many buffers again as
// it had, up to the whole pool. Returns false when it already had them all.
bool UringLoop::GrowRecvPool() {
  if (recv_given_ >= options_.recv_buffer_count) return false;
  GiveRecvBuffers(recv_given_);
  return true;
}

bool UringLoop::SetupFixedBuffers(const LoopOptions& o, std::string* error) {
  // Fixed buffers: the shard's small-file pool, so file reads into it skip page pinning, then
  // (bypass) the body buffers that file bodies pass through, registered after them.
  std::vector<iovec> iovs;
  if (o.uring.registered_region != nullptr && o.uring.registered_buffer_count > 0) {
    for (uint32_t i = 0; i < o.uring.registered_buffer_count; ++i) {
      iovs.push_back(
          iovec{const_cast<char*>(o.uring.registered_region) + i * o.uring.registered_buffer_size,
                o.uring.registered_buffer_size});
    }
    fixed_base_ = o.uring.registered_region;
    fixed_size_ = o.uring.registered_buffer_size;
    fixed_count_ = o.uring.registered_buffer_count;
  }
  if (direct_ && o.uring.body_buffers > 0) {
    body_bytes_ = static_cast<size_t>(o.uring.body_buffers) * o.uring.body_buffer_size;
    void* m = ::mmap(nullptr, body_bytes_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) {
      *error = "mmap for the body buffers failed";
      return false;
    }
    body_base_ = static_cast<char*>(m);
    body_count_ = o.uring.body_buffers;
    for (uint32_t i = 0; i < o.uring.body_buffers; ++i) {
      iovs.push_back(iovec{body_base_ + static_cast<size_t>(i) * o.uring.body_buffer_size,
                           o.uring.body_buffer_size});
      body_free_.push_back(static_cast<int>(o.uring.body_buffers - 1 - i));
    }
  }
  if (!iovs.empty()) {
    // Registering pins a buffer's pages, so a table of empty slots is registered now and each
    // buffer fills its slot when an operation first uses it (RegisteredIndex): a shard that has
    // cached nothing holds none of the small-file pool's memory. A kernel without sparse tables
    // registers every buffer now.
    int rc = io_uring_register_buffers_sparse(&ring_, static_cast<unsigned>(iovs.size()));
    if (rc == 0) {
      fixed_state_.assign(iovs.size(), kFixedEmpty);
    } else {
      rc = io_uring_register_buffers(&ring_, iovs.data(), static_cast<unsigned>(iovs.size()));
      if (rc < 0) {
        *error = std::string("io_uring_register_buffers: ") + strerror(-rc);
        return false;
      }
      fixed_state_.assign(iovs.size(), kFixedRegistered);
      stats_.fixed_buffers_registered = iovs.size();
    }
    fixed_iovs_ = std::move(iovs);
  }

  return true;
}

void UringLoop::Accept(int listen_fd, Completion* c) {
  Begin(c, Op::kAccept, listen_fd);
  io_uring_sqe* sqe = Sqe();
  if (direct_) {  // straight into a free slot of the registered file table
    // Non-blocking like the uring tier's sockets: a splice that finds the socket full waits in a
    // POLL_ADD, not in an io-wq worker, and an inline sendfile on the fd a body installs for it
    // returns EAGAIN instead of holding the shard (CLOEXEC is for process fds only).
    io_uring_prep_multishot_accept_direct(sqe, listen_fd, nullptr, nullptr, SOCK_NONBLOCK);
  } else {
    io_uring_prep_multishot_accept(sqe, listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  }
  io_uring_sqe_set_data(sqe, c);
}

void UringLoop::Open(int dir_fd, const char* path, FileStat* stat, Completion* c) {
  Begin(c, Op::kOpen, -1);
  c->dir_fd = dir_fd;
  c->path = path;
  c->stat = stat;
  c->file_fd = -1;
  // The open's slot holds its open_how (read by the kernel whenever the SQE is submitted, so
  // it must outlive this call), then its statx buffer. More opens in flight than SQ entries
  // (a cold burst) add slots; a deque never moves the ones in use.
  St(c).slot = TakeSlot();
  OpSlot& slot = slots_[static_cast<size_t>(St(c).slot)];
  slot.how = open_how{};
  slot.how.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;  // a FIFO must not block
  slot.how.resolve = RESOLVE_BENEATH;  // a symlink can never lead outside dir_fd
  io_uring_sqe* sqe = Sqe();
  io_uring_prep_openat2(sqe, dir_fd, path, &slot.how);
  io_uring_sqe_set_data(sqe, c);
}

void UringLoop::Read(int fd, char* buf, uint64_t length, uint64_t offset, Completion* c) {
  Begin(c, Op::kRead, fd);
  io_uring_sqe* sqe = Sqe();
  const int index = RegisteredIndex(FixedIndex(buf, length));
  if (index >= 0) {
    io_uring_prep_read_fixed(sqe, fd, buf, static_cast<unsigned>(length), offset, index);
  } else {
    io_uring_prep_read(sqe, fd, buf, static_cast<unsigned>(length), offset);
  }
  io_uring_sqe_set_data(sqe, c);
}

void UringLoop::Cancel(Completion* c) {
  if (!c->in_flight || c->cancelled) return;
  c->cancelled = true;
  if (c->op == Op::kRecv) {
    // Bytes kept for a paused receive go nowhere now, and neither do any still to come: a paused
    // receive delivers nothing, and one that kept bytes cannot deliver later ones without them.
    if (c->paused || St(c).held_head >= 0) {
      St(c).discard = true;
      St(c).dropped = St(c).held_head >= 0;
    }
    ReleaseHeld(c);
    if (!St(c).armed) {
      // Parked (paused, ended for lack of buffers, or waiting to redeliver): nothing in the
      // kernel will end it, so its last callback comes from Poll (RunWaitingRecvs).
      WaitForPoll(c);
      return;
    }
  }
  CancelInKernel(c);
}

void UringLoop::Shutdown(int fd, int how) {
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

void UringLoop::Close(int fd) {
  if (quiesced_) {
    // A direct descriptor goes with the ring's file table when the ring does; a file's fd is
    // closed here and now (through the ring it would wait for a submit that never comes, and a
    // full queue's submit from the destructor's thread fails, which would abort ringd at exit).
    if (!IsDirect(fd)) {
      resident_.Forget(fd);
      ::close(fd);
    }
    return;
  }
  if (IsDirect(fd)) {
    const uint32_t slot = static_cast<uint32_t>(fd & ~kDirectHandle);
    RINGD_ASSERT(slot < direct_slots_ && !slot_state_[slot].close_pending);
    if (slot_state_[slot].shutdowns > 0) {
      slot_state_[slot].close_pending = true;  // after the shutdowns in flight (ShutdownDone)
      return;
    }
    return CloseSlot(slot);
  }
  resident_.Forget(fd);  // the number may name another file next
  io_uring_sqe* sqe = Sqe();
  io_uring_prep_close(sqe, fd);
  Unread(sqe);
}

int UringLoop::SubmitAndWaitBatch(const __kernel_timespec* ts) {
  // What io_uring_submit_and_wait_timeout does, with the wait's min_wait_usec set, which
  // liburing 2.3 cannot: publish the queued SQEs, then one io_uring_enter submits them and waits.
  io_uring_sq* sq = &ring_.sq;
  const unsigned tail = sq->sqe_tail;
  if (sq->sqe_head != tail) {
    sq->sqe_head = tail;
    io_uring_smp_store_release(sq->ktail, tail);
  }
  const unsigned to_submit = tail - io_uring_smp_load_acquire(sq->khead);
  // Without a timeout the kernel would end the whole wait at min_wait_usec, empty or not: an
  // idle shard would wake every batch_wait_us. An hour stands for "no timeout".
  static constexpr __kernel_timespec kNoTimeout{3600, 0};
  io_uring_getevents_arg arg{};
  arg.sigmask = 0;
  arg.sigmask_sz = _NSIG / 8;
  arg.pad = batch_wait_us_;  // min_wait_usec (uapi::kFeatMinTimeout)
  arg.ts = reinterpret_cast<uint64_t>(ts != nullptr ? ts : &kNoTimeout);
  unsigned flags = IORING_ENTER_GETEVENTS | IORING_ENTER_EXT_ARG;
  if (stats_.ring_fd_registered) flags |= IORING_ENTER_REGISTERED_RING;  // enter_ring_fd: the index
  const long rc = ::syscall(__NR_io_uring_enter, ring_.enter_ring_fd, to_submit,
                            options_.uring.batch_wait_count, flags, &arg, sizeof(arg));
  return rc < 0 ? -errno : static_cast<int>(rc);
}

void UringLoop::Poll(int timeout_ms) {
  ++turn_;
  // Work already waiting (finished inside a call, resumed, parked, or reaped by a busy submit)
  // runs now: do not sleep first.
  if (!ready_.empty() || !waiting_recvs_.empty() || !deferred_.empty() || !held_back_.empty()) {
    timeout_ms = 0;
  }
  __kernel_timespec ts{};
  ts.tv_sec = timeout_ms / 1000;
  ts.tv_nsec = (timeout_ms % 1000) * 1000000L;
  int rc;
  if (faults_ != nullptr && Inject(Fault::kEintr, "io_uring_enter (wait)")) {
    rc = -EINTR;  // a signal: nothing submitted, nothing waited for
  } else if (faults_ != nullptr && Inject(Fault::kEbusy, "io_uring_enter (wait)")) {
    rc = -EBUSY;
  } else if (batch_wait_us_ != 0 && timeout_ms != 0) {
    rc = SubmitAndWaitBatch(timeout_ms >= 0 ? &ts : nullptr);
  } else if (io_uring_cq_ready(&ring_) > 0) {
    // Completions already wait (a submit since the last Poll, of a full queue, posted what
    // finished at once). liburing's wait would return them without asking the kernel for
    // completions, entering at most to submit, and the ring's deferred work (DEFER_TASKRUN:
    // receives, polls, zero-copy notifications) would wait for a Poll that finds the queue
    // empty: a loop that fills its queue every turn would never see its sockets again. Ask
    // for completions, without waiting.
    rc = io_uring_submit_and_get_events(&ring_);
  } else {
    io_uring_cqe* cqe = nullptr;
    rc =
        io_uring_submit_and_wait_timeout(&ring_, &cqe, 1, timeout_ms >= 0 ? &ts : nullptr, nullptr);
  }
  // -ETIME and -EINTR mean "nothing yet"; -EBUSY and -EAGAIN a full completion queue, which
  // the reaping below empties; anything else cannot happen.
  RINGD_ASSERT_MSG(rc >= 0 || rc == -ETIME || rc == -EINTR || rc == -EBUSY || rc == -EAGAIN,
                   "io_uring_submit_and_wait: %s", strerror(-rc));
  if (faults_ != nullptr) ReleaseFaults();
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
    for (unsigned i = 0; i < n; ++i) events[i] = {cqes[i]->user_data, cqes[i]->res, cqes[i]->flags};
    io_uring_cq_advance(&ring_, n);
    stats_.cqes += n;
    for (unsigned i = 0; i < n; ++i) {
      if (IsNextTurn(events[i].user_data)) {
        next_turns_.push_back(events[i]);
      } else {
        Dispatch(events[i].user_data, events[i].res, events[i].flags);
      }
    }
    if (n < static_cast<unsigned>(kBatch) && deferred_.empty()) break;
  }
  RunReady();
  for (size_t i = 0; i < next_turns_.size(); ++i) {
    Dispatch(next_turns_[i].user_data, next_turns_[i].res, next_turns_[i].flags);
  }
  next_turns_.clear();
  RunReady();
  RunWaitingRecvs();
}

LoopStats UringLoop::Stats() const {
  LoopStats s = stats_;
  s.page_cache_asks = resident_.asks();
  s.pipes_in_use = 0;
  s.pipe_capacity = pipes_.size();
  for (const Pipe& p : pipes_) s.pipes_in_use += p.busy ? 1 : 0;
  s.op_slots_in_use = slots_.size() - free_slots_.size();
  s.body_buffers_in_use = body_count_ - body_free_.size();
  s.recv_held_in_use = held_mem_.size() - held_free_.size();
  return s;
}

io_uring_sqe* UringLoop::Sqe() {
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
int UringLoop::TakeSlot() {
  if (free_slots_.empty()) {
    slots_.emplace_back();
    free_slots_.push_back(static_cast<int>(slots_.size() - 1));
  }
  const int slot = free_slots_.back();
  free_slots_.pop_back();
  return slot;
}

void UringLoop::ShutdownDone(uint32_t slot) {
  RINGD_ASSERT(slot < direct_slots_ && slot_state_[slot].shutdowns > 0);
  SlotState& st = slot_state_[slot];
  if (--st.shutdowns == 0 && st.close_pending) {
    st.close_pending = false;
    CloseSlot(slot);
  }
}

// Points an SQE prepared with a connection handle at the descriptor: a direct one is the
// registered file table's slot (IOSQE_FIXED_FILE).
void UringLoop::Target(io_uring_sqe* sqe, int handle) const {
  if (!IsDirect(handle)) return;
  const int slot = handle & ~kDirectHandle;
  RINGD_ASSERT_MSG(static_cast<uint32_t>(slot) < direct_slots_, "direct slot %d", slot);
  sqe->fd = slot;
  sqe->flags |= IOSQE_FIXED_FILE;
}

// Hands the queued SQEs to the kernel. A ring too busy to take them (its completion queue
// full: EBUSY, EAGAIN) has its completions reaped into deferred_, to be dispatched by the next
// Poll (never from here: we may be inside a callback), and the submit is retried.
void UringLoop::Submit() {
  for (int attempt = 0;; ++attempt) {
    int rc;
    if (attempt < 2 && Inject(Fault::kEintr, "io_uring_enter (submit)")) {
      rc = -EINTR;
    } else if (attempt < 2 && Inject(Fault::kEbusy, "io_uring_enter (submit)")) {
      rc = -EBUSY;  // nothing submitted: reap, then submit again
    } else {
      rc = io_uring_submit(&ring_);
    }
    if (rc >= 0) return;
    if (rc == -EINTR) continue;
    RINGD_ASSERT_MSG(rc == -EBUSY || rc == -EAGAIN, "io_uring_submit: %s", strerror(-rc));
    RINGD_ASSERT_MSG(attempt < 100000, "io_uring_submit: busy with nothing to reap");
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring_, &cqe) == 0 && cqe != nullptr) {
      deferred_.push_back(Event{cqe->user_data, cqe->res, cqe->flags});
      io_uring_cqe_seen(&ring_, cqe);
      ++stats_.cqes;
    }
  }
}

void UringLoop::Finish(Completion* c, int64_t result) {
  // Every SendFile ends here, whatever ended it (its last byte, an error, a failed poll, a
  // cancel), so no socket stays corked into its next response (but for the next piece of the
  // same body: EndCork); uncorking pushes the body's last partial segment out.
  if (c->corked) internal::EndCork(c, SocketFd(c->fd), result);
  if (c->op == Op::kRecv) {
    EndRecv(c);
  } else {
    Ended(c);
  }
  c->more = false;
  c->result = result;
  ++stats_.completed;
  c->callback(c);
}

bool UringLoop::IsNextTurn(uint64_t user_data) const {
  if (user_data == 0 || (user_data & kShutdownTag) != 0) return false;
  const Completion* c = reinterpret_cast<const Completion*>(user_data);
  return c->op == Op::kSendFile && St(c).phase == FilePhase::kInlineWaitWritable;
}

void UringLoop::DispatchEvent(uint64_t user_data, int32_t res, uint32_t flags) {
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
      if (!c->more) Ended(c);
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

// Test faults at the completion boundary (io/fault.h). The rules that keep each a state the
// kernel can be in: an operation's completions reach the loop in the order the kernel posted
// them, however late; with incrementally consumed buffers, so do all receives' (each takes the
// bytes after the last one's from a shared buffer: Received and Consumed count on that order),
// and no multishot ends early (its completions would wait for the end while others' went on);
// a multishot receive ends early only once the kernel has really ended it.
bool UringLoop::Intercept(const Event& e) {
  if (e.user_data == 0) return false;  // dropped anyway
  const bool ordered = incremental_ && (e.flags & IORING_CQE_F_BUFFER) != 0;
  const auto held = std::find(held_ops_.begin(), held_ops_.end(), e.user_data);
  if (held != held_ops_.end() || (ordered && buffers_held_)) {  // behind one held back: after it
    if (held == held_ops_.end()) held_ops_.push_back(e.user_data);  // and so are its next ones
    held_back_.push_back(e);
    return true;
  }
  for (size_t i = 0; i < endings_.size(); ++i) {
    if (endings_[i].user_data != e.user_data) continue;
    std::vector<Event>& events = endings_[i].events;
    events.push_back(e);
    if (e.flags & IORING_CQE_F_MORE) return true;
    // The receive's last completion. If it is the cancellation's, the kernel ended the
    // multishot with the bytes before it: those go out with their last one as the end (no
    // F_MORE), and the cancellation's completion is dropped. Otherwise the kernel ended it first
    // (end of stream, an error, no buffers) and everything goes out as it came.
    if (e.res == -ECANCELED) {
      size_t last = events.size();
      while (last > 0 && events[last - 1].res <= 0) --last;
      RINGD_ASSERT(last > 0);  // the first, the bytes that started the ending
      events.resize(last);
      events.back().flags &= ~IORING_CQE_F_MORE;
    }
    std::vector<Event> out = std::move(events);
    endings_.erase(endings_.begin() + static_cast<ptrdiff_t>(i));
    for (const Event& ev : out) DispatchEvent(ev.user_data, ev.res, ev.flags);
    return true;
  }
  if (Inject(Fault::kHoldBack, "completion")) {
    held_ops_.push_back(e.user_data);
    buffers_held_ = buffers_held_ || ordered;
    held_back_.push_back(e);
    return true;
  }
  if ((e.user_data & kShutdownTag) != 0) return false;
  Completion* c = reinterpret_cast<Completion*>(e.user_data);
  if (!incremental_ && c->op == Op::kRecv && e.res > 0 && (e.flags & IORING_CQE_F_MORE) &&
      Inject(Fault::kEndMultishot, "recv completion")) {
    // The kernel ends the multishot here: cancelled in the kernel, whose last completion (the
    // cancellation's, after any bytes already on their way) decides the end.
    CancelInKernel(c);
    endings_.push_back(Ending{e.user_data, {e}});
    return true;
  }
  return false;
}

void UringLoop::ReleaseFaults() {
  for (uint16_t bid : withheld_bufs_) {
    io_uring_buf_ring_add(buf_ring_, RecvBuffer(bid), options_.recv_buffer_size, bid,
                          io_uring_buf_ring_mask(options_.recv_buffer_count), 0);
    io_uring_buf_ring_advance(buf_ring_, 1);
  }
  withheld_bufs_.clear();
  held_ops_.clear();
  buffers_held_ = false;
  if (held_back_.empty()) return;
  std::vector<Event> held;
  held.swap(held_back_);
  for (const Event& e : held) Dispatch(e.user_data, e.res, e.flags);  // may be held again
}

void UringLoop::OnOpen(Completion* c, int32_t res) {
  if (c->file_fd < 0) {  // openat2 finished
    if (res < 0) {
      GiveSlot(c);
      return Finish(c, res);
    }
    c->file_fd = res;
    struct statx* stx = &slots_[static_cast<size_t>(St(c).slot)].stx;
    if (local_dirs_.IsLocal(c->dir_fd)) {
      // The kernel always runs IORING_OP_STATX on an io-wq worker: a thread switch there and
      // back for what a local file system answers from the open inode at once. There the shard
      // asks itself (a FUSE or NFS root's stat may wait for a daemon or a server: those go the
      // ring). The path may still have crossed into such a mount beneath the root: there
      // AT_STATX_DONT_SYNC takes the attributes the open just cached instead of asking again.
      ++stats_.stats_on_shard;
      res = ::statx(res, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_BASIC_STATS, stx) == 0
                ? 0
                : -errno;
    } else {
      io_uring_sqe* sqe = Sqe();
      io_uring_prep_statx(sqe, res, "", AT_EMPTY_PATH, STATX_BASIC_STATS, stx);
      io_uring_sqe_set_data(sqe, c);
      return;
    }
  }
  const struct statx stx = slots_[static_cast<size_t>(St(c).slot)].stx;
  GiveSlot(c);
  if (res < 0) {
    ::close(c->file_fd);
    return Finish(c, res);
  }
  *c->stat = FileStat{stx.stx_size,
                      stx.stx_mtime.tv_sec,
                      stx.stx_ino,
                      stx.stx_mode,
                      static_cast<uint64_t>(makedev(stx.stx_dev_major, stx.stx_dev_minor)),
                      stx.stx_mtime.tv_nsec};
  // io_uring returns EAGAIN instead of waiting for the disk on an O_NONBLOCK regular file, and
  // only the open needed it: drop the flag (a non-blocking fcntl on an open descriptor).
  if (S_ISREG(stx.stx_mode)) ::fcntl(c->file_fd, F_SETFL, 0);
  Finish(c, c->file_fd);
}

}  // namespace uring

absl::StatusOr<std::unique_ptr<Loop>> MakeUringLoop(const LoopOptions& options) {
  auto loop = std::make_unique<uring::UringLoop>();
  std::string error;
  if (!loop->Init(options, &error)) return absl::FailedPreconditionError(error);
  return loop;
}

absl::StatusOr<std::unique_ptr<Loop>> MakeBypassLoop(const LoopOptions& options) {
  LoopOptions o = options;
  o.uring.direct_descriptors = true;
  return MakeUringLoop(o);
}

}  // namespace ringd::io
