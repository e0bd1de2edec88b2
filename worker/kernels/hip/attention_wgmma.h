// Hopper warpgroup matrix multiply (wgmma.mma_async, sm_90a) building blocks
// for the extend-attention kernels (extend_attention_wgmma_sm90.hip and
// extend_attention_wgmma_ws.h), plus the mbarrier and named-barrier helpers
// of the warp-specialized kernel.
// NVIDIA only; the instruction bodies exist only in the sm_90a device pass
// (RADIXKV_HAS_WGMMA). Every other pass (sm_80, the host pass, hipcc never
// includes this file) sees __trap() stubs, and the host launcher selects the
// wgmma kernel only when its binary was built for compute capability >= 9.0.
//
// Source of the facts used here: the PTX ISA, "Asynchronous Warpgroup Level
// Matrix Multiply-Accumulate" (wgmma.mma_async, .fence, .commit_group,
// .wait_group; the matrix-descriptor format; the canonical 128-byte swizzle
// layouts, as also written down by CUTLASS's GMMA descriptor comments).
//
// Shared-memory tile layout ("SW128 tile"): a [rows][D] tile of 16-bit
// elements is stored as D / 64 column blocks of [rows][64]; row r of a block
// is 128 bytes at r * 128, and its 16-byte chunk c (dims 8c .. 8c+7 of the
// block) sits at chunk position c ^ (r % 8). The tile base is 1024-byte
// aligned, so this is exactly the hardware's 128-byte swizzle (address bits
// [4, 7) XOR bits [7, 10)). Descriptors:
//   * K-major operand (Q as A, K as B of S = Q K^T): start = block base of the
//     k-step's column block + 32 bytes per 16-element k-step inside the
//     block, SBO = 1024 (8-row groups), LBO unused (encoded 1).
//   * MN-major operand (V as B of O = P V, imm-trans-b = 1): start = key row
//     16 * k-step (2048 bytes per k-step), SBO = 1024 (8-key groups), LBO =
//     rows * 128 (the next 64-dim column block).
// Accumulators (m64nN, f32): warp w of the warpgroup owns rows 16w .. 16w+15;
// lane (g = lane / 4, t = lane % 4) holds d[4j + {0,1}] = row g, cols 8j + 2t
// + {0,1} and d[4j + {2,3}] = row g + 8: the mma.sync m16n8 C layout per
// 8-column tile, so a P fragment for the register-A form is packed exactly
// like mma.sync's A fragment (attention_mma.h).
#ifndef RADIXKV_WORKER_KERNELS_HIP_ATTENTION_WGMMA_H_
#define RADIXKV_WORKER_KERNELS_HIP_ATTENTION_WGMMA_H_

#include "worker/kernels/hip/hip_compat.h"

#if defined(RADIXKV_GPU_NVIDIA)

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && \
    defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define RADIXKV_HAS_WGMMA 1
#else
#define RADIXKV_HAS_WGMMA 0
#endif

namespace radixkv::worker::gpu::wgmma {

// Element offset of (row, 16-byte chunk) in an SW128 tile of kRows rows.
template <int kRows>
__device__ __forceinline__ int TileOffset(int row, int chunk) {
  return (chunk >> 3) * (kRows * 64) + row * 64 +
         (((chunk & 7) ^ (row & 7)) << 3);
}

// Shared-memory matrix descriptor, 128-byte swizzle (layout type 1 in bits
// 62-63); addresses and offsets in bytes (16-byte units in the descriptor).
__device__ __forceinline__ uint64_t MakeDescriptor(uint32_t smem_addr,
                                                   uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32) |
         (uint64_t{1} << 62);
}

// Orders this thread's earlier register writes (accumulators, A fragments)
// before the following wgmma.mma_async.
__device__ __forceinline__ void Fence() {
#if RADIXKV_HAS_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void CommitGroup() {
#if RADIXKV_HAS_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

template <int kPending>
__device__ __forceinline__ void WaitGroup() {
#if RADIXKV_HAS_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending)
               : "memory");
#endif
}

// Makes generic-proxy writes to shared memory (cp.async, st.shared) visible
// to the async proxy (wgmma operand reads); each writing thread, before the
// barrier.
__device__ __forceinline__ void FenceProxyAsyncShared() {
#if RADIXKV_HAS_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// mbarrier in shared memory (64-bit object): init with the number of
// arrivals that complete a phase; arrive (release); wait for the phase of the
// given parity to complete (acquire).
__device__ __forceinline__ void MbarrierInit(uint64_t* bar, uint32_t count) {
#if RADIXKV_HAS_WGMMA
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(bar))),
               "r"(count)
               : "memory");
