// GpuGemm: the GEMMs of the GPU model backend, C[M, N] (fp32, row-major) =
// A[M, K] W[N, K]^T + beta C with A and W in the compute dtype and fp32
// accumulation, on one stream. Decode-sized M (at most small_batch_max_rows,
// 2-byte dtypes, K a multiple of 8) runs the weight-streaming kernel of
// model_kernels.h, everything else the vendor GEMM of gpu_blas.h; a GEMM
// whose input is an RMSNorm (RunNormed) runs the norm in that kernel's
// prologue at M <= kFusedNormMaxRows, so a decode step of one or two
// sequences launches no RMSNorm kernel. With
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

// The RMSNorm input of RunNormed: rows src(m) = row_index ? row_index[m] :
// m of the fp32 residual x [*, k], scaled by weight (fp32 [k]) and eps as
// LaunchRmsNorm does.
struct RmsNormInput {
  const float* x = nullptr;
  const int32_t* row_index = nullptr;
  const float* weight = nullptr;
  float eps = 0.0f;
};

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
  // RunNormed fuses the norm where it can (default) or always launches it.
  void set_fuse_norm(bool on) { fuse_norm_ = on; }
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

  // C = RMSNorm(in) W^T (beta 0) for m rows: fused into the weight-streaming
  // kernel when that kernel takes the shape (m <= small_batch_max_rows and
  // kFusedNormMaxRows, 2-byte dtype, no autotuning); otherwise
  // LaunchRmsNorm writes the rows to `normed` ([m, k] in the dtype) and Run
  // follows. Same bits either way when the GEMM is the streaming kernel.
  absl::Status RunNormed(const RmsNormInput& in, void* normed, const void* w,
                         float* c, int64_t m, int64_t n, int64_t k) const;

 private:
  // Whether Run sends (m, k) to the weight-streaming kernel.
  bool TakesStreamingKernel(int64_t m, int64_t k) const;

  BlasHandle blas_ = nullptr;
  hipStream_t stream_ = nullptr;
  DType dtype_ = DType::kBF16;
  int32_t small_batch_max_rows_ = 0;
  bool autotune_ = false;
  bool fuse_norm_ = true;
  // Tuning is a cache of timings: Run stays const for the forward's callers.
  mutable GemmTuner tuner_;
};

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_GPU_GEMM_H_
