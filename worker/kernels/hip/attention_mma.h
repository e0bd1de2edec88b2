// Warp-level attention building blocks on NVIDIA tensor cores (mma.sync
// m16n8k16, bf16/fp16 operands, fp32 accumulators; sm_80 and newer, used on
// sm_90a). Device-only; included by paged_decode.hip and the NVIDIA extend
// kernels (extend_attention_mma_sm80.hip, the wgmma files). The AMD
// counterpart for extend is attention_mfma.h
// (v_mfma_f32_16x16x16{bf16_1k,f16}); AMD decode uses the portable SIMT
// kernel (docs/kernel-notes.md "AMD / Hygon path").
//
// One warp owns 16 query rows (FlashAttention-2 style): Q fragments and the
// fp32 output accumulator live in registers; K and V tiles of kN keys are read
// from shared memory with ldmatrix (V transposed by ldmatrix.trans). The
// online softmax works in the base-2 domain: logits are q.k * sm_scale *
// log2(e) (log2(e) folded into the scale, exp2 on the SFU).
//
// Shared-memory tiles hold rows of D 16-bit elements; the 16-byte chunk c of
// row r is stored at chunk position c ^ (r & 7) (XOR swizzle), which makes the
// 8-row ldmatrix phases and the 16-byte cp.async writes bank-conflict free
// for D >= 64.
#ifndef RADIXKV_WORKER_KERNELS_HIP_ATTENTION_MMA_H_
#define RADIXKV_WORKER_KERNELS_HIP_ATTENTION_MMA_H_

#include "worker/kernels/hip/hip_compat.h"

#if defined(RADIXKV_GPU_NVIDIA)

namespace radixkv::worker::gpu::mma {

// Element offset of (row, 16-byte chunk) in a swizzled [rows][D] tile.
template <int D>
__device__ __forceinline__ int SwizzledOffset(int row, int chunk) {
  static_assert(D % 64 == 0, "swizzle needs at least 8 chunks per row");
  return row * D + ((chunk ^ (row & 7)) << 3);
}

__device__ __forceinline__ uint32_t SmemAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; zero-fills when !valid (src not read).
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem,
                                          bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                   SmemAddress(smem)),
               "l"(gmem), "r"(src_size));
}

__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void LdMatrixX4(uint32_t r[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SmemAddress(smem)));
}

__device__ __forceinline__ void LdMatrixX4Trans(uint32_t r[4],
                                                const void* smem) {
  asm volatile(
      "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
      : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
      : "r"(SmemAddress(smem)));
}

// c += a * b for one m16n8k16 tile.
template <bool kBf16>
__device__ __forceinline__ void Mma16816(float c[4], const uint32_t a[4],
                                         uint32_t b0, uint32_t b1) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Packs (lo, hi) into one register of two 16-bit values, round to nearest.
