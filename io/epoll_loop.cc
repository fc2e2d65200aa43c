// The compatibility backend: a level-triggered epoll loop per shard for sockets, sendfile for file
// bodies, and a bounded worker pool for file work that could block (open + stat, reads and
// sendfile chunks whose pages are not in the page cache) -- nginx's `aio threads` model. Page
// cache hits are served inline: a preadv2(RWF_NOWAIT) probe decides.
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "io/backend_util.h"
#include "io/fault.h"
#include "io/loop.h"
#include "io/worker_pool.h"

namespace ringd::io {
namespace {

constexpr int kMaxEvents = 256;
constexpr int kAcceptBurst = 64;        // accepts per readiness event, for fairness
constexpr size_t kWarmChunk = 1 << 20;  // the most one worker job reads ahead

// A sendfile's bytes up to the next kWarmChunk boundary of the file (at most `remaining`): what a
// worker warms at once, and what one inline sendfile may read, so both meet at the same offsets.
uint64_t WarmBytes(const Completion* c) {
  return std::min(c->remaining, uint64_t{kWarmChunk} - c->offset % kWarmChunk);
}

// Opens `path` beneath `dir_fd` (never outside it, whatever its symlinks say) and stats it: the
// fd, or -errno. With `cached_only` (RESOLVE_CACHED, Linux 5.12) the path must resolve from the
// kernel's caches alone, so the call cannot wait for the disk: -EAGAIN otherwise; and it may
// not cross a mount point (RESOLVE_NO_XDEV: -EXDEV), since the root's file system being local
// says nothing of an NFS or FUSE mount beneath it, whose open or fstat may wait for a server.
int64_t OpenBeneath(int dir_fd, const char* path, bool cached_only, FileStat* out) {
  open_how how{};
  how.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;  // a FIFO must not block the open
  how.resolve = RESOLVE_BENEATH | (cached_only ? RESOLVE_CACHED | RESOLVE_NO_XDEV : 0);
  const int fd = static_cast<int>(::syscall(SYS_openat2, dir_fd, path, &how, sizeof how));
  if (fd < 0) return -errno;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return -err;
  }
  if (S_ISREG(st.st_mode)) {
    ::fcntl(fd, F_SETFL, 0);  // regular files: plain blocking reads
    // No read-ahead of the kernel's own: the workers read exactly the chunk the shard sends
    // next (readahead(2) below), so nothing is read that the page-cache budget may drop
    // before it is sent, to be read again.
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
  }
  *out = FileStat{static_cast<uint64_t>(st.st_size), st.st_mtim.tv_sec, st.st_ino, st.st_mode,
                  static_cast<uint64_t>(st.st_dev),  st.st_mtim.tv_nsec};
  return fd;
}

// What a worker does with a job; runs on a worker thread.
void RunJob(Completion* c, char* scratch, size_t scratch_size) {
  switch (c->op) {
    case Op::kOpen:
      c->result = OpenBeneath(c->dir_fd, c->path, false, c->stat);
      return;
    case Op::kRead: {
      const ssize_t n = ::pread(c->fd, c->buf, c->remaining, static_cast<off_t>(c->offset));
      c->result = n < 0 ? -errno : n;
      return;
    }
    case Op::kSendFile: {
      // Bring the next chunk into the page cache so the loop's sendfile will not block on disk.
      uint64_t want = WarmBytes(c);
      uint64_t off = c->offset;
      // The whole chunk goes to the disk at once (large IOs), then the reads below wait for it.
      ::readahead(c->file_fd, static_cast<off64_t>(off), want);
      while (want > 0) {
        const size_t n = want < scratch_size ? static_cast<size_t>(want) : scratch_size;
        const ssize_t r = ::pread(c->file_fd, scratch, n, static_cast<off_t>(off));
        if (r <= 0) break;  // errors and EOF surface in the loop's sendfile
        off += static_cast<uint64_t>(r);
        want -= static_cast<uint64_t>(r);
      }
      c->result =
          want == 0;  // 1: all of it is in the cache now; 0: the file ended (or failed) first
      return;
    }
    default:
      c->result = -EINVAL;
      return;
  }
}

class EpollLoop final : public Loop {
 public:
  ~EpollLoop() override {
    workers_.reset();  // joins the threads before the fds they may touch go away
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
    if (event_fd_ >= 0) ::close(event_fd_);
    if (fds_ != nullptr) ::munmap(fds_, fds_bytes_);
    if (scratch_ != nullptr && options_.recv_region == nullptr)
      ::munmap(scratch_, options_.recv_buffer_size);
  }

