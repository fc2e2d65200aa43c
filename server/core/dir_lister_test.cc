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

  // MakeAll() on `dir`: (status, body).
  std::pair<int, std::string> List(const std::string& dir, DirLister::Options options = {}) {
    std::string body;
    const int status =
        DirLister::MakeAll(options, root_fd_, dir, "/" + (dir == "." ? "" : dir + "/"), &body);
    return {status, body};
  }
  void MakeFiles(const std::string& dir, int count) {
    Mkdir(dir);
    for (int i = count - 1; i >= 0; --i) {
      char name[32];
      snprintf(name, sizeof name, "/f%06d", i);
      const int fd = ::open((root_ + "/" + dir + name).c_str(), O_WRONLY | O_CREAT, 0644);
      ASSERT_GE(fd, 0);
      ::close(fd);
    }
  }

  std::string root_;
  int root_fd_ = -1;
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

TEST(NameSet, KeepsTheSmallestInOrderInBoundedMemory) {
  NameSet names(10);
  for (int i = 999; i >= 0; --i) names.Add("n" + std::to_string(i));
  EXPECT_LE(names.size(), 20u);  // never more than twice what it keeps
  names.Sort();
  ASSERT_EQ(names.size(), 10u);
  // Bytewise: "n0" < "n1" < "n10" < "n100" < "n101" < ...
  const char* want[] = {"n0", "n1", "n10", "n100", "n101", "n102", "n103", "n104", "n105", "n106"};
  for (size_t i = 0; i < 10; ++i) EXPECT_STREQ(names[i], want[i]);
  NameSet few(10);
  few.Add("b");
  few.Add("\xFF");
  few.Add("a");
  few.Sort();
  ASSERT_EQ(few.size(), 3u);
  EXPECT_STREQ(few[0], "a");
  EXPECT_STREQ(few[2], "\xFF");  // unsigned bytes, as strcmp
}

// A directory of many entries (the integration test lists 100,000): listed whole through many
// pieces, in order.
TEST_F(DirListerTest, ListsManyEntriesInOrder) {
  MakeFiles("big", 3000);
  DirLister::Options json;
  json.format = http::ListingFormat::kJson;
  auto [status, body] = List("big", json);
  ASSERT_EQ(status, 200);
  EXPECT_GT(body.size(), 2 * DirLister::kPieceBytes);
  EXPECT_EQ(body.find("truncated"), std::string::npos);
  size_t at = 0;
  for (int i = 0; i < 3000; ++i) {
    char name[32];
    snprintf(name, sizeof name, "{\"name\":\"f%06d\"", i);
    const size_t next = body.find(name, at);
    ASSERT_NE(next, std::string::npos) << name;
    at = next;
  }
  EXPECT_TRUE(body.ends_with("}\r\n]\r\n"));
}

// More entries than --autoindex-max-entries: the first that many by name, and a line that says
// how many of how many.
TEST_F(DirListerTest, CutsPastMaxEntriesAndSaysSo) {
  MakeFiles("big", 2000);
  DirLister::Options json;
  json.format = http::ListingFormat::kJson;
  json.max_entries = 500;
  auto [status, body] = List("big", json);
  ASSERT_EQ(status, 200);
  EXPECT_NE(body.find("{\"type\":\"truncated\",\"shown\":500,\"entries\":2000}\r\n]\r\n"),
            std::string::npos)
      << body.substr(body.size() - 200);
  EXPECT_NE(body.find("\"f000499\""), std::string::npos);
  EXPECT_EQ(body.find("\"f000500\""), std::string::npos);
}

