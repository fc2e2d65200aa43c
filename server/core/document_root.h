// The document root every shard opens files beneath: the directory that --root names, followed
// when the name comes to mean another directory. Deploys switch a release by renaming a symlink
// or a directory over the old name (`ln -sfn releases/42 current.new && mv -T current.new
// current`); nginx resolves `root` for every request and serves the new release at once. ringd
// opens files relative to a directory descriptor (RESOLVE_BENEATH), so a thread of its own
// (ringd_main's RootWatch) checks the name once a second and on SIGHUP (Check), opens the
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
#include <cstdint>
#include <deque>
#include <string>

namespace ringd {

class DocumentRoot {
 public:
  static constexpr size_t kRetiredMax = 64;

  // Takes ownership of `fd`, the directory `path` named at start-up.
  DocumentRoot(std::string path, int fd);
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
  std::atomic<uint64_t> state_;
  int fd_;  // the current root (also in state_)
  dev_t dev_;
  ino_t ino_;
  std::deque<int> retired_;
  std::string last_error_;  // said once until the path works again
};

}  // namespace ringd
