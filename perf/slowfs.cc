// slowfs: a read-only FUSE passthrough that sleeps before every read, to give the perf harness's
// `cold` scenario a slow disk (this machine's virtual disk is fast).
//   slowfs BACKING_DIR MOUNTPOINT DELAY_US [fuse options...]      # e.g. 2000 us per read call
//   fusermount3 -u MOUNTPOINT
#define FUSE_USE_VERSION 31
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "server/http/decimal.h"

namespace {

std::string g_backing;
useconds_t g_delay_us = 0;

std::string Real(const char* path) { return g_backing + path; }

int GetAttr(const char* path, struct stat* st, fuse_file_info*) {
  return lstat(Real(path).c_str(), st) == 0 ? 0 : -errno;
}

int ReadLink(const char* path, char* buf, size_t size) {
  const ssize_t n = readlink(Real(path).c_str(), buf, size - 1);
  if (n < 0) return -errno;
  buf[n] = '\0';
  return 0;
}

int ReadDir(const char* path, void* buf, fuse_fill_dir_t fill, off_t, fuse_file_info*,
            fuse_readdir_flags) {
  DIR* d = opendir(Real(path).c_str());
  if (d == nullptr) return -errno;
  while (dirent* e = readdir(d))
    fill(buf, e->d_name, nullptr, 0, static_cast<fuse_fill_dir_flags>(0));
  closedir(d);
  return 0;
}

int Open(const char* path, fuse_file_info* fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
  const int fd = open(Real(path).c_str(), O_RDONLY);
  if (fd < 0) return -errno;
  fi->fh = static_cast<uint64_t>(fd);
  return 0;
}

int Read(const char*, char* buf, size_t size, off_t offset, fuse_file_info* fi) {
  usleep(g_delay_us);  // the slow disk
  const ssize_t n = pread(static_cast<int>(fi->fh), buf, size, offset);
  return n < 0 ? -errno : static_cast<int>(n);
}

int Release(const char*, fuse_file_info* fi) {
  close(static_cast<int>(fi->fh));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: slowfs BACKING_DIR MOUNTPOINT DELAY_US [fuse options...]\n");
    return 2;
  }
  char resolved[PATH_MAX];
  if (realpath(argv[1], resolved) == nullptr) {
    std::perror("slowfs: backing dir");
    return 1;
  }
  g_backing = resolved;
  uint64_t delay_us;
  if (!ringd::http::ParseDecimal(argv[3], UINT32_MAX, &delay_us)) {
    std::fprintf(stderr, "slowfs: DELAY_US: expected microseconds, got '%s'\n", argv[3]);
    return 2;
  }
  g_delay_us = static_cast<useconds_t>(delay_us);
  fuse_operations ops{};
  ops.getattr = GetAttr;
  ops.readlink = ReadLink;
  ops.readdir = ReadDir;
  ops.open = Open;
  ops.read = Read;
  ops.release = Release;
  // fuse_main gets: program, mountpoint, -f (stay in front; the harness owns the process),
  // allow_other so servers running as other users can read, then any extra options.
  std::vector<char*> args = {argv[0], argv[2], const_cast<char*>("-f"), const_cast<char*>("-o"),
                             const_cast<char*>("ro,allow_other,default_permissions")};
  for (int i = 4; i < argc; ++i) args.push_back(argv[i]);
  return fuse_main(static_cast<int>(args.size()), args.data(), &ops, nullptr);
}
