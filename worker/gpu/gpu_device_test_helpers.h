// Helpers of the GPU backend's device tests (GPU machine only): executors
// on the golden checkpoints with the tests' capacities, error norms, and a
// prefill batch.
#ifndef RADIXKV_WORKER_GPU_GPU_DEVICE_TEST_HELPERS_H_
#define RADIXKV_WORKER_GPU_GPU_DEVICE_TEST_HELPERS_H_

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "model/testing/shared_test_data.h"
#include "worker/cpu/cpu_model_executor.h"
#include "worker/gpu/gpu_model_executor.h"
#include "worker/model_executor.h"

namespace radixkv::worker::gpu_test {

// The shared data directory (RADIXKV_SHARED_DIR); a test failure and ""
// when it is missing.
inline std::string Shared() {
  absl::StatusOr<std::string> s = model::testing::FindSharedDir();
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : "";
}

// A GPU executor on checkpoint `dir` (8192 slots, B <= 64, T <= 1024,
// context <= 4096); nullptr and a test failure when Create fails.
inline std::unique_ptr<GpuModelExecutor> MakeGpu(const std::string& dir,
                                                 DType dtype,
                                                 bool graphs = true,
                                                 bool tensor_cores = true,
                                                 int32_t page_size = 16) {
  GpuModelExecutorOptions o;
  o.model_dir = dir;
  o.dtype = dtype;
  o.kv_capacity_slots = 8192;
  o.page_size = page_size;
  o.max_tokens_per_step = 1024;
  o.max_batch_size = 64;
  o.max_context_len = 4096;
  o.use_graphs = graphs;
  o.use_tensor_core_attention = tensor_cores;
  absl::StatusOr<std::unique_ptr<GpuModelExecutor>> e =
      GpuModelExecutor::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// The CPU reference executor on `dir` (8192 slots, 4 threads).
inline std::unique_ptr<CpuModelExecutor> MakeCpu(const std::string& dir,
                                                 int32_t page_size = 16) {
  CpuModelExecutorOptions o;
  o.model_dir = dir;
  o.kv_capacity_slots = 8192;
  o.page_size = page_size;
  o.num_threads = 4;
  absl::StatusOr<std::unique_ptr<CpuModelExecutor>> e =
      CpuModelExecutor::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// max |a - b|; inf when the sizes differ.
inline double MaxAbs(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    m = std::max(m, std::fabs(double(a[i]) - b[i]));
  }
  return a.size() == b.size() ? m : INFINITY;
}

// ||a - ref|| / ||ref||; inf when the sizes differ.
inline double RelL2(const std::vector<float>& a,
                    const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < ref.size(); ++i) {
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return a.size() == ref.size() ? std::sqrt(num / den) : INFINITY;
}

// A prefill batch of `prompts` with no cached prefix; sequence s writes its
// KV to slots [256 s, 256 s + len) (each prompt <= 256 tokens).
inline ForwardBatch PrefillBatch(
    const std::vector<std::vector<int32_t>>& prompts) {
  ForwardBatch b;
  b.qo_indptr = {0};
  b.kv_indptr.assign(prompts.size() + 1, 0);
  for (size_t s = 0; s < prompts.size(); ++s) {
    for (size_t i = 0; i < prompts[s].size(); ++i) {
      b.input_ids.push_back(prompts[s][i]);
      b.positions.push_back(static_cast<int32_t>(i));
      b.out_cache_loc.push_back(static_cast<int32_t>(s * 256 + i));
    }
    b.qo_indptr.push_back(static_cast<int32_t>(b.input_ids.size()));
  }
  return b;
}

// One decode step after PrefillBatch's layout: sequence s < seqs gets a
// random token in [3, vocab) at position `pos`, its KV slot 256 s + pos,
// and attends slots [256 s, 256 s + pos].
inline ForwardBatch DecodeStepBatch(int seqs, int pos, int32_t vocab,
                                    std::mt19937& rng) {
  ForwardBatch d;
  d.is_decode = true;
  d.qo_indptr = {0};
  d.kv_indptr = {0};
  for (int s = 0; s < seqs; ++s) {
    d.input_ids.push_back(3 + rng() % (vocab - 3));
    d.positions.push_back(pos);
    d.out_cache_loc.push_back(s * 256 + pos);
    for (int i = 0; i <= pos; ++i) d.kv_indices.push_back(s * 256 + i);
    d.qo_indptr.push_back(s + 1);
    d.kv_indptr.push_back(static_cast<int32_t>(d.kv_indices.size()));
  }
  return d;
}

}  // namespace radixkv::worker::gpu_test

#endif  // RADIXKV_WORKER_GPU_GPU_DEVICE_TEST_HELPERS_H_
