#include "server/core/dir_lister.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "io/assert.h"

namespace ringd {
namespace {

// The status a failed open or read of a directory answers.
int StatusOf(int err) {
  switch (err) {
    case EACCES:
    case EPERM:
      return 403;
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EAGAIN:
    case EINTR:
      return 503;
    default:  // ENOENT, ENOTDIR, ELOOP, EXDEV (a symlink leaving the root), ...
      return 404;
  }
}

// getdents64's record (linux_dirent64): the fields used, at their offsets.
constexpr size_t kReclenAt = 16, kNameAt = 19;

char* PieceData(DirListing* l, uint32_t index) {
  return l->buf + index * DirLister::kPieceStride + DirLister::kPieceFront;
}

}  // namespace

void NameSet::Add(std::string_view name) {
  if (at_.size() == 2 * keep_) Trim();
  // At most 2 * keep_ names of at most NAME_MAX bytes (keep_ <= --autoindex-max-entries' ceiling).
  RINGD_ASSERT(bytes_.size() + name.size() + 1 < UINT32_MAX);
  at_.push_back(static_cast<uint32_t>(bytes_.size()));
  bytes_.append(name.data(), name.size());
  bytes_.push_back('\0');
}

// Keeps the keep_ smallest names, in one string again: the dropped ones' bytes go with it.
void NameSet::Trim() {
  const char* b = bytes_.data();
  const auto less = [b](uint32_t x, uint32_t y) { return std::strcmp(b + x, b + y) < 0; };
  if (at_.size() > keep_) {
    std::nth_element(at_.begin(), at_.begin() + static_cast<ptrdiff_t>(keep_), at_.end(), less);
    at_.resize(keep_);
  }
  std::string kept;
  kept.reserve(bytes_.size() / 2 + 64);
  for (uint32_t& at : at_) {
    const size_t len = std::strlen(b + at) + 1;
    const uint32_t moved = static_cast<uint32_t>(kept.size());
    kept.append(b + at, len);
    at = moved;
  }
  bytes_.swap(kept);
}

void NameSet::Sort() {
  if (at_.size() > keep_) Trim();
  const char* b = bytes_.data();
  std::sort(at_.begin(), at_.end(),
            [b](uint32_t x, uint32_t y) { return std::strcmp(b + x, b + y) < 0; });
}

void NameSet::Free() {
  std::string().swap(bytes_);
  std::vector<uint32_t>().swap(at_);
}

DirLister::DirLister(io::Loop* loop, const Options& options)
    : loop_(loop), options_(options), thread_([this] { Run(); }) {
  RINGD_ASSERT(options.max_entries > 0);
}

DirLister::~DirLister() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_.notify_one();
  thread_.join();
  queued_.Abandon();
  done_.Abandon();
  for (DirListing& l : slots_) {
    Clean(&l);
    if (l.buf != nullptr) ::munmap(l.buf, kPieces * kPieceStride);
  }
}

DirListing* DirLister::Start(int root_fd, std::string_view dir, std::string_view url_path,
                             FileWaiter* waiter, const http::ListingFormat* format) {
  DirListing* l = nullptr;
  for (DirListing& s : slots_) {
    if (!s.taken) {
      l = &s;
      break;
    }
  }
  if (l == nullptr) return nullptr;
  if (l->buf == nullptr) {  // mapped on first use; its pages are touched as pieces fill them
    void* p = ::mmap(nullptr, kPieces * kPieceStride, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    l->buf = static_cast<char*>(p);
  }
  l->dir.assign(dir.data(), dir.size());
  l->url_path.assign(url_path.data(), url_path.size());
  l->root_fd = root_fd;
  l->format = format != nullptr ? *format : options_.format;
  l->waiter = waiter;
  l->status = 0;
  l->taken = true;
  l->status_woken = false;
  l->more = nullptr;
  l->more_arg = nullptr;
  l->stage = DirListing::Stage::kOpen;
  ++in_use_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    RINGD_ASSERT(!l->queued && !l->making && !l->notified && l->fd < 0);
    l->made = l->consumed = 0;
    l->finished = l->released = false;
    l->queued = true;
    queued_.PushBack(l);
  }
  work_.notify_one();
  return l;
}

void DirLister::Release(DirListing* l) {
  bool wake_thread = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    RINGD_ASSERT(l->taken && !l->released);
    l->released = true;
    l->more = nullptr;
    if (l->queued || l->making || l->notified) return;  // freed when they are done with it
    if (l->fd >= 0 || l->names.size() > 0) {
      // Left between pieces: the thread closes its directory and frees its names (they may be
      // megabytes: not on the shard), then hands it back to be freed.
      l->queued = true;
      queued_.PushBack(l);
      wake_thread = true;
    } else {
      Free(l);
    }
  }
  if (wake_thread) work_.notify_one();
}

