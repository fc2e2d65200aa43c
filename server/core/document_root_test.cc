// DocumentRoot against a real directory tree: a symlink renamed over the name, the name gone and
// back, and the descriptors of roots served before.
#include "server/core/document_root.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <future>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace ringd {
namespace {

class DocumentRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ringd-root-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    for (const char* name : {"rel1", "rel2"}) {
      ASSERT_EQ(::mkdir((dir_ + "/" + name).c_str(), 0755), 0);
      std::FILE* f = std::fopen((dir_ + "/" + name + "/v.txt").c_str(), "w");
      ASSERT_NE(f, nullptr);
      std::fputs(name, f);
      std::fclose(f);
    }
    current_ = dir_ + "/current";
    Point("rel1");
  }
  void TearDown() override {
    ::unlink(current_.c_str());
    ::unlink((current_ + ".new").c_str());
    for (const char* name : {"rel1", "rel2"}) {
      ::unlink((dir_ + "/" + name + "/v.txt").c_str());
      ::rmdir((dir_ + "/" + name).c_str());
    }
    ::rmdir(dir_.c_str());
  }
  // current -> target, by a rename over the name, as deploys do.
  void Point(const char* target) {
    ASSERT_EQ(::symlink(target, (current_ + ".new").c_str()), 0);
    ASSERT_EQ(::rename((current_ + ".new").c_str(), current_.c_str()), 0);
  }
  // The release a root descriptor is: its v.txt.
  static std::string Release(int fd) {
    const int f = ::openat(fd, "v.txt", O_RDONLY | O_CLOEXEC);
    if (f < 0) return "";
    char buf[16];
    const ssize_t n = ::read(f, buf, sizeof buf);
    ::close(f);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }
  // Descriptors of this process open on rel1 or rel2.
  int OpenOnReleases() const {
    int n = 0;
    DIR* d = ::opendir("/proc/self/fd");
    while (dirent* e = ::readdir(d)) {
      char target[PATH_MAX];
      const std::string link = std::string("/proc/self/fd/") + e->d_name;
      const ssize_t len = ::readlink(link.c_str(), target, sizeof target - 1);
      if (len <= 0) continue;
      const std::string t(target, static_cast<size_t>(len));
      n += t == dir_ + "/rel1" || t == dir_ + "/rel2";
    }
    ::closedir(d);
    return n;
  }

  std::string dir_, current_;
};

TEST_F(DocumentRootTest, FollowsTheNameAndSaysEachChangeOnce) {
  DocumentRoot root(current_, ::open(current_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  const uint64_t first = root.state();
  EXPECT_EQ(Release(DocumentRoot::Fd(first)), "rel1");
  EXPECT_EQ(root.Check(), "");  // nothing moved
  EXPECT_EQ(root.state(), first);

  Point("rel2");
  EXPECT_NE(root.Check().find("names another directory now"), std::string::npos);
  const uint64_t second = root.state();
  EXPECT_EQ(second >> 32, 1u);
  EXPECT_EQ(Release(DocumentRoot::Fd(second)), "rel2");
  EXPECT_EQ(Release(DocumentRoot::Fd(first)), "rel1");  // kept open for opens under way
  EXPECT_EQ(root.Check(), "");

  // The name gone for a while: said once, and the root in use stays.
  ASSERT_EQ(::unlink(current_.c_str()), 0);
  EXPECT_NE(root.Check().find("still serving the directory it named before"), std::string::npos);
  EXPECT_EQ(root.Check(), "");
  EXPECT_EQ(root.state(), second);
  Point("rel2");  // back, to the same directory
  EXPECT_EQ(root.Check(),
            "ringd: --root " + current_ + ": a directory again; serving it as before");
  EXPECT_EQ(root.state(), second);
  EXPECT_EQ(root.Check(), "");

  // A name that leads to a file is no root.
  ASSERT_EQ(::unlink(current_.c_str()), 0);
  Point("rel1/v.txt");
  EXPECT_NE(root.Check().find("not a directory"), std::string::npos);
  EXPECT_EQ(root.state(), second);
}

TEST_F(DocumentRootTest, KeepsTheRootsBeforeUpToABound) {
  {
    DocumentRoot root(current_, ::open(current_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    for (int i = 0; i < 100; ++i) {
      Point(i % 2 == 0 ? "rel2" : "rel1");
      ASSERT_NE(root.Check(), "");
    }
    EXPECT_EQ(root.state() >> 32, 100u);
    EXPECT_EQ(OpenOnReleases(), static_cast<int>(DocumentRoot::kRetiredMax) + 1);
  }
  EXPECT_EQ(OpenOnReleases(), 0);  // all of them closed with it
}

// The watch runs its check at once when asked, and about once a second otherwise.
TEST(RootWatchTest, ChecksWhenAskedAndEachSecond) {
  std::atomic<int> checks{0};
  RootWatch watch([&checks] { checks.fetch_add(1); });
  watch.CheckNow();
  const auto start = std::chrono::steady_clock::now();
  while (checks.load() == 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  EXPECT_GE(checks.load(), 2);  // at least one tick in 2.5 s
  EXPECT_TRUE(watch.Stop(std::chrono::seconds(5)));
  const int after = checks.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  EXPECT_EQ(checks.load(), after);  // none after Stop
}

// A check that does not return (a stat on a dead NFS server) leaves Stop false after its wait,
// so ringd can exit without it; once it returns the thread ends.
TEST(RootWatchTest, StopDoesNotWaitForAStuckCheck) {
  std::promise<void> entered, release;
  std::shared_future<void> released = release.get_future().share();
  bool first = true;
  RootWatch watch([&] {
    if (!first) return;
    first = false;
    entered.set_value();
    released.wait();
  });
  watch.CheckNow();
  entered.get_future().wait();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(watch.Stop(std::chrono::milliseconds(100)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
  release.set_value();
  EXPECT_TRUE(watch.Stop(std::chrono::seconds(5)));
}

}  // namespace
}  // namespace ringd
