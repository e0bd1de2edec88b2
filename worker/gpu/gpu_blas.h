// Vendor BLAS behind one set of names for the GPU model backend: cuBLAS on
// NVIDIA (nvcc / host compilers with the CUDA headers), hipBLAS on AMD
// (hipcc). Only what worker/gpu/gpu_gemm.cc uses: handles, stream
// and workspace binding, and the mixed-precision GEMM with fp32 accumulation.
// Include after worker/kernels/hip/hip_compat.h.
#ifndef RADIXKV_WORKER_GPU_GPU_BLAS_H_
#define RADIXKV_WORKER_GPU_GPU_BLAS_H_

#include "worker/kernels/hip/hip_compat.h"

#if defined(RADIXKV_GPU_AMD)
#include <hipblas/hipblas.h>

namespace radixkv::worker::gpu {
using BlasHandle = hipblasHandle_t;
using BlasStatus = hipblasStatus_t;
using BlasDataType = hipblasDatatype_t;
inline constexpr BlasStatus kBlasSuccess = HIPBLAS_STATUS_SUCCESS;
inline constexpr BlasDataType kBlasF32 = HIPBLAS_R_32F;
inline constexpr BlasDataType kBlasBF16 = HIPBLAS_R_16B;
inline constexpr BlasDataType kBlasF16 = HIPBLAS_R_16F;
inline BlasStatus BlasCreate(BlasHandle* h) { return hipblasCreate(h); }
inline BlasStatus BlasDestroy(BlasHandle h) { return hipblasDestroy(h); }
inline BlasStatus BlasSetStream(BlasHandle h, hipStream_t s) {
  return hipblasSetStream(h, s);
}
inline BlasStatus BlasSetWorkspace(BlasHandle, void*, size_t) {
  return HIPBLAS_STATUS_SUCCESS;  // hipBLAS 5.2 has no workspace binding
}
// Column-major C[m, n] = alpha op(A) op(B) + beta C, fp32 accumulation.
inline BlasStatus BlasGemmEx(BlasHandle h, bool trans_a, bool trans_b, int m,
                             int n, int k, const float* alpha, const void* a,
                             BlasDataType a_type, int lda, const void* b,
                             BlasDataType b_type, int ldb, const float* beta,
                             void* c, BlasDataType c_type, int ldc) {
  return hipblasGemmEx(h, trans_a ? HIPBLAS_OP_T : HIPBLAS_OP_N,
                       trans_b ? HIPBLAS_OP_T : HIPBLAS_OP_N, m, n, k, alpha, a,
                       a_type, lda, b, b_type, ldb, beta, c, c_type, ldc,
                       HIPBLAS_R_32F, HIPBLAS_GEMM_DEFAULT);
}
}  // namespace radixkv::worker::gpu

#else
#include <cublas_v2.h>

namespace radixkv::worker::gpu {
using BlasHandle = cublasHandle_t;
using BlasStatus = cublasStatus_t;
using BlasDataType = cudaDataType_t;
inline constexpr BlasStatus kBlasSuccess = CUBLAS_STATUS_SUCCESS;
inline constexpr BlasDataType kBlasF32 = CUDA_R_32F;
inline constexpr BlasDataType kBlasBF16 = CUDA_R_16BF;
inline constexpr BlasDataType kBlasF16 = CUDA_R_16F;
inline BlasStatus BlasCreate(BlasHandle* h) { return cublasCreate(h); }
inline BlasStatus BlasDestroy(BlasHandle h) { return cublasDestroy(h); }
inline BlasStatus BlasSetStream(BlasHandle h, cudaStream_t s) {
  return cublasSetStream(h, s);
}
// A fixed workspace keeps cuBLAS from allocating while a graph is captured.
inline BlasStatus BlasSetWorkspace(BlasHandle h, void* ws, size_t bytes) {
  return cublasSetWorkspace(h, ws, bytes);
}
// Column-major C[m, n] = alpha op(A) op(B) + beta C, fp32 accumulation
// (CUBLAS_COMPUTE_32F: no TF32 down-conversion of fp32 inputs).
inline BlasStatus BlasGemmEx(BlasHandle h, bool trans_a, bool trans_b, int m,
                             int n, int k, const float* alpha, const void* a,
                             BlasDataType a_type, int lda, const void* b,
                             BlasDataType b_type, int ldb, const float* beta,
                             void* c, BlasDataType c_type, int ldc) {
  return cublasGemmEx(h, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                      trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, alpha, a,
                      a_type, lda, b, b_type, ldb, beta, c, c_type, ldc,
                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}
}  // namespace radixkv::worker::gpu
#endif

#endif  // RADIXKV_WORKER_GPU_GPU_BLAS_H_
