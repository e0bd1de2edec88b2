// Pieces of the warp-specialized wgmma extend kernels (sm_90a), shared by
// the serving kernel (extend_attention_wgmma_sm90.hip) and the
// benchmark-only work-item kernel (extend_attention_wgmma_persistent_sm90.hip):
// tile and pipeline constants, the consumer warpgroup's step on one K/V tile
// (S = Q K^T, online softmax, P V) and its output store, and the lean
// producer warp's gather of a K/V tile. FlashAttention-3's split adapted to
// paged K/V; docs/kernel-notes.md "Hopper wgmma kernel". NVIDIA only;
// included after hip_compat.h.
//
// A block is 3 warpgroups: warpgroup 0 the producer (gathers K/V tiles
// through kv_indices with cp.async into kWsStages stages and signals a
// `full` mbarrier per stage), warpgroups 1 and 2 consumers of 64 query rows
// each (BLOCK_M 128) that wait on `full`, run the tile step on wgmma and
// release the stage on its `empty` mbarrier.
#ifndef RADIXKV_WORKER_KERNELS_HIP_EXTEND_ATTENTION_WGMMA_WS_H_
#define RADIXKV_WORKER_KERNELS_HIP_EXTEND_ATTENTION_WGMMA_WS_H_

#include "worker/kernels/hip/hip_compat.h"
// clang-format off
#include "worker/kernels/attention_combine.h"
#include "worker/kernels/hip/attention_mma.h"
#include "worker/kernels/hip/attention_wgmma.h"
#include "worker/kernels/hip/extend_attention.h"
#include "worker/kv_cache_layout.h"
// clang-format on

#if defined(RADIXKV_GPU_NVIDIA)

namespace radixkv::worker::gpu::extend {

// Keys per K/V tile.
inline constexpr int kWgmmaKeys = 64;

// kWsLag: K/V tiles the producer keeps in flight beyond the one it is
// publishing (it publishes tile i after issuing tile i + kWsLag); needs
// kWsStages >= kWsLag + 1 so that it never waits for a stage the consumers
// can only free after that publication (one more stage gives slack).
inline constexpr int kWsStages = 4;
inline constexpr int kWsLag = 2;
static_assert(kWsStages >= kWsLag + 1, "producer lag vs stages");

// V operand of the P V wgmma, MN-major in a SW128 tile: LBO = the next
// 64-dim column block (kWgmmaKeys rows of 128 bytes), SBO = the next 8 keys
// (attention_wgmma.h). The kernels take them from ExtendParams.
inline constexpr uint32_t kVDescLbo = kWgmmaKeys * 128;
inline constexpr uint32_t kVDescSbo = 1024;

// Pieces of a consumer warpgroup's step on one 64-key tile (warp-specialized
// kernels); q_addr / k_addr / v_addr are shared-memory byte addresses of this
// warpgroup's 64 Q rows and the stage's K and V tiles; o/m/l/s are this
// thread's accumulator rows (the m64nN accumulator layout = mma.sync's C
// layout per 8 columns).

// Issues S = Q K^T (D/16 wgmma m64n64k16, both operands in shared memory)
// into s and commits it as one wgmma group; does not wait.
template <int D, bool kBf16>
__device__ __forceinline__ void WsIssueS(float (&s)[kWgmmaKeys / 2],
                                         uint32_t q_addr, uint32_t k_addr) {
  constexpr int kN = kWgmmaKeys;
  constexpr int kBlockM = 128;
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) s[i] = 0.0f;
  wgmma::FenceRegisters(s);
  wgmma::Fence();
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint32_t col = (kk & 3) * 32;  // 16 elements per k-step
    const uint64_t da = wgmma::MakeDescriptor(
        q_addr + (kk >> 2) * (kBlockM * 128) + col, 16, 1024);
    const uint64_t db =
        wgmma::MakeDescriptor(k_addr + (kk >> 2) * (kN * 128) + col, 16, 1024);
    wgmma::MmaSS<kN, kBf16>(s, da, db, 1);
  }
  wgmma::CommitGroup();
}

