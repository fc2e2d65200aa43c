// Deadlines for one kind of timeout (header, idle, send, linger). Every entry of a list has the
// same duration, so appending keeps the list sorted by deadline: arm, disarm and expiry are all
// O(1), and a shard needs one list per kind rather than a kernel timer per connection.
//
//   TimerList idle(75000);
//   idle.Arm(&conn->timer, now_ms);           // (re)starts the connection's idle deadline
//   idle.Expire(now_ms, [](TimerNode* t) { ... close the connection ... });
#pragma once

#include <cstdint>

#include "mem/intrusive_list.h"

namespace ringd {

struct TimerNode {
  mem::ListLink<TimerNode> link;
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
    nodes_.PushBack(node);
  }

  void Disarm(TimerNode* node) {
    if (node->list != this) return;
    nodes_.Remove(node);
    node->list = nullptr;
  }

  // Disarms and passes to fire() every node whose deadline has passed, oldest first. fire() may
  // arm or disarm any node, this one included.
  template <typename Fn>
  void Expire(int64_t now_ms, Fn&& fire) {
    while (!nodes_.empty() && nodes_.front()->deadline_ms <= now_ms) {
      TimerNode* node = nodes_.front();
      Disarm(node);
      fire(node);
    }
  }

  // Disarms and returns the node armed longest ago (the earliest deadline), or nullptr.
  TimerNode* PopOldest() {
    TimerNode* node = nodes_.front();
    if (node != nullptr) Disarm(node);
    return node;
  }

  // The node armed longest ago, left armed (nullptr when none); Next(node) is the one armed after
  // it.
  TimerNode* Oldest() const { return nodes_.front(); }
  static TimerNode* Next(const TimerNode* node) { return Nodes::Next(node); }

  // The earliest deadline, or INT64_MAX when nothing is armed.
  int64_t NextDeadline() const { return nodes_.empty() ? INT64_MAX : nodes_.front()->deadline_ms; }
  bool Empty() const { return nodes_.empty(); }
  uint32_t size() const { return static_cast<uint32_t>(nodes_.size()); }  // nodes armed now
  int64_t duration_ms() const { return duration_ms_; }

 private:
  using Nodes = mem::IntrusiveList<TimerNode, &TimerNode::link>;
  int64_t duration_ms_;
  Nodes nodes_;  // oldest (earliest deadline) first
};

}  // namespace ringd