  bool Init(const LoopOptions& o, std::string* error) {
    options_ = o;
    resident_.set_trust_ms(o.page_cache_trust_ms);
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) {
      *error = std::string("epoll_create1: ") + strerror(errno);
      return false;
    }
    event_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (event_fd_ < 0) {
      *error = std::string("eventfd: ") + strerror(errno);
      return false;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = event_fd_;
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, event_fd_, &ev) != 0) {
      *error = std::string("epoll_ctl: ") + strerror(errno);
      return false;
    }
    rlimit rl{};
    ::getrlimit(RLIMIT_NOFILE, &rl);
    max_fds_ = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (1u << 22) ? (1u << 22) : rl.rlim_cur;
    fds_bytes_ = max_fds_ * sizeof(FdState);
    // Zero pages on demand: a table for every possible fd costs only the pages that are used.
    fds_ = static_cast<FdState*>(::mmap(nullptr, fds_bytes_, PROT_READ | PROT_WRITE,
                                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    // One receive buffer is all a readiness loop needs: bytes are consumed in the callback.
    scratch_ = o.recv_region != nullptr
                   ? o.recv_region
                   : static_cast<char*>(::mmap(nullptr, o.recv_buffer_size, PROT_READ | PROT_WRITE,
                                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (fds_ == MAP_FAILED || scratch_ == MAP_FAILED) {
      fds_ = nullptr;
      scratch_ = nullptr;
      *error = "epoll backend: mmap failed";
      return false;
    }
    workers_ = std::make_unique<WorkerPool>(o.epoll.worker_threads, o.epoll.worker_queue, event_fd_,
                                            &RunJob, kWarmChunk);
    faults_ = o.faults;  // from here on: set-up itself never fails for a test's fault
    return true;
  }

  const char* Name() const override { return "epoll"; }

  void Accept(int listen_fd, Completion* c) override {
    Begin(c, Op::kAccept, listen_fd);
    SetReader(listen_fd, c);
  }

  void Recv(int fd, Completion* c) override {
    Begin(c, Op::kRecv, fd);
    SetReader(fd, c);
  }

  void Send(int fd, iovec* iov, int iovcnt, Completion* c, bool more) override {
    Begin(c, Op::kSend, fd);
    RINGD_ASSERT_MSG(fd >= 0 && static_cast<uint64_t>(fd) < max_fds_, "fd %d", fd);
    c->send_flags = MSG_NOSIGNAL | (more ? MSG_MORE : 0);
    c->iov = iov;
    c->iovcnt = iovcnt;
    c->remaining = 0;
    for (int i = 0; i < iovcnt; ++i) c->remaining += iov[i].iov_len;
    fds_[fd].writer = c;
    DoWrite(c);  // most sends finish here; the callback still waits for Poll
  }

  void SendFile(int sock_fd, int file_fd, uint64_t offset, uint64_t length, Completion* c,
                bool more) override {
    Begin(c, Op::kSendFile, sock_fd);
    c->send_flags = more ? MSG_MORE : 0;  // RunReady leaves the cork on for the next piece
    RINGD_ASSERT_MSG(sock_fd >= 0 && static_cast<uint64_t>(sock_fd) < max_fds_, "fd %d", sock_fd);
    c->file_fd = file_fd;
    c->offset = offset;
    c->remaining = length;
    if (length == 0) return Complete(c, 0);
    fds_[sock_fd].writer = c;
    DoWrite(c);  // warms the file on a worker first where it is not cached
  }

  void Open(int dir_fd, const char* path, FileStat* stat, Completion* c) override {
    Begin(c, Op::kOpen, -1);
    c->dir_fd = dir_fd;
    c->path = path;
    c->stat = stat;
    // A path the kernel resolves from its caches opens here, as io_uring's opens try first:
    // a worker and two thread switches per open would be most of this tier's cost where a site
    // has many files. One that needs the disk (EAGAIN), or a kernel before RESOLVE_CACHED
    // (EINVAL: not tried again), goes to a worker, and so does every open on a file system that
    // is not local (FUSE, NFS: the open or the fstat may wait for a daemon or a server), and one
    // that crosses a mount point (EXDEV; the worker answers it, also where it escapes the root).
    if (inline_opens_ && local_dirs_.IsLocal(dir_fd)) {
      const int64_t r = OpenBeneath(dir_fd, path, true, stat);
      if (r != -EAGAIN && r != -EINVAL && r != -EXDEV) {
        ++stats_.opens_inline;
        return Complete(c, r);
      }
      if (r == -EINVAL) inline_opens_ = false;
    }
    Offload(c);
  }

  void Read(int fd, char* buf, uint64_t length, uint64_t offset, Completion* c) override {
    Begin(c, Op::kRead, fd);
    c->buf = buf;
    c->offset = offset;
    c->remaining = length;
    iovec v{buf, length};
    const ssize_t n = ::preadv2(fd, &v, 1, static_cast<off_t>(offset), RWF_NOWAIT);
    if (n >= 0) return Complete(c, n);  // in the page cache: no thread needed
    Offload(c);  // EAGAIN, or a file system without RWF_NOWAIT: the worker reads it
  }

  void Cancel(Completion* c) override {
    if (!c->in_flight || c->cancelled || (c->op != Op::kRecv && c->op != Op::kAccept)) return;
    c->cancelled = true;
    if (fds_[c->fd].reader == c) SetReader(c->fd, nullptr);
    Complete(c, -ECANCELED);
  }

  // Level-triggered: bytes not read stay in the socket, so pausing is just not asking.
  void PauseRecv(Completion* c) override {
    RINGD_ASSERT(c->op == Op::kRecv);
    if (!c->in_flight || c->paused) return;
    c->paused = true;
    if (fds_[c->fd].reader == c) SetReader(c->fd, nullptr);
  }

  void ResumeRecv(Completion* c) override {
    RINGD_ASSERT(c->op == Op::kRecv);
    if (!c->in_flight || !c->paused || c->cancelled) return;
    c->paused = false;
    SetReader(c->fd, c);
  }

  void Shutdown(int fd, int how) override { ::shutdown(fd, how); }

  void Close(int fd) override {
    RINGD_ASSERT_MSG(fd >= 0 && static_cast<uint64_t>(fd) < max_fds_, "close of fd %d", fd);
    FdState& st = fds_[fd];
    st = FdState{};        // closing removes it from the epoll set too
    resident_.Forget(fd);  // the number may name another file next
    ::close(fd);
  }

  void Poll(int timeout_ms) override {
    ++turn_;
    // Callbacks that ran here may have changed what the caller waits for (a drain that just
    // ended, a new deadline): return promptly rather than sleep on a timeout computed before.
    const bool ran = RunReady();
    epoll_event events[kMaxEvents];
    const int n =
        Inject(Fault::kEintr, "epoll_wait")
            ? -1  // a signal: no events this time
            : ::epoll_wait(epoll_fd_, events, kMaxEvents, ran || !ready_.empty() ? 0 : timeout_ms);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      const uint32_t ev = events[i].events;
      if (fd == event_fd_) {
        uint64_t v;
        ssize_t r = ::read(event_fd_, &v, sizeof v);
        (void)r;
        continue;
      }
      if (fds_[fd].reader != nullptr && (ev & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP))) {
        DoRead(fds_[fd].reader);
      }
      if (fds_[fd].writer != nullptr && fds_[fd].writer->op == Op::kSend &&
          (ev & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
        DoWrite(fds_[fd].writer);
      }
    }
    // The requests received run now (their responses' sends go out inline), and the file bodies
    // whose sockets took more take their turn after them, not before: so a page or an asset
    // does not wait behind every download's next turn (as on the uring tiers).
    RunReady();
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == event_fd_ || (events[i].events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) continue;
      Completion* w = fds_[fd].writer;
      if (w != nullptr && w->op == Op::kSendFile) DoWrite(w);
    }
    // Jobs the workers finished, then jobs held back while their queue was full, in order. Each
    // leaves the held list before it joins the worker queue (a Completion is on one queue at a
    // time), and goes back to its head if there is still no room.
    while (Completion* c = workers_->TakeDone()) WorkerDone(c);
    while (Completion* c = held_.Pop()) {
      if (!workers_->TrySubmit(c, c->op == Op::kSendFile)) {
        held_.PushFront(c);
        break;
      }
    }
    RunReady();
  }

  void Wake() override {
    const uint64_t one = 1;
    ssize_t r = ::write(event_fd_, &one, sizeof one);
    (void)r;
  }

  // Queued file jobs are dropped; a job a worker is running finishes first.
  void Quiesce() override { workers_->Stop(); }

  LoopStats Stats() const override {
    LoopStats s = stats_;
    s.page_cache_asks = resident_.asks();
    s.recv_pool_bytes = options_.recv_buffer_size;
    return s;
  }

 private:
  struct FdState {
    Completion* reader;  // accept or recv
    Completion* writer;  // send or sendfile
    uint32_t interest;   // events registered with epoll
    bool registered;
  };

  // Test faults (LoopOptions::faults, io/fault.h); nothing is injected without a plan.
  bool Inject(Fault f, const char* site) { return faults_ != nullptr && faults_->Inject(f, site); }
  uint64_t Shorten(const char* site, uint64_t n) {
    return faults_ == nullptr ? n : faults_->Shorten(site, n);
  }

  void Begin(Completion* c, Op op, int fd) {
    internal::BeginOp(c, op, fd);
    ++stats_.submitted;
    ++stats_.in_flight;
  }
  void Ended(Completion* c) {
    if (c->in_flight) --stats_.in_flight;
    c->in_flight = false;
  }

  // Finished operations run from Poll, never from inside the call that started them. The result
  // is only published then: the caller may be inside a callback reading this completion now.
  void Complete(Completion* c, int64_t result) {
    c->pending_result = result;
    ready_.Push(c);
  }

  bool RunReady() {
    bool ran = false;
    while (Completion* c = ready_.Pop()) {
      // Every SendFile ends here, whatever ended it (its last byte, an error, a worker's error,
      // a cancel), so no socket stays corked into its next response (but for the next piece of
      // the same body: EndCork); uncorking pushes the body's last partial segment out.
      if (c->corked) internal::EndCork(c, c->fd, c->pending_result);
      Ended(c);
      c->paused = false;
      c->result = c->pending_result;
      c->more = false;
      ++stats_.completed;
      c->callback(c);
      ran = true;
    }
    return ran;
  }

  void Offload(Completion* c) {
    // Reading ahead for sendfile is bulk work; opens, stats and small reads are quick.
    if (!Inject(Fault::kEbusy, "worker queue") &&
        workers_->TrySubmit(c, /*bulk=*/c->op == Op::kSendFile))
      return;
    held_.Push(c);  // the worker queue is full: hold it here (intrusive, so no allocation)
  }

  void WorkerDone(Completion* c) {
    if (c->op == Op::kSendFile) {  // the chunk is warm now: send it from the loop
      cold_.Note(c->file_fd, c->offset + WarmBytes(c));  // and warm the next one first
      fds_[c->fd].writer = c;
      // Where the worker stopped short (the file was truncated), straight to sendfile: only its
      // short count tells the owner so, and asking the page cache would send the chunk back to
      // a worker for ever. Otherwise ask as usual: pages read a moment ago may be gone again
      // under memory pressure, and sendfile would read them back on this thread.
      return DoWrite(c, /*ask=*/c->result == 1);
    }
    Complete(c, c->result);  // set by the worker
  }

  void UpdateInterest(int fd) {
    FdState& st = fds_[fd];
    uint32_t want = 0;
    if (st.reader != nullptr) want |= EPOLLIN | EPOLLRDHUP;
    if (st.writer != nullptr && st.writer->op != Op::kNone && write_blocked(st)) want |= EPOLLOUT;
    if (st.registered && want == st.interest) return;
    epoll_event ev{};
    ev.events = want;
    ev.data.fd = fd;
    const bool refused = Inject(Fault::kEnomem, "epoll_ctl") ? (errno = ENOMEM, true) : false;
    if (refused ||
        ::epoll_ctl(epoll_fd_, st.registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev) != 0) {
      // Out of kernel memory or of epoll watches: the operations on this descriptor fail, and
      // their owner ends the connection. Any other error is a bug (a closed or unknown fd).
      const int err = errno;
      RINGD_ASSERT_MSG(err == ENOMEM || err == ENOSPC, "epoll_ctl(fd %d): %s", fd, strerror(err));
      Completion* reader = st.reader;
      Completion* writer = st.writer;
      st.reader = st.writer = nullptr;
      if (reader != nullptr) {
        reader->cancelled = true;  // queued to end: a Cancel now has nothing left to do
        Complete(reader, -err);
      }
      if (writer != nullptr) {
        writer->more = false;
        Complete(writer, -err);
      }
      return;
    }
    st.registered = true;
    st.interest = want;
  }
  static bool write_blocked(const FdState& st) { return st.writer != nullptr && st.writer->more; }

  void SetReader(int fd, Completion* c) {
    RINGD_ASSERT_MSG(fd >= 0 && static_cast<uint64_t>(fd) < max_fds_, "fd %d", fd);
    fds_[fd].reader = c;
    UpdateInterest(fd);
  }

  void DoRead(Completion* c) {
    const int fd = c->fd;
    if (c->op == Op::kAccept) {
      for (int i = 0; i < kAcceptBurst && fds_[fd].reader == c; ++i) {
        const int s = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (s < 0) {
          // Taken at once: SetReader's epoll_ctl may change errno.
          const int err = errno;
          if (err == EAGAIN || err == EINTR || err == ECONNABORTED) return;
          SetReader(fd, nullptr);  // EMFILE and friends: the caller retries later
          Ended(c);
          c->result = -err;
          c->more = false;
          ++stats_.completed;
          c->callback(c);
          return;
        }
        c->result = s;
        c->more = true;
        ++stats_.completed;
        c->callback(c);
      }
      return;
    }
    // One read per readiness event (level-triggered: more data means another event).
    const int injected = faults_ != nullptr ? faults_->Errno("recv") : 0;
    const ssize_t n =
        injected != 0 ? -1 : ::recv(fd, scratch_, Shorten("recv", options_.recv_buffer_size), 0);
    // Taken at once: SetReader's epoll_ctl may change errno.
    const int err = injected != 0 ? injected : n < 0 ? errno : 0;
    if (err == EAGAIN || err == EINTR) return;
    if (n > 0) {
      c->data = scratch_;
      c->result = n;
      c->more = true;
      ++stats_.completed;
      c->callback(c);
      return;
    }
    SetReader(fd, nullptr);  // end of stream or an error ends the "multishot"
    Ended(c);
    c->data = nullptr;
    c->result = -err;  // 0: end of stream
    c->more = false;
    ++stats_.completed;
    c->callback(c);
  }

  void DoWrite(Completion* c, bool ask_first = true) {
    const int fd = c->fd;
    for (bool ask = ask_first; c->remaining > 0; ask = true) {
      ssize_t n;
      if (c->op == Op::kSend) {
        msghdr msg{};
        msg.msg_iov = c->iov;
        msg.msg_iovlen = static_cast<size_t>(c->iovcnt);
        iovec prefix;
        if (faults_ != nullptr && c->iovcnt > 0) {  // a short send: part of the first buffer
          prefix = {c->iov[0].iov_base, Shorten("sendmsg", c->iov[0].iov_len)};
          if (prefix.iov_len < c->iov[0].iov_len) msg.msg_iov = &prefix, msg.msg_iovlen = 1;
        }
        const int injected = faults_ != nullptr ? faults_->Errno("sendmsg") : 0;
        n = injected != 0 ? (errno = injected, -1) : ::sendmsg(fd, &msg, c->send_flags);
      } else {
        const uint64_t budget =
            send_turns_.Budget(c, turn_, options_.send_turn_bytes, options_.send_turn_share_bytes);
        if (budget == 0) {  // this connection had its turn: EPOLLOUT brings it back next Poll
          c->more = true;
          UpdateInterest(fd);
          return;
        }
        // Ask the page cache over exactly what sendfile may read (a yes is trusted for
        // --page-cache-trust-ms): pages warmed on a worker may since have been reclaimed, and
        // read-ahead puts pages in the cache before their read ends; sendfile meeting either
        // waits for the disk on this thread. A transfer that needed a worker has its next chunk
        // warmed there first (ColdTransfers).
        const uint64_t len = std::min(budget, WarmBytes(c));
        if (ask && (cold_.Take(c->file_fd, c->offset) ||
                    !resident_.Cached(c->file_fd, c->offset, len, MonotonicMs()) ||
                    Inject(Fault::kNotCached, "page cache"))) {
          c->more = false;
          fds_[fd].writer = nullptr;
          UpdateInterest(fd);
          internal::UncorkBody(c, fd);  // what is queued goes out while the worker reads
          return Offload(c);
        }
        if (options_.tcp_nopush) internal::CorkBody(c, fd);
        off_t off = static_cast<off_t>(c->offset);
        const int injected = faults_ != nullptr ? faults_->Errno("sendfile") : 0;
        n = injected != 0 ? (errno = injected, -1)
                          : ::sendfile(fd, c->file_fd, &off, Shorten("sendfile", len));
        if (n == 0) break;  // the file ended early: truncated; the short result says so
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) {  // the socket buffer is full: wait for EPOLLOUT
          c->more = true;       // marks "blocked" for UpdateInterest
          UpdateInterest(fd);
          return;
        }
        return FinishWrite(c, -errno);
      }
      c->done += static_cast<uint64_t>(n);
      c->remaining -= static_cast<uint64_t>(n);
      if (c->op == Op::kSend) {
        internal::AdvanceIov(c, static_cast<size_t>(n));
      } else {
        c->offset += static_cast<uint64_t>(n);
        send_turns_.Sent(c, static_cast<uint64_t>(n));
        stats_.sendfile_bytes += static_cast<uint64_t>(n);
      }
    }
    FinishWrite(c, static_cast<int64_t>(c->done));
  }

