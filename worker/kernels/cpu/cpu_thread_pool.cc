#include "worker/kernels/cpu/cpu_thread_pool.h"

#include <algorithm>

namespace radixkv::worker {
namespace {
// True on a thread currently running a task of some CpuThreadPool: nested
// ParallelFor calls run inline instead of waiting on busy workers.
thread_local bool in_pool_task = false;
}  // namespace

CpuThreadPool::CpuThreadPool(int num_threads)
    : num_threads_(std::max(1, num_threads)) {
  workers_.reserve(num_threads_ - 1);
  for (int i = 0; i + 1 < num_threads_; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

CpuThreadPool::~CpuThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void CpuThreadPool::RunTasks(const std::function<void(int64_t)>* fn,
                             int64_t n) {
  const bool was_in_task = in_pool_task;
  in_pool_task = true;
  for (;;) {
    const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n) break;
    (*fn)(i);
  }
  in_pool_task = was_in_task;
}

void CpuThreadPool::WorkerLoop() {
  uint64_t seen_generation = 0;
  for (;;) {
    const std::function<void(int64_t)>* fn;
    int64_t n;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock,
                    [&] { return stop_ || generation_ != seen_generation; });
      if (stop_) return;
      seen_generation = generation_;
      // Snapshot under the lock. A worker waking after its generation ended
      // sees n_ = 0 and must not touch next_: the caller's next generation
      // may reset it at any moment and an index claimed here would be lost.
      if (n_ == 0) continue;
      fn = fn_;
      n = n_;
      ++active_workers_;
    }
    RunTasks(fn, n);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --active_workers_;
    }
    done_cv_.notify_all();
  }
}

void CpuThreadPool::ParallelFor(int64_t n,
                                const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (n == 1 || workers_.empty() || in_pool_task) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    next_.store(0, std::memory_order_relaxed);
    ++generation_;
  }
  work_cv_.notify_all();
  RunTasks(&fn, n);
  // Every index has been claimed; wait for workers still running theirs.
  // A worker that wakes up late finds next_ >= n_ and leaves at once.
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return active_workers_ == 0; });
  fn_ = nullptr;
  n_ = 0;
}

void ParallelFor(CpuThreadPool* pool, int64_t n,
                 const std::function<void(int64_t)>& fn) {
  if (pool == nullptr) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  pool->ParallelFor(n, fn);
}

}  // namespace radixkv::worker
