#include "server/core/file_cache.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <vector>

#include "absl/hash/hash.h"
#include "io/assert.h"

namespace ringd {
namespace {

absl::string_view Key(std::string_view s) { return absl::string_view(s.data(), s.size()); }

http::FileMeta MetaFromError(int64_t err) {
  http::FileMeta m;
  m.error = static_cast<int>(-err);
  switch (-err) {
    case EACCES:
    case EPERM:
      m.kind = http::FileMeta::Kind::kForbidden;
      break;
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EAGAIN:
    case EINTR:
      m.kind = http::FileMeta::Kind::kUnavailable;
      break;
    default:  // ENOENT, ENOTDIR, ELOOP, EXDEV (a symlink leaving the root), ENAMETOOLONG, ...
      m.kind = http::FileMeta::Kind::kMissing;
      break;
  }
  return m;
}

}  // namespace

MissingPaths::MissingPaths(uint32_t capacity) {
  uint64_t n = 8;
  while (n < capacity) n <<= 1;
  slots_ = static_cast<Slot*>(std::calloc(n, sizeof(Slot)));
  RINGD_ASSERT_MSG(slots_ != nullptr, "out of memory for %llu missing-path slots",
                   static_cast<unsigned long long>(n));
  mask_ = n - 1;
}

MissingPaths::~MissingPaths() { std::free(slots_); }

namespace {
constexpr uint64_t kMissingProbe = 8;

// Two independent hashes of a path: a slot matches only when both do. Its place in the table
// comes from the second, libstdc++'s std::hash, which is the same in every process; abseil's,
// the first, is seeded per process (from an address), and a place taken from it made the shard
// simulator's runs differ from one process to the next wherever two paths met in a window.
std::pair<uint64_t, uint64_t> PathHashes(std::string_view path) {
  const uint64_t h1 = absl::Hash<absl::string_view>{}(Key(path));
  uint64_t h2 = std::hash<std::string_view>{}(path);
  if (h1 == 0 && h2 == 0) h2 = 1;  // (0, 0) marks an empty slot
  return {h1, h2};
}
}  // namespace

MissingPaths::Slot* MissingPaths::Match(uint64_t h1, uint64_t h2) const {
  for (uint64_t i = 0; i < kMissingProbe; ++i) {
    Slot* s = &slots_[(h2 + i) & mask_];
    if (s->h1 == h1 && s->h2 == h2) return s;
  }
  return nullptr;
}

void MissingPaths::Note(std::string_view path, int64_t expires_ms, uint64_t validation, int error) {
  const auto [h1, h2] = PathHashes(path);
  Slot* pick = Match(h1, h2);
  if (pick == nullptr) {  // the window's first empty slot, else the one that expires first
    for (uint64_t i = 0; i < kMissingProbe; ++i) {
      Slot* s = &slots_[(h2 + i) & mask_];
      if (s->h1 == 0 && s->h2 == 0) {
        pick = s;
        break;
      }
      if (pick == nullptr || s->expires_ms < pick->expires_ms) pick = s;
    }
    if (pick->h1 == 0 && pick->h2 == 0) ++known_;
    pick->h1 = h1;
    pick->h2 = h2;
  }
  pick->expires_ms = expires_ms;
  pick->validation = validation;
  pick->error = static_cast<uint64_t>(error) & 0xffff;
  pick->revalidating = 0;
}

std::optional<MissingPaths::Known> MissingPaths::Find(std::string_view path) const {
  const auto [h1, h2] = PathHashes(path);
  const Slot* s = Match(h1, h2);
  if (s == nullptr) return std::nullopt;
  return Known{s->expires_ms, s->validation, s->revalidating != 0, static_cast<int>(s->error)};
}

void MissingPaths::ForgetAll() {
  for (uint64_t i = 0; i <= mask_ && known_ > 0; ++i) {
    Slot* s = &slots_[i];
    if (s->h1 == 0 && s->h2 == 0) continue;
    *s = Slot{};
    --known_;
  }
}

void MissingPaths::MarkRevalidating(std::string_view path, bool on) {
  const auto [h1, h2] = PathHashes(path);
  if (Slot* s = Match(h1, h2)) s->revalidating = on ? 1 : 0;
}

void MissingPaths::Forget(std::string_view path) {
  const auto [h1, h2] = PathHashes(path);
  if (Slot* s = Match(h1, h2)) {
    *s = Slot{};
    --known_;
  }
}

FileCache::FileCache(io::Loop* loop, int root_fd, mem::BufferPool* content_pool,
                     const FileCacheOptions& o)
    : loop_(loop),
      root_fd_(root_fd),
      content_pool_(content_pool),
      options_(o),
      entries_(o.max_entries + kMissingChecks),
      missing_(4 * o.max_entries) {
  map_.reserve(o.max_entries);
}

FileCache::~FileCache() {
  // Entries still opening belong to the loop until it is gone; the shard only destroys the cache
  // after its loop has drained, so everything here is idle.
  woken_.Abandon();
  for (auto& [path, e] : map_) {
    if (CacheEntry* s = e->successor) {  // a revalidation the loop never finished
      e->successor = nullptr;
      s->replaces = nullptr;
      s->revalidating = false;
      s->waiters.Abandon();
      s->ready = true;
      MaybeFree(s);
    }
    e->in_map = false;
    e->pins = 0;
    e->waiters.Abandon();
    e->ready = true;  // an open the loop never finished: nothing will complete it now
    MaybeFree(e);
  }
  map_.clear();
}

std::optional<http::FileMeta> FileCache::Lookup(std::string_view path) {
  return LookupSince(path, UINT64_MAX);
}

std::optional<http::FileMeta> FileCache::LookupSince(std::string_view path, uint64_t since,
                                                     CacheEntry** found) {
  if (found != nullptr) *found = nullptr;
  auto it = map_.find(Key(path));
  if (it == map_.end()) {
    // Known missing: fresh, validated since the request began, or within its grace while an
    // open of the path runs beside (as for entries, below).
    if (std::optional<MissingPaths::Known> k = missing_.Find(path)) {
      if (k->expires_ms > now_ms_ || k->validation > since || RevalidateMissing(path, *k)) {
        ++stats_.hits;
        http::FileMeta m;  // kMissing
        m.error = k->error;
        return m;
      }
    }
    ++stats_.misses;
    return std::nullopt;
  }
  CacheEntry* e = it->second;
  if (!e->ready) {
    ++stats_.misses;
    return std::nullopt;
  }
  if (e->expires_ms <= now_ms_ && e->validation <= since) {
    if (!RevalidateBeside(e)) {
      ++stats_.misses;
      return std::nullopt;
    }
    ++stats_.stale_hits;
  }
  ++stats_.hits;
  Touch(e);
  if (found != nullptr) *found = e;
  return e->meta;
}

bool FileCache::RevalidateBeside(CacheEntry* e) {
  if (options_.valid_ms == 0 || e->meta.kind == http::FileMeta::Kind::kUnavailable ||
      now_ms_ >= e->expires_ms + static_cast<int64_t>(options_.valid_ms)) {
    return false;
  }
  if (e->successor != nullptr) return true;  // already under way
  // No eviction for it (that could pick `e` itself), and not one of the spare entries.
  if (entries_.Empty() || stats_.entries >= options_.max_entries) return false;
  CacheEntry* s = StartOpen(e->path);
  if (s == nullptr) return false;
  s->revalidating = true;
  s->replaces = e;
  e->successor = s;
  return true;
}

bool FileCache::RevalidateMissing(std::string_view path, const MissingPaths::Known& known) {
  if (options_.valid_ms == 0 ||
      now_ms_ >= known.expires_ms + static_cast<int64_t>(options_.valid_ms)) {
    return false;
  }
  if (!known.revalidating) {
    if (entries_.Empty()) return false;  // no eviction for it: a spare entry or none
    const bool over = stats_.entries >= options_.max_entries;
    CacheEntry* s = StartOpen(path);
    if (s == nullptr) return false;
    s->spare = over;
    s->revalidating = true;  // with no entry to replace: Ready puts it in the map
    missing_.MarkRevalidating(path, true);
  }
  ++stats_.stale_hits;
  return true;
}

// A new entry, out of the map, its open started.
CacheEntry* FileCache::StartOpen(std::string_view path) {
  CacheEntry* e = entries_.Get();
  if (e == nullptr) return nullptr;
  e->path.assign(path.data(), path.size());
  e->cache = this;
  e->op.owner = e;
  e->op.callback = &FileCache::OnOp;
  e->in_map = false;
  ++stats_.entries;
  ++stats_.opens;
  e->reading = false;
  e->spare = false;
  e->root_generation = root_generation_;
  ++loading_;
  loop_->Open(root_fd_, e->path.c_str(), &e->stat, &e->op);
  return e;
}

bool FileCache::Fetch(std::string_view path, FileWaiter* waiter) {
  auto it = map_.find(Key(path));
  CacheEntry* e = nullptr;
  if (it != map_.end()) {
    e = it->second;
    if (e->ready && e->expires_ms <= now_ms_) {
      // Stale: a fresh entry replaces it (the revalidation already under way, if there is one);
      // in-flight responses keep the old one.
      CacheEntry* s = e->successor;
      Retire(e);
      e = s;
      if (e != nullptr) {
        e->revalidating = false;
        e->in_map = true;
        map_[e->path] = e;
      }
    }
  }
  if (e == nullptr) {
    // A path known missing, asked again, opens in one of the kMissingChecks spare entries (its
    // entry lives only until the answer is noted): a file's absent siblings must not evict
    // files. So does a prefetch (most often of such a sibling, and nobody waits for it), which
    // never evicts to start: with the spare entries all taken, there is none. One that finds
    // its file gives an entry back, as a re-check that does (Ready). Anything else takes one of
    // max_entries, evicting the least recently used.
    if (waiter == nullptr && entries_.Empty()) return false;
    const bool recheck = waiter == nullptr || missing_.Find(path).has_value();
    const bool over = stats_.entries >= options_.max_entries;
    if ((entries_.Empty() || (over && !recheck)) && !EvictOne()) return false;
    e = StartOpen(path);
    if (e == nullptr) return false;
    e->spare = over && recheck;
    e->in_map = true;
    map_[e->path] = e;
  }
  // `e` is loading here: the planner only asks to fetch paths Lookup did not know, and a ready,
  // expired entry was replaced above. So the waiter is always woken later, never from inside
  // this call.
  RINGD_ASSERT(!e->ready);
  if (waiter == nullptr) return true;  // Prefetch
  RINGD_ASSERT(!waiter->waiting());
  waiter->entry = e;
  e->waiters.PushFront(waiter);
  return true;
}

void FileCache::Prefetch(std::string_view path) {
  if (!Lookup(path)) Fetch(path, nullptr);
}

void FileCache::Forget(FileWaiter* waiter) {
  if (waiter->woken) {  // off the woken queue: its wake-up never runs
    RINGD_ASSERT(waiter->entry == nullptr);
    woken_.Remove(waiter);
    waiter->woken = false;
    return;
  }
  CacheEntry* e = waiter->entry;
  if (e == nullptr) return;
  // On the waiter list of an entry still loading: an entry with waiters is never freed
  // (MaybeFree), and Ready moves them all to the woken queue before it can be.
  RINGD_ASSERT(!e->ready);
  e->waiters.Remove(waiter);
  waiter->entry = nullptr;
}

CacheEntry* FileCache::Pin(std::string_view path) {
  auto it = map_.find(Key(path));
  if (it == map_.end() || !it->second->ready) return nullptr;
  if (it->second->pins++ == 0) ++stats_.pinned;
  return it->second;
}

CacheEntry* FileCache::PinFound(CacheEntry* e, uint64_t retired_then, std::string_view path) {
  if (e == nullptr || retired_then != retirements_ || e->path != path) return Pin(path);
  RINGD_ASSERT(e->in_map && e->ready);
  if (e->pins++ == 0) ++stats_.pinned;
  return e;
}

void FileCache::Unpin(CacheEntry* e) {
  RINGD_ASSERT(e->pins > 0 && stats_.pinned > 0);
  if (--e->pins == 0) --stats_.pinned;
  MaybeFree(e);
}

void FileCache::SwitchRoot(int root_fd) {
  root_fd_ = root_fd;
  ++root_generation_;
  // Every entry leaves the map: a request from now on opens its path beneath the new root, and
  // the old release's files close now (those a response holds, when it ends), so that deleting
  // that release frees its space. Requests waiting on an open beneath the old root plan again at
  // once, beneath the new one (the open finishes alone; Ready frees it). A revalidation under
  // way carries on alone and is not taken up (Ready: root_generation).
  // In the order of their paths, not the map's, which abseil seeds per process: the wake-ups
  // and the closes go out alike in every process, so the simulator's seeds replay anywhere.
  std::vector<CacheEntry*> all;
  all.reserve(map_.size());
  for (auto& [path, e] : map_) all.push_back(e);
  std::sort(all.begin(), all.end(),
            [](const CacheEntry* a, const CacheEntry* b) { return a->path < b->path; });
  for (CacheEntry* e : all) {
    QueueWakeups(e);
    Retire(e);
  }
  missing_.ForgetAll();
  stats_.missing_known = missing_.known();
}

void FileCache::OnOp(io::Completion* c) {
  CacheEntry* e = static_cast<CacheEntry*>(c->owner);
  FileCache* self = e->cache;
  if (!e->reading) return self->Opened(e, c->result);
  e->reading = false;
  // The content read finished.
  if (c->result != static_cast<int64_t>(e->meta.size)) {
    // Short read: the file changed while we read it. Serve it from the fd instead, where a
    // truncation is caught by the sender, and revalidate at the next request: the metadata is
    // known to be out of date.
    self->content_pool_->Put(e->content);
    e->content = nullptr;
    --self->stats_.content_buffers;
    // Expired a whole valid_ms ago: no answering from it while it revalidates (RevalidateBeside's
    // grace is for entries that are merely old, not for one known to be wrong).
    e->expires_ms = self->now_ms_ - static_cast<int64_t>(self->options_.valid_ms);
  }
  self->Ready(e);
}

void FileCache::Opened(CacheEntry* e, int64_t result) {
  // Validated now, when its metadata is read (not when a content read finishes later): a
  // request that began after this point may not take it as fresh for itself, and its freshness
  // runs from now. A passing failure is answered (503) but not remembered: the next request
  // tries again.
  e->validation = ++validations_;
  e->expires_ms = now_ms_ + options_.valid_ms;
  if (result < 0) {
    e->meta = MetaFromError(result);
    if (e->meta.kind == http::FileMeta::Kind::kUnavailable) e->expires_ms = now_ms_;
    return Ready(e);
  }
  const int fd = static_cast<int>(result);
  const io::FileStat& st = e->stat;
  e->meta.size = st.size;
  e->meta.mtime_sec = st.mtime_sec;
  e->meta.inode = st.inode;
  e->meta.dev = st.dev;
  e->meta.mtime_nsec = st.mtime_nsec;
  if (S_ISREG(st.mode)) {
    e->meta.kind = http::FileMeta::Kind::kRegular;
    e->fd = fd;
  } else {
    e->meta.kind =
        S_ISDIR(st.mode) ? http::FileMeta::Kind::kDirectory : http::FileMeta::Kind::kOther;
    loop_->Close(fd);  // only the metadata is needed
    return Ready(e);
  }
  if (content_pool_ != nullptr && st.size > 0 && st.size <= options_.small_file_max &&
      st.size <= content_pool_->buffer_size()) {
    char* buf = content_pool_->Get();
    if (buf == nullptr && TakeContent()) buf = content_pool_->Get();
    if (buf != nullptr) {
      e->content = buf;
      ++stats_.content_buffers;
      ++stats_.content_reads;
      e->reading = true;
      loop_->Read(fd, buf, st.size, 0, &e->op);
      return;
    }
  }
  Ready(e);
}

void FileCache::Ready(CacheEntry* e) {
  RINGD_ASSERT(loading_ > 0);
  --loading_;
  e->ready = true;
  if (e->revalidating) {
    // A revalidation beside requests: it takes the old entry's place, unless it failed for now
    // (the old one stays, and the next request past its expiry tries again) or the path has a
    // different entry by now (this one is dropped).
    e->revalidating = false;
    CacheEntry* old = e->replaces;
    e->replaces = nullptr;
    if (old != nullptr) old->successor = nullptr;
    auto it = map_.find(Key(e->path));
    const bool failed = e->meta.kind == http::FileMeta::Kind::kUnavailable;
    // Opened beneath a root that has moved since (SwitchRoot): never taken up.
    const bool moved = e->root_generation != root_generation_;
    if (!failed && !moved && (it == map_.end() || it->second == old)) {
      if (old != nullptr) Retire(old);
      e->in_map = true;
      map_[e->path] = e;
    } else if (failed && old == nullptr) {
      missing_.MarkRevalidating(e->path, false);  // the next stale hit tries again
    }
  }
  if (e->in_map) Touch(e);
  // Queue everyone waiting; RunWakeups wakes them after this callback has returned, so a
  // waiter never re-plans inside the cache's own code.
  QueueWakeups(e);
  if (e->in_map) {
    // A missing path is remembered in MissingPaths, not in an entry; anything else it is now
    // says it is no longer missing.
    if (e->meta.kind == http::FileMeta::Kind::kMissing) {
      missing_.Note(e->path, e->expires_ms, e->validation, e->meta.error);
      stats_.missing_known = missing_.known();
      return Retire(e);
    }
    if (e->meta.kind != http::FileMeta::Kind::kUnavailable) {
      missing_.Forget(e->path);
      stats_.missing_known = missing_.known();
    }
    // The path is there now and keeps a spare entry: give one back, so that the spares stay
    // spare and the entries within max_entries. Never this one: it was just asked for (and,
    // freed here, it would be used after its free below).
    if (e->spare && stats_.entries > options_.max_entries) EvictOne(e);
  }
  if (!e->in_map) MaybeFree(e);
}

void FileCache::QueueWakeups(CacheEntry* e) {
  while (FileWaiter* w = e->waiters.PopFront()) {
    w->entry = nullptr;  // `e` may be freed before the wake-up runs
    w->woken = true;
    woken_.PushBack(w);
  }
}

void FileCache::RunWakeups() {
  // Bounded: a wake-up can only queue new ones through an open that completes in a later Poll.
  while (FileWaiter* w = woken_.PopFront()) {
    w->woken = false;
    w->wake(w);
  }
}

void FileCache::Touch(CacheEntry* e) {
  lru_.MoveToBack(e);
  if (e->content != nullptr) content_lru_.MoveToBack(e);
}

void FileCache::Unlink(CacheEntry* e) {
  if (lru_.Contains(e)) lru_.Remove(e);
  if (content_lru_.Contains(e)) content_lru_.Remove(e);
}

bool FileCache::TakeContent() {
  for (CacheEntry* e = content_lru_.front(); e != nullptr; e = content_lru_.Next(e)) {
    if (e->pins == 0) {
      DropContent(e);
      return true;
    }
  }
  return false;
}

void FileCache::DropContent(CacheEntry* e) {
  RINGD_ASSERT(e->pins == 0 && e->content != nullptr && !e->reading);
  if (content_lru_.Contains(e)) content_lru_.Remove(e);
  content_pool_->Put(e->content);
  e->content = nullptr;
  --stats_.content_buffers;
  ++stats_.content_dropped;
}

bool FileCache::EvictOne(const CacheEntry* keep) {
  // The least recently used entry that no response holds and that is not loading.
  for (CacheEntry* e = lru_.front(); e != nullptr; e = lru_.Next(e)) {
    if (e->pins == 0 && e->ready && e->waiters.empty() && e != keep) {
      ++stats_.evictions;
      Retire(e);
      return true;
    }
  }
  return false;
}

void FileCache::Retire(CacheEntry* e) {
  if (!e->in_map) return;
  e->in_map = false;
  ++retirements_;
  if (e->successor != nullptr) {  // it carries on alone, and takes the path if it is free then
    e->successor->replaces = nullptr;
    e->successor = nullptr;
  }
  map_.erase(Key(e->path));
  Unlink(e);
  MaybeFree(e);
}

void FileCache::MaybeFree(CacheEntry* e) {
  if (e->in_map || e->pins > 0 || !e->ready || !e->waiters.empty()) return;
  if (e->fd >= 0) loop_->Close(e->fd);
  if (e->content != nullptr) {
    content_pool_->Put(e->content);
    --stats_.content_buffers;
  }
  --stats_.entries;
  entries_.Put(e);
}

}  // namespace ringd
