#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "mem/asan_poison.h"
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

// Whether a page-aligned buffer's first page is resident.
bool Resident(const char* buffer) {
  unsigned char vec = 0;
  EXPECT_EQ(mincore(const_cast<char*>(buffer), 4096, &vec), 0);
  return (vec & 1) != 0;
}

TEST(BufferPool, ReleaseIdleHandsBackOnlyBuffersIdleForAWholePeriod) {
  mem::BufferPool pool(8192, 16);
  ASSERT_TRUE(pool.ok());
  // A burst: six buffers out at once, written, then five of them back.
  std::vector<char*> out;
  for (int i = 0; i < 6; ++i) {
    out.push_back(pool.Get());
    std::memset(out.back(), 'x', 8192);
  }
  for (int i = 0; i < 5; ++i) pool.Put(out[i]);
  // Taken during this period: nothing is released yet.
  EXPECT_EQ(pool.ReleaseIdle(), 0u);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(Resident(out[i]));
  // One is taken again (the top of the stack: the last put back), the rest stay idle.
  char* again = pool.Get();
  EXPECT_EQ(again, out[4]);
  std::memset(again, 'y', 8192);
  EXPECT_EQ(pool.ReleaseIdle(), 4u);  // idle a whole period: out[0..3]
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(Resident(out[i]));
  EXPECT_TRUE(Resident(again));  // in use: untouched
  EXPECT_EQ(again[8191], 'y');
  EXPECT_TRUE(Resident(out[5]));
  EXPECT_EQ(out[5][0], 'x');
  EXPECT_EQ(pool.released(), 4u);
  // Released buffers come back zeroed, and nothing is released twice.
  EXPECT_EQ(pool.ReleaseIdle(), 0u);
  pool.Put(again);
  pool.Put(out[5]);
  EXPECT_EQ(pool.ReleaseIdle(), 0u);  // `again` was taken this period
  EXPECT_EQ(pool.ReleaseIdle(), 2u);  // now both were idle a whole period
  char* b = pool.Get();
  EXPECT_EQ(b[0], 0);
  pool.Put(b);
}

struct PageSized {
  char bytes[6000];  // more than a page: its slots are whole pages (8 KiB)
};

