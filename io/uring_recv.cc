// The io_uring backend's receives (uring_loop.h): multishot recv from the provided buffer ring,
// with whole or incrementally consumed buffers, pause and resume with the bytes already received
// kept (copied) in order, and re-arming after ENOBUFS.
#include <cstring>

#include "io/uring_loop.h"
#include "io/uring_uapi.h"

namespace ringd::io::uring {

void UringLoop::Recv(int fd, Completion* c) {
  RINGD_ASSERT(!waiting_recvs_.Holds(c));  // a receive that has ended waits for nothing
  Begin(c, Op::kRecv, fd);
  St(c).armed = false;
  St(c).held_head = St(c).held_tail = -1;
  St(c).held_end = 1;
  St(c).discard = St(c).dropped = false;
  ArmRecv(c);
}

// The multishot receive is cancelled in the kernel; what it had already received arrives as
// CQEs and is kept in order (HoldBuffer) until ResumeRecv hands it over from Poll.
void UringLoop::PauseRecv(Completion* c) {
  RINGD_ASSERT(c->op == Op::kRecv);
  if (!c->in_flight || c->cancelled || c->paused) return;
  c->paused = true;
  if (St(c).armed) CancelInKernel(c);
}

void UringLoop::ResumeRecv(Completion* c) {
  RINGD_ASSERT(c->op == Op::kRecv);
  if (!c->in_flight || c->cancelled || !c->paused) return;
  c->paused = false;
  WaitForPoll(c);
}

void UringLoop::ArmRecv(Completion* c) {
  RINGD_ASSERT(!St(c).armed && !c->paused && St(c).held_head < 0);
  St(c).armed = true;
  io_uring_sqe* sqe = Sqe();
  // With incremental consumption the length caps each completion (a buffer is larger than
  // one delivery may be); otherwise it must be 0 and a completion fills at most a buffer.
  io_uring_prep_recv_multishot(sqe, c->fd, nullptr, incremental_ ? recv_max_ : 0, 0);
  Target(sqe, c->fd);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = kRecvGroup;
  io_uring_sqe_set_data(sqe, c);
  FailSqe(sqe, c, Fault::kEnomem, ENOMEM, "recv (multishot)");
}

// Once a receive's bytes have been delivered or copied: the buffer goes back to the kernel,
// unless (incremental) the kernel is still filling it.
void UringLoop::Consumed(uint16_t bid, int32_t len, uint32_t flags) {
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
void UringLoop::Hold(Completion* c, const char* data, int32_t len) {
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
  if (St(c).held_tail >= 0) {
    held_next_[static_cast<size_t>(St(c).held_tail)] = chunk;
  } else {
    St(c).held_head = chunk;
  }
  St(c).held_tail = chunk;
  ++stats_.recv_held;
}

// Takes the oldest kept chunk off a receive's list; the caller frees it.
int32_t UringLoop::PopHeld(Completion* c) {
  const int32_t chunk = St(c).held_head;
  St(c).held_head = held_next_[static_cast<size_t>(chunk)];
  if (St(c).held_head < 0) St(c).held_tail = -1;
  return chunk;
}

// Hands bytes to the receive's owner; they are consumed during the callback.
void UringLoop::Deliver(Completion* c, const char* data, int32_t len) {
  RINGD_ASSERT(len > 0 && static_cast<uint32_t>(len) <= recv_max_);
  c->data = data;
  c->result = len;
  ++stats_.completed;
  c->callback(c);
}

void UringLoop::Redeliver(Completion* c) {
  while (c->in_flight && !c->cancelled && !c->paused && St(c).held_head >= 0) {
    const int32_t chunk = PopHeld(c);
    c->more = true;
    Deliver(c, held_mem_[static_cast<size_t>(chunk)].get(), held_len_[static_cast<size_t>(chunk)]);
    held_free_.push_back(chunk);
  }
  if (!c->in_flight || c->cancelled || c->paused || St(c).held_head >= 0) return;
  if (St(c).held_end <= 0) {  // end of stream or an error came while paused: deliver it last
    const int64_t end = St(c).held_end;
    St(c).held_end = 1;
    c->data = nullptr;
    return Finish(c, end);
  }
  // Still armed: the pause's cancellation is on its way, and its completion re-arms.
  if (!St(c).armed) ArmRecv(c);
}

// Poll's last pass, once the completions it reaped have run and returned their buffers: each
// receive waiting for it (WaitForPoll) gets, if resumed, the bytes kept while paused, in order,
// then the end that came while paused; one the kernel ended is armed again; one cancelled with
// nothing in the kernel for the cancellation to find gets its last callback here (without it the
// owner would wait for that callback forever). Each is taken off the queue before anything runs
// for it, and is on it at most once, so an owner that frees it in its last callback (the server
// frees a connection there) leaves nothing behind that names it.
void UringLoop::RunWaitingRecvs() {
  while (Completion* c = waiting_recvs_.Pop()) {
    // A receive leaves the queue when it ends (EndRecv): one here is still its owner's.
    RINGD_ASSERT(c->op == Op::kRecv && c->in_flight);
    if (!c->cancelled) {
      Redeliver(c);
    } else if (!St(c).armed) {  // armed: the kernel's answer to the cancellation ends it
      c->data = nullptr;
      Finish(c, St(c).dropped ? kRecvCancelledWithInput : -ECANCELED);
    }
  }
}

void UringLoop::OnRecv(Completion* c, int32_t res, uint32_t flags) {
  const bool kernel_more = (flags & IORING_CQE_F_MORE) != 0;
  if (!kernel_more) St(c).armed = false;
  // Paused, or bytes kept from a pause still waiting for Redeliver: keep these behind them.
  const bool hold = !c->cancelled && (c->paused || St(c).held_head >= 0);
  if (res > 0) {
    const uint16_t bid = static_cast<uint16_t>(flags >> IORING_CQE_BUFFER_SHIFT);
    if (St(c).discard) {  // cancelled while paused or holding bytes: these go too (Cancel)
      Consumed(bid, res, flags);
      St(c).dropped = true;
      if (kernel_more) return;
      c->data = nullptr;
      return Finish(c, kRecvCancelledWithInput);
    }
    if (hold) {
      Hold(c, Received(bid), res);
      Consumed(bid, res, flags);
      if (!kernel_more && !c->paused) WaitForPoll(c);  // re-armed once redelivered
      return;
    }
    // Ended without an error (the kernel stops a multishot now and then): re-arm quietly.
    if (!kernel_more && !c->cancelled) WaitForPoll(c);
    c->more = kernel_more || !c->cancelled;
    if (!c->more) EndRecv(c);
    Deliver(c, Received(bid), res);
    Consumed(bid, res, flags);
    return;
  }
  if (res == -ENOBUFS && !c->cancelled) {  // every buffer was in use: re-arm after this batch
    // The pool grows once a Poll: one burst that finds the ring dry ends every receive it
    // reaches with ENOBUFS, all posted before the first is seen, and each doubling the pool
    // would give the kernel all of it. Receives still short after the re-arm grow it again.
    if (recv_grown_turn_ != turn_) {
      if (GrowRecvPool()) {
        recv_grown_turn_ = turn_;
      } else {
        ++stats_.recv_nobufs;  // the whole pool was in use
      }
    }
    if (!c->paused) WaitForPoll(c);  // a paused one is re-armed by ResumeRecv
    return;
  }
  if (kernel_more) return;  // an error that does not end the multishot: ignore
  if (res == -ECANCELED && !c->cancelled) {
    // PauseRecv's cancellation: the receive stays in flight for its owner. Re-arm once
    // resumed and everything kept has been handed over.
    if (!c->paused) WaitForPoll(c);
    return;
  }
  if (hold) {  // end of stream or an error while paused: after the bytes kept before it
    St(c).held_end = res;
    return;
  }
  c->data = nullptr;
  // A cancelled receive the kernel ended for lack of buffers was not to be re-armed anyway, and no
  // socket error happened; but the socket had bytes for it: its owner hears that the client is
  // still sending (a connection closing after its last response lingers then).
  // So did one that dropped bytes when it was cancelled (Cancel).
  if (res == -ENOBUFS || (res == -ECANCELED && St(c).dropped)) res = kRecvCancelledWithInput;
  Finish(c, res);  // 0: end of stream; < 0: error or cancelled
}

}  // namespace ringd::io::uring