// Runs `lister`'s wake-ups until `done` or about five seconds.
template <typename Done>
void RunUntil(DirLister& lister, Done done) {
  for (int i = 0; i < 500 && !done(); ++i) {
    lister.RunWakeups();
    if (!done()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

struct Woken : FileWaiter {
  int count = 0;
};

// Through the thread: the status wakes the waiter from RunWakeups on the caller's thread; then
// pieces, at most kPieces made ahead of the shard (it waits, however long the shard takes), each
// announced through Follow's callback; together they are the listing MakeAll makes.
TEST_F(DirListerTest, StreamsPiecesWithBackPressure) {
  MakeFiles("big", 3000);
  const int64_t now_ms = 0;
  ScriptedLoop loop(&now_ms);
  DirLister lister(&loop, {});
  Woken waiter;
  waiter.wake = [](FileWaiter* w) { ++static_cast<Woken*>(w)->count; };
  DirListing* l = lister.Start(root_fd_, "big", "/big/", &waiter);
  ASSERT_NE(l, nullptr);
  // The thread runs ahead of a busy shard: the status and the first kPieces pieces are all made
  // before a wake-up runs, so they come as one wake-up, the status's.
  for (int i = 0; i < 500 && lister.Unsent(l) < DirLister::kPieces; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  RunUntil(lister, [&] { return waiter.count > 0; });
  ASSERT_EQ(waiter.count, 1);
  ASSERT_EQ(l->status, 200);
  int more = 0;
  lister.Follow(
      l, [](void* arg) { ++*static_cast<int*>(arg); }, &more);
  // Nothing handed back: the thread makes kPieces, then waits.
  RunUntil(lister, [&] { return lister.Unsent(l) == DirLister::kPieces; });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  lister.RunWakeups();
  EXPECT_EQ(lister.Unsent(l), DirLister::kPieces);
  EXPECT_FALSE(lister.Ended(l));
  std::string body;
  uint32_t pieces = 0;
  bool last = false;
  while (!last) {
    lister.RunWakeups();  // as the shard does after each Poll, whether or not a piece waits
    RunUntil(lister, [&] { return lister.Unsent(l) > 0; });
    const ListingPiece piece = lister.Next(l);
    ASSERT_GT(piece.len, 0u);
    ASSERT_LE(piece.len, DirLister::kPieceBytes);
    body.append(piece.data, piece.len);
    last = piece.last;
    lister.Consume(l);
    ++pieces;
  }
  EXPECT_TRUE(lister.Ended(l));
  EXPECT_GT(pieces, DirLister::kPieces);
  // The pieces made after Follow were announced; the thread notes the last one under the same
  // lock as it counts it made, so a wake-up run now sees it whatever the threads' timing.
  lister.RunWakeups();
  EXPECT_GE(more, 1);
  EXPECT_EQ(body, List("big").second);
  lister.Release(l);
  RunUntil(lister, [&] { return lister.in_use() == 0; });
  EXPECT_EQ(lister.in_use(), 0u);
  EXPECT_EQ(waiter.count, 1);
}

// Released before its status, between pieces (the thread waiting on the shard), or while the
// shard's wake-up is pending: freed every time, no waiter woken after; every slot taken: null.
TEST_F(DirListerTest, FreesWhatIsReleasedAtAnyPoint) {
  MakeFiles("big", 3000);
  const int64_t now_ms = 0;
  ScriptedLoop loop(&now_ms);
  DirLister lister(&loop, {});
  Woken waiter;
  waiter.wake = [](FileWaiter* w) { ++static_cast<Woken*>(w)->count; };

  DirListing* taken[DirLister::kSlots];
  for (DirListing*& t : taken) {
    t = lister.Start(root_fd_, "big", "/big/", &waiter);
    ASSERT_NE(t, nullptr);
  }
  EXPECT_EQ(lister.Start(root_fd_, ".", "/", &waiter), nullptr);
  for (DirListing* t : taken) lister.Release(t);  // before their wake-ups
  RunUntil(lister, [&] { return lister.in_use() == 0; });
  EXPECT_EQ(lister.in_use(), 0u);
  EXPECT_EQ(waiter.count, 0);

  // Between pieces: the ring full, the thread gone on to other work.
  DirListing* l = lister.Start(root_fd_, "big", "/big/", &waiter);
  ASSERT_NE(l, nullptr);
  RunUntil(lister, [&] { return waiter.count > 0; });
  ASSERT_EQ(l->status, 200);
  lister.Follow(
      l, [](void*) {}, nullptr);
  RunUntil(lister, [&] { return lister.Unsent(l) == DirLister::kPieces; });
  lister.Consume(l);  // one back: the thread makes another
  lister.Release(l);
  RunUntil(lister, [&] { return lister.in_use() == 0; });
  EXPECT_EQ(lister.in_use(), 0u);

  // A small one made whole, its wake-ups pending, then released.
  Write("one.txt", 1);
  l = lister.Start(root_fd_, ".", "/", &waiter);
  ASSERT_NE(l, nullptr);
  RunUntil(lister, [&] { return waiter.count > 1; });
  ASSERT_EQ(l->status, 200);
  RunUntil(lister, [&] { return lister.Unsent(l) > 0; });
  const ListingPiece piece = lister.Next(l);
  EXPECT_TRUE(piece.last);
  EXPECT_NE(std::string_view(piece.data, piece.len).find("one.txt"), std::string::npos);
  lister.Release(l);
  RunUntil(lister, [&] { return lister.in_use() == 0; });
  EXPECT_EQ(lister.in_use(), 0u);
  EXPECT_EQ(waiter.count, 2);
}

}  // namespace
}  // namespace ringd