// Online softmax (base 2) of a completed S tile: the mask (prefix: key < lp;
// extend: key <= row) where the tile needs it, new row maxima m, l = l *
// alpha + row sums, s = exp2(s - m). Returns alpha (the factor O must be
// scaled by) per row; does not touch O.
__device__ __forceinline__ void WsSoftmax(float (&s)[kWgmmaKeys / 2],
                                          float (&m)[2], float (&l)[2],
                                          float (&alpha)[2], bool prefix,
                                          int32_t key0, int32_t lp,
                                          int32_t warp_row0, int lane,
                                          const ExtendParams& p) {
  constexpr int kN = kWgmmaKeys;
  constexpr int kSTiles = kN / 8;
  const int g = lane >> 2, t4 = lane & 3;
  const bool need_mask = prefix ? key0 + kN > lp : key0 + kN - 1 > warp_row0;
  if (need_mask) {
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int32_t key = key0 + j * 8 + 2 * t4 + (i & 1);
        const int32_t row = warp_row0 + g + 8 * (i >> 1);
        const bool ok = prefix ? key < lp : key <= row;
        s[4 * j + i] = ok ? s[4 * j + i] * p.scale_log2 : -INFINITY;
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kSTiles * 4; ++i) s[i] *= p.scale_log2;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) {
      mx = fmaxf(mx, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
    }
    mx = fmaxf(mx, WarpShflXor(mx, 1));
    mx = fmaxf(mx, WarpShflXor(mx, 2));
    const float m_new = fmaxf(m[r], mx);
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
    alpha[r] = FastExp2(m[r] - m_ref);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kSTiles; ++j) {
      s[4 * j + 2 * r] = FastExp2(s[4 * j + 2 * r] - m_ref);
      s[4 * j + 2 * r + 1] = FastExp2(s[4 * j + 2 * r + 1] - m_ref);
      sum += s[4 * j + 2 * r] + s[4 * j + 2 * r + 1];
    }
    l[r] = l[r] * alpha[r] + sum;
    m[r] = m_new;
  }
}

template <int D>
__device__ __forceinline__ void WsRescaleO(float (&o)[D / 8 * 4],
                                           const float (&alpha)[2]) {
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      o[4 * n + 2 * r] *= alpha[r];
      o[4 * n + 2 * r + 1] *= alpha[r];
    }
  }
}

// P (16-bit pairs, packed like an mma.sync A fragment) from exp2'd s.
template <bool kBf16>
__device__ __forceinline__ void WsPackP(const float (&s)[kWgmmaKeys / 2],
                                        uint32_t (&pa)[kWgmmaKeys / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kWgmmaKeys / 16; ++kk) {
    pa[kk][0] = mma::PackPair<kBf16>(s[8 * kk + 0], s[8 * kk + 1]);
    pa[kk][1] = mma::PackPair<kBf16>(s[8 * kk + 2], s[8 * kk + 3]);
    pa[kk][2] = mma::PackPair<kBf16>(s[8 * kk + 4], s[8 * kk + 5]);
    pa[kk][3] = mma::PackPair<kBf16>(s[8 * kk + 6], s[8 * kk + 7]);
  }
}

// Issues O += P V (4 wgmma m64nDk16, P from registers, V MN-major from
// shared memory, transposed by the instruction) and commits it as one wgmma
// group; does not wait.
template <int D, bool kBf16>
__device__ __forceinline__ void WsIssuePV(float (&o)[D / 8 * 4],
                                          uint32_t (&pa)[kWgmmaKeys / 16][4],
                                          uint32_t v_addr,
                                          const ExtendParams& p) {
  wgmma::FenceRegisters(o);
  wgmma::Fence();
#pragma unroll
  for (int kk = 0; kk < kWgmmaKeys / 16; ++kk) {
    const uint64_t db = wgmma::MakeDescriptor(v_addr + kk * 16 * 128,
                                              p.v_desc_lbo, p.v_desc_sbo);
    wgmma::MmaRS<D, kBf16>(o, pa[kk], db, 1);
  }
  wgmma::CommitGroup();
}

// One whole tile step, each wgmma waited on right after it: S, softmax,
// O rescale, P V. Returns after the P V wgmma completed, so the stage may be
// released.
template <int D, bool kBf16>
__device__ __forceinline__ void WsConsumeTile(
    float (&o)[D / 8 * 4], float (&m)[2], float (&l)[2], uint32_t q_addr,
    uint32_t k_addr, uint32_t v_addr, bool prefix, int32_t key0, int32_t lp,
    int32_t warp_row0, int lane, const ExtendParams& p) {
  float s[kWgmmaKeys / 2];
  WsIssueS<D, kBf16>(s, q_addr, k_addr);
  wgmma::WaitGroup<0>();
  wgmma::FenceRegisters(s);
  float alpha[2];
  WsSoftmax(s, m, l, alpha, prefix, key0, lp, warp_row0, lane, p);
  WsRescaleO<D>(o, alpha);
  uint32_t pa[kWgmmaKeys / 16][4];
  WsPackP<kBf16>(s, pa);
  WsIssuePV<D, kBf16>(o, pa, v_addr, p);
  wgmma::WaitGroup<0>();  // warpgroup-wide: the stage is no longer read
  wgmma::FenceRegisters(o);
}

