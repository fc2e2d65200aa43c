// PagesCached: cachestat where the kernel lets us ask, else RWF_NOWAIT reads; both must tell a
// file written (so in the page cache) from one evicted, and a range half in the cache from one
// wholly in it.
#include "io/backend_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace ringd::io::internal {
namespace {

class PagesCachedTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("TEST_TMPDIR");
    path_ = std::string(dir != nullptr ? dir : "/tmp") + "/pages-cached-XXXXXX";
    fd_ = ::mkstemp(path_.data());
    ASSERT_GE(fd_, 0);
    const std::string block(1 << 20, 'x');
    for (int i = 0; i < 4; ++i)
      ASSERT_EQ(::write(fd_, block.data(), block.size()), static_cast<ssize_t>(block.size()));
    ASSERT_EQ(::fdatasync(fd_), 0);
  }
  void TearDown() override {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  bool Cached(uint64_t offset, uint64_t length) {
    return GetParam() ? PagesCachedByReading(fd_, offset, length)
                      : PagesCached(fd_, offset, length);
  }
  // Drops the file's clean pages from the page cache; false where the file system keeps them
  // (tmpfs: its pages are the file).
  bool Evict() {
    ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
    return !PagesCached(fd_, 0, 4096);
  }
  std::string path_;
  int fd_ = -1;
};

TEST_P(PagesCachedTest, WrittenIsCachedEvictedIsNot) {
  EXPECT_TRUE(Cached(0, 4 << 20));
  EXPECT_TRUE(Cached(12345, 1 << 20));
  if (!Evict()) GTEST_SKIP() << "this file system keeps a file's pages (tmpfs?)";
  EXPECT_FALSE(Cached(0, 4 << 20));
  EXPECT_FALSE(Cached(3 << 20, 1 << 20));
}

TEST_P(PagesCachedTest, ARangeOnlyPartlyCachedIsNot) {
  if (!Evict()) GTEST_SKIP() << "this file system keeps a file's pages (tmpfs?)";
  char buf[4096];
  ASSERT_EQ(::pread(fd_, buf, sizeof buf, 0), static_cast<ssize_t>(sizeof buf));  // one page
  EXPECT_TRUE(Cached(0, 4096));
  EXPECT_FALSE(Cached(0, 4 << 20)) << "the range's end was never read";
}

INSTANTIATE_TEST_SUITE_P(Probes, PagesCachedTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("reading") : std::string("cachestat");
                         });

}  // namespace
}  // namespace ringd::io::internal

namespace ringd::io::internal {
namespace {

TEST(ColdTransfers, ANotedTransferIsTakenOnceAtItsNextOffset) {
  ColdTransfers cold;
  EXPECT_FALSE(cold.Take(7, 1 << 20));
  cold.Note(7, 1 << 20);
  EXPECT_FALSE(cold.Take(7, 2 << 20)) << "another offset of the same file";
  EXPECT_FALSE(cold.Take(8, 1 << 20)) << "the same offset of another file";
  EXPECT_TRUE(cold.Take(7, 1 << 20));
  EXPECT_FALSE(cold.Take(7, 1 << 20)) << "taken once";
}

TEST(ColdTransfers, ManyTransfersAtOnceMostlyKeepTheirNotes) {
  ColdTransfers cold;
  for (int fd = 0; fd < 256; ++fd) cold.Note(fd, uint64_t{3} << 20);
  int kept = 0;
  for (int fd = 0; fd < 256; ++fd) kept += cold.Take(fd, uint64_t{3} << 20);
  // 256 notes in 1,024 slots: a few collide and are lost (the next chunk then asks PagesCached).
  EXPECT_GT(kept, 200);
  EXPECT_LE(kept, 256);
}

}  // namespace
}  // namespace ringd::io::internal
