// CpuThreadPool: a small fixed-size pool of threads for the CPU kernels and
// the CPU model executor. Work is expressed as ParallelFor over an index
// range (e.g. one index per (sequence, kv head) pair); the calling thread
// takes part, so a pool of N threads runs N tasks at once with N-1 workers.
#ifndef RADIXKV_WORKER_KERNELS_CPU_CPU_THREAD_POOL_H_
#define RADIXKV_WORKER_KERNELS_CPU_CPU_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace radixkv::worker {

class CpuThreadPool {
 public:
  // num_threads: total parallelism including the caller (>= 1; values < 1
  // are treated as 1). Starts num_threads - 1 worker threads.
  explicit CpuThreadPool(int num_threads);
  // Joins the workers. No ParallelFor may be running.
  ~CpuThreadPool();
  CpuThreadPool(const CpuThreadPool&) = delete;
  CpuThreadPool& operator=(const CpuThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(i) once for every i in [0, n), spread over the pool's threads
  // (dynamic scheduling, one index at a time), and returns when all calls
  // have finished. Calls from inside a task, or while another ParallelFor of
  // this pool is running on another thread, run inline / wait their turn, so
  // nesting never deadlocks. fn must not throw.
  void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  void WorkerLoop();
  void RunTasks(const std::function<void(int64_t)>* fn, int64_t n);

  const int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // serializes ParallelFor calls from different threads

  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  uint64_t generation_ = 0;  // bumped per ParallelFor; guarded by mu_
  bool stop_ = false;
  int active_workers_ = 0;  // workers inside RunTasks for this generation
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
};

// Runs fn(i) for i in [0, n): on `pool` when non-null, else inline in order.
void ParallelFor(CpuThreadPool* pool, int64_t n,
                 const std::function<void(int64_t)>& fn);

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_KERNELS_CPU_CPU_THREAD_POOL_H_
