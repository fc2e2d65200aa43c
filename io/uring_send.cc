// The io_uring backend's sends (uring_loop.h): buffers (send, sendmsg, their zero-copy forms, from
// registered buffers where they lie in one) and file bodies: pages already cached go out with an
// inline sendfile(2) on real fds (on the bypass tier, an fd installed for the socket at its first
// body); the rest splices file -> pipe -> socket through the ring, with a pool of pipes.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/sendfile.h>

#include <algorithm>

#include "io/uring_loop.h"
#include "io/uring_uapi.h"

namespace ringd::io::uring {

void UringLoop::Send(int fd, iovec* iov, int iovcnt, Completion* c, bool more) {
  Begin(c, Op::kSend, fd);
  c->send_flags = MSG_NOSIGNAL | (more ? MSG_MORE : 0);
  c->iov = iov;
  c->iovcnt = iovcnt;
  c->remaining = 0;
  for (int i = 0; i < iovcnt; ++i) c->remaining += iov[i].iov_len;
  SubmitSend(c);
}

void UringLoop::SendFile(int sock_fd, int file_fd, uint64_t offset, uint64_t length, Completion* c,
                         bool more) {
  Begin(c, Op::kSendFile, sock_fd);
  c->send_flags = more ? MSG_MORE : 0;  // Finish leaves the cork on for the next piece
  c->file_fd = file_fd;
  c->offset = offset;
  c->remaining = length;
  St(c).in_pipe = 0;
  St(c).pipe_index = -1;
  St(c).phase = FilePhase::kNone;
  RINGD_ASSERT(St(c).slot < 0);
  // bypass with --body-buffers (off by default): read the body into a registered buffer and
  // send it from there; with every body buffer busy, on as below.
  if (IsDirect(sock_fd) && !body_free_.empty()) {
    if (c->corked) internal::UncorkBody(c, SocketFd(sock_fd));  // only inline sends cork
    St(c).slot = body_free_.back();
    body_free_.pop_back();
    return ReadBody(c);
  }
  // --splice-min-bytes: a large body splices even when cached (a pipe's 1 MiB per send, where
  // sendfile's internal pipe gives the socket 64 KiB at a time).
  if (options_.uring.splice_min_bytes != 0 && length >= options_.uring.splice_min_bytes)
    return Splice(c);
  // Pages already in the page cache go out with sendfile on the (non-blocking) socket right
  // here: no kernel worker hop, and it cannot block on the disk. Anything else is spliced
  // through the ring, where a cold read blocks an io-wq worker, never this thread; and so is
  // the rest of a transfer that has needed the disk (internal::ColdTransfers).
  if (IsDirect(sock_fd) && fd_install_) {
    SlotState& st = slot_state_[static_cast<uint32_t>(sock_fd & ~kDirectHandle)];
    if (st.fd < 0 && !st.fd_refused) {
      // The first body on this connection: give its socket a process fd, once, so that cached
      // pages can go out with an inline sendfile as on the uring tier (OnSendFile goes on).
      St(c).phase = FilePhase::kInstallingFd;
      io_uring_sqe* sqe = Sqe();
      io_uring_prep_rw(uapi::kOpFixedFdInstall, sqe, static_cast<int>(sock_fd & ~kDirectHandle),
                       nullptr, 0, 0);
      sqe->flags |= IOSQE_FIXED_FILE;
      io_uring_sqe_set_data(sqe, c);
      FailSqe(sqe, c, Fault::kEmfile, EMFILE, "fixed fd install");
      return;
    }
  }
  if (cold_.Take(file_fd, offset) || !SendCached(c)) Splice(c);
}

// The next piece of the body into the SendFile's body buffer. A read of pages not in the page
// cache waits for the disk inside the kernel (buffered reads through the ring do not block the
// submitter), never on this thread.
void UringLoop::ReadBody(Completion* c) {
  const uint64_t n = Shorten("read (body buffer)",
                             std::min<uint64_t>(c->remaining, options_.uring.body_buffer_size));
  St(c).phase = FilePhase::kReadBody;
  St(c).in_pipe = 0;  // nothing read yet
  io_uring_sqe* sqe = Sqe();
  const int index = RegisteredIndex(static_cast<int>(fixed_count_) + St(c).slot);
  if (index >= 0) {
    io_uring_prep_read_fixed(sqe, c->file_fd, BodyBuffer(St(c).slot), static_cast<unsigned>(n),
                             c->offset, index);
  } else {
    io_uring_prep_read(sqe, c->file_fd, BodyBuffer(St(c).slot), static_cast<unsigned>(n),
                       c->offset);
  }
  io_uring_sqe_set_data(sqe, c);
  FailSqe(sqe, c, Fault::kEnomem, ENOMEM, "read (body buffer)");
}

// What is left of the piece read (from c->buf), to the socket.
void UringLoop::SendBody(Completion* c) {
  // MSG_MORE only while more of the body follows (as SpliceOut).
  const int more = c->remaining > St(c).in_pipe ? MSG_MORE : 0;
  St(c).phase = FilePhase::kSendBody;
  io_uring_sqe* sqe = Sqe();
  io_uring_prep_send(sqe, c->fd, c->buf, Shorten("send (body buffer)", St(c).in_pipe),
                     MSG_NOSIGNAL | more);
  Target(sqe, c->fd);
  io_uring_sqe_set_data(sqe, c);
  FailSqe(sqe, c, Fault::kEnomem, ENOMEM, "send (body buffer)");
}

void UringLoop::OnBody(Completion* c, int32_t res) {
  const auto release = [&] {
    body_free_.push_back(St(c).slot);
    St(c).slot = -1;
  };
  if (St(c).phase == FilePhase::kReadBody) {
    if (res <= 0) {  // 0: the file ended before `length` bytes: truncated under us
      release();
      return Finish(c, res < 0 ? res : static_cast<int64_t>(c->done));
    }
    St(c).in_pipe = static_cast<uint32_t>(res);
    c->offset += static_cast<uint64_t>(res);
    c->buf = BodyBuffer(St(c).slot);
    return SendBody(c);
  }
  if (res <= 0) {  // the send failed (or the peer is gone)
    release();
    return Finish(c, res < 0 ? res : -EPIPE);
  }
  St(c).in_pipe -= static_cast<uint32_t>(res);
  c->buf += res;
  c->done += static_cast<uint64_t>(res);
  c->remaining -= static_cast<uint64_t>(res);
  stats_.read_send_bytes += static_cast<uint64_t>(res);
  if (St(c).in_pipe > 0) return SendBody(c);
  if (c->remaining > 0) return ReadBody(c);
  release();
  Finish(c, static_cast<int64_t>(c->done));
}

void UringLoop::SubmitSend(Completion* c) {
  io_uring_sqe* sqe = Sqe();
  // send_zc pays for large buffers only: below the threshold the notification costs more than
  // the copy it saves.
  const bool zc = options_.uring.send_zc && c->remaining >= options_.uring.send_zc_min_bytes;
  if (zc) ++stats_.send_zc;
  // A zero-copy send completes only once the kernel lets go of the buffer (its notification):
  // bytes held back by MSG_MORE would be let go only when the kernel sends them alone, 200 ms
  // later, while what was to push them (the body, the close) waits for this completion.
  const int flags = zc ? c->send_flags & ~MSG_MORE : c->send_flags;
  if (c->iovcnt == 1) {
    const size_t len = Shorten("send", c->iov[0].iov_len);
    // A buffer inside the registered region (the small-file cache) goes zero-copy from the
    // registered buffer (IORING_RECVSEND_FIXED_BUF): the kernel skips pinning its pages.
    const int fixed = zc ? RegisteredIndex(FixedIndex(static_cast<const char*>(c->iov[0].iov_base),
                                                      c->iov[0].iov_len))
                         : -1;
    if (fixed >= 0) {
      ++stats_.send_zc_fixed;
      io_uring_prep_send_zc_fixed(sqe, c->fd, c->iov[0].iov_base, len, flags, 0,
                                  static_cast<unsigned>(fixed));
    } else if (zc) {
      io_uring_prep_send_zc(sqe, c->fd, c->iov[0].iov_base, len, flags, 0);
    } else {
      io_uring_prep_send(sqe, c->fd, c->iov[0].iov_base, len, flags);
    }
  } else {
    // The msghdr lives in a slot until the send completes (an SQ thread may read it late).
    if (St(c).slot < 0) St(c).slot = TakeSlot();
    msghdr& msg = slots_[static_cast<size_t>(St(c).slot)].msg;
    msg = msghdr{};
    msg.msg_iov = c->iov;
    msg.msg_iovlen = Shorten("sendmsg (buffers)", static_cast<size_t>(c->iovcnt));
    if (zc) {
      io_uring_prep_sendmsg_zc(sqe, c->fd, &msg, flags);
    } else {
      io_uring_prep_sendmsg(sqe, c->fd, &msg, flags);
    }
  }
  Target(sqe, c->fd);
  io_uring_sqe_set_data(sqe, c);
  FailSqe(sqe, c, Fault::kEnomem, ENOMEM, "send");
}

// Tries the inline path; true if the operation is finished or waiting for socket space.
bool UringLoop::SendCached(Completion* c) {
  // sendfile(2) needs the socket's fd number, which a direct descriptor has only once one is
  // installed for it.
  const int sock = SocketFd(c->fd);
  if (sock < 0) return false;
  while (c->remaining > 0) {
    const uint64_t budget =
        send_turns_.Budget(c, turn_, options_.send_turn_bytes, options_.send_turn_share_bytes);
    if (budget == 0) {  // this connection had its turn: wait for the next Poll's
      WaitWritable(c);
      return true;
    }
    const uint64_t chunk = std::min({c->remaining, kInlineChunk, budget});
    if (!resident_.Cached(c->file_fd, c->offset, chunk, MonotonicMs()) ||
        Inject(Fault::kNotCached, "page cache (inline)")) {
      return c->done > 0 ? (Splice(c), true) : false;
    }
    if (options_.tcp_nopush) internal::CorkBody(c, sock);
    off_t off = static_cast<off_t>(c->offset);
    ssize_t n = -1;
    const int injected = faults_ != nullptr ? faults_->Errno("sendfile (inline)") : 0;
    if (injected != 0) {
      errno = injected;  // the call failed so, having sent nothing
    } else {
      n = ::sendfile(sock, c->file_fd, &off, Shorten("sendfile (inline)", chunk));
    }
    if (n > 0) {
      c->offset += static_cast<uint64_t>(n);
      c->done += static_cast<uint64_t>(n);
      c->remaining -= static_cast<uint64_t>(n);
      send_turns_.Sent(c, static_cast<uint64_t>(n));
      stats_.sendfile_bytes += static_cast<uint64_t>(n);
      continue;
    }
    if (n == 0) break;  // the file ended early: truncated
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {  // the socket is full: poll, then come back here
      WaitWritable(c);
      return true;
    }
    Ready(c, -errno);  // Finish uncorks
    return true;
  }
  Ready(c, static_cast<int64_t>(c->done));
  return true;
}

// The inline path continues when the socket takes more (at once, if it already does: the CQE
// then waits in the ring behind everything else that is ready).
void UringLoop::WaitWritable(Completion* c) {
  St(c).phase = FilePhase::kInlineWaitWritable;
  St(c).in_pipe = 0;
  io_uring_sqe* sqe = Sqe();
  io_uring_prep_poll_add(sqe, c->fd, POLLOUT);
  Target(sqe, c->fd);
  io_uring_sqe_set_data(sqe, c);
  FailSqe(sqe, c, Fault::kEnomem, ENOMEM, "poll (inline, writable)");
}

// The splice path for what is left of a SendFile.
void UringLoop::Splice(Completion* c) {
  // Splices do not cork: what the inline sends (or the last piece) queued goes out while the
  // disk reads.
  if (c->corked) internal::UncorkBody(c, SocketFd(c->fd));
  const int pipe = TakePipe();
  if (pipe >= 0) {
    St(c).pipe_index = pipe;
    return SpliceIn(c);
  }
  // Every pipe busy: wait (intrusively) until one comes back. No pipe busy and none to be
  // made (out of descriptors): nothing would ever wake a waiter, so fail it now.
  if (pipe == kNoPipeFree) {
    St(c).phase = FilePhase::kWaitingPipe;
    return pipe_wait_.Push(c);
  }
  Ready(c, pipe);
}

// A free pipe's index; kNoPipeFree when every pipe is busy; -errno when a pipe was needed and
// could not be created (EMFILE, ENFILE) while none is busy.
int UringLoop::TakePipe() {
  int error = 0;
  bool any_busy = false;
  for (size_t i = 0; i < pipes_.size(); ++i) {
    Pipe& p = pipes_[i];
    if (p.busy) {
      any_busy = true;
      continue;
    }
    if (p.r < 0) {
      const int rc = OpenPipe(&p);
      if (rc < 0) {
        error = rc;
        continue;
      }
    }
    p.busy = true;
    return static_cast<int>(i);
  }
  return any_busy || error == 0 ? kNoPipeFree : error;
}

int UringLoop::OpenPipe(Pipe* p) {
  if (Inject(Fault::kEmfile, "pipe2")) return -EMFILE;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return -errno;
  ::fcntl(fds[1], F_SETPIPE_SZ, static_cast<int>(options_.uring.pipe_size));  // best effort
  p->r = fds[0];
  p->w = fds[1];
  return 0;
}

// A pipe comes back empty, or (after an error with bytes stuck in it) is drained: read out until
// it is empty, so that it is kept without asking for new descriptors, which may have run out.
// One that cannot be drained is closed (made again when next needed).
void UringLoop::GivePipe(int index, bool dirty) {
  RINGD_ASSERT(index >= 0 && static_cast<size_t>(index) < pipes_.size() &&
               pipes_[static_cast<size_t>(index)].busy);
  Pipe& p = pipes_[static_cast<size_t>(index)];
  if (dirty) {
    char sink[16384];
    ssize_t n;
    while ((n = ::read(p.r, sink, sizeof sink)) > 0) {
    }
    if (n != -1 || errno != EAGAIN) {  // not empty and readable: give it up
      ::close(p.r);
      ::close(p.w);
      p.r = p.w = -1;
    }
  }
  p.busy = false;
  // The pipe just freed serves the next waiter. If it was dirty and cannot be replaced (out of
  // descriptors), the waiter waits, first in line, for another pipe that is busy and will come
  // back; with none busy, no pipe may ever come, so waiters fail now.
  while (Completion* c = pipe_wait_.Pop()) {
    const int pipe = TakePipe();
    if (pipe >= 0) {
      St(c).pipe_index = pipe;
      return SpliceIn(c);
    }
    if (pipe == kNoPipeFree) return pipe_wait_.PushFront(c);
    Ready(c, pipe);
  }
}

void UringLoop::SpliceIn(Completion* c) {
  RINGD_ASSERT(St(c).pipe_index >= 0 && static_cast<size_t>(St(c).pipe_index) < pipes_.size());
  const Pipe& p = pipes_[static_cast<size_t>(St(c).pipe_index)];
  St(c).phase = FilePhase::kSpliceIn;
  const uint64_t chunk =
      Shorten("splice file->pipe",
              c->remaining < options_.uring.pipe_size ? c->remaining : options_.uring.pipe_size);
  io_uring_sqe* sqe = Sqe();
  io_uring_prep_splice(sqe, c->file_fd, static_cast<int64_t>(c->offset), p.w, -1,
                       static_cast<unsigned>(chunk), SPLICE_F_MOVE);
  io_uring_sqe_set_data(sqe, c);
  FailSqe(sqe, c, Fault::kEnomem, ENOMEM, "splice file->pipe");
}

void UringLoop::SpliceOut(Completion* c) {
  RINGD_ASSERT(St(c).pipe_index >= 0 && static_cast<size_t>(St(c).pipe_index) < pipes_.size());
  const Pipe& p = pipes_[static_cast<size_t>(St(c).pipe_index)];
  io_uring_sqe* sqe = Sqe();
  // SPLICE_F_MORE (MSG_MORE) only while more of the body follows: on the last piece it would
  // hold the final partial segment back until the client's delayed ACK (40 ms) pushed it.
  const unsigned more = c->remaining > St(c).in_pipe ? SPLICE_F_MORE : 0;
  St(c).phase = FilePhase::kSpliceOut;
  io_uring_prep_splice(sqe, p.r, -1, c->fd, -1,
                       static_cast<unsigned>(Shorten("splice pipe->socket", St(c).in_pipe)),
                       SPLICE_F_MOVE | more);
  Target(sqe, c->fd);  // the socket is splice's output, the SQE's own fd
  io_uring_sqe_set_data(sqe, c);
  // The socket full (the splice runs on an io-wq worker, non-blocking), or no memory.
  if (!FailSqe(sqe, c, Fault::kEagain, EAGAIN, "splice pipe->socket")) {
    FailSqe(sqe, c, Fault::kEnomem, ENOMEM, "splice pipe->socket");
  }
}

int UringLoop::RegisteredIndex(int index) {
  if (index < 0) return -1;
  uint8_t& state = fixed_state_[static_cast<size_t>(index)];
  if (state == kFixedEmpty) {
    // Pins the buffer's pages now; one that cannot be (RLIMIT_MEMLOCK) is read and sent through
    // as plain memory from then on.
    const __u64 tag = 0;
    const int rc = io_uring_register_buffers_update_tag(
        &ring_, static_cast<unsigned>(index), &fixed_iovs_[static_cast<size_t>(index)], &tag, 1);
    state = rc == 1 ? kFixedRegistered : kFixedRefused;
    if (rc == 1) ++stats_.fixed_buffers_registered;
  }
  return state == kFixedRegistered ? index : -1;
}

int UringLoop::FixedIndex(const char* buf, uint64_t length) const {
  if (fixed_base_ == nullptr || buf < fixed_base_) return -1;
  const size_t off = static_cast<size_t>(buf - fixed_base_);
  const size_t index = off / fixed_size_;
  if (index >= fixed_count_ || off + length > (index + 1) * fixed_size_) return -1;
  return static_cast<int>(index);
}

void UringLoop::OnSend(Completion* c, int32_t res, uint32_t flags) {
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

void UringLoop::OnSendFile(Completion* c, int32_t res) {
  switch (St(c).phase) {
    case FilePhase::kReadBody:
    case FilePhase::kSendBody:
      return OnBody(c, res);
    case FilePhase::kInstallingFd:
      return OnFdInstalled(c, res);
    case FilePhase::kInlineWaitWritable:  // the socket takes more (or failed): inline again
      St(c).phase = FilePhase::kNone;
      if (res < 0) return Finish(c, res);
      if (!SendCached(c)) Splice(c);
      return RunReady();
    case FilePhase::kSpliceWaitWritable:  // the same, with bytes waiting in the pipe
      if (res < 0) {
        GivePipe(St(c).pipe_index, true);
        return Finish(c, res);
      }
      return SpliceOut(c);
    case FilePhase::kSpliceIn:
      if (res <= 0) {
        GivePipe(St(c).pipe_index, false);
        // 0: the file ended before `length` bytes: it was truncated under us.
        return Finish(c, res < 0 ? res : static_cast<int64_t>(c->done));
      }
      St(c).in_pipe = static_cast<uint32_t>(res);
      c->offset += static_cast<uint64_t>(res);
      return SpliceOut(c);
    case FilePhase::kSpliceOut:
      return OnSpliceOut(c, res);
    case FilePhase::kNone:
    case FilePhase::kWaitingPipe:
      break;
  }
  RINGD_ASSERT_MSG(false, "a SendFile completion in phase %d", static_cast<int>(St(c).phase));
}

// The socket's process fd, or why not; the body goes on as SendFile would have sent it.
void UringLoop::OnFdInstalled(Completion* c, int32_t res) {
  St(c).phase = FilePhase::kNone;
  SlotState& st = slot_state_[static_cast<uint32_t>(c->fd & ~kDirectHandle)];
  // One install per connection (its SendFiles run one at a time, and Close waits for them).
  RINGD_ASSERT(st.fd < 0 && !st.fd_refused);
  if (res >= 0) {
    st.fd = res;
  } else {
    st.fd_refused = true;
  }
  if (cold_.Take(c->file_fd, c->offset) || !SendCached(c)) Splice(c);
  RunReady();
}

// Pipe -> socket ended: more of the pipe, the next piece of the file, or the end.
void UringLoop::OnSpliceOut(Completion* c, int32_t res) {
  if (res == -EAGAIN) {
    // Splice runs on an io-wq worker and the socket is non-blocking: its buffer is full.
    // Wait for room with a poll rather than block a kernel worker per slow client.
    St(c).phase = FilePhase::kSpliceWaitWritable;
    io_uring_sqe* sqe = Sqe();
    io_uring_prep_poll_add(sqe, c->fd, POLLOUT);
    Target(sqe, c->fd);
    io_uring_sqe_set_data(sqe, c);
    FailSqe(sqe, c, Fault::kEnomem, ENOMEM, "poll (splice, writable)");
    return;
  }
  if (res <= 0) {  // pipe -> socket failed: the pipe still holds bytes, so it is replaced
    GivePipe(St(c).pipe_index, true);
    return Finish(c, res < 0 ? res : -EPIPE);
  }
  St(c).in_pipe -= static_cast<uint32_t>(res);
  c->done += static_cast<uint64_t>(res);
  stats_.splice_bytes += static_cast<uint64_t>(res);
  c->remaining -= static_cast<uint64_t>(res);
  if (St(c).in_pipe > 0) return SpliceOut(c);
  if (c->remaining > 0) return SpliceIn(c);
  GivePipe(St(c).pipe_index, false);
  cold_.Note(c->file_fd, c->offset);
  Finish(c, static_cast<int64_t>(c->done));
}

}  // namespace ringd::io::uring
