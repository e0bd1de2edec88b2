// Project-owned HIP <-> CUDA portability layer for radixkv's GPU kernels.
//
// The kernels in worker/kernels/hip/ are written once in HIP C++ and compiled
// by two compilers:
//   * hipcc (Debian's ROCm 5.2, clang 15) for AMD/Hygon gfx9 (wave64):
//     this header includes the HIP headers and adds nothing but the
//     project-named warp wrappers below.
//   * nvcc (CUDA 13) for NVIDIA (warp 32): Debian's HIP-on-NVIDIA headers do
//     not compile against CUDA 13, so this header
//     maps the handful of HIP runtime names the kernels and their host code use
//     onto the CUDA runtime.
//
// Rules that every kernel in this package follows, so that one source serves
// 32-lane warps and 64-lane wavefronts (32-lane code ported to wave64 must
// widen every lane mask to 64 bits and start butterflies at width / 2):
//   * The warp/wavefront width is the compile-time constant kWarpSize (32 on
//     NVIDIA, __AMDGCN_WAVEFRONT_SIZE on AMD, i.e. 64 on gfx9); nothing assumes
//     32.
//   * Ballot masks are WarpMask (uint32_t on NVIDIA, uint64_t on AMD).
//   * Cross-lane moves go through WarpShflXor/WarpShfl on float or int32
//     values only (never bf16/fp16 structs: hipcc 5.2 rejects them).
//   * Do not call __ballot directly (CUDA 13 keeps a legacy builtin of that
//     name); use WarpBallot.
#ifndef RADIXKV_WORKER_KERNELS_HIP_HIP_COMPAT_H_
#define RADIXKV_WORKER_KERNELS_HIP_HIP_COMPAT_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__HIPCC__) && !defined(__CUDACC__)
// ---------------------------------------------------------------- AMD / HIP
#define RADIXKV_GPU_AMD 1
#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

#else
// ------------------------------------------------------------ NVIDIA / nvcc
#define RADIXKV_GPU_NVIDIA 1
#include <cuda_fp16.h>
#include <cuda_runtime.h>

using hipError_t = cudaError_t;
using hipStream_t = cudaStream_t;
using hipEvent_t = cudaEvent_t;
using hipDeviceProp_t = cudaDeviceProp;
#define hipSuccess cudaSuccess
#define hipErrorInvalidValue cudaErrorInvalidValue
#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipPeekAtLastError cudaPeekAtLastError
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipHostMalloc cudaMallocHost
#define hipHostFree cudaFreeHost
#define hipMemcpy cudaMemcpy
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemset cudaMemset
#define hipMemsetAsync cudaMemsetAsync
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipStreamCreate cudaStreamCreate
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize
#define hipEventCreate cudaEventCreate
#define hipEventDestroy cudaEventDestroy
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventElapsedTime cudaEventElapsedTime
#define hipGetDevice cudaGetDevice
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
#define hipDeviceAttributeMaxSharedMemoryPerBlock \
  cudaDevAttrMaxSharedMemoryPerBlockOptin
#define hipFuncSetAttribute(fn, attr, value) \
  cudaFuncSetAttribute(fn, attr, value)
#define hipFuncAttributeMaxDynamicSharedMemorySize \
  cudaFuncAttributeMaxDynamicSharedMemorySize
// hipLaunchKernelGGL(kernel, grid, block, shared_bytes, stream, args...).
#define hipLaunchKernelGGL(kernel, grid, block, shared_bytes, stream, ...) \
  (kernel)<<<(grid), (block), (shared_bytes), (stream)>>>(__VA_ARGS__)
#endif

