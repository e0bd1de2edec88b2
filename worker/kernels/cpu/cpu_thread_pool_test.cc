#include "worker/kernels/cpu/cpu_thread_pool.h"

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::worker {
namespace {

TEST(CpuThreadPoolTest, RunsEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    CpuThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 3, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](int64_t i) { hits[i].fetch_add(1); });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
    }
  }
}

TEST(CpuThreadPoolTest, ManyConsecutiveCallsAndNesting) {
  CpuThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int round = 0; round < 200; ++round) {
    pool.ParallelFor(7, [&](int64_t i) {
      // Nested calls run inline on the calling task's thread.
      pool.ParallelFor(3, [&](int64_t j) { sum.fetch_add(i * 3 + j); });
    });
  }
  EXPECT_EQ(sum.load(), 200 * (20 * 21 / 2));
}

// Back-to-back small calls: a worker that wakes after its call ended must
// not claim (and drop) an index of the next call.
TEST(CpuThreadPoolTest, BackToBackSmallCallsLoseNoIndex) {
  CpuThreadPool pool(4);
  for (int round = 0; round < 20000; ++round) {
    const int64_t n = 2 + round % 4;
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, [&](int64_t i) { hits[i].fetch_add(1); });
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(hits[i].load(), 1) << "round " << round << " index " << i;
    }
  }
}

TEST(CpuThreadPoolTest, NullPoolRunsInlineInOrder) {
  std::vector<int64_t> order;
  ParallelFor(nullptr, 5, [&](int64_t i) { order.push_back(i); });
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace radixkv::worker
