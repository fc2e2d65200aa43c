#include "io/backend_util.h"

#include <errno.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

namespace ringd::io::internal {
namespace {

// cachestat(2), Linux 6.5 (syscall 451 on every architecture; Debian 12's headers predate it).
constexpr long kSysCachestat = 451;
struct CachestatRange {
  uint64_t off;
  uint64_t len;
};
struct Cachestat {
  uint64_t nr_cache;
  uint64_t nr_dirty;
  uint64_t nr_writeback;
  uint64_t nr_evicted;
  uint64_t nr_recently_evicted;
};

std::atomic<bool> cachestat_missing{false};  // the kernel has no cachestat (ENOSYS)

// The largest RWF_NOWAIT probe read: what tells a hit from a miss without a one-byte read's
// side effect (below). A per-thread scratch buffer takes it.
constexpr uint64_t kProbeBytes = 64 << 10;

// cachestat counts a page the moment it is in the cache, including one whose read from the disk
// is still in flight (read-ahead puts its pages in locked, ahead of the reader), and a sendfile
// that meets such a page waits for the disk on the shard's thread, and every request on the shard
// with it (docs/PERFORMANCE.md, "cold on a slow disk"). One-byte RWF_NOWAIT reads at the
// range's start, every kUptodateStride, and its last byte tell a page still being read
// (EAGAIN). They start no read of their own here: every page they touch is already in the cache.
// Where RWF_NOWAIT is refused (FUSE) cachestat's answer stands.
constexpr uint64_t kUptodateStride = 256 << 10;

// What one-byte RWF_NOWAIT reads say of a range cachestat counted as cached.
enum class Readable { kYes, kNo, kCannotTell };

Readable PagesReadable(int fd, uint64_t offset, uint64_t length) {
  char byte;
  iovec v{&byte, 1};
  for (uint64_t at = offset;; at = std::min(at + kUptodateStride, offset + length - 1)) {
    const ssize_t n = ::preadv2(fd, &v, 1, static_cast<off_t>(at), RWF_NOWAIT);
    if (n < 0 && errno == EOPNOTSUPP) return Readable::kCannotTell;
    if (n != 1) return Readable::kNo;
    if (at == offset + length - 1) return Readable::kYes;
  }
}

}  // namespace

PageCacheAnswer AskPageCache(int fd, uint64_t offset, uint64_t length) {
  if (length == 0) return {true, true};
  if (!cachestat_missing.load(std::memory_order_relaxed)) {
    const uint64_t page = 4096;
    const CachestatRange range{offset / page * page, offset + length - offset / page * page};
    Cachestat cs{};
    if (::syscall(kSysCachestat, fd, &range, &cs, 0) == 0) {
      if (cs.nr_cache < (range.len + page - 1) / page) return {false, true};
      const Readable r = PagesReadable(fd, offset, length);
      return {r != Readable::kNo, r != Readable::kCannotTell};
    }
    if (errno == ENOSYS) cachestat_missing.store(true, std::memory_order_relaxed);
    // EPERM: cachestat answers only to the file's owner or a writer (a shard running as
    // --user over someone else's files). Ask the page cache by reading instead.
  }
  // The reading fallback looks at the range's start and its last byte only: not to be trusted
  // beyond this answer.
  return {PagesCachedByReading(fd, offset, length), false};
}

bool PagesCached(int fd, uint64_t offset, uint64_t length) {
  return AskPageCache(fd, offset, length).cached;
}

bool ResidentFiles::Cached(int fd, uint64_t offset, uint64_t length, int64_t now_ms) {
  Entry& e = slots_[static_cast<uint32_t>(fd) % kSlots];
  const uint64_t end = offset + length;
  const bool live = e.fd == fd && now_ms < e.until_ms;
  if (live && e.begin <= offset && end <= e.end) return true;
  ++asks_;
  const PageCacheAnswer a = ask_(fd, offset, length);
  if (!a.cached || !a.verified || trust_ms_ <= 0) return a.cached;
  if (live && offset <= e.end && e.begin <= end) {  // touches what is trusted: one range, the
    e.begin = std::min(e.begin, offset);            // older answer's deadline
    e.end = std::max(e.end, end);
  } else {
    e = Entry{fd, offset, end, now_ms + trust_ms_};
  }
  return true;
}

void ResidentFiles::Forget(int fd) {
  Entry& e = slots_[static_cast<uint32_t>(fd) % kSlots];
  if (e.fd == fd) e = Entry{};
}

bool PagesCachedByReading(int fd, uint64_t offset, uint64_t length) {
  if (length == 0) return true;
  // A read that may not wait for the disk. Not one byte: a one-byte miss starts a read-ahead
  // sized for one byte, and the body's reads that follow then go to the disk in small pieces,
  // more of them for each cold file (docs/PERFORMANCE.md).
  // Reading the probe's bytes for real costs a copy of up to 64 KiB on a hit.
  static thread_local char scratch[kProbeBytes];
  iovec v{scratch, static_cast<size_t>(std::min(length, kProbeBytes))};
  const ssize_t n = ::preadv2(fd, &v, 1, static_cast<off_t>(offset), RWF_NOWAIT);
  if (n < static_cast<ssize_t>(v.iov_len)) return false;
  if (length <= kProbeBytes) return true;
  v.iov_len = 1;  // and the range's last byte
  return ::preadv2(fd, &v, 1, static_cast<off_t>(offset + length - 1), RWF_NOWAIT) == 1;
}

}  // namespace ringd::io::internal
