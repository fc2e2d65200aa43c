// Threads for file work that may block (open, stat, reads of data not in the page cache), used
// by the epoll backend as nginx uses `aio threads`. Bounded: TrySubmit refuses when the queue is
// full and the caller holds the job back (backpressure) instead of queueing without limit.
// Finished jobs come back through TakeDone on the loop's thread, announced on `notify_fd`.
//
//   WorkerPool pool(4, 1024, eventfd, &RunJob);
//   if (!pool.TrySubmit(c)) { /* keep c in the caller's own waiting list */ }
//   while (Completion* c = pool.TakeDone()) c->callback(c);
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "io/loop.h"

namespace ringd::io {

class WorkerPool {
 public:
  using Job = void (*)(Completion* c, char* scratch, size_t scratch_size);

  WorkerPool(uint32_t threads, uint32_t queue_capacity, int notify_fd, Job job, size_t scratch_size);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  bool TrySubmit(Completion* c);
  // The next finished job, or nullptr.
  Completion* TakeDone();
  uint32_t Queued() const;

 private:
  void Run();

  const uint32_t capacity_;
  const int notify_fd_;
  const Job job_;
  const size_t scratch_size_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Completion* queue_head_ = nullptr;  // intrusive, through Completion::next_ready
  Completion* queue_tail_ = nullptr;
  uint32_t queued_ = 0;
  Completion* done_head_ = nullptr;
  Completion* done_tail_ = nullptr;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ringd::io