void DirLister::Free(DirListing* l) {
  RINGD_ASSERT(l->taken && l->released && !l->queued && !l->making && !l->notified && l->fd < 0);
  l->taken = false;
  --in_use_;
}

void DirLister::Follow(DirListing* l, void (*more)(void*), void* arg) {
  RINGD_ASSERT(l->taken && l->status == 200 && l->status_woken);
  l->more = more;
  l->more_arg = arg;
}

ListingPiece DirLister::Next(DirListing* l) {
  std::lock_guard<std::mutex> lock(mu_);
  if (l->made == l->consumed) return {};
  const uint32_t index = l->consumed % kPieces;
  return {PieceData(l, index), l->piece_len[index], l->finished && l->made - l->consumed == 1};
}

void DirLister::Consume(DirListing* l) {
  bool wake_thread = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    RINGD_ASSERT(l->consumed < l->made && !l->released);
    ++l->consumed;
    // The thread left it with every piece made: it goes on now that one is free.
    if (!l->queued && !l->making && !l->finished) {
      l->queued = true;
      queued_.PushBack(l);
      wake_thread = true;
    }
  }
  if (wake_thread) work_.notify_one();
}

uint32_t DirLister::Unsent(DirListing* l) {
  std::lock_guard<std::mutex> lock(mu_);
  RINGD_ASSERT(l->made - l->consumed <= kPieces);
  return l->made - l->consumed;
}

bool DirLister::Ended(DirListing* l) {
  std::lock_guard<std::mutex> lock(mu_);
  return l->finished && l->made == l->consumed;
}

void DirLister::Notify(DirListing* l) {
  if (l->notified) return;
  l->notified = true;
  done_.PushBack(l);
}

void DirLister::RunWakeups() {
  mem::IntrusiveList<DirListing, &DirListing::to_shard> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (DirListing* l = done_.PopFront()) done.PushBack(l);
  }
  // A wake-up may release another listing of this batch: that one is freed when its turn
  // comes here (it is still `notified` until then).
  while (DirListing* l = done.PopFront()) {
    bool released;
    {
      std::lock_guard<std::mutex> lock(mu_);
      l->notified = false;
      released = l->released;
      if (released && !l->queued && !l->making) {
        if (l->fd >= 0 || l->names.size() > 0) {
          l->queued = true;  // the thread cleans it first (Release)
          queued_.PushBack(l);
          work_.notify_one();
        } else {
          Free(l);
        }
      }
    }
    if (released) continue;
    if (!l->status_woken) {
      RINGD_ASSERT(l->status != 0);  // the thread says the status before any piece
      l->status_woken = true;
      l->waiter->wake(l->waiter);
    } else if (l->more != nullptr) {
      l->more(l->more_arg);
    }
  }
}

void DirLister::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [this] { return stopping_ || !queued_.empty(); });
    if (stopping_) return;
    DirListing* l = queued_.PopFront();
    l->queued = false;
    l->making = true;
    // Makes what it can: the status, then pieces while there is room in the ring, until the
    // last, or until the shard lets it go.
    for (;;) {
      if (l->released || l->finished) break;
      const bool open = l->stage == DirListing::Stage::kOpen;
      if (!open && l->made - l->consumed == kPieces) break;  // wait for the shard: Consume
      const uint32_t index = l->made % kPieces;
      lock.unlock();
      bool last = false;
      if (open) {
        Open(options_, l);
        last = l->status != 200;
      } else {
        last = FillPiece(options_, l, index);
      }
      lock.lock();
      if (!open) ++l->made;
      if (last) l->finished = true;
      Notify(l);
      loop_->Wake();
    }
    if (l->fd >= 0 || l->names.size() > 0) {
      if (l->released || l->finished) {
        lock.unlock();
        Clean(l);
        lock.lock();
      }
    }
    l->making = false;
    if (l->released) {  // the shard frees it (RunWakeups)
      Notify(l);
      loop_->Wake();
    }
  }
}

void DirLister::Clean(DirListing* l) {
  if (l->fd >= 0) ::close(l->fd);
  l->fd = -1;
  l->names.Free();
}

