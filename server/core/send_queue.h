// Which response bodies a shard sends now: shortest remaining response first (SRPT), with a
// bound on waiting. Sans-IO: it orders tickets and counts slots; the shard starts the sends.
//
// Without it every connection with a body sends its next chunk as soon as the last one is out,
// and the kernel shares the shard's bandwidth equally between them (processor sharing): a page
// waits behind every download in progress. With it, at most `slots` long body sends are in
// flight per shard; the others wait here, least remaining bytes first, so short responses finish
// first and a long one, once it is the shortest left, keeps its place to the end. Bounds:
//   - a send whose response has at most `short_bytes` left never waits (it needs no slot);
//   - a send that has waited `max_wait_ms` goes at once, over the slot budget (the aging bound:
//     no transfer starves);
//   - a send that has held its slot for `hold_ms` without ending stops counting against the
//     budget: its client or the disk, not the shard, is what limits it, and the shard has
//     bandwidth to spare for the next one. Its connection's next chunk then starts at once,
//     without a slot, for as long as its chunks keep taking that long (so the queue stays
//     work-conserving with slow clients and cold files).
//
//   SendQueue q({.slots = 2, .short_bytes = 256 << 10, .max_wait_ms = 500, .capacity = n});
//   if (q.Admit(&conn->ticket, remaining, now_ms)) StartChunk(conn);   // else it waits here
//   ...  q.Done(&conn->ticket, now_ms);                                // its chunk ended
//   while (SendTicket* t = q.Next(now_ms)) StartChunk(ConnOf(t));      // after Admit/Done/ticks
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mem/intrusive_list.h"

namespace ringd {

// One connection's place in the queue (intrusive: it lives in the Connection).
struct SendTicket {
  static constexpr uint32_t kNotQueued = UINT32_MAX;
  uint64_t remaining = 0;  // response bytes left when queued: the order
  uint64_t seq = 0;        // queueing order: breaks ties
  // When it began to wait (while queued), or its send started with a slot (while counted).
  int64_t since_ms = 0;
  uint32_t heap_index = kNotQueued;
  bool holds_slot = false;  // a send started with a slot and has not ended
  bool counted = false;     // and that slot still counts against the budget (within hold_ms)
  bool slow = false;        // its last chunk took hold_ms or more: the next needs no slot
  // On the waiting list, or on the counted holders' list (never both): each oldest first.
  mem::ListLink<SendTicket> link;
  bool queued() const { return heap_index != kNotQueued; }
};

struct SendQueueOptions {
  bool srpt = true;  // false: every send starts at once (processor sharing, --send-order=fair)
  uint32_t slots = 2;
  uint64_t short_bytes = 256 << 10;
  int64_t max_wait_ms = 500;
  int64_t hold_ms = 10;
  uint32_t capacity = 0;  // tickets at most (one per connection)
};

struct SendQueueStats {
  uint64_t queued = 0;      // sends that waited here
  uint64_t aged = 0;        // sends started over the budget by the aging bound
  uint64_t slow = 0;        // chunks that took hold_ms or more (the next goes without a slot)
  int64_t max_wait_ms = 0;  // the longest any send waited here
};

class SendQueue {
 public:
  explicit SendQueue(const SendQueueOptions& options);

  // A body send with `remaining` response bytes left wants to start. True: start it now (its
  // slot, if it needs one, is taken). False: it waits here until Next returns it.
  bool Admit(SendTicket* t, uint64_t remaining, int64_t now_ms);
  // Whether Admit would start that send now (it changes nothing): the queue as it stands.
  bool WouldAdmit(const SendTicket* t, uint64_t remaining) const {
    return !options_.srpt || remaining <= options_.short_bytes || t->slow ||
           (in_flight_ < options_.slots && heap_.empty());
  }
  // The send Admit or Next started has ended: its slot comes back. Call Next afterwards.
  void Done(SendTicket* t, int64_t now_ms);
  // The next waiting send to start now, its slot taken: first any that has waited max_wait_ms
  // (oldest first, even over the budget), then the least remaining while a slot is free (a slot
  // held for hold_ms is free).
  SendTicket* Next(int64_t now_ms);
  // A waiting connection ends.
  void Remove(SendTicket* t);
  // While sends wait: when the oldest reaches the aging bound, or the oldest counted slot its
  // hold_ms, whichever is first (INT64_MAX when none waits). The shard polls no longer.
  int64_t NextDeadlineMs() const;

  uint32_t in_flight() const { return in_flight_; }  // slots counting against the budget
  size_t waiting() const { return heap_.size(); }
  const SendQueueStats& stats() const { return stats_; }
  const SendQueueOptions& options() const { return options_; }

 private:
  using List = mem::IntrusiveList<SendTicket, &SendTicket::link>;  // oldest first
  static bool Before(const SendTicket* a, const SendTicket* b) {
    return a->remaining != b->remaining ? a->remaining < b->remaining : a->seq < b->seq;
  }
  void Hold(SendTicket* t, int64_t now_ms);
  void SiftUp(uint32_t i);
  void SiftDown(uint32_t i);
  void Place(uint32_t i, SendTicket* t) {
    heap_[i] = t;
    t->heap_index = i;
  }

  SendQueueOptions options_;
  std::vector<SendTicket*> heap_;  // a binary min-heap by (remaining, seq); capacity reserved
  List waiting_;                   // queueing order, which is age order
  List holders_;                   // counted slot holders, in start order
  uint64_t next_seq_ = 0;
  uint32_t in_flight_ = 0;  // counted slot holders (more than `slots` after aging)
  SendQueueStats stats_;
};

}  // namespace ringd
