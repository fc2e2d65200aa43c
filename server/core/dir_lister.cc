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
#include <vector>

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

struct Kept {
  std::string name;
  bool operator<(const Kept& o) const { return name < o.name; }  // bytewise, as strcmp
};

// getdents64's record (linux_dirent64): the fields used, at their offsets.
constexpr size_t kReclenAt = 16, kNameAt = 19;

}  // namespace

DirLister::DirLister(io::Loop* loop, const Options& options)
    : loop_(loop), options_(options), thread_([this] { Run(); }) {}

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
    if (l.buf != nullptr) ::munmap(l.buf, kBufferBytes);
  }
}

DirListing* DirLister::Start(int root_fd, std::string_view dir, std::string_view url_path,
                             FileWaiter* waiter) {
  DirListing* l = nullptr;
  for (DirListing& s : slots_) {
    if (s.state == DirListing::State::kFree) {
      l = &s;
      break;
    }
  }
  if (l == nullptr) return nullptr;
  if (l->buf == nullptr) {  // mapped on first use; its pages are touched as listings fill them
    void* p =
        ::mmap(nullptr, kBufferBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    l->buf = static_cast<char*>(p);
  }
  l->dir.assign(dir.data(), dir.size());
  l->url_path.assign(url_path.data(), url_path.size());
  l->root_fd = root_fd;
  l->waiter = waiter;
  l->status = 0;
  l->body = {};
  l->abandoned = false;
  ++in_use_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    l->state = DirListing::State::kQueued;
    queued_.PushBack(l);
  }
  work_.notify_one();
  return l;
}

void DirLister::Release(DirListing* l) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    RINGD_ASSERT(l->state != DirListing::State::kFree && !l->abandoned);
    if (l->state != DirListing::State::kWoken) {
      l->abandoned = true;  // the thread has it, or RunWakeups will: freed there
      return;
    }
    l->state = DirListing::State::kFree;
  }
  --in_use_;
}

bool DirLister::Waiting(DirListing* l) {
  std::lock_guard<std::mutex> lock(mu_);
  return l->state != DirListing::State::kWoken;
}

void DirLister::RunWakeups() {
  mem::IntrusiveList<DirListing, &DirListing::link> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (DirListing* l = done_.PopFront()) done.PushBack(l);
  }
  // A wake-up may release another listing of this batch: that one is only marked abandoned
  // (it is kDone), and freed when its turn comes here.
  while (DirListing* l = done.PopFront()) {
    bool abandoned;
    {
      std::lock_guard<std::mutex> lock(mu_);
      abandoned = l->abandoned;
      l->state = abandoned ? DirListing::State::kFree : DirListing::State::kWoken;
    }
    if (abandoned) {
      --in_use_;
      continue;
    }
    l->waiter->wake(l->waiter);
  }
}

void DirLister::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [this] { return stopping_ || !queued_.empty(); });
    if (stopping_) return;
    DirListing* l = queued_.PopFront();
    // One released before its turn (its client left) is not made: its slot comes back sooner.
    if (!l->abandoned) {
      lock.unlock();
      Make(options_, l);
      lock.lock();
    }
    l->state = DirListing::State::kDone;
    done_.PushBack(l);
    loop_->Wake();
  }
}

void DirLister::Make(const Options& options, DirListing* l) {
  l->body = {};
  open_how how{};
  how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH;
  const int fd =
      static_cast<int>(::syscall(SYS_openat2, l->root_fd, l->dir.c_str(), &how, sizeof how));
  if (fd < 0) {
    l->status = StatusOf(errno);
    return;
  }
  // Every entry is read; the kMaxEntries smallest names are kept (a heap whose top is the
  // largest kept), so the memory is bounded however large the directory.
  std::vector<Kept> kept;
  kept.reserve(std::min<size_t>(kMaxEntries, 1024));
  uint64_t total = 0;
  alignas(8) static thread_local char dents[64 << 10];
  for (;;) {
    const long n = ::syscall(SYS_getdents64, fd, dents, sizeof dents);
    if (n < 0) {
      l->status = StatusOf(errno);
      ::close(fd);
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
      ++total;
      if (kept.size() < kMaxEntries) {
        kept.push_back(Kept{std::string(name)});
        std::push_heap(kept.begin(), kept.end());
      } else if (name < kept.front().name) {
        std::pop_heap(kept.begin(), kept.end());
        kept.back().name.assign(name.data(), name.size());
        std::push_heap(kept.begin(), kept.end());
      }
    }
  }
  std::sort_heap(kept.begin(), kept.end());
  http::ListingWriter writer(options.format, l->buf, kBufferBytes);
  writer.Begin(l->url_path);
  for (const Kept& k : kept) {
    // Links are followed (as nginx lists them), within the root or not: a link's target is not
    // served unless it resolves beneath the root, but its size and time are shown. A name
    // gone since it was read, or a dangling link, is shown as itself (lstat) or not at all.
    struct statx st;
    if (::statx(fd, k.name.c_str(), AT_STATX_SYNC_AS_STAT, STATX_TYPE | STATX_SIZE | STATX_MTIME,
                &st) != 0 &&
        ::statx(fd, k.name.c_str(), AT_SYMLINK_NOFOLLOW, STATX_TYPE | STATX_SIZE | STATX_MTIME,
                &st) != 0) {
      --total;
      continue;
    }
    const http::ListingEntry entry{k.name, S_ISDIR(st.stx_mode), st.stx_size,
                                   static_cast<int64_t>(st.stx_mtime.tv_sec)};
    if (!writer.Add(entry)) break;
  }
  ::close(fd);
  l->body = writer.End(total);
  l->status = l->body.empty() ? 500 : 200;
}

}  // namespace ringd
