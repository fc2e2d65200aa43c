// FileCache's revalidation beside requests: an expired entry keeps answering (for one more
// valid_ms) while its successor opens, and the successor takes its place when ready; past that
// grace, with valid_ms 0, or for a passing failure, requests wait as before.
#include "server/core/file_cache.h"

#include <sys/stat.h>

#include <cerrno>
#include <vector>

#include "gtest/gtest.h"

namespace ringd {
namespace {

// A loop whose opens finish when the test says so; nothing else is used by the cache here
// (no content pool: no content reads).
class ScriptedLoop final : public io::Loop {
 public:
  const char* Name() const override { return "scripted"; }
  void Accept(int, io::Completion*) override { ADD_FAILURE(); }
  void Recv(int, io::Completion*) override { ADD_FAILURE(); }
  void Send(int, iovec*, int, io::Completion*, bool) override { ADD_FAILURE(); }
  void SendFile(int, int, uint64_t, uint64_t, io::Completion*, bool) override { ADD_FAILURE(); }
  void Open(int dir, const char* path, io::FileStat* stat, io::Completion* c) override {
    dirs.push_back(dir);
    opens.push_back(c);
    stats.push_back(stat);
    paths.push_back(path);
  }
  void Read(int, char*, uint64_t length, uint64_t, io::Completion* c) override {
    reads.push_back({c, length});
  }
  void Cancel(io::Completion*) override { ADD_FAILURE(); }
  void PauseRecv(io::Completion*) override { ADD_FAILURE(); }
  void ResumeRecv(io::Completion*) override { ADD_FAILURE(); }
  void Shutdown(int, int) override { ADD_FAILURE(); }
  void Close(int fd) override { closed.push_back(fd); }
  void Poll(int) override {}
  void Wake() override {}
  io::LoopStats Stats() const override { return {}; }

  // Finishes open number i: a regular file (fd, size) or an error (-errno).
  void Finish(size_t i, int64_t result, uint64_t size = 0) {
    io::Completion* c = opens.at(i);
    c->result = result;
    *stats.at(i) = io::FileStat{size, 1, 1000 + i, S_IFREG | 0644};
    c->callback(c);
  }

  // Finishes every content read in flight, each with all its bytes.
  void FinishReads() {
    std::vector<std::pair<io::Completion*, uint64_t>> now;
    now.swap(reads);
    for (auto [c, length] : now) {
      c->result = static_cast<int64_t>(length);
      c->callback(c);
    }
  }

  std::vector<std::pair<io::Completion*, uint64_t>> reads;
  std::vector<int> dirs;  // each open's directory
  std::vector<io::Completion*> opens;
  std::vector<io::FileStat*> stats;
  std::vector<std::string> paths;
  std::vector<int> closed;
};

class FileCacheTest : public ::testing::Test {
 protected:
  // `content_buffers`: a small-file content pool of that many 4 KiB buffers (none: no pool).
  void Make(uint32_t valid_ms, uint32_t entries = 8, uint32_t content_buffers = 0) {
    FileCacheOptions o;
    o.valid_ms = valid_ms_ = valid_ms;
    o.max_entries = entries;
    o.small_file_max = 4096;
    if (content_buffers > 0) pool_ = std::make_unique<mem::BufferPool>(4096, content_buffers);
    cache_ = std::make_unique<FileCache>(&loop_, -1, pool_.get(), o);
  }
  // A waited-for first lookup: the entry is ready and fresh at time `now` (`fd` -ENOENT: the
  // path known missing).
  void Load(const char* path, int fd, uint64_t size, int64_t now) {
    cache_->set_now(now);
    ASSERT_FALSE(cache_->Lookup(path));
    FileWaiter w;
    w.wake = [](FileWaiter*) {};
    ASSERT_TRUE(cache_->Fetch(path, &w));
    loop_.Finish(loop_.opens.size() - 1, fd, size);
    loop_.FinishReads();
    cache_->RunWakeups();
    if (valid_ms_ > 0) {
      ASSERT_TRUE(cache_->Lookup(path));
    }
  }

