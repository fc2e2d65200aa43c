// A shard's directory listings (--autoindex), made off the shard: reading a directory
// (getdents64, and a statx per entry shown) may wait for the disk, io_uring has no operation for
// it, and the epoll tier's workers are the loop's own. So the lister owns one thread, started with
// it; the shard hands it a listing to make (Start), the thread writes the whole body into the
// listing's buffer, queues it back and wakes the shard's loop (Loop::Wake), and the shard runs the
// waiter's wake-up after its Poll (RunWakeups), never from the thread.
//
//   DirLister lister(loop, options);                        // with --autoindex only
//   DirListing* l = lister.Start(root_fd, "pub", "/pub/", &ex->waiter);  // null: all busy (503)
//   lister.RunWakeups();                                    // after each Poll
//   lister.Release(l);                                      // the response is done with it
//
// Bounded: kSlots listings per shard at once, each a buffer of kBufferBytes (mapped on first
// use); a listing shows the first kMaxEntries entries by name, and fewer when their text fills
// the buffer, and then says it was cut. The thread keeps only the kMaxEntries smallest names
// while it reads, so a directory of any size costs it that much memory.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "io/loop.h"
#include "mem/intrusive_list.h"
#include "server/core/file_cache.h"
#include "server/http/dir_listing.h"

namespace ringd {

struct DirListing {
  // Set by Start on the shard; read by the thread.
  std::string dir;       // relative to the root ("." for the root)
  std::string url_path;  // its decoded URL path, the listing's title
  int root_fd = -1;
  FileWaiter* waiter = nullptr;  // woken (on the shard) when the listing is made
  // Set by the thread.
  int status = 0;         // 200, or 403, 404, 500, 503
  std::string_view body;  // status 200: in `buf`
  // The lister's own.
  enum class State : uint8_t { kFree, kQueued, kDone, kWoken } state = State::kFree;
  bool abandoned = false;  // released before its wake-up ran: freed when the thread is done
  char* buf = nullptr;
  mem::ListLink<DirListing> link;  // on the queue to the thread, or back
};

class DirLister {
 public:
  static constexpr uint32_t kSlots = 4;
  static constexpr size_t kBufferBytes = 1 << 20;
  static constexpr uint32_t kMaxEntries = 10000;

  struct Options {
    http::ListingFormat format = http::ListingFormat::kHtml;
    bool show_dot_files = false;  // --serve-dot-files
  };

  DirLister(io::Loop* loop, const Options& options);
  ~DirLister();  // waits for the listing the thread is making, if any
  DirLister(const DirLister&) = delete;
  DirLister& operator=(const DirLister&) = delete;

  // Starts listing `dir` beneath `root_fd`; `waiter->wake` runs from RunWakeups once it is made.
  // Null when every slot is taken.
  DirListing* Start(int root_fd, std::string_view dir, std::string_view url_path,
                    FileWaiter* waiter);
  // The listing's requester is done with it (its response ended, or it stopped waiting): freed
  // now, or once the thread has finished it.
  void Release(DirListing* l);
  // Whether `l` is still being made, or made and its wake-up not yet run.
  bool Waiting(DirListing* l);
  // Runs the wake-ups of the listings the thread has finished since the last call.
  void RunWakeups();
  uint32_t in_use() const { return in_use_; }

  // Lists `dir` beneath `root_fd` into `l` (blocking): the thread's work, public for the tests.
  static void Make(const Options& options, DirListing* l);

 private:
  void Run();

  io::Loop* loop_;
  Options options_;
  DirListing slots_[kSlots];
  uint32_t in_use_ = 0;  // slots not free (the shard's count)
  std::mutex mu_;
  std::condition_variable work_;
  mem::IntrusiveList<DirListing, &DirListing::link> queued_;  // to the thread, under mu_
  mem::IntrusiveList<DirListing, &DirListing::link> done_;    // back to the shard, under mu_
  bool stopping_ = false;                                     // under mu_
  std::thread thread_;
};

}  // namespace ringd