template <bool kBf16>
__device__ __forceinline__ uint32_t PackPair(float lo, float hi) {
  uint32_t r;
  if constexpr (kBf16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

// State of one warp's 16 query rows. Lane (g = lane / 4, t = lane % 4) holds
// rows g and g + 8; o[n][0..1] are row g, dims n*8 + 2t + {0,1}; o[n][2..3]
// the same dims of row g + 8. l holds the lane's partial row sums (reduced
// over the 4 lanes of a row only in Finish()).
template <int D, int kN, bool kBf16>
struct WarpAttention {
  static_assert(D % 64 == 0 && kN % 16 == 0, "tile shape");
  static constexpr int kKSteps = D / 16;  // k-steps of S = Q K^T
  static constexpr int kSTiles = kN / 8;  // n-tiles of S (keys)
  static constexpr int kOTiles = D / 8;   // n-tiles of O (dims)

  uint32_t q[kKSteps][4];
  float o[kOTiles][4];
  float m[2];
  float l[2];

  __device__ __forceinline__ void Init() {
#pragma unroll
    for (int n = 0; n < kOTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o[n][i] = 0.0f;
    }
    m[0] = m[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
  }

  // Q rows [0, 16) of a swizzled [>=16][D] tile starting at `tile`.
  __device__ __forceinline__ void LoadQ(const uint16_t* tile) {
    const int lane = LaneId();
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      LdMatrixX4(q[kk],
                 tile + SwizzledOffset<D>(lane % 16, 2 * kk + lane / 16));
    }
  }

  // s = Q K^T (raw dot products) for the kN keys of a swizzled [kN][D] tile.
  __device__ __forceinline__ void Scores(float s[kSTiles][4],
                                         const uint16_t* k_tile) const {
    const int lane = LaneId();
    const int mid = lane >> 3, r = lane & 7;
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s[j][i] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
#pragma unroll
      for (int j = 0; j < kSTiles; j += 2) {
        uint32_t b[4];
        LdMatrixX4(b, k_tile + SwizzledOffset<D>(j * 8 + (mid >> 1) * 8 + r,
                                                 2 * kk + (mid & 1)));
        Mma16816<kBf16>(s[j], q[kk], b[0], b[1]);
        Mma16816<kBf16>(s[j + 1], q[kk], b[2], b[3]);
      }
    }
  }

  // Online-softmax update with base-2 logits `s` (already scaled, masked
  // entries -inf), then O += P V for the kN keys of a swizzled V tile.
  __device__ __forceinline__ void Accumulate(float s[kSTiles][4],
                                             const uint16_t* v_tile) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kSTiles; ++j) {
        mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
      }
      mx = fmaxf(mx, WarpShflXor(mx, 1));
      mx = fmaxf(mx, WarpShflXor(mx, 2));
      const float m_new = fmaxf(m[r], mx);
      // A row that has seen only masked keys keeps m = -inf; use 0 as the
      // reference so that exp2(-inf - 0) = 0 instead of NaN.
      const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = FastExp2(m[r] - m_ref);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kSTiles; ++j) {
        s[j][2 * r] = FastExp2(s[j][2 * r] - m_ref);
        s[j][2 * r + 1] = FastExp2(s[j][2 * r + 1] - m_ref);
        sum += s[j][2 * r] + s[j][2 * r + 1];
      }
      l[r] = l[r] * alpha + sum;
      m[r] = m_new;
#pragma unroll
      for (int n = 0; n < kOTiles; ++n) {
        o[n][2 * r] *= alpha;
        o[n][2 * r + 1] *= alpha;
      }
    }
    const int lane = LaneId();
    const int mid = lane >> 3, rr = lane & 7;
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      uint32_t a[4];
      a[0] = PackPair<kBf16>(s[2 * kk][0], s[2 * kk][1]);
      a[1] = PackPair<kBf16>(s[2 * kk][2], s[2 * kk][3]);
      a[2] = PackPair<kBf16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = PackPair<kBf16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int n = 0; n < kOTiles; n += 2) {
        uint32_t b[4];
        LdMatrixX4Trans(b,
                        v_tile + SwizzledOffset<D>(kk * 16 + (mid & 1) * 8 + rr,
                                                   n + (mid >> 1)));
        Mma16816<kBf16>(o[n], a, b[0], b[1]);
        Mma16816<kBf16>(o[n + 1], a, b[2], b[3]);
      }
    }
  }

  // Reduces the row sums over the 4 lanes of each row. After this, l[r] is
  // the full base-2 exp-sum of row g (r = 0) / g + 8 (r = 1) relative to m[r].
  __device__ __forceinline__ void Finish() {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[r] += WarpShflXor(l[r], 1);
      l[r] += WarpShflXor(l[r], 2);
    }
  }
};

}  // namespace radixkv::worker::gpu::mma

#endif  // RADIXKV_GPU_NVIDIA
#endif  // RADIXKV_WORKER_KERNELS_HIP_ATTENTION_MMA_H_
