#include "worker/gpu/gpu_gemm.h"

#include "absl/strings/str_cat.h"
#include "worker/gpu/model_kernels.h"

namespace radixkv::worker::gpu {
namespace {

BlasDataType BlasType(DType d) {
  switch (d) {
    case DType::kF32:
      return kBlasF32;
    case DType::kBF16:
      return kBlasBF16;
    case DType::kF16:
      return kBlasF16;
  }
  return kBlasF32;
}

}  // namespace

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
  return absl::OkStatus();
}

void GpuGemm::BindWorkspace(void* workspace, size_t bytes) {
  BlasSetWorkspace(blas_, workspace, bytes);
}

absl::Status GpuGemm::Run(const void* a, const void* w, float* c, int64_t m,
                          int64_t n, int64_t k, float beta) const {
  if (m == 0) return absl::OkStatus();
  if (m <= small_batch_max_rows_ && dtype_ != DType::kF32 && k % 8 == 0 &&
      LaunchSmallBatchGemm(a, w, c, static_cast<int32_t>(m),
                           static_cast<int32_t>(n), static_cast<int32_t>(k),
                           beta, dtype_, stream_) == 0) {
    return absl::OkStatus();
  }
  // Row-major C = A W^T is column-major C^T = W A^T: op(W) = W^T, op(A) = A.
  const float alpha = 1.0f;
  const BlasDataType t = BlasType(dtype_);
  const BlasStatus s =
      BlasGemmEx(blas_, /*trans_a=*/true, /*trans_b=*/false,
                 static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                 &alpha, w, t, static_cast<int>(k), a, t, static_cast<int>(k),
                 &beta, c, kBlasF32, static_cast<int>(n));
  if (s != kBlasSuccess) {
    return absl::InternalError(absl::StrCat("BLAS GemmEx failed (status ",
                                            static_cast<int>(s), ") M=", m,
                                            " N=", n, " K=", k));
  }
  return absl::OkStatus();
}

}  // namespace radixkv::worker::gpu
