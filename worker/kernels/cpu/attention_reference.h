// Test-only: the naive dense attention formula in float64 that every CPU (and
// HIP) attention kernel is checked against, plus helpers that fill a KvPool
// with random values and read elements back through the pool's address
// function.
#ifndef RADIXKV_WORKER_KERNELS_CPU_ATTENTION_REFERENCE_H_
#define RADIXKV_WORKER_KERNELS_CPU_ATTENTION_REFERENCE_H_

#include <cstdint>
#include <random>
#include <vector>

#include "worker/kv_pool.h"

namespace radixkv::worker::testing {

// Dense causal attention of one sequence in float64.
//   q    [lq][hq][d]; k, v [lk][hkv][d]; query i sees key j iff
//        j <= i + (lk - lq) (shifted causal mask, background.md §3.2); query
//        head h uses kv head h / (hq / hkv).
//   out  [lq][hq][d] resized and written; lse [lq][hq] natural log
//        (-inf and out 0 for a row that sees no key).
//   window_left  -1: no window; w >= 0: query i (position p = i + lk - lq)
//        also needs j >= p - w (transformers' sliding window W = w + 1:
//        kv_idx > q_idx - W).
void ReferenceAttention(const std::vector<double>& q,
                        const std::vector<double>& k,
                        const std::vector<double>& v, int lq, int lk, int hq,
                        int hkv, int d, double scale, std::vector<double>* out,
                        std::vector<double>* lse, int window_left = -1);

// One case of the sliding-window kernel tests.
struct WindowCase {
  int window;  // Hugging Face W; the kernels' window_left is W - 1
  int page_size;
  KvLayout layout;
  DType dtype;
  int index;  // 0, 1, ...: varies the other parameters
};

// Calls fn(WindowCase) for every window W in {1, 15, 16, 17, 64, 4095}
// (around a page of 16, a page of 64, longer than most contexts) x page
// size in {1, 16, 64}, cycling through the three layouts and three dtypes.
template <typename F>
void ForEachWindowCase(F&& fn) {
  const KvLayout layouts[] = {KvLayout::kBSHD, KvLayout::kBHSD,
                              KvLayout::kVllm};
  const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF16};
  int i = 0;
  for (int window : {1, 15, 16, 17, 64, 4095}) {
    for (int ps : {1, 16, 64}) {
      fn(WindowCase{window, ps, layouts[i % 3], dtypes[(i / 3) % 3], i});
      ++i;
    }
  }
}

// Seed for a randomized test: $RADIXKV_TEST_SEED if set, else fresh from
// std::random_device. Printed to stdout so a failure can be replayed.
uint64_t TestSeed(const char* test_name);

// Writes uniform(-1, 1) values (never exactly 0) into every element of
// layer's K and V, rounded to the pool dtype.
void FillPoolRandom(KvPool& pool, int layer, std::mt19937_64& rng);

// K / V element at (slot, kv_head, dim) of `layer` converted to double.
double PoolK(const KvPool& pool, int layer, int64_t slot, int32_t kv_head,
             int32_t dim);
double PoolV(const KvPool& pool, int layer, int64_t slot, int32_t kv_head,
             int32_t dim);

// n uniform(-scale, scale) floats, never exactly 0.
std::vector<float> RandomFloats(int64_t n, float scale, std::mt19937_64& rng);

// Slots for sequences of the given lengths, page by page as a block table
// would map them: pages are drawn from a random permutation of the pool's
// pages (so kv_indices are permuted and non-contiguous), every sequence starts
// on a fresh page. Returns the concatenated slots; requires enough pages.
std::vector<int64_t> PermutedSlots(const KvPool& pool,
                                   const std::vector<int>& lengths,
                                   std::mt19937_64& rng);

}  // namespace radixkv::worker::testing

#endif  // RADIXKV_WORKER_KERNELS_CPU_ATTENTION_REFERENCE_H_
