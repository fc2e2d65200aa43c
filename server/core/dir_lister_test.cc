#include "server/core/dir_lister.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "server/core/scripted_loop.h"

namespace ringd {
namespace {

class DirListerTest : public ::testing::Test {
 protected:
  DirListerTest() {
    char tmpl[] = "/tmp/ringd-dir-lister-XXXXXX";
    root_ = mkdtemp(tmpl);
    root_fd_ = ::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    buf_ = std::make_unique<char[]>(DirLister::kBufferBytes);
  }
  ~DirListerTest() override {
    ::close(root_fd_);
    std::string cmd = "rm -rf '" + root_ + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }
  void Write(const std::string& rel, size_t size) {
    const int fd = ::open((root_ + "/" + rel).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0) << rel;
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(size)), 0);
    ::close(fd);
  }
  void Mkdir(const std::string& rel) { ASSERT_EQ(::mkdir((root_ + "/" + rel).c_str(), 0755), 0); }

  // Make() on `dir`: (status, body).
  std::pair<int, std::string> List(const std::string& dir, DirLister::Options options = {}) {
    DirListing l;
    l.dir = dir;
    l.url_path = "/" + (dir == "." ? "" : dir + "/");
    l.root_fd = root_fd_;
    l.buf = buf_.get();
    DirLister::Make(options, &l);
    return {l.status, std::string(l.body)};
  }

  std::string root_;
  int root_fd_ = -1;
  std::unique_ptr<char[]> buf_;
};

TEST_F(DirListerTest, ListsSortedWithSizesAndDirectories) {
  Write("b.txt", 10);
  Write("a b.txt", 2048);
  Write("<x>\".html", 1);
  Mkdir("sub");
  Write(".hidden", 3);
  Write("caf\xE9", 4);  // not UTF-8
  auto [status, body] = List(".");
  ASSERT_EQ(status, 200);
  const size_t a = body.find("href=\"a%20b.txt\">a b.txt</a>");
  const size_t b = body.find("href=\"b.txt\">b.txt</a>");
  const size_t x = body.find("href=\"%3Cx%3E%22.html\">&lt;x&gt;&quot;.html</a>");
  const size_t sub = body.find("href=\"sub/\">sub/</a>");
  const size_t cafe = body.find("href=\"caf%E9\">caf\xEF\xBF\xBD</a>");
  ASSERT_NE(a, std::string::npos) << body;
  ASSERT_NE(b, std::string::npos) << body;
  ASSERT_NE(x, std::string::npos) << body;
  ASSERT_NE(sub, std::string::npos) << body;
  ASSERT_NE(cafe, std::string::npos) << body;
  // By name, bytewise: "<" < "a" < "b" < "caf" < "sub".
  EXPECT_LT(x, a);
  EXPECT_LT(a, b);
  EXPECT_LT(b, cafe);
  EXPECT_LT(cafe, sub);
  EXPECT_NE(body.find("<td>2048</td>"), std::string::npos) << body;
  EXPECT_EQ(body.find(".hidden"), std::string::npos) << body;
  EXPECT_EQ(body.find("Listing cut"), std::string::npos) << body;
  DirLister::Options shown;
  shown.show_dot_files = true;
  EXPECT_NE(List(".", shown).second.find("href=\".hidden\""), std::string::npos);
}

TEST_F(DirListerTest, AnswersErrors) {
  EXPECT_EQ(List("missing").first, 404);
  Write("file", 1);
  EXPECT_EQ(List("file").first, 404);  // ENOTDIR
  EXPECT_EQ(List("../").first, 404);   // beneath the root only (EXDEV)
  if (::geteuid() != 0) {
    Mkdir("locked");
    ASSERT_EQ(::chmod((root_ + "/locked").c_str(), 0), 0);
    EXPECT_EQ(List("locked").first, 403);
    ASSERT_EQ(::chmod((root_ + "/locked").c_str(), 0755), 0);
  }
}

// A directory of more entries than a listing shows: the first kMaxEntries by name, read in
// bounded memory, and a line that says how many of how many.
TEST_F(DirListerTest, CutsAHugeDirectoryAndSaysSo) {
  Mkdir("big");
  constexpr int kFiles = 100000;
  for (int i = kFiles - 1; i >= 0; --i) {
    char name[32];
    snprintf(name, sizeof name, "big/f%06d", i);
    const int fd = ::open((root_ + "/" + name).c_str(), O_WRONLY | O_CREAT, 0644);
    ASSERT_GE(fd, 0);
    ::close(fd);
  }
  DirLister::Options json;
  json.format = http::ListingFormat::kJson;
  auto [status, body] = List("big", json);
  ASSERT_EQ(status, 200);
  EXPECT_LE(body.size(), DirLister::kBufferBytes);
  EXPECT_NE(body.find("{\"name\":\"f000000\""), std::string::npos);
  const std::string cut = "\"type\":\"truncated\",\"shown\":";
  const size_t at = body.find(cut);
  ASSERT_NE(at, std::string::npos) << body.substr(body.size() - 200);
  const uint64_t shown = std::stoull(body.substr(at + cut.size()));
  EXPECT_GT(shown, 1000u);
  EXPECT_LE(shown, DirLister::kMaxEntries);
  EXPECT_NE(body.find(",\"entries\":100000}"), std::string::npos);
  char last[32];
  snprintf(last, sizeof last, "\"f%06d\"", static_cast<int>(shown) - 1);
  EXPECT_NE(body.find(last), std::string::npos) << last;
  snprintf(last, sizeof last, "\"f%06d\"", static_cast<int>(shown));
  EXPECT_EQ(body.find(last), std::string::npos) << last;
}

// Through the thread: the waiter is woken from RunWakeups on the caller's thread; a listing
// released before its wake-up is freed there without one; every slot taken: null.
TEST_F(DirListerTest, WakesFromRunWakeupsAndFreesWhatIsReleased) {
  Write("one.txt", 1);
  const int64_t now_ms = 0;
  ScriptedLoop loop(&now_ms);
  DirLister lister(&loop, {});
  struct Woken : FileWaiter {
    int count = 0;
  } waiter;
  waiter.wake = [](FileWaiter* w) { ++static_cast<Woken*>(w)->count; };
  DirListing* l = lister.Start(root_fd_, ".", "/", &waiter);
  ASSERT_NE(l, nullptr);
  for (int i = 0; i < 500 && waiter.count == 0; ++i) {
    lister.RunWakeups();
    if (waiter.count == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(waiter.count, 1);
  EXPECT_EQ(l->status, 200);
  EXPECT_NE(l->body.find("one.txt"), std::string::npos);
  EXPECT_EQ(lister.in_use(), 1u);
  lister.Release(l);
  EXPECT_EQ(lister.in_use(), 0u);

  DirListing* taken[DirLister::kSlots];
  for (DirListing*& t : taken) {
    t = lister.Start(root_fd_, ".", "/", &waiter);
    ASSERT_NE(t, nullptr);
  }
  EXPECT_EQ(lister.Start(root_fd_, ".", "/", &waiter), nullptr);
  for (DirListing* t : taken) lister.Release(t);  // before their wake-ups
  for (int i = 0; i < 500 && lister.in_use() > 0; ++i) {
    lister.RunWakeups();
    if (lister.in_use() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(lister.in_use(), 0u);
  EXPECT_EQ(waiter.count, 1);  // none of them woke it
}

}  // namespace
}  // namespace ringd
