#include "mem/intrusive_list.h"

#include <vector>

#include "gtest/gtest.h"

namespace ringd::mem {
namespace {

struct Item {
  int id = 0;
  ListLink<Item> a;
  ListLink<Item> b;
};

using ListA = IntrusiveList<Item, &Item::a>;
using ListB = IntrusiveList<Item, &Item::b>;

template <typename L>
std::vector<int> Forward(const L& l) {
  std::vector<int> ids;
  for (Item* i = l.front(); i != nullptr; i = L::Next(i)) ids.push_back(i->id);
  return ids;
}

template <typename L>
std::vector<int> Backward(const L& l) {
  std::vector<int> ids;
  for (Item* i = l.back(); i != nullptr; i = L::Prev(i)) ids.push_back(i->id);
  return ids;
}

TEST(IntrusiveListTest, PushRemoveAndPopKeepOrderBothWays) {
  Item items[5];
  for (int i = 0; i < 5; ++i) items[i].id = i;
  ListA l;
  EXPECT_TRUE(l.empty());
  EXPECT_EQ(l.PopFront(), nullptr);
  l.PushBack(&items[1]);
  l.PushBack(&items[2]);
  l.PushFront(&items[0]);
  l.PushBack(&items[3]);
  EXPECT_EQ(Forward(l), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(Backward(l), (std::vector<int>{3, 2, 1, 0}));
  EXPECT_EQ(l.size(), 4u);
  l.Remove(&items[2]);  // the middle
  l.Remove(&items[0]);  // the front
  l.Remove(&items[3]);  // the back
  EXPECT_EQ(Forward(l), (std::vector<int>{1}));
  EXPECT_EQ(l.front(), l.back());
  l.PushBack(&items[2]);  // an unlinked element links again
  EXPECT_EQ(l.PopFront(), &items[1]);
  EXPECT_EQ(l.PopFront(), &items[2]);
  EXPECT_TRUE(l.empty());
  EXPECT_EQ(l.back(), nullptr);
  EXPECT_EQ(l.size(), 0u);
}

TEST(IntrusiveListTest, MoveToBackMakesAnElementTheNewest) {
  Item items[3];
  for (int i = 0; i < 3; ++i) items[i].id = i;
  ListA l;
  for (Item& i : items) l.PushBack(&i);
  l.MoveToBack(&items[0]);
  EXPECT_EQ(Forward(l), (std::vector<int>{1, 2, 0}));
  l.MoveToBack(&items[0]);  // already the newest
  EXPECT_EQ(Forward(l), (std::vector<int>{1, 2, 0}));
  EXPECT_EQ(Backward(l), (std::vector<int>{0, 2, 1}));
  l.Remove(&items[2]);
  EXPECT_FALSE(l.Contains(&items[2]));
  l.MoveToBack(&items[2]);  // not on the list: linked
  EXPECT_EQ(Forward(l), (std::vector<int>{1, 0, 2}));
  EXPECT_TRUE(l.Contains(&items[1]) && l.Contains(&items[0]) && l.Contains(&items[2]));
}

TEST(IntrusiveListTest, AnElementIsOnOneListPerLink) {
  Item items[3];
  for (int i = 0; i < 3; ++i) items[i].id = i;
  ListA a;
  ListB b;
  for (Item& i : items) a.PushBack(&i);
  b.PushBack(&items[2]);
  b.PushBack(&items[0]);
  a.Remove(&items[0]);
  EXPECT_EQ(Forward(a), (std::vector<int>{1, 2}));
  EXPECT_EQ(Forward(b), (std::vector<int>{2, 0}));
}

TEST(IntrusiveListTest, AbandonForgetsEveryElement) {
  Item items[2];
  ListA l;
  l.PushBack(&items[0]);
  l.PushBack(&items[1]);
  l.Abandon();
  EXPECT_TRUE(l.empty());
  EXPECT_EQ(l.size(), 0u);
  EXPECT_FALSE(l.Contains(&items[0]));
}

TEST(IntrusiveListDeathTest, LinkingAnElementTwiceOrRemovingAStrangerAsserts) {
  Item items[2];
  ListA l;
  l.PushBack(&items[0]);
  EXPECT_DEATH(l.PushBack(&items[0]), "");
  ListA other;
  other.PushBack(&items[1]);
  EXPECT_DEATH(l.Remove(&items[1]), "");
}

}  // namespace
}  // namespace ringd::mem
