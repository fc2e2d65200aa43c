#include "server/core/send_queue.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace ringd {
namespace {

SendQueueOptions Opts(uint32_t slots, uint64_t short_bytes = 0, int64_t max_wait_ms = 1000,
                      int64_t hold_ms = int64_t{1} << 40) {
  SendQueueOptions o;
  o.slots = slots;
  o.short_bytes = short_bytes;
  o.max_wait_ms = max_wait_ms;
  o.hold_ms = hold_ms;
  o.capacity = 64;
  return o;
}

TEST(SendQueue, FairStartsEverythingAtOnce) {
  SendQueueOptions o = Opts(1);
  o.srpt = false;
  SendQueue q(o);
  SendTicket t[3];
  for (SendTicket& x : t) EXPECT_TRUE(q.Admit(&x, 10 << 20, 0));
  EXPECT_EQ(q.in_flight(), 0u);
  EXPECT_EQ(q.Next(0), nullptr);
}

TEST(SendQueue, ShortSendsNeedNoSlot) {
  SendQueue q(Opts(1, 1000));
  SendTicket big, small;
  EXPECT_TRUE(q.Admit(&big, 5000, 0));
  EXPECT_TRUE(big.holds_slot);
  EXPECT_TRUE(q.Admit(&small, 1000, 0));  // the only slot is taken; a short send goes anyway
  EXPECT_FALSE(small.holds_slot);
  q.Done(&small, 0);
  EXPECT_EQ(q.in_flight(), 1u);
}

TEST(SendQueue, ShortestRemainingFirstThenQueueOrder) {
  SendQueue q(Opts(1));
  SendTicket running, a, b, c, d;
  ASSERT_TRUE(q.Admit(&running, 100, 0));
  EXPECT_FALSE(q.Admit(&a, 300, 1));
  EXPECT_FALSE(q.Admit(&b, 200, 2));
  EXPECT_FALSE(q.Admit(&c, 300, 3));
  EXPECT_FALSE(q.Admit(&d, 50, 4));
  EXPECT_EQ(q.Next(5), nullptr);  // no free slot
  std::vector<SendTicket*> order;
  SendTicket* holder = &running;
  for (int i = 0; i < 4; ++i) {
    q.Done(holder, 0);
    holder = q.Next(5);
    ASSERT_NE(holder, nullptr);
    EXPECT_EQ(q.Next(5), nullptr);  // one slot: one at a time
    order.push_back(holder);
  }
  EXPECT_EQ(order, (std::vector<SendTicket*>{&d, &b, &a, &c}));
  EXPECT_EQ(q.waiting(), 0u);
}

TEST(SendQueue, AgingBoundStartsTheOldestOverBudget) {
  SendQueue q(Opts(1, 0, 100));
  SendTicket running, big, small;
  ASSERT_TRUE(q.Admit(&running, 100, 0));
  EXPECT_FALSE(q.Admit(&big, 1 << 30, 10));
  EXPECT_FALSE(q.Admit(&small, 10, 20));
  EXPECT_EQ(q.NextDeadlineMs(), 110);
  EXPECT_EQ(q.Next(109), nullptr);
  EXPECT_EQ(q.Next(110), &big);  // waited 100 ms: goes, although the one slot is taken
  EXPECT_EQ(q.in_flight(), 2u);
  EXPECT_EQ(q.NextDeadlineMs(), 120);
  EXPECT_EQ(q.stats().aged, 1u);
  EXPECT_EQ(q.stats().max_wait_ms, 100);
  q.Done(&running, 0);
  q.Done(&big, 0);
  EXPECT_EQ(q.Next(111), &small);
  EXPECT_EQ(q.NextDeadlineMs(), INT64_MAX);
}

// A slot held for hold_ms (a slow client, a cold file) stops counting: the next waiting send
// starts, the slow one's end gives back nothing more, and its next chunk needs no slot for as
// long as its chunks stay slow.
TEST(SendQueue, SlotHeldTooLongStopsCounting) {
  SendQueue q(Opts(1, 0, 1000, 10));
  SendTicket slow, a, b;
  ASSERT_TRUE(q.Admit(&slow, 1000, 0));
  EXPECT_FALSE(q.Admit(&a, 500, 2));
  EXPECT_FALSE(q.Admit(&b, 600, 3));
  EXPECT_EQ(q.NextDeadlineMs(), 10);
  EXPECT_EQ(q.Next(9), nullptr);
  EXPECT_EQ(q.Next(10), &a);  // slow's slot no longer counts
  EXPECT_EQ(q.Next(10), nullptr);
  EXPECT_EQ(q.in_flight(), 1u);
  EXPECT_EQ(q.NextDeadlineMs(), 20);  // a's hold
  q.Done(&slow, 30);
  EXPECT_TRUE(slow.slow);
  EXPECT_EQ(q.stats().slow, 1u);
  EXPECT_EQ(q.in_flight(), 1u);
  // Its next chunk starts at once, without a slot, although b waits and the slot is a's.
  ASSERT_TRUE(q.Admit(&slow, 900, 30));
  EXPECT_TRUE(slow.holds_slot);
  EXPECT_FALSE(slow.counted);
  q.Done(&slow, 31);  // fast this time: the next one counts again
  EXPECT_FALSE(slow.slow);
  EXPECT_FALSE(q.Admit(&slow, 800, 31));
  q.Done(&a, 12);
  EXPECT_FALSE(a.slow);
  EXPECT_EQ(q.Next(32), &b);
  EXPECT_EQ(q.Next(32), nullptr);
  q.Remove(&slow);
  EXPECT_EQ(q.NextDeadlineMs(), INT64_MAX);
}

TEST(SendQueue, RemoveKeepsHeapAndAgeListConsistent) {
  SendQueue q(Opts(1, 0, 1000));
  SendTicket running, t[6];
  ASSERT_TRUE(q.Admit(&running, 1, 0));
  const uint64_t sizes[6] = {60, 10, 50, 20, 40, 30};
  for (int i = 0; i < 6; ++i) EXPECT_FALSE(q.Admit(&t[i], sizes[i], i));
  q.Remove(&t[0]);  // the oldest
  q.Remove(&t[3]);  // from the middle of the heap
  q.Remove(&t[3]);  // twice is harmless
  EXPECT_FALSE(t[0].queued());
  EXPECT_EQ(q.waiting(), 4u);
  EXPECT_EQ(q.NextDeadlineMs(), 1001);  // t[1] is the oldest now
  std::vector<uint64_t> got;
  SendTicket* holder = &running;
  while (true) {
    q.Done(holder, 0);
    holder = q.Next(10);
    if (holder == nullptr) break;
    got.push_back(holder->remaining);
  }
  EXPECT_EQ(got, (std::vector<uint64_t>{10, 30, 40, 50}));
}

// Random admits, completions, removals and clock steps: the slots never exceed the budget except
// through aging, nothing waits past the bound once Next has run, and whatever starts without
// aging is the least remaining of those waiting.
TEST(SendQueue, RandomizedInvariants) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 50; ++round) {
    const uint32_t slots = 1 + rng() % 4;
    const int64_t max_wait = 1 + rng() % 50;
    const int64_t hold = 1 + rng() % 50;
    SendQueue q(Opts(slots, rng() % 3 == 0 ? 100 : 0, max_wait, hold));
    std::vector<SendTicket> t(64);
    std::vector<bool> sending(64, false);
    std::vector<int64_t> queued_at(64, 0);
    int64_t now = 0;
    for (int step = 0; step < 2000; ++step) {
      const size_t i = rng() % t.size();
      switch (rng() % 4) {
        case 0:
          if (!t[i].queued() && !sending[i]) {
            t[i].slow = rng() % 8 == 0;  // limited by its client: needs no slot
            const uint64_t remaining = rng() % 1000;
            const bool predicted = q.WouldAdmit(&t[i], remaining);  // as the head's MSG_MORE asks
            sending[i] = q.Admit(&t[i], remaining, now);
            EXPECT_EQ(sending[i], predicted) << "WouldAdmit and Admit disagree";
            queued_at[i] = now;
          }
          break;
        case 1:
          if (sending[i]) {
            q.Done(&t[i], now);
            sending[i] = false;
          }
          break;
        case 2:
          q.Remove(&t[i]);
          break;
        case 3:
          now += rng() % 10;
          break;
      }
      while (SendTicket* s = q.Next(now)) {
        const bool aged = now - queued_at[s - t.data()] >= max_wait;
        if (!aged) {
          for (const SendTicket& o : t) {
            if (o.queued()) {
              EXPECT_LE(s->remaining, o.remaining);
            }
          }
        }
        sending[s - t.data()] = true;
      }
      EXPECT_GT(q.NextDeadlineMs(), now);
      uint32_t counted = 0;
      for (const SendTicket& o : t) {
        EXPECT_TRUE(!o.counted || o.holds_slot);
        counted += o.counted;
      }
      EXPECT_EQ(counted, q.in_flight());
      EXPECT_LE(q.stats().max_wait_ms, max_wait + 9);
    }
  }
}

}  // namespace
}  // namespace ringd