namespace radixkv::worker::gpu {

// ------------------------------------------------------------ warp geometry

#if defined(RADIXKV_GPU_AMD)
#if defined(__AMDGCN_WAVEFRONT_SIZE)
inline constexpr int kWarpSize = __AMDGCN_WAVEFRONT_SIZE;
#else
// Host pass of hipcc: the project builds gfx9 targets only (wave64). Host code
// never sizes anything from kWarpSize; it is here so shared headers parse.
inline constexpr int kWarpSize = 64;
#endif
using WarpMask = uint64_t;
#else
inline constexpr int kWarpSize = 32;
using WarpMask = uint32_t;
#endif

static_assert(kWarpSize == 32 || kWarpSize == 64,
              "radixkv kernels support warp/wavefront widths 32 and 64");
#if defined(__GFX9__)
// gfx9 (gfx906, gfx90a, ... and Hygon DCUs) is wave64: the device pass of
// every AMD CI build proves the 64-wide path compiles.
static_assert(kWarpSize == 64, "gfx9 targets are wave64");
#endif

#if defined(__CUDACC__) || defined(__HIPCC__)

// Lane index within the warp/wavefront, 0..kWarpSize-1.
__device__ __forceinline__ int LaneId() {
  return static_cast<int>(threadIdx.x) & (kWarpSize - 1);
}

// Bitmask of lanes (bit i = lane i) for which `pred` is true. WarpMask is
// 32-bit on NVIDIA and 64-bit on AMD; callers test bits with WarpMask(1) << i.
__device__ __forceinline__ WarpMask WarpBallot(bool pred) {
#if defined(RADIXKV_GPU_AMD)
  return static_cast<WarpMask>(__ballot(pred));
#else
  return __ballot_sync(0xffffffffu, pred);
#endif
}

// Value of `v` held by lane (LaneId() ^ lane_mask). Whole warp participates.
__device__ __forceinline__ float WarpShflXor(float v, int lane_mask) {
#if defined(RADIXKV_GPU_AMD)
  return __shfl_xor(v, lane_mask, kWarpSize);
#else
  return __shfl_xor_sync(0xffffffffu, v, lane_mask, kWarpSize);
#endif
}

__device__ __forceinline__ int32_t WarpShflXor(int32_t v, int lane_mask) {
#if defined(RADIXKV_GPU_AMD)
  return __shfl_xor(v, lane_mask, kWarpSize);
#else
  return __shfl_xor_sync(0xffffffffu, v, lane_mask, kWarpSize);
#endif
}

// Value of `v` held by lane `src_lane`. Whole warp participates.
__device__ __forceinline__ float WarpShfl(float v, int src_lane) {
#if defined(RADIXKV_GPU_AMD)
  return __shfl(v, src_lane, kWarpSize);
#else
  return __shfl_sync(0xffffffffu, v, src_lane, kWarpSize);
#endif
}

// Butterfly reductions over `width` consecutive lanes (width a power of two,
// <= kWarpSize); every participating lane gets the result. Starts at
// width / 2, so the same code is right for wave64.
template <int kWidth = kWarpSize>
__device__ __forceinline__ float WarpReduceSum(float v) {
  static_assert(
      kWidth >= 1 && kWidth <= kWarpSize && (kWidth & (kWidth - 1)) == 0,
      "width must be a power of two <= kWarpSize");
#pragma unroll
  for (int mask = kWidth / 2; mask >= 1; mask /= 2) v += WarpShflXor(v, mask);
  return v;
}

template <int kWidth = kWarpSize>
__device__ __forceinline__ float WarpReduceMax(float v) {
  static_assert(
      kWidth >= 1 && kWidth <= kWarpSize && (kWidth & (kWidth - 1)) == 0,
      "width must be a power of two <= kWarpSize");
#pragma unroll
  for (int mask = kWidth / 2; mask >= 1; mask /= 2) {
    v = fmaxf(v, WarpShflXor(v, mask));
  }
  return v;
}

// Orders shared-memory accesses among the lanes of one warp.
__device__ __forceinline__ void WarpSync() {
#if defined(RADIXKV_GPU_AMD)
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#else
  __syncwarp();
#endif
}

// 2^x on the special-function unit (the host pre-multiplies the softmax
// scale by log2(e), so the kernels only need exp2).
// exp2(-inf) = 0.
__device__ __forceinline__ float FastExp2(float x) {
#if defined(RADIXKV_GPU_AMD)
  return exp2f(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

// ------------------------------------------------- 16-bit element <-> float
// Device fast paths for the pool's storage types (raw uint16 bits). Host code
// and the CPU reference use worker/numeric_types.h; these produce identical
// results (bf16 widening is exact; fp16 widening is exact; narrowing rounds to
// nearest even in both).

__device__ __forceinline__ float HalfBitsToFloat(uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}

__device__ __forceinline__ uint16_t FloatToHalfBits(float f) {
  return __half_as_ushort(__float2half_rn(f));
}

__device__ __forceinline__ float Bf16BitsToFloat(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

// Round to nearest even; NaN stays (quiet) NaN.
__device__ __forceinline__ uint16_t FloatToBf16Bits(float f) {
  const uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// The pool's 16-bit element type as a template flag: bf16 (kBf16) or fp16.
template <bool kBf16>
__device__ __forceinline__ float ElemToFloat(uint16_t bits) {
  if constexpr (kBf16) {
    return Bf16BitsToFloat(bits);
  } else {
    return HalfBitsToFloat(bits);
  }
}

template <bool kBf16>
__device__ __forceinline__ uint16_t FloatToElem(float f) {
  if constexpr (kBf16) {
    return FloatToBf16Bits(f);
  } else {
    return FloatToHalfBits(f);
  }
}

// Two consecutive output elements as one 32-bit word (lo at the lower
// address, little-endian), each rounded as FloatToElem does.
template <bool kBf16>
__device__ __forceinline__ uint32_t PackElemPair(float lo, float hi) {
  return static_cast<uint32_t>(FloatToElem<kBf16>(lo)) |
         (static_cast<uint32_t>(FloatToElem<kBf16>(hi)) << 16);
}

#endif  // __CUDACC__ || __HIPCC__

// ------------------------------------------------------------ launch helpers

// Opts `kernel` into `bytes` of dynamic shared memory (LDS) where that is
// more than the 48 KB every kernel may use without asking. Returns the
// runtime's error code (0 = success). Host code of the kernel files.
template <typename Kernel>
int SetSmemLimit(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return 0;
  return static_cast<int>(hipFuncSetAttribute(
      reinterpret_cast<const void*>(kernel),
      hipFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_KERNELS_HIP_HIP_COMPAT_H_
