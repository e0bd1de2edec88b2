// GpuGemm: the GEMMs of the GPU model backend, C[M, N] (fp32, row-major) =
// A[M, K] W[N, K]^T + beta C with A and W in the compute dtype and fp32
// accumulation, on one stream. Decode-sized M (at most small_batch_max_rows,
// 2-byte dtypes, K a multiple of 8) runs the weight-streaming kernel of
// model_kernels.h, everything else the vendor GEMM of gpu_blas.h. With
// autotune on, shapes GemmTuner tunes (decode buckets) run the fastest of
// GemmEx, the streaming kernel and cuBLASLt's algorithms (gpu_gemm_tuner.h).
#ifndef RADIXKV_WORKER_GPU_GPU_GEMM_H_
#define RADIXKV_WORKER_GPU_GPU_GEMM_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "worker/gpu/gpu_blas.h"
#include "worker/gpu/gpu_gemm_tuner.h"
#include "worker/numeric_types.h"

namespace radixkv::worker::gpu {

class GpuGemm {
 public:
  GpuGemm() = default;
  ~GpuGemm();
  GpuGemm(const GpuGemm&) = delete;
  GpuGemm& operator=(const GpuGemm&) = delete;

  // Creates the BLAS handle on `stream` (a hipStream_t). INTERNAL when the
  // handle cannot be created.
  absl::Status Init(hipStream_t stream, DType dtype,
                    int32_t small_batch_max_rows);

  // Gives the vendor GEMM a fixed device workspace, so that it allocates
  // nothing while a graph is captured.
  void BindWorkspace(void* workspace, size_t bytes);
  // fp32 scratch the tuner's timed candidates of accumulating (beta != 0)
  // shapes write (GemmTuner::BindScratch).
  void BindTuningScratch(float* scratch, size_t floats);

  void set_small_batch_max_rows(int32_t rows) { small_batch_max_rows_ = rows; }
  // Per-shape tuned GEMMs (GemmTuner) on or off for later calls; the tuned
  // choices are kept.
  void set_autotune(bool on) { autotune_ = on; }
  // The tuned shapes and their choices (GemmTuner::Describe).
  std::string DescribeTuning() const { return tuner_.Describe(); }

  // C = A W^T + beta C for M = m rows (m == 0: nothing). a: [m, k], w:
  // [n, k] in the dtype; c: fp32 [m, n]. INTERNAL naming the shape when the
  // vendor GEMM fails.
  // With autotune, a new tunable shape is timed first (synchronizes the
  // stream; never during capture).
  absl::Status Run(const void* a, const void* w, float* c, int64_t m, int64_t n,
                   int64_t k, float beta) const;

 private:
  BlasHandle blas_ = nullptr;
  hipStream_t stream_ = nullptr;
  DType dtype_ = DType::kBF16;
  int32_t small_batch_max_rows_ = 0;
  bool autotune_ = false;
  // Tuning is a cache of timings: Run stays const for the forward's callers.
  mutable GemmTuner tuner_;
};

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_GPU_GEMM_H_
