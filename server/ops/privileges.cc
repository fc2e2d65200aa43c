#include "server/ops/privileges.h"

#include <dirent.h>
#include <grp.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

namespace ringd {
namespace {

std::string Errno(const char* what) { return std::string(what) + ": " + strerror(errno); }

bool NoCapabilities() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  for (const auto& d : data) {
    if (d.effective != 0 || d.permitted != 0) return false;
  }
  return true;
}

// The first thread of this process whose real, effective or saved uid is not `uid`, or "" when
// none. Kernel threads of io_uring rings (iou-sqp-*, iou-wrk-*) are threads of the process too,
// and keep the credentials they were created with: the SQPOLL ring the start-up probe tried
// (closed by now) may leave one behind for a moment.
std::string ThreadNotRunningAs(uid_t uid) {
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return "";
  std::string found;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream status(std::string("/proc/self/task/") + e->d_name + "/status");
    std::string line, name;
    while (std::getline(status, line)) {
      if (line.rfind("Name:", 0) == 0) name = line.substr(line.find_first_not_of(" \t", 5));
      if (line.rfind("Uid:", 0) != 0) continue;
      unsigned r = 0, eu = 0, su = 0;
      if (std::sscanf(line.c_str(), "Uid: %u %u %u", &r, &eu, &su) == 3 &&
          (r != uid || eu != uid || su != uid)) {
        found = name + " (thread " + e->d_name + ", uid " + std::to_string(eu) + ")";
      }
    }
    if (!found.empty()) break;
  }
  ::closedir(dir);
  return found;
}

}  // namespace

absl::Status RootAllowed(const Config& config) {
  if (::geteuid() == 0) {
    if (config.has_user || config.allow_root) return absl::OkStatus();
    return absl::FailedPreconditionError(
        "refusing to serve as root: pass --user NAME to switch to once the ports are bound "
        "(or --allow-root to serve as root anyway)");
  }
  if (config.has_user && (::getuid() != config.uid || ::getgid() != config.gid)) {
    return absl::FailedPreconditionError("--user " + config.user +
                                         ": switching users needs root, and ringd runs as uid " +
                                         std::to_string(::getuid()));
  }
  return absl::OkStatus();
}

absl::Status DropPrivileges(const Config& config) {
  if (!config.has_user || ::geteuid() != 0)
    return absl::OkStatus();  // RootAllowed checked the rest
  const std::string who = "--user " + config.user;
  // glibc applies each of these to every thread of the process (the shards exist already).
  if (::initgroups(config.user.c_str(), config.gid) != 0) {
    return absl::FailedPreconditionError(who + ": " + Errno("initgroups"));
  }
  if (::setgid(config.gid) != 0) {
    return absl::FailedPreconditionError(who + ": " + Errno("setgid"));
  }
  if (::setuid(config.uid) != 0) {
    return absl::FailedPreconditionError(who + ": " + Errno("setuid"));
  }
  uid_t ruid, euid, suid;
  gid_t rgid, egid, sgid;
  if (::getresuid(&ruid, &euid, &suid) != 0 || ::getresgid(&rgid, &egid, &sgid) != 0 ||
      ruid != config.uid || euid != config.uid || suid != config.uid || rgid != config.gid ||
      egid != config.gid || sgid != config.gid) {
    return absl::FailedPreconditionError(who + ": the user and group ids did not all change");
  }
  if (::setuid(0) == 0 || ::setgid(0) == 0 || !NoCapabilities()) {
    return absl::FailedPreconditionError(
        who + ": root could be regained after switching; refusing to serve");
  }
  // Every thread follows (glibc applies the change to all of them); a kernel io thread of a ring
  // closed at start-up is given a few seconds to go away.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::string left;
  while (!(left = ThreadNotRunningAs(config.uid)).empty()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::FailedPreconditionError(who +
                                           ": a thread still runs with other credentials: " + left);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::OkStatus();
}

}  // namespace ringd