#endif
}

__device__ __forceinline__ void MbarrierArrive(uint64_t* bar) {
#if RADIXKV_HAS_WGMMA
  asm volatile(
      "{\n.reg .b64 state;\n"
      "mbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(
          static_cast<uint32_t>(__cvta_generic_to_shared(bar)))
      : "memory");
#endif
}

__device__ __forceinline__ void MbarrierWait(uint64_t* bar, uint32_t parity) {
#if RADIXKV_HAS_WGMMA
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_LOOP:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_LOOP;\n}\n" ::"r"(
          static_cast<uint32_t>(__cvta_generic_to_shared(bar))),
      "r"(parity)
      : "memory");
#endif
}

// Barrier among the kThreads threads of a named barrier id (1..15; 0 is
// __syncthreads).
template <int kId, int kThreads>
__device__ __forceinline__ void NamedBarrierSync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreads) : "memory");
}

// Keeps the compiler from moving reads/writes of accumulator registers across
// the asynchronous wgmma window (issue .. wait_group).
template <int N>
__device__ __forceinline__ void FenceRegisters(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The fp32 accumulator operands of one wgmma: d[0, 32) for N = 64, d[0, 64)
// for N = 128 (PTX %0..%31 / %0..%63), as asm output lists and register
// lists.
#define RADIXKV_WGMMA_OUT32                                               \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), \
      "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]),        \
      "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),    \
      "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),    \
      "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),    \
      "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),    \
      "+f"(d[31])
#define RADIXKV_WGMMA_OUT64                                                \
  RADIXKV_WGMMA_OUT32, "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),     \
      "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]),     \
      "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),     \
      "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),     \
      "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]),     \
      "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define RADIXKV_WGMMA_REG32                                                \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, " \
  "%30, %31"
#define RADIXKV_WGMMA_REG64                                                \
  RADIXKV_WGMMA_REG32                                                      \
  ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "    \
  "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, " \
  "%59, %60, %61, %62, %63"

// One `wgmma.mma_async.sync.aligned.SHAPE.f32.TYPE.TYPE {REGS}, OPERANDS`
// whose scale-d predicate is set from the operand SCALE (scale_d != 0
// accumulates, 0 overwrites d); OUTS are the accumulators' asm outputs and
// the variadic arguments the asm inputs.
#define RADIXKV_WGMMA(SHAPE, TYPE, REGS, OPERANDS, SCALE, OUTS, ...)       \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SCALE                   \
               ", 0;\n"                                                    \
               "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPE "." TYPE \
               " {" REGS "}, " OPERANDS ";\n}\n"                           \
               : OUTS                                                      \
               : __VA_ARGS__)

