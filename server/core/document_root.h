// The document root every shard opens files beneath: the directory that --root names, followed
// when the name comes to mean another directory. Deploys switch a release by renaming a symlink
// or a directory over the old name (`ln -sfn releases/42 current.new && mv -T current.new
// current`); nginx resolves `root` for every request and serves the new release at once. ringd
// opens files relative to a directory descriptor (RESOLVE_BENEATH), so a thread of its own
// (RootWatch, below) checks the name once a second and on SIGHUP (Check), opens the
// directory it names now when that is another one, and publishes it; each shard takes it up at
// its next turn (FileCache::SwitchRoot).
//
//   DocumentRoot root(config.root, fd);     // fd: the O_PATH directory opened at start-up
//   std::string line = root.Check();        // one thread: "" unless something changed
//   uint64_t s = root.state();              // shard: changes when the root does; Fd(s)
//
// Descriptors of directories served before stay open (a shard's opens in flight, or queued on
// a worker, still name them) until kRetiredMax newer roots have followed; then the oldest closes.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace ringd {

class DocumentRoot {
 public:
  static constexpr size_t kRetiredMax = 64;

  // Takes ownership of `fd`, the directory `path` named at start-up. `flag` names it in the
  // lines Check returns ("--root", or "--site example.org: --root").
  DocumentRoot(std::string path, int fd, std::string flag = "--root");
  ~DocumentRoot();
  DocumentRoot(const DocumentRoot&) = delete;
  DocumentRoot& operator=(const DocumentRoot&) = delete;

  // Shards: the root's generation and descriptor in one word, read in one load. The word is what
  // a shard is lent (Shard::SetDocumentRoot), so a simulator can move a root of its own.
  uint64_t state() const { return state_.load(std::memory_order_acquire); }
  const std::atomic<uint64_t>* state_word() const { return &state_; }
  static uint64_t State(uint64_t generation, int fd) {
    return generation << 32 | static_cast<uint32_t>(fd);
  }
  static int Fd(uint64_t state) { return static_cast<int>(state & 0xffffffffu); }

  // One thread only. When the path names another directory than the one served (and the user
  // ringd serves as can search it), opens it and publishes it. Returns a line for the log when the
  // root changed, or when the path stopped (or resumed) naming a directory that can be opened; ""
  // otherwise. An error keeps the directory in use.
  std::string Check();

 private:
  void Publish(int fd);

  std::string path_;
  std::string flag_;
  std::atomic<uint64_t> state_;
  int fd_;  // the current root (also in state_)
  dev_t dev_;
  ino_t ino_;
  std::deque<int> retired_;
  std::string last_error_;  // said once until the path works again
};

// The thread that runs a root's check: once a second and at once on CheckNow (SIGHUP). A stat
// of a root on a network file system whose server is gone waits here, not in the thread that
// handles signals and the watchdog. Start it after the signals are blocked, so it takes none.
//
//   RootWatch watch([&] { ... root.Check() ...; wake the shards if it moved; });
//   watch.CheckNow();
//   if (!watch.Stop(std::chrono::seconds(1))) _exit(0);  // a check stuck past the drain
class RootWatch {
 public:
  explicit RootWatch(std::function<void()> check);
  // Joins the thread: after a Stop that returned true, or with a check that returns.
  ~RootWatch();
  RootWatch(const RootWatch&) = delete;
  RootWatch& operator=(const RootWatch&) = delete;

  void CheckNow();
  // Asks the thread to end and waits up to `wait` for it. False while a check is still under way
  // then: the caller ends the process without it (nothing the check touches may be destroyed
  // while it runs, this included).
  bool Stop(std::chrono::milliseconds wait);

 private:
  void Run();

  std::function<void()> check_;
  std::mutex mu_;
  std::condition_variable cv_;        // to the thread: stop_ or now_
  std::condition_variable ended_cv_;  // from the thread: ended_
  bool stop_ = false;
  bool now_ = false;
  bool ended_ = false;
  std::thread thread_;  // last: it runs once the rest is built
};

}  // namespace ringd
