#include "server/core/document_root.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/assert.h"

namespace ringd {

DocumentRoot::DocumentRoot(std::string path, int fd, std::string flag)
    : path_(std::move(path)),
      flag_(std::move(flag)),
      state_(static_cast<uint32_t>(fd)),
      fd_(fd),
      dev_(0),
      ino_(0) {
  RINGD_ASSERT(fd >= 0);
  struct stat st;
  if (::fstat(fd, &st) == 0) {
    dev_ = st.st_dev;
    ino_ = st.st_ino;
  }
}

DocumentRoot::~DocumentRoot() {
  ::close(fd_);
  for (const int fd : retired_) ::close(fd);
}

void DocumentRoot::Publish(int fd) {
  const uint64_t generation = (state_.load(std::memory_order_relaxed) >> 32) + 1;
  retired_.push_back(fd_);
  if (retired_.size() > kRetiredMax) {
    ::close(retired_.front());
    retired_.pop_front();
  }
  fd_ = fd;
  state_.store(State(generation, fd), std::memory_order_release);
}

std::string DocumentRoot::Check() {
  struct stat st;
  std::string error;
  int fd = -1;
  if (::stat(path_.c_str(), &st) != 0) {
    error = std::strerror(errno);
  } else if (!S_ISDIR(st.st_mode)) {
    error = "not a directory";
  } else if (st.st_dev == dev_ && st.st_ino == ino_) {
    if (last_error_.empty()) return "";
  } else {
    fd = ::open(path_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    // What was opened, which may differ from what stat saw if the name moved again between.
    if (fd < 0 || ::fstat(fd, &st) != 0) {
      error = std::strerror(errno);
    } else if (::faccessat(fd, ".", X_OK, AT_EACCESS) != 0) {
      // As at start-up: a root the serving user cannot search would answer 403 to everything.
      error = std::string("the user ringd serves as cannot search it: ") + std::strerror(errno);
    }
  }
  if (!error.empty()) {
    if (fd >= 0) ::close(fd);
    if (error == last_error_) return "";
    last_error_ = error;
    return "ringd: " + flag_ + " " + path_ + ": " + error +
           "; still serving the directory it named before";
  }
  last_error_.clear();
  if (fd < 0) return "ringd: " + flag_ + " " + path_ + ": a directory again; serving it as before";
  if (st.st_dev == dev_ && st.st_ino == ino_) {  // it moved back before the open
    ::close(fd);
    return "";
  }
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  Publish(fd);
  return "ringd: " + flag_ + " " + path_ +
         " names another directory now: serving it (files cached " +
         "from the one before are opened again at their next request)";
}

RootWatch::RootWatch(std::function<void()> check)
    : check_(std::move(check)), thread_([this] { Run(); }) {}

RootWatch::~RootWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void RootWatch::CheckNow() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    now_ = true;
  }
  cv_.notify_one();
}

bool RootWatch::Stop(std::chrono::milliseconds wait) {
  std::unique_lock<std::mutex> lock(mu_);
  stop_ = true;
  cv_.notify_one();
  if (!ended_cv_.wait_for(lock, wait, [this] { return ended_; })) return false;
  lock.unlock();
  thread_.join();
  return true;
}

void RootWatch::Run() {
  pthread_setname_np(pthread_self(), "ringd-root");
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_ || now_; });
    if (stop_) break;
    now_ = false;
    lock.unlock();
    check_();
    lock.lock();
  }
  ended_ = true;
  ended_cv_.notify_all();
}

}  // namespace ringd
