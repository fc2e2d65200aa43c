// cacheprobe: asks the page cache, three ways, how much of a file it holds, so that a server can
// tell a hot file from a cold one where RWF_NOWAIT is refused (FUSE, some network file systems).
//
//   cacheprobe [--evict] [--read] [--willneed] [--time N] [--range BYTES] FILE...
//
// For each file, on one open descriptor (and --evict / --read / --willneed applied first, through
// it; --willneed is posix_fadvise(WILLNEED) over the range, which puts its pages in the cache at
// once and reads them in the background):
//   nowait    preadv2(RWF_NOWAIT) of the first 64 KiB: bytes, or the errno (EAGAIN: not cached,
//             EOPNOTSUPP: the file system refuses the flag)
//   cachestat cachestat(2) over the whole file (or its first --range bytes) (Linux 6.5+, syscall
//   451 on x86_64): pages cached mincore   mincore(2) over a shared read-only mapping of the file
//   (or of its first --range
//             bytes): pages resident
//   ringd     what the servers' inline send path decides (io/backend_util.h PagesCached): yes
//             (cached and readable now) or no
// One line per file: `path size=N nowait=... cachestat=... mincore=... ringd=...`; with --time N, a
// second line with each probe's cost in nanoseconds per call (mean of N calls on the same
// descriptor).
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "io/backend_util.h"
#include "perf/tool_flags.h"

ABSL_FLAG(bool, evict, false, "drop the file's pages from the cache first (POSIX_FADV_DONTNEED)");
ABSL_FLAG(bool, read, false, "read the whole file first");
ABSL_FLAG(bool, willneed, false, "posix_fadvise(WILLNEED) over the range first");
ABSL_FLAG(int, time, 0, "also time each way over this many calls");
ABSL_FLAG(uint64_t, range, 0, "bytes from the start to ask about (0: the whole file)");

namespace {

#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif

struct CachestatRange {
  uint64_t off;
  uint64_t len;  // 0: to the end of the file
};

struct Cachestat {
  uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

std::string Errno(int err) { return std::string("E:") + strerrordesc_np(err); }

std::string NoWait(int fd) {
  static char buf[64 << 10];
  iovec iov{buf, sizeof buf};
  const ssize_t n = preadv2(fd, &iov, 1, 0, RWF_NOWAIT);
  return n < 0 ? Errno(errno) : std::to_string(n) + "B";
}

std::string CacheStat(int fd, uint64_t len, uint64_t pages) {
  CachestatRange range{0, len};
  Cachestat cs{};
  if (syscall(__NR_cachestat, fd, &range, &cs, 0) != 0) return Errno(errno);
  return std::to_string(cs.nr_cache) + "/" + std::to_string(pages) + " (evicted " +
         std::to_string(cs.nr_evicted) + ")";
}

std::string MinCore(int fd, uint64_t size) {
  if (size == 0) return "empty";
  void* p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Errno(errno);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((size + page - 1) / page);
  std::string out;
  if (mincore(p, size, vec.data()) != 0) {
    out = Errno(errno);
  } else {
    size_t resident = 0;
    for (unsigned char v : vec) resident += v & 1;
    out = std::to_string(resident) + "/" + std::to_string(vec.size());
  }
  munmap(p, size);
  return out;
}

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000 + static_cast<uint64_t>(ts.tv_nsec);
}

template <typename F>
double NsPerCall(int n, F f) {
  const uint64_t t0 = NowNs();
  for (int i = 0; i < n; ++i) f();
  return static_cast<double>(NowNs() - t0) / n;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr char kUsage[] =
      "usage: cacheprobe [--evict] [--read] [--willneed] [--time N] [--range BYTES] FILE...";
  std::vector<char*> files = ringd::ParseToolFlags(argc, argv, kUsage);
  const bool evict = absl::GetFlag(FLAGS_evict), read_all = absl::GetFlag(FLAGS_read),
             willneed = absl::GetFlag(FLAGS_willneed);
  const int repeat = absl::GetFlag(FLAGS_time);
  const uint64_t range = absl::GetFlag(FLAGS_range);  // 0: the whole file
  if (files.size() < 2) {
    std::fprintf(stderr, "%s\n", kUsage);
    return 2;
  }
  argv = files.data();
  argc = static_cast<int>(files.size());
  for (int i = 1; i < argc; ++i) {
    const int fd = open(argv[i], O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
      std::printf("%s %s\n", argv[i], Errno(errno).c_str());
      if (fd >= 0) close(fd);
      continue;
    }
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (evict) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (read_all) {
      static char buf[1 << 20];
      for (off_t off = 0; pread(fd, buf, sizeof buf, off) > 0; off += sizeof buf) {
      }
    }
    const uint64_t len = range ? std::min(range, size) : size;
    const uint64_t pages = (len + 4095) / 4096;
    if (willneed) posix_fadvise(fd, 0, static_cast<off_t>(len), POSIX_FADV_WILLNEED);
    // cachestat and mincore first: a successful RWF_NOWAIT read would not change residency, but a
    // refused one must not be mistaken for a read that brought pages in.
    // ringd's verdict next: its one-byte RWF_NOWAIT reads touch only pages already in the cache.
    const std::string cs = CacheStat(fd, len, pages), mc = MinCore(fd, len);
    const bool cached = ringd::io::internal::PagesCached(fd, 0, len);
    const std::string nw = NoWait(fd);
    std::printf("%s size=%llu nowait=%s cachestat=%s mincore=%s ringd=%s\n", argv[i],
                static_cast<unsigned long long>(size), nw.c_str(), cs.c_str(), mc.c_str(),
                cached ? "yes" : "no");
    if (repeat > 0) {
      std::printf("%s ns/call: nowait=%.0f cachestat=%.0f mincore(mmap+mincore+munmap)=%.0f\n",
                  argv[i], NsPerCall(repeat, [&] { NoWait(fd); }),
                  NsPerCall(repeat, [&] { CacheStat(fd, len, pages); }),
                  NsPerCall(repeat, [&] { MinCore(fd, len); }));
    }
    close(fd);
  }
  return 0;
}
