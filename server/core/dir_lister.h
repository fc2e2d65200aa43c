// A shard's directory listings (--autoindex), made off the shard and streamed: reading a
// directory (getdents64, and a statx per entry shown) may wait for the disk, io_uring has no
// operation for it, and the epoll tier's workers are the loop's own. So the lister owns one
// thread, started with it. The shard hands it a listing (Start); the thread reads and sorts the
// names, says the status (the waiter's wake-up), then formats the body a piece at a time into
// the listing's ring of kPieces buffers and wakes the shard for each (Loop::Wake; the shard runs
// the wake-ups after its Poll, RunWakeups, never from the thread). The shard sends each piece
// and hands it back (Consume); when every piece is made and not yet sent, the thread leaves that
// listing and works on others until one comes back: the listing's unsent bytes in ringd are at
// most kPieces * kPieceBytes, however slowly its client reads.
//
//   DirLister lister(loop, options);                        // with --autoindex only
//   DirListing* l = lister.Start(root_fd, "pub", "/pub/", &ex->waiter);  // null: all busy (503)
//   lister.RunWakeups();                                    // after each Poll
//   // waiter woken: l->status. 200: the body follows, piece by piece.
//   lister.Follow(l, &OnMore, arg);                         // OnMore(arg): another piece is made
//   ListingPiece p = lister.Next(l);  /* send p */  lister.Consume(l);   ...  lister.Ended(l)
//   lister.Release(l);                                      // the response is done with it
//
// Bounded: kSlots listings per shard at once, each a ring of kPieces * kPieceBytes (mapped on
// first use), and the names it shows: at most Options::max_entries, held by the thread (NameSet:
// at most twice that many while it reads, at most NAME_MAX + 5 bytes each), from the directory's
// read until its last piece is made. A directory with more entries shows the first max_entries by
// name, then says it was cut.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "io/loop.h"
#include "mem/intrusive_list.h"
#include "server/core/file_cache.h"
#include "server/http/dir_listing.h"

namespace ringd {

// The names of a directory a listing shows: the `keep` smallest (bytewise, as strcmp) of those
// added, sorted by Sort. Each is kept NUL-terminated in one string; past twice `keep` names the
// largest are dropped (Trim), so the memory stays bounded however many are added.
class NameSet {
 public:
  explicit NameSet(size_t keep) : keep_(keep) {}
  void Add(std::string_view name);
  void Sort();  // the `keep` smallest, in order
  size_t size() const { return at_.size(); }
  const char* operator[](size_t i) const { return bytes_.data() + at_[i]; }
  void Free();  // gives the memory back

 private:
  void Trim();
  size_t keep_;
  std::string bytes_;
  std::vector<uint32_t> at_;  // where each name begins in bytes_
};

// A piece of a listing's body, ready to send: `len` bytes at `data`, with kPieceFront writable
// bytes before it and kPieceBack after it (for HTTP/1.1's chunk framing).
struct ListingPiece {
  char* data = nullptr;
  size_t len = 0;
  bool last = false;  // the body's last piece
};

struct DirListing {
  // Set by Start on the shard; read by the thread.
  std::string dir;       // relative to the root ("." for the root)
  std::string url_path;  // its decoded URL path, the listing's title
  int root_fd = -1;
  http::ListingFormat format = http::ListingFormat::kHtml;  // its site's --autoindex-format
  FileWaiter* waiter = nullptr;  // woken (on the shard) once `status` is known
  // Set by the thread before the waiter's wake-up.
  int status = 0;  // 200, or 403, 404, 500, 503
  // The shard's own.
  bool taken = false;             // the slot is in use
  bool status_woken = false;      // the waiter's wake-up has run
  void (*more)(void*) = nullptr;  // Follow: run from RunWakeups for each piece made
  void* more_arg = nullptr;
  char* buf = nullptr;  // the ring: kPieces pieces, mapped on first use
  // Under the lister's mutex.
  uint32_t made = 0;           // pieces the thread has made
  uint32_t consumed = 0;       // pieces the shard has handed back
  bool finished = false;       // the thread has made the last piece (or failed)
  bool queued = false;         // on the thread's queue
  bool making = false;         // the thread works on it
  bool notified = false;       // on the queue back to the shard
  bool released = false;       // the shard is done with it: freed once the thread is
  uint32_t piece_len[2] = {};  // each piece's length once made
  // The thread's own while it makes the listing.
  enum class Stage : uint8_t { kOpen, kBegin, kEntries, kEnd, kDone } stage = Stage::kOpen;
  int fd = -1;
  NameSet names{0};
  size_t next = 0;     // the next name to format
  uint64_t total = 0;  // the directory's entries (hidden ones not counted)
  http::ListingWriter writer{http::ListingFormat::kHtml};
  mem::ListLink<DirListing> to_thread;
  mem::ListLink<DirListing> to_shard;
};

class DirLister {
 public:
  static constexpr uint32_t kSlots = 4;
  static constexpr uint32_t kPieces = 2;
  static constexpr size_t kPieceBytes = 64 << 10;
  static constexpr size_t kPieceFront = 16, kPieceBack = 16;
  static constexpr size_t kPieceStride = kPieceFront + kPieceBytes + kPieceBack;
  // The longest title (a directory path beneath the root, and its slashes) fits an empty piece;
  // so does any entry, and the closing.
  static_assert(http::ListingWriter::MaxBeginBytes(http::PlanScratch::kMaxPath + 2) <= kPieceBytes);
  static_assert(http::ListingWriter::kMaxEntryBytes + http::ListingWriter::kMaxEndBytes <=
                kPieceBytes);
  static_assert(sizeof(DirListing::piece_len) / sizeof(uint32_t) == kPieces);