  ScriptedLoop loop_;
  uint32_t valid_ms_ = 0;
  std::unique_ptr<mem::BufferPool> pool_;
  std::unique_ptr<FileCache> cache_;
};

TEST_F(FileCacheTest, AnExpiredEntryAnswersWhileItsRevalidationRuns) {
  Make(1000);
  Load("a.css", 10, 100, 0);
  cache_->set_now(1500);  // expired, within one more valid_ms
  auto meta = cache_->Lookup("a.css");
  ASSERT_TRUE(meta) << "the request waits for the revalidation";
  EXPECT_EQ(meta->size, 100u);
  ASSERT_EQ(loop_.opens.size(), 2u) << "a revalidation started";
  EXPECT_EQ(loop_.paths[1], "a.css");
  EXPECT_TRUE(cache_->Lookup("a.css"));
  EXPECT_EQ(loop_.opens.size(), 2u) << "one revalidation at a time";
  EXPECT_EQ(cache_->Stats().stale_hits, 2u);

  loop_.Finish(1, 11, 200);  // the file grew: the successor takes the entry's place
  meta = cache_->Lookup("a.css");
  ASSERT_TRUE(meta);
  EXPECT_EQ(meta->size, 200u);
  EXPECT_EQ(loop_.closed, std::vector<int>{10}) << "the old entry's fd goes";
  EXPECT_EQ(cache_->Stats().entries, 1u);
  cache_->set_now(2400);
  EXPECT_TRUE(cache_->Lookup("a.css"));
  EXPECT_EQ(cache_->Stats().stale_hits, 2u) << "fresh again from 1500 for valid_ms";
}

TEST_F(FileCacheTest, PastTheGraceARequestWaitsAndJoinsTheRevalidation) {
  Make(1000);
  Load("a.css", 10, 100, 0);
  cache_->set_now(1500);
  ASSERT_TRUE(cache_->Lookup("a.css"));
  ASSERT_EQ(loop_.opens.size(), 2u);
  cache_->set_now(2000);  // 2 x valid_ms since it was read: no longer answered from it
  EXPECT_FALSE(cache_->Lookup("a.css"));
  FileWaiter w;
  bool woken = false;
  static bool* flag;
  flag = &woken;
  w.wake = [](FileWaiter*) { *flag = true; };
  ASSERT_TRUE(cache_->Fetch("a.css", &w));
  EXPECT_EQ(loop_.opens.size(), 2u) << "it joins the revalidation under way";
  loop_.Finish(1, 11, 300);
  cache_->RunWakeups();
  EXPECT_TRUE(woken);
  auto meta = cache_->Lookup("a.css");
  ASSERT_TRUE(meta);
  EXPECT_EQ(meta->size, 300u);
  EXPECT_EQ(cache_->Stats().entries, 1u);
}

TEST_F(FileCacheTest, ZeroValidMsHasNoGrace) {
  Make(0);
  Load("a.css", 10, 100, 0);
  cache_->set_now(1);
  EXPECT_FALSE(cache_->Lookup("a.css"));
  EXPECT_EQ(loop_.opens.size(), 1u);
}

TEST_F(FileCacheTest, APassingFailureKeepsTheOldEntry) {
  Make(1000);
  Load("a.css", 10, 100, 0);
  cache_->set_now(1200);
  ASSERT_TRUE(cache_->Lookup("a.css"));
  loop_.Finish(1, -EMFILE);
  auto meta = cache_->Lookup("a.css");
  ASSERT_TRUE(meta) << "EMFILE on a revalidation does not turn a served file into a 503";
  EXPECT_EQ(meta->size, 100u);
  EXPECT_EQ(loop_.opens.size(), 3u) << "and the next request past expiry tries again";
  loop_.Finish(2, -ENOENT);  // the file is gone: that is the answer from now on
  meta = cache_->Lookup("a.css");
  ASSERT_TRUE(meta);
  EXPECT_EQ(meta->kind, http::FileMeta::Kind::kMissing);
  EXPECT_EQ(loop_.closed, std::vector<int>{10});
}

TEST_F(FileCacheTest, AnEntryEvictedDuringItsRevalidationLeavesThePathToTheSuccessor) {
  Make(1000, 2);
  Load("a.css", 10, 100, 0);
  cache_->set_now(1200);
  ASSERT_TRUE(cache_->Lookup("a.css"));  // successor: the second of two entries
  ASSERT_EQ(loop_.opens.size(), 2u);
  // A new path needs an entry: the old a.css (unpinned, ready) is evicted.
  FileWaiter w;
  w.wake = [](FileWaiter*) {};
  ASSERT_TRUE(cache_->Fetch("b.css", &w));
  EXPECT_EQ(loop_.closed, std::vector<int>{10});
  loop_.Finish(2, 12, 50);
  loop_.Finish(1, 11, 200);
  cache_->RunWakeups();
  auto meta = cache_->Lookup("a.css");
  ASSERT_TRUE(meta) << "the successor took the free path";
  EXPECT_EQ(meta->size, 200u);
  EXPECT_TRUE(cache_->Lookup("b.css"));
}

TEST_F(FileCacheTest, NoFreeEntryMeansTheRequestWaits) {
  Make(1000, 1);
  Load("a.css", 10, 100, 0);
  cache_->set_now(1200);
  EXPECT_FALSE(cache_->Lookup("a.css")) << "no entry for a successor: the old way";
  EXPECT_EQ(loop_.opens.size(), 1u);
}

// The planner's RequestLookup pins the entry its last lookup found without hashing the path
// again, only while that is the planned path and no entry has left the map since.
TEST_F(FileCacheTest, PinningWhatTheLookupFoundNeedsThePathAndNoRetirementSince) {
  Make(1000, 2);
  Load("a.css", 10, 100, 0);
  {
    RequestLookup lookup(cache_.get(), cache_->validations());
    ASSERT_TRUE(lookup.Lookup("a.css"));
    CacheEntry* e = lookup.Pin("a.css");
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->fd, 10);
    EXPECT_EQ(e->pins, 1u);
    cache_->Unpin(e);
    EXPECT_EQ(lookup.Pin("b.css"), nullptr) << "another path than the one found: not cached";
  }
  RequestLookup lookup(cache_.get(), cache_->validations());
  ASSERT_TRUE(lookup.Lookup("a.css"));
  // Two new paths need both entries: a.css (unpinned, ready) is evicted and freed.
  FileWaiter wb, wc;
  wb.wake = wc.wake = [](FileWaiter*) {};
  ASSERT_TRUE(cache_->Fetch("b.css", &wb));
  ASSERT_TRUE(cache_->Fetch("c.css", &wc));
  EXPECT_EQ(loop_.closed, std::vector<int>{10});
  EXPECT_EQ(lookup.Pin("a.css"), nullptr) << "the entry found has left the map since";
  loop_.Finish(1, 12, 50);
  loop_.Finish(2, 13, 60);
  cache_->RunWakeups();
}

TEST_F(FileCacheTest, PinningWhatTheLookupFoundSkipsAnEntryReplacedSince) {
  Make(1000, 4);
  Load("a.css", 10, 100, 0);
  CacheEntry* held = cache_->Pin("a.css");  // a response in flight keeps the old entry alive
  ASSERT_NE(held, nullptr);
  RequestLookup lookup(cache_.get(), cache_->validations());
  ASSERT_TRUE(lookup.Lookup("a.css"));
  // Past expiry and its grace, a request replaces the entry: the old one leaves the map (still
  // pinned, same path) and a new one opens.
  cache_->set_now(2500);
  FileWaiter w;
  w.wake = [](FileWaiter*) {};
  ASSERT_TRUE(cache_->Fetch("a.css", &w));
  EXPECT_EQ(lookup.Pin("a.css"), nullptr) << "not the replaced entry: the new one is not ready";
  loop_.Finish(1, 11, 200);
  cache_->RunWakeups();
  CacheEntry* fresh = cache_->Pin("a.css");
  ASSERT_NE(fresh, nullptr);
  CacheEntry* again = cache_->Pin("a.css");
  EXPECT_EQ(cache_->Stats().pinned, 2u) << "the retired entry and the fresh one, once each";
  cache_->Unpin(again);
  cache_->Unpin(fresh);
  EXPECT_EQ(cache_->Stats().pinned, 1u);
  cache_->Unpin(held);
  EXPECT_EQ(cache_->Stats().pinned, 0u);
  EXPECT_EQ(loop_.closed, std::vector<int>{10});
}

// A missing path (a file's absent .br or .gz sibling, most often) is remembered apart from the
// entries: it takes none, and the files keep theirs.
TEST_F(FileCacheTest, AMissingPathTakesNoEntry) {
  Make(1000, 2);
  Load("a.css.gz", -ENOENT, 0, 0);
  auto meta = cache_->Lookup("a.css.gz");
  ASSERT_TRUE(meta);
  EXPECT_EQ(meta->kind, http::FileMeta::Kind::kMissing);
  EXPECT_EQ(cache_->Stats().entries, 0u);
  EXPECT_EQ(cache_->Stats().missing_known, 1u);
  Load("a.css", 10, 100, 0);
  Load("b.css", 11, 100, 0);
  EXPECT_EQ(cache_->Stats().evictions, 0u) << "two files fill two entries";
  EXPECT_TRUE(cache_->Lookup("a.css.gz")) << "still known missing";
  EXPECT_EQ(loop_.opens.size(), 3u);
}

// A waiter names its entry only while it waits on that entry's list. Woken, it waits for
// RunWakeups, and its entry may be gone by then (a path found missing keeps no entry): a
// connection that closes before its wake-up runs must find nothing there that names it.
TEST_F(FileCacheTest, AWokenWaiterNamesNoEntry) {
  Make(1000);
  int wakes = 0;
  struct Waiter : FileWaiter {
    int* wakes = nullptr;
  } w;
  w.wakes = &wakes;
  w.wake = [](FileWaiter* fw) { ++*static_cast<Waiter*>(fw)->wakes; };
  ASSERT_TRUE(cache_->Fetch("gone.txt", &w));
  EXPECT_NE(w.entry, nullptr) << "waiting on the entry that opens the path";
  loop_.Finish(0, -ENOENT);
  EXPECT_EQ(cache_->Stats().entries, 0u) << "the entry was freed";
  EXPECT_TRUE(w.woken);
  EXPECT_EQ(w.entry, nullptr) << "a woken waiter still names the entry that was freed";
  cache_->Forget(&w);  // its connection closes first
  EXPECT_FALSE(w.woken);
  cache_->RunWakeups();
  EXPECT_EQ(wakes, 0);
  // And one woken as usual.
  ASSERT_TRUE(cache_->Fetch("gone.txt", &w)) << "a forgotten waiter can wait again";
  loop_.Finish(1, -ENOENT);
  cache_->RunWakeups();
  EXPECT_EQ(wakes, 1);
  EXPECT_FALSE(w.woken);
  EXPECT_EQ(w.entry, nullptr);
}

TEST_F(FileCacheTest, AMissingPathRevalidatesBesideItsRequests) {
  Make(1000);
  Load("new.txt", -ENOENT, 0, 0);
  cache_->set_now(1500);  // expired, within one more valid_ms
  auto meta = cache_->Lookup("new.txt");
  ASSERT_TRUE(meta) << "answered while it revalidates";
  EXPECT_EQ(meta->kind, http::FileMeta::Kind::kMissing);
  ASSERT_EQ(loop_.opens.size(), 2u) << "a revalidation started";
  EXPECT_TRUE(cache_->Lookup("new.txt"));
  EXPECT_EQ(loop_.opens.size(), 2u) << "one revalidation at a time";
  loop_.Finish(1, 12, 42);  // the file has appeared since
  meta = cache_->Lookup("new.txt");
  ASSERT_TRUE(meta);
  EXPECT_EQ(meta->kind, http::FileMeta::Kind::kRegular);
  EXPECT_EQ(meta->size, 42u);
  EXPECT_EQ(cache_->Stats().missing_known, 0u) << "no longer missing";
  EXPECT_EQ(cache_->Stats().entries, 1u);
  // Past the grace a request waits for the open, as for an entry.
  Load("gone.txt", -ENOENT, 0, 1500);
  cache_->set_now(3500);
  EXPECT_FALSE(cache_->Lookup("gone.txt"));
}

TEST_F(FileCacheTest, AMissingPathCountsAsFreshForTheRequestThatWaitedForIt) {
  Make(0);  // no validity at all: only the request that waited may use the answer
  const uint64_t since = cache_->validations();
  Load("x.br", -ENOENT, 0, 0);
  RequestLookup lookup(cache_.get(), since);
  auto meta = lookup.Lookup("x.br");
  ASSERT_TRUE(meta);
  EXPECT_EQ(meta->kind, http::FileMeta::Kind::kMissing);
  EXPECT_FALSE(cache_->Lookup("x.br")) << "a later request asks again";
}

// Asking again about a path known missing takes a spare entry: a file's absent siblings never
// evict the files (each file asks for two, and each file evicted has to be opened again).
TEST_F(FileCacheTest, ARecheckOfAMissingPathEvictsNoFile) {
  Make(1000, 2);
  Load("a.css.gz", -ENOENT, 0, 0);
  Load("a.css", 10, 100, 2000);
  Load("b.css", 11, 100, 2000);
  cache_->set_now(2500);  // past the sibling's grace (the files are fresh): a request waits
  EXPECT_FALSE(cache_->Lookup("a.css.gz"));
  FileWaiter w;
  w.wake = [](FileWaiter*) {};
  ASSERT_TRUE(cache_->Fetch("a.css.gz", &w));
  EXPECT_EQ(cache_->Stats().evictions, 0u);
  loop_.Finish(loop_.opens.size() - 1, -ENOENT);
  cache_->RunWakeups();
  EXPECT_EQ(cache_->Stats().entries, 2u) << "the recheck's entry is gone again";
  cache_->set_now(2600);
  EXPECT_TRUE(cache_->Lookup("a.css")) << "the files are still there";
  EXPECT_TRUE(cache_->Lookup("b.css"));
  EXPECT_TRUE(cache_->Lookup("a.css.gz"));
}

// A re-check that finds the path there now gives a spare entry back (evicting the least recently
// used file), so the spares stay spare and the entries within their bound.
TEST_F(FileCacheTest, ARecheckThatFindsTheFileGivesItsSpareEntryBack) {
  Make(1000, 2);
  Load("a.css.gz", -ENOENT, 0, 0);
  Load("a.css", 10, 100, 2000);
  Load("b.css", 11, 100, 2000);
  cache_->set_now(2500);
  EXPECT_FALSE(cache_->Lookup("a.css.gz"));
  FileWaiter w;
  w.wake = [](FileWaiter*) {};
  ASSERT_TRUE(cache_->Fetch("a.css.gz", &w));
  loop_.Finish(loop_.opens.size() - 1, 12, 40);  // it exists now
  cache_->RunWakeups();
  EXPECT_EQ(cache_->Stats().entries, 2u);
  EXPECT_EQ(cache_->Stats().evictions, 1u);
  auto meta = cache_->Lookup("a.css.gz");
  ASSERT_TRUE(meta);
  EXPECT_EQ(meta->kind, http::FileMeta::Kind::kRegular);
}

// More small files than content buffers: a newer one takes the least recently used content that
// no response holds, and every file keeps its entry (evicting the least recently used entry would
// lose a file, and free no buffer when that entry has none).
TEST_F(FileCacheTest, AFullContentPoolGivesBackContentNotEntries) {
  Make(1000, 8, 2);
  Load("a.css", 10, 100, 0);
  Load("big.bin", 11, 1 << 20, 0);  // too big for content: the fd serves it
  Load("b.css", 12, 100, 0);
  CacheEntry* held = cache_->Pin("b.css");  // a response is sending b.css's content
  ASSERT_NE(held, nullptr);
  ASSERT_NE(held->content, nullptr);
  Load("c.css", 13, 100, 0);  // the pool is full: a.css's content is the oldest not held
  EXPECT_EQ(cache_->Stats().evictions, 0u);
  EXPECT_EQ(cache_->Stats().entries, 4u) << "every file keeps its entry";
  EXPECT_EQ(cache_->Stats().content_dropped, 1u);
  EXPECT_EQ(cache_->Stats().content_buffers, 2u);
  CacheEntry* a = cache_->Pin("a.css");
  CacheEntry* c = cache_->Pin("c.css");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(a->content, nullptr) << "a.css is sent from its fd now";
  EXPECT_EQ(a->fd, 10);
  EXPECT_NE(c->content, nullptr);
  EXPECT_NE(held->content, nullptr) << "content a response holds stays";
  EXPECT_TRUE(cache_->Lookup("big.bin"));
  EXPECT_TRUE(loop_.closed.empty()) << "no file was closed";
  cache_->Unpin(a);
  cache_->Unpin(c);
  cache_->Unpin(held);
  // Use keeps content: b.css, asked for last, keeps its content; c.css's goes for d.css.
  ASSERT_TRUE(cache_->Lookup("c.css"));
  ASSERT_TRUE(cache_->Lookup("b.css"));
  Load("d.css", 14, 100, 0);
  CacheEntry* b = cache_->Pin("b.css");
  c = cache_->Pin("c.css");
  EXPECT_NE(b->content, nullptr);
  EXPECT_EQ(c->content, nullptr);
  cache_->Unpin(b);
  cache_->Unpin(c);
}

// A prefetch (a request's next lookups, started beside the one it waits for) opens what is not
// known, once, with nobody waiting; over the bound it takes a spare entry and evicts no file.
TEST_F(FileCacheTest, APrefetchOpensOnceAndEvictsNoFile) {
  Make(1000, 2);
  Load("a.css", 10, 100, 0);
  Load("b.css", 11, 100, 0);
  const size_t opens = loop_.opens.size();
  cache_->Prefetch("a.css");  // known and fresh: nothing to do
  EXPECT_EQ(loop_.opens.size(), opens);
  cache_->Prefetch("a.css.br");
  ASSERT_EQ(loop_.opens.size(), opens + 1);
  EXPECT_EQ(loop_.paths.back(), "a.css.br");
  cache_->Prefetch("a.css.br");  // loading: not again
  EXPECT_EQ(loop_.opens.size(), opens + 1);
  EXPECT_EQ(cache_->Stats().evictions, 0u);
  EXPECT_EQ(cache_->Stats().entries, 3u) << "a spare entry";
  loop_.Finish(opens, -ENOENT);
  cache_->RunWakeups();  // nobody to wake
  EXPECT_EQ(cache_->Stats().entries, 2u);
  auto meta = cache_->Lookup("a.css.br");
  ASSERT_TRUE(meta) << "the request's next lookup finds the answer";
  EXPECT_EQ(meta->kind, http::FileMeta::Kind::kMissing);
  EXPECT_TRUE(cache_->Lookup("a.css"));
  EXPECT_TRUE(cache_->Lookup("b.css"));
}

// A re-check (or a prefetch) in a spare entry that finds the file gives an entry back, but never
// its own: with every other entry held by a response, it would be the only one to evict, and
// would be freed inside its own completion, with its waiter still to be woken.
TEST_F(FileCacheTest, ASpareEntryThatFindsItsFileNeverEvictsItself) {
  Make(1000, 1);
  Load("a.css.gz", -ENOENT, 0, 0);
  Load("a.css", 10, 100, 2000);
  CacheEntry* held = cache_->Pin("a.css");
  ASSERT_NE(held, nullptr);
  cache_->set_now(2500);
  EXPECT_FALSE(cache_->Lookup("a.css.gz"));
  FileWaiter w;
  static bool woken;
  woken = false;
  w.wake = [](FileWaiter*) { woken = true; };
  ASSERT_TRUE(cache_->Fetch("a.css.gz", &w));
  loop_.Finish(loop_.opens.size() - 1, 12, 40);  // it exists now
  cache_->RunWakeups();
  EXPECT_TRUE(woken);
  EXPECT_TRUE(loop_.closed.empty()) << "neither file was closed";
  auto meta = cache_->Lookup("a.css.gz");
  ASSERT_TRUE(meta);
  EXPECT_EQ(meta->kind, http::FileMeta::Kind::kRegular);
  cache_->Unpin(held);
}

// --root renamed over (DocumentRoot): every path known, found or missing, is opened again beneath
// the new root at its next request, with no grace; an open under way when the root changed
// answers its waiters but is not remembered.
TEST_F(FileCacheTest, ASwitchedRootOpensEveryPathAgainBeneathTheNewOne) {
  Make(1000);
  Load("a.css", 10, 100, 0);
  Load("gone.txt", -ENOENT, 0, 1);  // known missing, fresh
  FileWaiter late;
  bool late_woken = false;
  static bool* late_flag;
  late_flag = &late_woken;
  late.wake = [](FileWaiter*) { *late_flag = true; };
  ASSERT_FALSE(cache_->Lookup("b.js"));
  ASSERT_TRUE(cache_->Fetch("b.js", &late));  // under way beneath the old root
  const size_t b_open = loop_.opens.size() - 1;

  cache_->SwitchRoot(7);
  EXPECT_EQ(loop_.closed, std::vector<int>{10});  // the old release's file, closed now
  cache_->RunWakeups();
  EXPECT_TRUE(late_woken);  // it plans again at once, without waiting for the old root's open
  cache_->set_now(2);       // all of it fresh by the clock
  EXPECT_FALSE(cache_->Lookup("a.css"));
  EXPECT_FALSE(cache_->Lookup("gone.txt"));
  EXPECT_FALSE(cache_->Lookup("b.js"));
  ASSERT_TRUE(cache_->Fetch("b.js", &late));
  EXPECT_EQ(loop_.dirs.back(), 7);
  loop_.Finish(b_open, 12, 300);  // the old root's open ends alone: closed, not remembered
  EXPECT_EQ(loop_.closed.back(), 12);
  loop_.Finish(loop_.opens.size() - 1, 13, 310);
  cache_->RunWakeups();
  EXPECT_EQ(cache_->Lookup("b.js")->size, 310u);

  const size_t before = loop_.opens.size();
  Load("a.css", 20, 200, 3);
  ASSERT_EQ(loop_.opens.size(), before + 1);
  EXPECT_EQ(loop_.dirs.back(), 7);
  EXPECT_EQ(cache_->Lookup("a.css")->size, 200u);
  Load("gone.txt", 21, 50, 3);  // there beneath the new root
  EXPECT_EQ(loop_.dirs.back(), 7);
  EXPECT_EQ(cache_->Lookup("gone.txt")->size, 50u);
  EXPECT_EQ(loop_.dirs.front(), -1);
}

TEST_F(FileCacheTest, ARevalidationUnderWayBeneathTheOldRootIsNotTakenUp) {
  Make(1000);
  Load("c.css", 10, 100, 0);
  cache_->set_now(1500);
  ASSERT_TRUE(cache_->Lookup("c.css"));  // a stale hit: its revalidation starts, beneath -1
  const size_t beside = loop_.opens.size() - 1;
  cache_->SwitchRoot(7);
  EXPECT_FALSE(cache_->Lookup("c.css"));
  const uint64_t since = cache_->validations();  // a request that begins after the switch
  loop_.Finish(beside, 11, 111);
  cache_->RunWakeups();
  EXPECT_FALSE(cache_->LookupSince("c.css", since));
  Load("c.css", 12, 222, 1500);
  EXPECT_EQ(loop_.dirs.back(), 7);
  EXPECT_EQ(cache_->Lookup("c.css")->size, 222u);
  EXPECT_EQ(loop_.closed.size(), 2u);  // the old entry's fd and its successor's
}

TEST_F(FileCacheTest, AMissingPathsRecheckUnderWayBeneathTheOldRootIsNotRemembered) {
  Make(1000);
  Load("m.txt", -ENOENT, 0, 0);  // known missing
  cache_->set_now(1500);
  ASSERT_TRUE(cache_->Lookup("m.txt"));  // a stale hit: its re-check starts, beneath -1
  const size_t recheck = loop_.opens.size() - 1;
  EXPECT_EQ(loop_.dirs.back(), -1);
  cache_->SwitchRoot(7);
  const uint64_t since = cache_->validations();  // a request that begins after the switch
  loop_.Finish(recheck, 11, 5);                  // there beneath the old root
  cache_->RunWakeups();
  cache_->set_now(1501);
  EXPECT_FALSE(cache_->LookupSince("m.txt", since));  // opened beneath the new root first
  EXPECT_EQ(loop_.closed.back(), 11);
  Load("m.txt", 12, 6, 1501);
  EXPECT_EQ(loop_.dirs.back(), 7);
  EXPECT_EQ(cache_->Lookup("m.txt")->size, 6u);
}

}  // namespace
}  // namespace ringd