// d[0, 32) += A (64 x 16, shared memory) * B (16 x 64, shared memory);
// scale_d = 0 overwrites d. Neither operand transposed (both K-major).
template <bool kBf16>
__device__ __forceinline__ void WgmmaSS64(float (&d)[32], uint64_t desc_a,
                                          uint64_t desc_b, int scale_d) {
#if RADIXKV_HAS_WGMMA
  if constexpr (kBf16) {
    RADIXKV_WGMMA("m64n64k16", "bf16", RADIXKV_WGMMA_REG32,
                  "%32, %33, p, 1, 1, 0, 0", "%34", RADIXKV_WGMMA_OUT32,
                  "l"(desc_a), "l"(desc_b), "r"(scale_d));
  } else {
    RADIXKV_WGMMA("m64n64k16", "f16", RADIXKV_WGMMA_REG32,
                  "%32, %33, p, 1, 1, 0, 0", "%34", RADIXKV_WGMMA_OUT32,
                  "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
#else
  __trap();
#endif
}

// d[0, 64) += A (64 x 16, shared memory) * B (16 x 128, shared memory);
// scale_d = 0 overwrites d. Neither operand transposed (both K-major).
template <bool kBf16>
__device__ __forceinline__ void WgmmaSS128(float (&d)[64], uint64_t desc_a,
                                           uint64_t desc_b, int scale_d) {
#if RADIXKV_HAS_WGMMA
  if constexpr (kBf16) {
    RADIXKV_WGMMA("m64n128k16", "bf16", RADIXKV_WGMMA_REG64,
                  "%64, %65, p, 1, 1, 0, 0", "%66", RADIXKV_WGMMA_OUT64,
                  "l"(desc_a), "l"(desc_b), "r"(scale_d));
  } else {
    RADIXKV_WGMMA("m64n128k16", "f16", RADIXKV_WGMMA_REG64,
                  "%64, %65, p, 1, 1, 0, 0", "%66", RADIXKV_WGMMA_OUT64,
                  "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
#else
  __trap();
#endif
}

// d[0, 32) += A (64 x 16, registers, mma.sync A-fragment layout) *
// B (16 x 64, shared memory, MN-major: imm-trans-b = 1).
template <bool kBf16>
__device__ __forceinline__ void WgmmaRS64(float (&d)[32],
                                          const uint32_t (&a)[4],
                                          uint64_t desc_b, int scale_d) {
#if RADIXKV_HAS_WGMMA
  if constexpr (kBf16) {
    RADIXKV_WGMMA("m64n64k16", "bf16", RADIXKV_WGMMA_REG32,
                  "{%32, %33, %34, %35}, %36, p, 1, 1, 1", "%37",
                  RADIXKV_WGMMA_OUT32, "r"(a[0]), "r"(a[1]), "r"(a[2]),
                  "r"(a[3]), "l"(desc_b), "r"(scale_d));
  } else {
    RADIXKV_WGMMA("m64n64k16", "f16", RADIXKV_WGMMA_REG32,
                  "{%32, %33, %34, %35}, %36, p, 1, 1, 1", "%37",
                  RADIXKV_WGMMA_OUT32, "r"(a[0]), "r"(a[1]), "r"(a[2]),
                  "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }
#else
  __trap();
#endif
}

// d[0, 64) += A (64 x 16, registers, mma.sync A-fragment layout) *
// B (16 x 128, shared memory, MN-major: imm-trans-b = 1).
template <bool kBf16>
__device__ __forceinline__ void WgmmaRS128(float (&d)[64],
                                           const uint32_t (&a)[4],
                                           uint64_t desc_b, int scale_d) {
#if RADIXKV_HAS_WGMMA
  if constexpr (kBf16) {
    RADIXKV_WGMMA("m64n128k16", "bf16", RADIXKV_WGMMA_REG64,
                  "{%64, %65, %66, %67}, %68, p, 1, 1, 1", "%69",
                  RADIXKV_WGMMA_OUT64, "r"(a[0]), "r"(a[1]), "r"(a[2]),
                  "r"(a[3]), "l"(desc_b), "r"(scale_d));
  } else {
    RADIXKV_WGMMA("m64n128k16", "f16", RADIXKV_WGMMA_REG64,
                  "{%64, %65, %66, %67}, %68, p, 1, 1, 1", "%69",
                  RADIXKV_WGMMA_OUT64, "r"(a[0]), "r"(a[1]), "r"(a[2]),
                  "r"(a[3]), "l"(desc_b), "r"(scale_d));
  }
#else
  __trap();
#endif
}

template <int N, bool kBf16>
__device__ __forceinline__ void MmaSS(float (&d)[N / 2], uint64_t desc_a,
                                      uint64_t desc_b, int scale_d) {
  static_assert(N == 64 || N == 128, "instantiated shapes");
  if constexpr (N == 64) {
    WgmmaSS64<kBf16>(d, desc_a, desc_b, scale_d);
  } else {
    WgmmaSS128<kBf16>(d, desc_a, desc_b, scale_d);
  }
}

template <int N, bool kBf16>
__device__ __forceinline__ void MmaRS(float (&d)[N / 2], const uint32_t (&a)[4],
                                      uint64_t desc_b, int scale_d) {
  static_assert(N == 64 || N == 128, "instantiated shapes");
  if constexpr (N == 64) {
    WgmmaRS64<kBf16>(d, a, desc_b, scale_d);
  } else {
    WgmmaRS128<kBf16>(d, a, desc_b, scale_d);
  }
}

}  // namespace radixkv::worker::gpu::wgmma

#undef RADIXKV_WGMMA
#undef RADIXKV_WGMMA_REG64
#undef RADIXKV_WGMMA_REG32
#undef RADIXKV_WGMMA_OUT64
#undef RADIXKV_WGMMA_OUT32

#endif  // RADIXKV_GPU_NVIDIA
#endif  // RADIXKV_WORKER_KERNELS_HIP_ATTENTION_WGMMA_H_
