// GpuGemm: the GEMMs of the GPU model backend, C[M, N] (fp32, row-major) =
// A[M, K] W[N, K]^T + beta C with A and W in the compute dtype and fp32
// accumulation, on one stream. Decode-sized M (at most small_batch_max_rows,
// 2-byte dtypes, K a multiple of 8) runs the weight-streaming kernel of
// model_kernels.h, everything else the vendor GEMM of gpu_blas.h.
#ifndef RADIXKV_WORKER_GPU_GPU_GEMM_H_
#define RADIXKV_WORKER_GPU_GPU_GEMM_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "worker/gpu/gpu_blas.h"
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

  void set_small_batch_max_rows(int32_t rows) { small_batch_max_rows_ = rows; }

  // C = A W^T + beta C for M = m rows (m == 0: nothing). a: [m, k], w:
  // [n, k] in the dtype; c: fp32 [m, n]. INTERNAL naming the shape when the
  // vendor GEMM fails.
  absl::Status Run(const void* a, const void* w, float* c, int64_t m, int64_t n,
                   int64_t k, float beta) const;

 private:
  BlasHandle blas_ = nullptr;
  hipStream_t stream_ = nullptr;
  DType dtype_ = DType::kBF16;
  int32_t small_batch_max_rows_ = 0;
};

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_GPU_GEMM_H_
