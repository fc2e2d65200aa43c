// Proves the wiring //server:ringd uses (//third_party:mimalloc, linked --no-as-needed): plain
// malloc and operator new land in mimalloc's heap.
#include "mimalloc.h"

#include <cstdlib>
#include <memory>

#include "gtest/gtest.h"

namespace {

TEST(Mimalloc, OwnsMallocAndNew) {
#ifdef RINGD_NO_MIMALLOC
  GTEST_SKIP() << "sanitizer build: the sanitizer's allocator replaces mimalloc here";
#else
  void* p = std::malloc(100);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(mi_is_in_heap_region(p)) << "malloc did not come from mimalloc";
  EXPECT_GE(mi_usable_size(p), 100u);
  std::free(p);
  auto q = std::make_unique<char[]>(5000);
  EXPECT_TRUE(mi_is_in_heap_region(q.get())) << "operator new did not come from mimalloc";
#endif
}

}  // namespace
