#include "io/worker_pool.h"

#include <unistd.h>

#include <memory>

namespace ringd::io {

WorkerPool::WorkerPool(uint32_t threads, uint32_t queue_capacity, int notify_fd, Job job,
                       size_t scratch_size)
    : capacity_(queue_capacity), notify_fd_(notify_fd), job_(job), scratch_size_(scratch_size) {
  for (uint32_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

WorkerPool::~WorkerPool() { Stop(); }

void WorkerPool::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    // Queued jobs point into their owners' memory, which may be freed once we return.
    quick_ = internal::CompletionQueue{};
    bulk_ = internal::CompletionQueue{};
    queued_ = 0;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

bool WorkerPool::BulkAllowed() const {
  return bulk_.head != nullptr && (threads_.size() <= 1 || bulk_running_ + 1 < threads_.size());
}

bool WorkerPool::TrySubmit(Completion* c, bool bulk) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queued_ >= capacity_) return false;
    (bulk ? bulk_ : quick_).Push(c);
    ++queued_;
  }
  cv_.notify_all();  // a waiting worker may only be allowed one class
  return true;
}

Completion* WorkerPool::TakeDone() {
  std::lock_guard<std::mutex> lock(mu_);
  return done_.Pop();
}

uint32_t WorkerPool::Queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_;
}

void WorkerPool::Run() {
  // Each worker's scratch buffer: where reads that only warm the page cache land.
  std::unique_ptr<char[]> scratch(new char[scratch_size_]);
  while (true) {
    Completion* c;
    bool bulk;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || quick_.head != nullptr || BulkAllowed(); });
      if (stopping_) return;
      bulk = quick_.head == nullptr;
      c = bulk ? bulk_.Pop() : quick_.Pop();
      --queued_;
      if (bulk) ++bulk_running_;
    }
    job_(c, scratch.get(), scratch_size_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (bulk) {
        --bulk_running_;
        cv_.notify_all();  // another bulk job may start now
      }
      done_.Push(c);
    }
    const uint64_t one = 1;
    ssize_t r = ::write(notify_fd_, &one, sizeof one);
    (void)r;
  }
}

}  // namespace ringd::io