TEST(SlabPool, ReleaseIdleHandsBackOnlySlotsIdleForAWholePeriod) {
  SlabPool<PageSized> pool(8);
  std::vector<PageSized*> out;
  for (int i = 0; i < 4; ++i) {
    out.push_back(pool.Get());
    ASSERT_EQ(reinterpret_cast<uintptr_t>(out.back()) % 4096, 0u);
    std::memset(out.back()->bytes, 'x', sizeof out.back()->bytes);
  }
  for (int i = 0; i < 3; ++i) pool.Put(out[i]);
  EXPECT_EQ(pool.ReleaseIdle(), 0u);  // taken during this period
  PageSized* again = pool.Get();      // the last put back
  EXPECT_EQ(again, out[2]);
  std::memset(again->bytes, 'y', sizeof again->bytes);
  EXPECT_EQ(pool.ReleaseIdle(), 2u);  // out[0], out[1]: idle a whole period
  EXPECT_FALSE(Resident(reinterpret_cast<char*>(out[0])));
  EXPECT_FALSE(Resident(reinterpret_cast<char*>(out[1]) + 4096));
  EXPECT_TRUE(Resident(reinterpret_cast<char*>(again)));
  EXPECT_EQ(again->bytes[5999], 'y');
  EXPECT_EQ(out[3]->bytes[0], 'x');   // in use: untouched
  EXPECT_EQ(pool.ReleaseIdle(), 0u);  // nothing twice
  EXPECT_EQ(pool.released(), 2u);
  PageSized* b = pool.Get();  // the top of the free stack: out[1], released, so zeroed
  EXPECT_EQ(b, out[1]);
  EXPECT_EQ(b->bytes[0], 0);
  for (PageSized* p : {again, out[3], b}) pool.Put(p);
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

// Get, Put and reuse in a shuffled order, every byte of what is handed out written and read
// back. Under ASan this shows the poisoning never covers what is handed out, the free list's
// link included, and that buffers whose size is not a multiple of ASan's 8-byte granule do not
// poison their neighbours.
struct Wide {
  uint64_t words[5];
};

TEST(SlabPool, GetPutReuseCyclesTouchOnlyLiveObjects) {
  SlabPool<Wide> pool(4);
  std::vector<Wide*> out;
  for (int round = 0; round < 50; ++round) {
    while (Wide* w = pool.Get()) {
      for (uint64_t& word : w->words) word = static_cast<uint64_t>(round);
      out.push_back(w);
    }
    ASSERT_EQ(out.size(), 4u);
    // Put back every other one, then the rest: the free list is a mix of old and new links.
    for (size_t i = round % 2; i < out.size(); i += 2) pool.Put(out[i]);
    for (size_t i = 1 - round % 2; i < out.size(); i += 2) {
      for (uint64_t word : out[i]->words) EXPECT_EQ(word, static_cast<uint64_t>(round));
      pool.Put(out[i]);
    }
    out.clear();
  }
  EXPECT_EQ(pool.Stats().in_use, 0u);
}

TEST(BufferPool, GetPutReuseCyclesTouchOnlyLiveBuffers) {
  for (size_t size : {size_t{4096}, size_t{100}, size_t{13}}) {
    SCOPED_TRACE(size);
    BufferPool pool(size, 5);
    ASSERT_TRUE(pool.ok()) << pool.error();
    std::vector<char*> out;
    for (int round = 0; round < 20; ++round) {
      while (char* b = pool.Get()) {
        std::memset(b, round, size);
        out.push_back(b);
      }
      ASSERT_EQ(out.size(), 5u);
      for (size_t i = round % 2; i < out.size(); i += 2) pool.Put(out[i]);
      for (size_t i = 1 - round % 2; i < out.size(); i += 2) {
        EXPECT_EQ(out[i][0], static_cast<char>(round));
        EXPECT_EQ(out[i][size - 1], static_cast<char>(round));
        std::memset(out[i], round + 1, size);  // a neighbour's Put left it addressable
        pool.Put(out[i]);
      }
      out.clear();
    }
  }
}

TEST(BufferPool, ShardMemoryIsAddressableAgainAfterItsPool) {
  ShardMemory memory({2 * 4096});
  ASSERT_TRUE(memory.ok()) << memory.error();
  {
    BufferPool pool(4096, 2, memory.Region(0));
    pool.Put(pool.Get());
  }
  std::memset(memory.Region(0), 1, 2 * 4096);  // under ASan: no longer poisoned
  EXPECT_EQ(memory.Region(0)[2 * 4096 - 1], 1);
}

// Use after Put under AddressSanitizer (--config=asan): the pools poison what they hold, so the
// access is reported and the process dies. A build without ASan has no poisoning to test.
constexpr const char* kNoAsan =
    "built without AddressSanitizer: the pools poison only under --config=asan";

// A read the compiler keeps.
template <typename T>
T Touch(const T* p) {
  return *static_cast<const volatile T*>(p);
}

TEST(SlabPoolDeathTest, AnObjectTouchedAfterPutIsReported) {
  if (!kPoolsPoisonForAsan) GTEST_SKIP() << kNoAsan;
  SlabPool<Wide> pool(2);
  Wide* w = pool.Get();
  Wide* other = pool.Get();
  pool.Put(other);
  pool.Put(w);
  EXPECT_DEATH(Touch(&w->words[0]), "use-after-poison");
  EXPECT_DEATH(Touch(&w->words[4]), "use-after-poison");
  Wide* again = pool.Get();
  EXPECT_EQ(again, w);
  again->words[0] = 1;  // handed out again: addressable
  pool.Put(again);
}

TEST(SlabPoolDeathTest, ASlotNeverHandedOutIsPoisoned) {
  if (!kPoolsPoisonForAsan) GTEST_SKIP() << kNoAsan;
  SlabPool<Wide> pool(2);
  Wide* w = pool.Get();
  static_assert(sizeof(Wide) % alignof(void*) == 0);  // slots are exactly sizeof(Wide) apart
  const Wide* fresh = w + 1;
  ASSERT_TRUE(pool.Owns(fresh));
  ASSERT_EQ(pool.IndexOf(fresh), 1u);
  EXPECT_DEATH(Touch(&fresh->words[2]), "use-after-poison");
  pool.Put(w);
}

TEST(SlabPoolDeathTest, APutTwiceIsReported) {
  if (!kPoolsPoisonForAsan) GTEST_SKIP() << kNoAsan;
  SlabPool<Wide> pool(2);
  Wide* w = pool.Get();
  Wide* other = pool.Get();  // still out: the count alone does not catch the second Put
  pool.Put(w);
  EXPECT_DEATH(pool.Put(w), "use-after-poison");  // Put reads the slot first
  pool.Put(other);
}

TEST(BufferPoolDeathTest, ABufferTouchedAfterPutIsReported) {
  if (!kPoolsPoisonForAsan) GTEST_SKIP() << kNoAsan;
  BufferPool pool(4096, 4);
  ASSERT_TRUE(pool.ok()) << pool.error();
  char* b = pool.Get();
  char* kept = pool.Get();
  pool.Put(b);
  EXPECT_DEATH(Touch(&b[0]), "use-after-poison");
  EXPECT_DEATH(Touch(&b[4095]), "use-after-poison");
  EXPECT_DEATH(Touch(pool.base() + 3 * 4096), "use-after-poison");  // never handed out
  kept[0] = kept[4095] = 1;
  pool.Put(kept);
}

TEST(BufferPoolDeathTest, AShardMemoryBufferTouchedAfterPutIsReported) {
  if (!kPoolsPoisonForAsan) GTEST_SKIP() << kNoAsan;
  ShardMemory memory({2 * 4096});
  ASSERT_TRUE(memory.ok()) << memory.error();
  BufferPool pool(4096, 2, memory.Region(0));
  char* b = pool.Get();
  b[100] = 1;
  pool.Put(b);
  EXPECT_DEATH(Touch(&b[100]), "use-after-poison");
}

}  // namespace
}  // namespace ringd::mem
