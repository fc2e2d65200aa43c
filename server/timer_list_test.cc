#include "server/timer_list.h"

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

}  // namespace
}  // namespace ringd