void DirLister::Open(const Options& options, DirListing* l) {
  l->names = NameSet(options.max_entries);
  l->next = 0;
  l->total = 0;
  l->writer = http::ListingWriter(l->format);
  if (http::ListingWriter::MaxBeginBytes(l->url_path.size()) > kPieceBytes) {
    l->status = 500;  // a title longer than any directory's path: cannot happen (kMaxPath)
    return;
  }
  open_how how{};
  how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH;
  const int fd =
      static_cast<int>(::syscall(SYS_openat2, l->root_fd, l->dir.c_str(), &how, sizeof how));
  if (fd < 0) {
    l->status = StatusOf(errno);
    return;
  }
  // Every entry is read; at most max_entries names are kept (NameSet), so the memory is
  // bounded however large the directory.
  alignas(8) static thread_local char dents[64 << 10];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, fd, dents, sizeof dents);
    if (n < 0) {
      l->status = StatusOf(errno);
      ::close(fd);
      l->names.Free();
      return;
    }
    if (n == 0) break;
    for (long off = 0; off < n;) {
      uint16_t reclen;
      std::memcpy(&reclen, dents + off + kReclenAt, sizeof reclen);
      const std::string_view name(dents + off + kNameAt);
      off += reclen;
      if (name == "." || name == "..") continue;
      if (!options.show_dot_files && name.front() == '.') continue;
      ++l->total;
      l->names.Add(name);
    }
  }
  l->names.Sort();
  l->fd = fd;
  l->status = 200;
  l->stage = DirListing::Stage::kBegin;
}

// Formats the next piece of the body into piece `index`; true when it holds the closing.
bool DirLister::FillPiece(const Options& options, DirListing* l, uint32_t index) {
  (void)options;
  char* const p = PieceData(l, index);
  size_t used = 0;
  if (l->stage == DirListing::Stage::kBegin) {
    used = l->writer.Begin(l->url_path, p, kPieceBytes);
    RINGD_ASSERT(used > 0);  // checked in Open
    l->stage = DirListing::Stage::kEntries;
  }
  while (l->stage == DirListing::Stage::kEntries) {
    if (l->next == l->names.size()) {
      l->stage = DirListing::Stage::kEnd;
      break;
    }
    if (kPieceBytes - used < http::ListingWriter::kMaxEntryBytes) break;  // full
    const char* name = l->names[l->next++];
    // Links are followed (as nginx lists them), within the root or not: a link's target is not
    // served unless it resolves beneath the root, but its size and time are shown. A name
    // gone since it was read, or a dangling link, is shown as itself (lstat) or not at all.
    struct statx st;
    if (::statx(l->fd, name, AT_STATX_SYNC_AS_STAT, STATX_TYPE | STATX_SIZE | STATX_MTIME, &st) !=
            0 &&
        ::statx(l->fd, name, AT_SYMLINK_NOFOLLOW, STATX_TYPE | STATX_SIZE | STATX_MTIME, &st) !=
            0) {
      --l->total;
      continue;
    }
    const http::ListingEntry entry{name, S_ISDIR(st.stx_mode), st.stx_size,
                                   static_cast<int64_t>(st.stx_mtime.tv_sec)};
    const size_t n = l->writer.Add(entry, p + used, kPieceBytes - used);
    RINGD_ASSERT(n > 0);  // kMaxEntryBytes were free
    used += n;
  }
  if (l->stage == DirListing::Stage::kEnd &&
      kPieceBytes - used >= http::ListingWriter::kMaxEndBytes) {
    const size_t n = l->writer.End(l->total, p + used, kPieceBytes - used);
    RINGD_ASSERT(n > 0);
    used += n;
    l->stage = DirListing::Stage::kDone;
  }
  RINGD_ASSERT(used > 0 && used <= kPieceBytes);
  l->piece_len[index] = static_cast<uint32_t>(used);
  return l->stage == DirListing::Stage::kDone;
}

int DirLister::MakeAll(const Options& options, int root_fd, std::string_view dir,
                       std::string_view url_path, std::string* body) {
  DirListing l;
  std::vector<char> ring(kPieces * kPieceStride);
  l.buf = ring.data();
  l.dir.assign(dir.data(), dir.size());
  l.url_path.assign(url_path.data(), url_path.size());
  l.root_fd = root_fd;
  l.format = options.format;
  Open(options, &l);
  body->clear();
  if (l.status == 200) {
    for (uint32_t i = 0;; ++i) {
      const bool last = FillPiece(options, &l, i % kPieces);
      body->append(PieceData(&l, i % kPieces), l.piece_len[i % kPieces]);
      if (last) break;
    }
  }
  Clean(&l);
  return l.status;
}

}  // namespace ringd
