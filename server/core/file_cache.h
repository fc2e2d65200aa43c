// A shard's open-file cache (like nginx's open_file_cache) with the small-file content cache
// inside it. Each entry holds a path's metadata, its open fd (regular files), and for small
// files their bytes in a buffer of the shard's content pool, so a hot small file costs no file
// syscall. Entries are revalidated by opening and statx-ing again after `valid_ms`. Negative
// results (missing files, absent .br and .gz siblings) are kept apart, in a fixed table of path
// hashes (MissingPaths), so that the two siblings every file is asked for do not take two of
// the entries; they are revalidated the same way. Bounded in entries and in content bytes:
// least recently used entries go first, and when the content buffers run out, the least recently
// used content goes back to the pool (its entry stays, served from its fd). Everything runs on the
// shard thread.
//
//   cache.Lookup("css/site.css")        -> metadata, or nullopt: not known yet
//   cache.Fetch("css/site.css", &w)     -> opens it through the loop; `w` is woken when known
//   cache.RunWakeups()                  -> after each Poll: runs the wake-ups, never inside Ready
//   Entry* e = cache.Pin(path)          -> keeps fd and content alive for a response; Unpin(e)
//
// A request that waited for a lookup plans again with RequestLookup: an entry validated since
// the request began counts as fresh for it however short `valid_ms` is, so
// --open-file-cache-valid-ms=0 and passing failures (EMFILE: 503) cannot send it round again.
//
// Revalidation does not make requests wait while the entry is less than one more `valid_ms`
// past its expiry: the request is answered from the entry, and a revalidation (a successor
// entry, out of the map) runs beside it and takes the entry's place when it is ready. So a hot
// file's requests never queue behind an open that waits for a saturated disk (its statx shares
// io-wq with the cold files' opens), and a change is seen at most 2 x valid_ms after it happened
// (immediately with --open-file-cache-valid-ms=0, which has no such grace).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "io/loop.h"
#include "mem/buffer_pool.h"
#include "mem/intrusive_list.h"
#include "mem/slab_pool.h"
#include "server/core/compressor.h"
#include "server/http/response_plan.h"

namespace ringd {

// Something waiting for a path's metadata: a connection whose planning stopped at kNeedLookup.
// It is on one list at a time: its entry's waiters (`entry` names that entry), then the cache's
// woken queue (`woken`; `entry` is null, since the entry may be freed before the wake-up runs).
struct FileWaiter {
  mem::ListLink<FileWaiter> link;  // on its entry's waiter list, then on the cache's woken queue
  struct CacheEntry* entry = nullptr;  // the entry whose waiter list it is on
  bool woken = false;                  // on the cache's woken queue
  void (*wake)(FileWaiter*) = nullptr;
  bool waiting() const { return entry != nullptr || woken; }
};
using FileWaiters = mem::IntrusiveList<FileWaiter, &FileWaiter::link>;

struct CacheEntry {
  std::string path;  // relative to the root; also the map key
  http::FileMeta meta;
  int fd = -1;              // regular files only
  char* content = nullptr;  // small files: the whole file, from the content pool
  bool ready = false;       // metadata known (false while opening / reading)
  bool in_map = true;       // false once replaced by a fresher entry or evicted
  int64_t expires_ms = 0;
  uint64_t validation = 0;             // the cache's validation count when its metadata was read
  uint32_t pins = 0;                   // responses using fd/content now
  FileWaiters waiters;                 // newest first
  mem::ListLink<CacheEntry> lru_link;  // on the cache's lru_ while in the map
  mem::ListLink<CacheEntry> content_link;  // and on its content_lru_ while it holds content
  io::Completion op;                       // the open, then the content read
  io::FileStat stat;                       // what the open found
  bool reading = false;  // `op` is the content read (the cache's own record, not the loop's)
  bool spare = false;    // opened in one of the spare entries (a missing path asked again)
  uint32_t root_generation = 0;  // the cache's root (SwitchRoot) when its open began
  // Revalidation beside requests (see the top): the old entry's successor while it loads, and
  // the successor's link back (null once the old one has left the map).
  bool revalidating = false;  // this entry is a successor, not in the map yet
  CacheEntry* successor = nullptr;
  CacheEntry* replaces = nullptr;
  class FileCache* cache = nullptr;
};

struct FileCacheOptions {
  uint32_t max_entries = 10000;
  uint32_t valid_ms = 1000;
  uint32_t small_file_max = 16384;  // also the content pool's buffer size bound
};

struct FileCacheStats {
  uint64_t hits = 0, misses = 0, opens = 0, evictions = 0, content_reads = 0;
  uint64_t content_dropped = 0;  // contents given back for newer ones (their entries stay)
  uint64_t stale_hits = 0;  // hits on an expired entry while its revalidation runs (in `hits` too)
  uint64_t entries = 0, content_buffers = 0;
  uint64_t pinned = 0;         // entries a response holds now (in the map or retired)
  uint64_t missing_known = 0;  // paths in MissingPaths (not entries)

