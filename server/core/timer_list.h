// Deadlines for one kind of timeout (header, idle, send, linger). Every entry of a list has the
// same duration, so appending keeps the list sorted by deadline: arm, disarm and expiry are all
// O(1), and a shard needs one list per kind rather than a kernel timer per connection.
//
//   TimerList idle(75000);
//   idle.Arm(&conn->timer, now_ms);           // (re)starts the connection's idle deadline
//   idle.Expire(now_ms, [](TimerNode* t) { ... close the connection ... });
#pragma once

#include <cstdint>

namespace ringd {

struct TimerNode {
  TimerNode* prev = nullptr;
  TimerNode* next = nullptr;
  int64_t deadline_ms = 0;
  class TimerList* list = nullptr;  // the list it is armed on, if any
};

class TimerList {
 public:
  explicit TimerList(int64_t duration_ms) : duration_ms_(duration_ms) {}

  // Arms `node` to fire duration_ms after now, moving it from any list it was on.
  void Arm(TimerNode* node, int64_t now_ms) {
    if (node->list != nullptr) node->list->Disarm(node);
    node->deadline_ms = now_ms + duration_ms_;
    node->list = this;
    node->next = nullptr;
    node->prev = tail_;
    if (tail_ != nullptr) {
      tail_->next = node;
    } else {
      head_ = node;
    }
    tail_ = node;
    ++size_;
  }

  void Disarm(TimerNode* node) {
    if (node->list != this) return;
    if (node->prev != nullptr)
      node->prev->next = node->next;
    else
      head_ = node->next;
    if (node->next != nullptr)
      node->next->prev = node->prev;
    else
      tail_ = node->prev;
    node->prev = node->next = nullptr;
    node->list = nullptr;
    --size_;
  }

  // Disarms and passes to fire() every node whose deadline has passed, oldest first. fire() may
  // arm or disarm any node, this one included.
  template <typename Fn>
  void Expire(int64_t now_ms, Fn&& fire) {
    while (head_ != nullptr && head_->deadline_ms <= now_ms) {
      TimerNode* node = head_;
      Disarm(node);
      fire(node);
    }
  }

  // Disarms and returns the node armed longest ago (the earliest deadline), or nullptr.
  TimerNode* PopOldest() {
    TimerNode* node = head_;
    if (node != nullptr) Disarm(node);
    return node;
  }

  // The node armed longest ago, left armed (nullptr when none); its `next` is the one armed after
  // it.
  TimerNode* Oldest() const { return head_; }

  // The earliest deadline, or INT64_MAX when nothing is armed.
  int64_t NextDeadline() const { return head_ != nullptr ? head_->deadline_ms : INT64_MAX; }
  bool Empty() const { return head_ == nullptr; }
  uint32_t size() const { return size_; }  // nodes armed now
  int64_t duration_ms() const { return duration_ms_; }

 private:
  int64_t duration_ms_;
  TimerNode* head_ = nullptr;
  TimerNode* tail_ = nullptr;
  uint32_t size_ = 0;
};

}  // namespace ringd
