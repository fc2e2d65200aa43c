#include "server/core/send_queue.h"

#include "io/assert.h"

namespace ringd {

SendQueue::SendQueue(const SendQueueOptions& options) : options_(options) {
  heap_.reserve(options.capacity);  // the only allocation: Admit never grows it
}

bool SendQueue::Admit(SendTicket* t, uint64_t remaining, int64_t now_ms) {
  RINGD_ASSERT(!t->queued() && !t->holds_slot);
  if (!options_.srpt || remaining <= options_.short_bytes) return true;  // needs no slot
  if (t->slow) {  // limited by its client or the disk, not by the shard: no slot either
    t->holds_slot = true;
    t->since_ms = now_ms;
    return true;
  }
  if (in_flight_ < options_.slots && heap_.empty()) {
    Hold(t, now_ms);
    return true;
  }
  RINGD_ASSERT_MSG(heap_.size() < options_.capacity, "send queue over capacity %u",
                   options_.capacity);
  t->remaining = remaining;
  t->seq = next_seq_++;
  t->since_ms = now_ms;
  heap_.push_back(t);
  Place(static_cast<uint32_t>(heap_.size() - 1), t);
  SiftUp(t->heap_index);
  waiting_.PushBack(t);
  ++stats_.queued;
  return false;
}

void SendQueue::Hold(SendTicket* t, int64_t now_ms) {
  t->holds_slot = true;
  t->counted = true;
  t->since_ms = now_ms;
  holders_.PushBack(t);
  ++in_flight_;
}

void SendQueue::Done(SendTicket* t, int64_t now_ms) {
  if (!t->holds_slot) return;
  t->holds_slot = false;
  t->slow = now_ms - t->since_ms >= options_.hold_ms;
  if (t->slow) ++stats_.slow;
  if (!t->counted) return;  // it never counted, or stopped counting after hold_ms
  t->counted = false;
  holders_.Remove(t);
  RINGD_ASSERT(in_flight_ > 0);
  --in_flight_;
}

SendTicket* SendQueue::Next(int64_t now_ms) {
  if (heap_.empty()) return nullptr;
  // Slots held too long stop counting: their clients are slow, and the shard is not busy.
  while (holders_.front() != nullptr && now_ms - holders_.front()->since_ms >= options_.hold_ms) {
    SendTicket* h = holders_.front();
    holders_.Remove(h);
    h->counted = false;
    --in_flight_;
  }
  SendTicket* t = nullptr;
  if (now_ms - waiting_.front()->since_ms >= options_.max_wait_ms) {
    t = waiting_.front();
    ++stats_.aged;
  } else if (in_flight_ < options_.slots) {
    t = heap_[0];
  } else {
    return nullptr;
  }
  const int64_t waited = now_ms - t->since_ms;
  if (waited > stats_.max_wait_ms) stats_.max_wait_ms = waited;
  Remove(t);
  Hold(t, now_ms);
  return t;
}

void SendQueue::Remove(SendTicket* t) {
  if (!t->queued()) return;
  const uint32_t i = t->heap_index;
  RINGD_ASSERT(i < heap_.size() && heap_[i] == t);
  SendTicket* last = heap_.back();
  heap_.pop_back();
  if (last != t) {
    Place(i, last);
    SiftUp(i);
    SiftDown(last->heap_index);
  }
  t->heap_index = SendTicket::kNotQueued;
  waiting_.Remove(t);
}

int64_t SendQueue::NextDeadlineMs() const {
  if (heap_.empty()) return INT64_MAX;
  int64_t at = waiting_.front()->since_ms + options_.max_wait_ms;
  if (holders_.front() != nullptr && holders_.front()->since_ms + options_.hold_ms < at) {
    at = holders_.front()->since_ms + options_.hold_ms;
  }
  return at;
}

void SendQueue::SiftUp(uint32_t i) {
  SendTicket* t = heap_[i];
  while (i > 0) {
    const uint32_t parent = (i - 1) / 2;
    if (!Before(t, heap_[parent])) break;
    Place(i, heap_[parent]);
    i = parent;
  }
  Place(i, t);
}

void SendQueue::SiftDown(uint32_t i) {
  SendTicket* t = heap_[i];
  const uint32_t n = static_cast<uint32_t>(heap_.size());
  for (;;) {
    uint32_t child = 2 * i + 1;
    if (child >= n) break;
    if (child + 1 < n && Before(heap_[child + 1], heap_[child])) ++child;
    if (!Before(heap_[child], t)) break;
    Place(i, heap_[child]);
    i = child;
  }
  Place(i, t);
}

}  // namespace ringd