  // Another cache's (a --site's), for the shard's totals.
  void Add(const FileCacheStats& o) {
    hits += o.hits, misses += o.misses, opens += o.opens, evictions += o.evictions;
    content_reads += o.content_reads, content_dropped += o.content_dropped;
    stale_hits += o.stale_hits, entries += o.entries, content_buffers += o.content_buffers;
    pinned += o.pinned, missing_known += o.missing_known;
  }
};

// Paths known to be missing, each with when that was read (the cache's validation count) and
// until when it holds: a fixed, open-addressed table of two independent 64-bit hashes of the
// path (a false match would need both to collide), 8 slots probed per path; a full window
// overwrites the slot that expires first. The cache sizes it at 4 x its entries (a file's two
// siblings, and room). Allocated zeroed at start-up (untouched pages cost
// nothing until used).
class MissingPaths {
 public:
  struct Known {
    int64_t expires_ms;
    uint64_t validation;
    bool revalidating;  // an open of the path runs beside the requests it answers
    int error;          // the open's errno (ENOENT, ELOOP, EXDEV, ...), for the error log
  };
  explicit MissingPaths(uint32_t capacity);  // slots: the power of two at or above it
  ~MissingPaths();
  MissingPaths(const MissingPaths&) = delete;
  MissingPaths& operator=(const MissingPaths&) = delete;

  void Note(std::string_view path, int64_t expires_ms, uint64_t validation, int error);
  std::optional<Known> Find(std::string_view path) const;
  void MarkRevalidating(std::string_view path, bool on);
  void Forget(std::string_view path);
  void ForgetAll();  // writes only the slots in use: untouched pages stay untouched
  uint64_t known() const { return known_; }

 private:
  struct Slot {
    uint64_t h1, h2;  // both 0: empty
    int64_t expires_ms;
    uint64_t validation : 47;  // a count of validations: 2^47 outlasts any process
    uint64_t error : 16;       // errno values are below 4096
    uint64_t revalidating : 1;
  };
  Slot* Match(uint64_t h1, uint64_t h2) const;
  Slot* slots_ = nullptr;
  uint64_t mask_ = 0;
  uint64_t known_ = 0;
};

class FileCache : public http::FileMetaSource {
 public:
  // Entries beyond max_entries for opens of paths known missing, asked again (Fetch), and for
  // prefetches.
  static constexpr uint32_t kMissingChecks = 256;

  // `content_pool` may be null (no small-file cache). `root_fd` is the document root.
  FileCache(io::Loop* loop, int root_fd, mem::BufferPool* content_pool, const FileCacheOptions& o);
  ~FileCache() override;

  // The planner's view (FileMetaSource): fresh metadata, or nullopt.
  std::optional<http::FileMeta> Lookup(std::string_view path) override;
  // Also counts as fresh an entry validated after validations() was `since` (RequestLookup).
  // `found`, if given, is set to the entry the answer came from (nullptr without one).
  std::optional<http::FileMeta> LookupSince(std::string_view path, uint64_t since,
                                            CacheEntry** found = nullptr);
  // How many times metadata has been read so far: a point in the cache's history.
  uint64_t validations() const { return validations_; }

  // Starts (or joins) fetching `path`; `waiter->wake` runs once its metadata is known. Returns
  // false when the cache cannot take another entry right now (all pinned or loading): 503.
  bool Fetch(std::string_view path, FileWaiter* waiter);
  // Starts fetching `path` unless it is known (fresh, or revalidating beside requests) or
  // loading, with nobody waiting: a request's next lookup, started beside the one it waits for.
  // It takes a spare entry (none left: no prefetch), so starting it evicts no file; one that
  // finds its file gives an entry back, as a re-check does. Counts as a lookup (hits, misses).
  void Prefetch(std::string_view path);
  // Stops waiting (the connection is closing), or drops a wake-up not yet run.
  void Forget(FileWaiter* waiter);
  // Runs the wake-ups of waiters whose entries became ready (queued by the cache, never run
  // from inside its own completion).
  void RunWakeups();

  // The ready entry for `path`, pinned for a response; nullptr if it is not cached.
  CacheEntry* Pin(std::string_view path);
  // The same, without a second hash lookup when `e` is what LookupSince found for `path` while
  // retirements() was `retired_then`: no entry has left the map since, so `e` is still there.
  CacheEntry* PinFound(CacheEntry* e, uint64_t retired_then, std::string_view path);
  // How many entries have left the map so far.
  uint64_t retirements() const { return retirements_; }
  void Unpin(CacheEntry* e);