  void FinishWrite(Completion* c, int64_t result) {
    const int fd = c->fd;
    c->more = false;
    fds_[fd].writer = nullptr;
    UpdateInterest(fd);
    Complete(c, result);
  }

  LoopOptions options_;
  FaultPlan* faults_ = nullptr;
  bool inline_opens_ = true;  // RESOLVE_CACHED works here (until an EINVAL says otherwise)
  internal::LocalDirs local_dirs_;
  int epoll_fd_ = -1;
  int event_fd_ = -1;
  FdState* fds_ = nullptr;
  size_t fds_bytes_ = 0;
  uint64_t max_fds_ = 0;
  char* scratch_ = nullptr;
  std::unique_ptr<WorkerPool> workers_;
  internal::CompletionQueue ready_;      // finished, callbacks not yet run
  internal::CompletionQueue held_;       // jobs waiting for room in the worker queue
  internal::ColdTransfers cold_;         // transfers whose next chunk is warmed on a worker at once
  internal::ResidentFiles resident_{0};  // page-cache answers trusted for a while
  LoopStats stats_;
  uint64_t turn_ = 0;  // Poll calls so far: SendFile's per-turn budget
  internal::SendTurns send_turns_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Loop>> MakeEpollLoop(const LoopOptions& options) {
  auto loop = std::make_unique<EpollLoop>();
  std::string error;
  if (!loop->Init(options, &error)) return absl::FailedPreconditionError(error);
  return loop;
}

}  // namespace ringd::io
