// The worker pool's shutdown: jobs still queued never run once Stop (or the destructor) begins,
// because the memory they point into may be freed right after (a shard's file cache entries).
#include "io/worker_pool.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace ringd::io {
namespace {

std::atomic<int> jobs_run{0};

void SlowJob(Completion* c, char*, size_t) {
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  c->result = 1;
  jobs_run.fetch_add(1);
}

TEST(WorkerPoolTest, QueuedJobsDoNotRunAfterStop) {
  const int notify = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(notify, 0);
  jobs_run = 0;
  Completion jobs[8];
  {
    WorkerPool pool(1, 16, notify, &SlowJob, 64);
    for (Completion& c : jobs) ASSERT_TRUE(pool.TrySubmit(&c, /*bulk=*/false));
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the first one is running
  }  // the destructor stops the pool: the queued jobs are dropped, not run
  EXPECT_LE(jobs_run.load(), 1);
  const int after_stop = jobs_run.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(jobs_run.load(), after_stop) << "a job ran after the pool stopped";
  ::close(notify);
}

}  // namespace
}  // namespace ringd::io