  void set_now(int64_t now_ms) { now_ms_ = now_ms; }
  // Opens from now on go beneath `root_fd` (DocumentRoot: --root names another directory).
  // Every entry leaves the map and every missing path is forgotten, so each is opened again at
  // its next request; requests waiting on an open beneath the old root plan again at once, and
  // nothing opened beneath it is remembered. Responses holding entries finish from them.
  void SwitchRoot(int root_fd);
  int root_fd() const { return root_fd_; }  // what opens go beneath now
  uint32_t entries_in_use() const { return static_cast<uint32_t>(stats_.entries); }
  // Opens and content reads the loop has not completed yet: a cache is destroyed only at 0.
  uint32_t loading() const { return loading_; }
  const FileCacheStats& Stats() const { return stats_; }

 private:
  static void OnOp(io::Completion* c);
  void Opened(CacheEntry* e, int64_t result);
  void Ready(CacheEntry* e);
  // Moves `e`'s waiters to the woken queue (RunWakeups wakes them, never from inside the cache).
  void QueueWakeups(CacheEntry* e);
  // Starts revalidating an expired entry beside the requests that use it; false when it may not
  // (no grace left, a failure entry, or no free entry for the successor).
  bool RevalidateBeside(CacheEntry* e);
  // The same for a path known missing: true when `known` may still answer (a stale hit).
  bool RevalidateMissing(std::string_view path, const MissingPaths::Known& known);
  CacheEntry* StartOpen(std::string_view path);
  void Touch(CacheEntry* e);
  void Unlink(CacheEntry* e);
  bool EvictOne(const CacheEntry* keep = nullptr);  // any but `keep`
  // With every content buffer taken: the least recently used content that no response holds
  // goes back to the pool; its entry stays (its fd serves it). Evicting the least recently
  // used entry instead would free a buffer only when that entry has one, and lose a file
  // otherwise.
  bool TakeContent();
  void DropContent(CacheEntry* e);
  void Retire(CacheEntry* e);  // out of the map; freed when unpinned and idle
  void MaybeFree(CacheEntry* e);

  io::Loop* loop_;
  int root_fd_;
  uint32_t root_generation_ = 0;
  mem::BufferPool* content_pool_;
  FileCacheOptions options_;
  mem::SlabPool<CacheEntry> entries_;
  absl::flat_hash_map<std::string, CacheEntry*> map_;
  // Entries by last use, least recent first: all of the map's (lru_), and those with content.
  mem::IntrusiveList<CacheEntry, &CacheEntry::lru_link> lru_;
  mem::IntrusiveList<CacheEntry, &CacheEntry::content_link> content_lru_;
  FileWaiters woken_;  // waiters whose entry is ready, wake-up not yet run, oldest first
  int64_t now_ms_ = 0;
  uint64_t validations_ = 0;
  uint64_t retirements_ = 0;
  uint32_t loading_ = 0;  // StartOpen to Ready
  MissingPaths missing_;
  FileCacheStats stats_;
};

// The planner's view for one request: what was validated since the request began planning is
// the answer for it, even where `valid_ms` has run out since (a request that waited for a
// lookup must see the result it waited for); and the directory listing made for it, if any
// (`listing`: a DirListing's directory and status once known; null: none).
class RequestLookup final : public http::FileMetaSource {
 public:
  struct MadeListing {
    std::string_view dir;
    http::ListingResult result;
  };
  RequestLookup(FileCache* cache, uint64_t since, const MadeListing* listing = nullptr,
                Compressor* compressor = nullptr)
      : cache_(cache), since_(since), listing_(listing), compressor_(compressor) {}
  std::optional<http::ListingResult> Listing(std::string_view dir) override {
    if (listing_ == nullptr || listing_->dir != dir) return std::nullopt;
    return listing_->result;
  }
  std::optional<http::FileMeta> Lookup(std::string_view path) override {
    std::optional<http::FileMeta> meta = cache_->LookupSince(path, since_, &last_);
    retired_ = cache_->retirements();
    return meta;
  }
  std::optional<std::string_view> Variant(const http::FileMeta& meta,
                                          http::Coding coding) override {
    if (compressor_ == nullptr) return std::nullopt;
    variant_ = compressor_->Find(meta, coding);
    if (variant_ == nullptr) return std::nullopt;
    return std::string_view(variant_->bytes);
  }
  // The variant the last Variant call found (the plan's body when ResponsePlan::variant).
  ringd::Variant* found_variant() const { return variant_; }
  // The planned file, pinned: the entry the last Lookup found when that was `path`.
  CacheEntry* Pin(std::string_view path) { return cache_->PinFound(last_, retired_, path); }

 private:
  FileCache* cache_;
  uint64_t since_;
  const MadeListing* listing_;
  Compressor* compressor_;
  ringd::Variant* variant_ = nullptr;
  CacheEntry* last_ = nullptr;
  uint64_t retired_ = 0;
};

}  // namespace ringd
