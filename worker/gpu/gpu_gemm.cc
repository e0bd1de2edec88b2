#include "worker/gpu/gpu_gemm.h"

#include "absl/strings/str_cat.h"
#include "worker/gpu/gpu_status.h"
#include "worker/gpu/model_kernels.h"

namespace radixkv::worker::gpu {

GpuGemm::~GpuGemm() {
  if (blas_ != nullptr) BlasDestroy(blas_);
}

absl::Status GpuGemm::Init(hipStream_t stream, DType dtype,
                           int32_t small_batch_max_rows) {
  if (BlasCreate(&blas_) != kBlasSuccess) {
    return absl::InternalError("BLAS handle creation failed");
  }
  BlasSetStream(blas_, stream);
  stream_ = stream;
  dtype_ = dtype;
  small_batch_max_rows_ = small_batch_max_rows;
  return tuner_.Init(stream, blas_, dtype);
}

void GpuGemm::BindWorkspace(void* workspace, size_t bytes) {
  BlasSetWorkspace(blas_, workspace, bytes);
  tuner_.BindWorkspace(workspace, bytes);
}

void GpuGemm::BindTuningScratch(float* scratch, size_t floats) {
  tuner_.BindScratch(scratch, floats);
}

absl::Status GpuGemm::Run(const void* a, const void* w, float* c, int64_t m,
                          int64_t n, int64_t k, float beta) const {
  if (m == 0) return absl::OkStatus();
  if (autotune_) {
    absl::StatusOr<bool> tuned = tuner_.Run(a, w, c, m, n, k, beta);
    if (!tuned.ok()) return tuned.status();
    if (*tuned) return absl::OkStatus();
  }
  if (TakesStreamingKernel(m, k) &&
      LaunchSmallBatchGemm(a, w, c, static_cast<int32_t>(m),
                           static_cast<int32_t>(n), static_cast<int32_t>(k),
                           beta, dtype_, stream_) == 0) {
    return absl::OkStatus();
  }
  const BlasStatus s = RunGemmEx(blas_, dtype_, a, w, c, m, n, k, beta);
  if (s != kBlasSuccess) {
    return absl::InternalError(absl::StrCat("BLAS GemmEx failed (status ",
                                            static_cast<int>(s), ") M=", m,
                                            " N=", n, " K=", k));
  }
  return absl::OkStatus();
}

bool GpuGemm::TakesStreamingKernel(int64_t m, int64_t k) const {
  return m <= small_batch_max_rows_ && dtype_ != DType::kF32 && k % 8 == 0;
}

absl::Status GpuGemm::RunNormed(const RmsNormInput& in, void* normed,
                                const void* w, float* c, int64_t m, int64_t n,
                                int64_t k) const {
  if (m == 0) return absl::OkStatus();
  if (fuse_norm_ && !autotune_ && TakesStreamingKernel(m, k) &&
      LaunchSmallBatchGemmRmsNorm(
          in.x, in.row_index, in.weight, in.eps, w, c, static_cast<int32_t>(m),
          static_cast<int32_t>(n), static_cast<int32_t>(k), 0.0f, dtype_,
          stream_) == 0) {
    return absl::OkStatus();
  }
  RADIXKV_RETURN_IF_ERROR(KernelError(
      LaunchRmsNorm(in.x, in.row_index, in.weight, in.eps,
                    static_cast<int32_t>(m), static_cast<int32_t>(k), normed,
                    dtype_, stream_),
      "rmsnorm"));
  return Run(normed, w, c, m, n, k, 0.0f);
}

}  // namespace radixkv::worker::gpu