  struct Options {
    http::ListingFormat format = http::ListingFormat::kHtml;
    bool show_dot_files = false;    // --serve-dot-files
    uint32_t max_entries = 100000;  // --autoindex-max-entries
  };

  DirLister(io::Loop* loop, const Options& options);
  ~DirLister();  // waits for the piece the thread is making, if any
  DirLister(const DirLister&) = delete;
  DirLister& operator=(const DirLister&) = delete;

  // Starts listing `dir` beneath `root_fd`; `waiter->wake` runs from RunWakeups once its status
  // is known. Null when every slot is taken. `format`: the site's (null: Options::format).
  DirListing* Start(int root_fd, std::string_view dir, std::string_view url_path,
                    FileWaiter* waiter, const http::ListingFormat* format = nullptr);
  // The listing's requester is done with it (its response ended, or it stopped waiting): freed
  // now, or once the thread has let it go (it stops making it at the next piece).
  void Release(DirListing* l);
  // Whether the waiter's wake-up has yet to run.
  bool Waiting(const DirListing* l) const { return !l->status_woken; }
  // Status 200: from now on `more(arg)` runs from RunWakeups after the thread has made another
  // piece, until Release. (Pieces made before may have been announced with the status: the
  // shard calls Next first, and waits for `more` only when Next has nothing.)
  void Follow(DirListing* l, void (*more)(void*), void* arg);
  // The oldest piece made and not yet handed back, or an empty piece when none is made yet.
  // The last piece need not be handed back: Release takes it too.
  ListingPiece Next(DirListing* l);
  // The piece Next gave is sent (or copied): its buffer goes back to the thread.
  void Consume(DirListing* l);
  // Pieces made and not yet handed back (at most kPieces: the thread waits for the shard).
  uint32_t Unsent(DirListing* l);
  // Whether every piece is made and handed back: the body is over.
  bool Ended(DirListing* l);
  // Runs the wake-ups of the listings the thread has moved on since the last call.
  void RunWakeups();
  uint32_t in_use() const { return in_use_; }

  // Lists `dir` beneath `root_fd` whole into `body` (blocking, a piece at a time through
  // `l`'s ring): the thread's work, on the caller's thread, for the tests. Returns the status.
  static int MakeAll(const Options& options, int root_fd, std::string_view dir,
                     std::string_view url_path, std::string* body);

 private:
  // The thread's steps (MakeStep: read and sort, or one piece).
  static void Open(const Options& options, DirListing* l);
  static bool FillPiece(const Options& options, DirListing* l, uint32_t index);
  static void Clean(DirListing* l);
  void Run();
  void Notify(DirListing* l);  // under mu_
  void Free(DirListing* l);    // the shard's, under mu_

  io::Loop* loop_;
  Options options_;
  DirListing slots_[kSlots];
  uint32_t in_use_ = 0;  // slots taken (the shard's count)
  std::mutex mu_;
  std::condition_variable work_;
  mem::IntrusiveList<DirListing, &DirListing::to_thread> queued_;  // under mu_
  mem::IntrusiveList<DirListing, &DirListing::to_shard> done_;     // under mu_
  bool stopping_ = false;                                          // under mu_
  std::thread thread_;
};

}  // namespace ringd
