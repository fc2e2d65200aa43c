#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mem/buffer_pool.h"
#include "mem/shard_memory.h"
#include "mem/slab_pool.h"

namespace ringd::mem {
namespace {

struct Tracked {
  static inline int live = 0;
  explicit Tracked(int v = 7) : value(v) { ++live; }
  ~Tracked() { --live; }
  int value;
  char payload[40];
};

TEST(SlabPool, HandsOutEverySlotOnceThenRefuses) {
  SlabPool<Tracked> pool(3);
  Tracked* a = pool.Get(1);
  Tracked* b = pool.Get();
  Tracked* c = pool.Get(3);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(a->value, 1);
  EXPECT_EQ(b->value, 7);
  EXPECT_EQ(Tracked::live, 3);
  EXPECT_EQ(pool.Get(), nullptr);  // a hard bound: no fallback allocation
  EXPECT_EQ(pool.Stats().exhausted, 1u);
  EXPECT_EQ(pool.Stats().in_use, 3u);
  pool.Put(b);
  EXPECT_EQ(Tracked::live, 2);
  Tracked* d = pool.Get(4);
  EXPECT_EQ(d, b);  // the freed slot is reused first
  EXPECT_EQ(pool.Stats().high_water, 3u);
  EXPECT_TRUE(pool.Owns(d));
  EXPECT_EQ(pool.IndexOf(a), 0u);
  Tracked outside;
  EXPECT_FALSE(pool.Owns(&outside));
  pool.Put(a);
  pool.Put(c);
  pool.Put(d);
  EXPECT_EQ(pool.Stats().in_use, 0u);
}

TEST(SlabPool, AbandonedObjectsAreForgottenNotDestroyed) {
  const int before = Tracked::live;
  {
    SlabPool<Tracked> pool(2);
    ASSERT_NE(pool.Get(), nullptr);
    pool.Abandon();  // without it, destroying the pool fails its assertion
    EXPECT_EQ(pool.Stats().in_use, 0u);
  }
  EXPECT_EQ(Tracked::live, before + 1) << "the abandoned object's destructor did not run";
  Tracked::live = before;
}

TEST(BufferPool, HandsOutDistinctAlignedBuffers) {
  BufferPool pool(4096, 8);
  ASSERT_TRUE(pool.ok()) << pool.error();
  std::set<char*> seen;
  std::vector<char*> out;
  for (int i = 0; i < 8; ++i) {
    char* b = pool.Get();
    ASSERT_NE(b, nullptr);
    EXPECT_EQ((b - pool.base()) % 4096, 0);
    b[0] = static_cast<char>(i);
    b[4095] = static_cast<char>(i);  // the whole buffer is writable
    EXPECT_TRUE(seen.insert(b).second);
    out.push_back(b);
  }
  EXPECT_EQ(pool.Get(), nullptr);
  EXPECT_EQ(pool.Stats().exhausted, 1u);
  EXPECT_EQ(pool.Available(), 0u);
  for (char* b : out) pool.Put(b);
  EXPECT_EQ(pool.Available(), 8u);
  EXPECT_EQ(pool.Stats().high_water, 8u);
  EXPECT_EQ(pool.Stats().in_use, 0u);
}

TEST(ShardMemory, CarvesOneMappingIntoPoolRegions) {
  ShardMemory memory({3 * 8192, 100, 0, 4096});
  ASSERT_TRUE(memory.ok()) << memory.error();
  EXPECT_EQ(memory.RegionSize(1), 4096u);  // rounded up to pages
  EXPECT_EQ(memory.Region(1), memory.Region(0) + 3 * 8192);
  EXPECT_EQ(memory.Region(2), nullptr);
  EXPECT_EQ(memory.Region(3), memory.Region(1) + 4096);
  EXPECT_EQ(memory.total(), 3 * 8192u + 4096 + 4096);
  BufferPool pool(8192, 3, memory.Region(0));
  ASSERT_TRUE(pool.ok());
  char* a = pool.Get();
  EXPECT_EQ(a, memory.Region(0));
  a[8191] = 1;
  char* b = pool.Get();
  char* c = pool.Get();
  EXPECT_NE(b, nullptr);
  EXPECT_NE(c, nullptr);
  EXPECT_EQ(pool.Get(), nullptr);
  for (char* x : {a, b, c}) pool.Put(x);
}

TEST(BufferPoolDeathTest, DestroyedWithBuffersOutFailsUnlessAbandoned) {
  EXPECT_DEATH(
      {
        BufferPool pool(4096, 2);
        pool.Get();
      },
      "1 buffers still out of the pool");
  BufferPool pool(4096, 2);
  pool.Get();
  pool.Abandon();
  EXPECT_EQ(pool.Stats().in_use, 0u);
}

}  // namespace
}  // namespace ringd::mem
