#include "server/send_queue.h"

#include "io/assert.h"

namespace ringd {

SendQueue::SendQueue(const SendQueueOptions& options) : options_(options) {
  heap_.reserve(options.capacity);  // the only allocation: Admit never grows it
}

bool SendQueue::Admit(SendTicket* t, uint64_t remaining, int64_t now_ms) {
  RINGD_ASSERT(!t->queued() && !t->holds_slot);
  if (!options_.srpt || remaining <= options_.short_bytes) return true;  // needs no slot
  if (in_flight_ < options_.slots && heap_.empty()) {
    t->holds_slot = true;
    ++in_flight_;
    return true;
  }
  RINGD_ASSERT_MSG(heap_.size() < options_.capacity, "send queue over capacity %u",
                   options_.capacity);
  t->remaining = remaining;
  t->seq = next_seq_++;
  t->queued_ms = now_ms;
  heap_.push_back(t);
  Place(static_cast<uint32_t>(heap_.size() - 1), t);
  SiftUp(t->heap_index);
  t->older = newest_;
  t->newer = nullptr;
  (newest_ != nullptr ? newest_->newer : oldest_) = t;
  newest_ = t;
  ++stats_.queued;
  return false;
}

void SendQueue::Done(SendTicket* t) {
  if (!t->holds_slot) return;
  RINGD_ASSERT(in_flight_ > 0);
  t->holds_slot = false;
  --in_flight_;
}

SendTicket* SendQueue::Next(int64_t now_ms) {
  if (oldest_ != nullptr && now_ms - oldest_->queued_ms >= options_.max_wait_ms) {
    ++stats_.aged;
    return Take(oldest_, now_ms);
  }
  if (heap_.empty() || in_flight_ >= options_.slots) return nullptr;
  return Take(heap_[0], now_ms);
}

SendTicket* SendQueue::Take(SendTicket* t, int64_t now_ms) {
  const int64_t waited = now_ms - t->queued_ms;
  if (waited > stats_.max_wait_ms) stats_.max_wait_ms = waited;
  Remove(t);
  t->holds_slot = true;
  ++in_flight_;
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
  (t->older != nullptr ? t->older->newer : oldest_) = t->newer;
  (t->newer != nullptr ? t->newer->older : newest_) = t->older;
  t->older = t->newer = nullptr;
}

int64_t SendQueue::NextDeadlineMs() const {
  return oldest_ != nullptr ? oldest_->queued_ms + options_.max_wait_ms : INT64_MAX;
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
