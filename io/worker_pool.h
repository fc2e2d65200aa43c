// Threads for file work that may block (open, stat, reads of data not in the page cache), used
// by the epoll backend as nginx uses `aio threads`. Bounded: TrySubmit refuses when the queue is
// full and the caller holds the job back (backpressure) instead of queueing without limit.
// Finished jobs come back through TakeDone on the loop's thread, announced on `notify_fd`.
// Two classes: quick jobs (open + stat, small reads) always go first, and bulk jobs (reading a
// large file ahead for sendfile) may occupy every thread but one, so a request for a hot file's
// metadata never queues behind a slow disk.
//
//   WorkerPool pool(4, 1024, eventfd, &RunJob);
//   if (!pool.TrySubmit(c, /*bulk=*/false)) { /* keep c in the caller's own waiting list */ }
//   while (Completion* c = pool.TakeDone()) c->callback(c);
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "io/backend_util.h"
#include "io/loop.h"

namespace ringd::io {

class WorkerPool {
 public:
  using Job = void (*)(Completion* c, char* scratch, size_t scratch_size);

  WorkerPool(uint32_t threads, uint32_t queue_capacity, int notify_fd, Job job,
             size_t scratch_size);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  bool TrySubmit(Completion* c, bool bulk);
  // Drops every queued job (they never run) and joins the threads once their running jobs end.
  // After it, no job touches its Completion. The destructor stops too.
  void Stop();
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
  bool BulkAllowed() const;
  internal::CompletionQueue quick_, bulk_;
  uint32_t queued_ = 0;
  uint32_t bulk_running_ = 0;
  internal::CompletionQueue done_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ringd::io