// Writes one consumer warp's 16 output rows (rows >= le are skipped) and
// their LSE (natural log) from the accumulators.
template <int D, bool kBf16>
__device__ __forceinline__ void WsStoreRows(float (&o)[D / 8 * 4],
                                            const float (&m)[2], float (&l)[2],
                                            int32_t warp_row0, int32_t le,
                                            int32_t qo_start, int32_t h,
                                            int lane, const ExtendParams& p) {
  constexpr int kOTiles = D / 8;
  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += WarpShflXor(l[r], 1);
    l[r] += WarpShflXor(l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int32_t row = warp_row0 + g + 8 * r;
    if (row >= le) continue;
    const int64_t orow =
        static_cast<int64_t>(qo_start + row) * p.num_q_heads + h;
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
#pragma unroll
    for (int n = 0; n < kOTiles; ++n) {
      *reinterpret_cast<uint32_t*>(p.out + orow * D + n * 8 + 2 * t4) =
          PackElemPair<kBf16>(o[4 * n + 2 * r] * inv,
                              o[4 * n + 2 * r + 1] * inv);
    }
    if (t4 == 0 && p.lse != nullptr) p.lse[orow] = CombineLse(m[r], l[r]);
  }
}

// Value of lane `src_lane`'s 64-bit `v` (whole warp; NVIDIA only).
__device__ __forceinline__ int64_t WarpShfl64(int64_t v, int src_lane) {
  const int32_t lo =
      __shfl_sync(0xffffffffu, static_cast<int32_t>(v), src_lane);
  const int32_t hi =
      __shfl_sync(0xffffffffu, static_cast<int32_t>(v >> 32), src_lane);
  return static_cast<int64_t>(
      (static_cast<uint64_t>(static_cast<uint32_t>(hi)) << 32) |
      static_cast<uint32_t>(lo));
}

// Per-lane constants of a lean producer warp for one work item: the warp
// gathers keys [16 * warp, 16 * warp + 16) of every 64-key tile; lane l
// computes the source offset of key 16 * warp + l % 16 (K for l < 16, V for
// l >= 16) and copies 16-byte chunk `chunk` of rows `sub`, `sub` + 32 / (D /
// 8), ... of the warp's 16 keys.
struct WsProducerLane {
  int chunk;    // 16-byte chunk of a row this lane copies
  int sub;      // row within a copy step
  bool v_lane;  // lanes 16-31 compute V offsets
  int key;      // key within the tile whose offset this lane computes
  int warp;     // producer warp 0-3
  int64_t k_delta, v_delta;  // KOffset/VOffset(0, kvh, 8 * chunk) - (.., 0)
  bool v_strided;            // vLLM V layout: dims strided by page_size
  int64_t v_stride;
  int32_t kvh, hkv, qo_start, le;
};

template <int D>
__device__ __forceinline__ WsProducerLane
MakeWsProducerLane(const ExtendParams& p, int lane, int warp, int32_t kvh,
                   int32_t qo_start, int32_t le) {
  constexpr int kChunksPerRow = D / 8;
  WsProducerLane w;
  w.chunk = lane % kChunksPerRow;
  w.sub = lane / kChunksPerRow;
  w.v_lane = lane >= 16;
  w.key = warp * 16 + (lane & 15);
  w.warp = warp;
  w.k_delta = p.g.KOffset(0, kvh, w.chunk * 8) - p.g.KOffset(0, kvh, 0);
  w.v_delta = p.g.VOffset(0, kvh, w.chunk * 8) - p.g.VOffset(0, kvh, 0);
  w.v_strided = p.g.layout == KvLayout::kVllm;
  w.v_stride = p.g.VDimStride();
  w.kvh = kvh;
  w.hkv = p.g.num_kv_heads;
  w.qo_start = qo_start;
  w.le = le;
  return w;
}

