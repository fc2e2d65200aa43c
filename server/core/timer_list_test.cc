#include "server/core/timer_list.h"

#include <vector>

#include "gtest/gtest.h"

namespace ringd {
namespace {

TEST(TimerList, FiresInDeadlineOrderAndRearms) {
  TimerList list(100);
  TimerNode a, b, c;
  list.Arm(&a, 0);
  list.Arm(&b, 10);
  list.Arm(&c, 20);
  EXPECT_EQ(list.NextDeadline(), 100);
  list.Arm(&a, 50);  // re-arming moves it to the back
  EXPECT_EQ(list.NextDeadline(), 110);
  std::vector<TimerNode*> fired;
  list.Expire(120, [&](TimerNode* t) { fired.push_back(t); });
  EXPECT_EQ(fired, (std::vector<TimerNode*>{&b, &c}));
  EXPECT_EQ(b.list, nullptr);
  EXPECT_EQ(list.NextDeadline(), 150);
  list.Disarm(&a);
  EXPECT_TRUE(list.Empty());
  EXPECT_EQ(list.NextDeadline(), INT64_MAX);
}

TEST(TimerList, MovesNodesBetweenLists) {
  TimerList header(10), idle(1000);
  TimerNode n;
  header.Arm(&n, 0);
  idle.Arm(&n, 5);  // a node is on one list at a time
  EXPECT_TRUE(header.Empty());
  EXPECT_EQ(n.list, &idle);
  int fired = 0;
  header.Expire(100, [&](TimerNode*) { ++fired; });
  EXPECT_EQ(fired, 0);
  // A callback may re-arm the node it is given.
  idle.Expire(2000, [&](TimerNode* t) {
    ++fired;
    header.Arm(t, 2000);
  });
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(n.list, &header);
}

TEST(TimerList, CountsWhatIsArmed) {
  TimerList a(10), b(10);
  TimerNode x, y;
  a.Arm(&x, 0);
  a.Arm(&x, 1);  // re-arming on the same list counts once
  a.Arm(&y, 2);
  EXPECT_EQ(a.size(), 2u);
  b.Arm(&y, 3);  // moves
  EXPECT_EQ(a.size(), 1u);
  EXPECT_EQ(b.size(), 1u);
  a.Expire(100, [](TimerNode*) {});
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.PopOldest(), &y);
  EXPECT_EQ(b.size(), 0u);
}

}  // namespace
}  // namespace ringd