// One producer warp's share of a K/V tile (lean producer): 16 keys x D dims
// of K and V into the 128-byte-swizzled stage tiles ks / vs with cp.async
// (zero-fill past the end). prefix: keys key0.. of the paged prefix, `slot`
// = kv_indices entry of this lane's key (-1 past Lp); else extend keys
// key0.. (rows of k_extend / v_extend). Does not commit the cp.async group.
template <int D>
__device__ __forceinline__ void WsGatherTile(const ExtendParams& p,
                                             const WsProducerLane& w,
                                             bool prefix, int32_t key0,
                                             int64_t slot, uint16_t* ks,
                                             uint16_t* vs) {
  constexpr int kN = kWgmmaKeys;
  constexpr int kKeysPerWarp = 16;
  constexpr int kRowsPerStep = 32 / (D / 8);
  constexpr int kSteps = kKeysPerWarp / kRowsPerStep;
  const bool v_lane = w.v_lane, v_strided = w.v_strided;
  const int32_t kvh = w.kvh, hkv = w.hkv, qo_start = w.qo_start, le = w.le;
  const int my_key = w.key, my_chunk = w.chunk, my_sub = w.sub, warp = w.warp;
  const int64_t k_delta = w.k_delta, v_delta = w.v_delta, v_stride = w.v_stride;
  // This lane's key: element offset of (key, kvh, dim 0) in the K (lanes
  // 0-15) or V (lanes 16-31) source; -1 past the end (zero-fill).
  int64_t off = -1;
  if (prefix) {
    if (slot >= 0) {
      off = v_lane && v_strided ? p.g.VOffset(slot, kvh, 0)
                                : p.g.KOffset(slot, kvh, 0);
    }
  } else if (key0 + my_key < le) {
    off = (static_cast<int64_t>(qo_start + key0 + my_key) * hkv + kvh) * D;
  }
  const uint16_t* ksrc = prefix ? p.k_cache : p.k_ext;
  const uint16_t* vsrc = prefix ? p.v_cache : p.v_ext;
  const int64_t kd = prefix ? k_delta : my_chunk * 8;
  const int64_t vd = prefix ? v_delta : my_chunk * 8;
  // Row address (dim 0) of this lane's key in its source, the source's
  // base for keys past the end (never read: src-size 0), and a ballot of
  // the valid lanes, so each copy needs only a shuffle and one add.
  const uint32_t valid = __ballot_sync(0xffffffffu, off >= 0);
  const int64_t row_addr = static_cast<int64_t>(reinterpret_cast<uintptr_t>(
      (v_lane ? vsrc : ksrc) + (off >= 0 ? off : 0)));
  if (!(prefix && v_strided)) {
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      const int row = step * kRowsPerStep + my_sub;  // key within the warp
      const auto* kp = reinterpret_cast<const uint16_t*>(
          static_cast<uintptr_t>(WarpShfl64(row_addr, row)));
      const auto* vp = reinterpret_cast<const uint16_t*>(
          static_cast<uintptr_t>(WarpShfl64(row_addr, 16 + row)));
      const int so = wgmma::TileOffset<kN>(warp * kKeysPerWarp + row, my_chunk);
      mma::CpAsync16(ks + so, kp + kd, (valid >> row) & 1u);
      mma::CpAsync16(vs + so, vp + vd, (valid >> (16 + row)) & 1u);
    }
  } else {  // vLLM V (dims strided by page_size): 8 loads per chunk
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      const int row = step * kRowsPerStep + my_sub;
      const auto* kp = reinterpret_cast<const uint16_t*>(
          static_cast<uintptr_t>(WarpShfl64(row_addr, row)));
      const auto* vp = reinterpret_cast<const uint16_t*>(
          static_cast<uintptr_t>(WarpShfl64(row_addr, 16 + row)));
      const int so = wgmma::TileOffset<kN>(warp * kKeysPerWarp + row, my_chunk);
      mma::CpAsync16(ks + so, kp + kd, (valid >> row) & 1u);
      uint32_t wv[4] = {0, 0, 0, 0};
      if ((valid >> (16 + row)) & 1u) {
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          wv[e / 2] |= static_cast<uint32_t>(vp[vd + e * v_stride])
                       << (16 * (e % 2));
        }
      }
      *reinterpret_cast<uint4*>(vs + so) =
          make_uint4(wv[0], wv[1], wv[2], wv[3]);
    }
  }
}

// True if `kernel` has a binary for compute capability >= 9.0 in this build
// (sm_90a): the only binaries with a real body (other passes see __trap()).
template <typename Kernel>
bool WgmmaBinaryPresent(Kernel kernel) {
  cudaFuncAttributes attr;
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) error
    return false;
  }
  return attr.binaryVersion >= 90;
}

}  // namespace radixkv::worker::gpu::extend

#endif  // RADIXKV_GPU_NVIDIA

#endif  // RADIXKV_WORKER_KERNELS_HIP_EXTEND_ATTENTION_WGMMA_WS_H_
