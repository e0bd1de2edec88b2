// Extend (prefix-prefill) attention on the GPU: SGLang extend semantics.
//
// Sequence b has Lp = kv_indptr[b+1] - kv_indptr[b] cached prefix tokens (in
// the paged pool, slots kv_indices[kv_indptr[b] ..]) and Le = qo_indptr[b+1]
// - qo_indptr[b] new tokens whose q, k, v are contiguous rows of q / k_extend
// / v_extend. New token i sees every prefix token and new tokens j <= i: the
// shifted causal mask j <= i + (Lk - Lq) over the concatenation (seed 3.2,
// 5.3 "平移因果掩码的代码落地").
//
// Tiling (seed 3.4): a block owns BLOCK_M = 64 query rows of one query head.
//   Stage 1, prefix: tiles of kN keys over [0, Lp) with no mask (only the
//     last partial tile masks keys >= Lp);
//   Stage 2, extend: tiles over [0, extend_end) with extend_end = min(Le,
//     (m_block + 1) * BLOCK_M): tiles above the diagonal are never loaded
//     (early exit); only tiles that cross the diagonal apply the mask.
// Blocks are scheduled heaviest first (the last m-block of the longest
// extend runs first) to shorten the causal tail.
//
// NVIDIA sm_90a, head_dim 64/128 (default): ExtendWgmmaWsKernel, Hopper
// wgmma (attention_wgmma.h) with a producer warpgroup gathering K/V tiles and
// two consumer warpgroups (FlashAttention-3's split); docs/kernel-notes.md.
// NVIDIA otherwise (head_dim 256, sm_80 builds, RADIXKV_EXTEND_KERNEL=mma):
// tensor cores (attention_mma.h, mma.sync m16n8k16, bf16/fp16 in,
// fp32 accumulate); 8 (or 4) warps x 16 rows; K/V tiles double-buffered with
// cp.async; per-key addresses computed once per tile by one thread per key
// (KOffset(slot, head, 0)) plus a per-thread loop-invariant dim delta: the
// k_delta / v_delta incremental addressing of seed 5.3.
// AMD gfx90a / gfx94x (device checked at run time): ExtendMfmaKernel, MFMA
// 16x16x16 bf16/fp16 (attention_mfma.h), 4 wavefronts x 16 rows;
// RADIXKV_EXTEND_KERNEL=portable forces the portable kernel. Compiled in CI,
// never run (no AMD hardware): docs/kernel-notes.md "AMD / Hygon path".
// AMD otherwise (gfx906, ...) and cross-check on NVIDIA:
// ExtendPortableKernel, SIMT, one warp per query row, warp width from
// hip_compat.h.
#include "worker/kernels/hip/hip_compat.h"
// clang-format off
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string_view>

#include "worker/kernels/attention_combine.h"
#include "worker/kernels/hip/attention_mfma.h"
#include "worker/kernels/hip/attention_mma.h"
#include "worker/kernels/hip/attention_wgmma.h"
#include "worker/kernels/hip/gpu_kernel_launch.h"
#include "worker/kv_cache_layout.h"
// clang-format on

namespace radixkv::worker::gpu {
namespace {

constexpr int kThreads = 128;

struct ExtendParams {
  KvCacheGeometry g;
  const uint16_t* k_cache;
  const uint16_t* v_cache;
  const uint16_t* q;
  const uint16_t* k_ext;
  const uint16_t* v_ext;
  const int32_t* qo_indptr;
  const int32_t* kv_indptr;
  const int64_t* kv_indices;
  int32_t num_q_heads;
  int32_t group;
  float scale_log2;
  uint16_t* out;
  float* lse;
  int32_t num_m_blocks;
  // ExtendWgmmaItemsKernel: sequences, work items (num_m_blocks * Hq * B),
  // item order (see DecodeExtendItem).
  int32_t batch_size;
  int32_t num_items;
  int32_t heavy_first_order;
  // wgmma kernel: V descriptor leading / stride byte offsets (host-set).
  uint32_t v_desc_lbo;
  uint32_t v_desc_sbo;
};

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

// ------------------------------------------------------------ portable SIMT

// grid = (ceil(max Le / warps per block), Hq, B); one warp per query row,
// lanes split head_dim.
template <int D, bool kBf16>
__global__ void __launch_bounds__(kThreads)
    ExtendPortableKernel(ExtendParams p) {
  static_assert(D % kWarpSize == 0, "head_dim must be a multiple of warp");
  constexpr int kPerLane = D / kWarpSize;
  constexpr int kWarps = kThreads / kWarpSize;
  const int32_t b = blockIdx.z;
  const int32_t h = blockIdx.y;
  const int32_t i = blockIdx.x * kWarps + threadIdx.x / kWarpSize;
  const int32_t qo_start = p.qo_indptr[b];
  const int32_t le = p.qo_indptr[b + 1] - qo_start;
  if (i >= le) return;  // whole warp leaves together
  const int64_t kv_start = p.kv_indptr[b];
  const int32_t lp = static_cast<int32_t>(p.kv_indptr[b + 1] - kv_start);
  const int32_t kvh = h / p.group;
  const int32_t hkv = p.g.num_kv_heads;
  const int d0 = LaneId() * kPerLane;

  float qf[kPerLane], o[kPerLane];
  const int64_t row = static_cast<int64_t>(qo_start + i) * p.num_q_heads + h;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    qf[e] = ElemToFloat<kBf16>(p.q[row * D + d0 + e]) * p.scale_log2;
    o[e] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  auto update = [&](const float* kf, const float* vf) {
    float dot = 0.0f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) dot += qf[e] * kf[e];
    const float s = WarpReduceSum(dot);
    const float m_new = fmaxf(m, s);
    const float alpha = FastExp2(m - m_new);
    const float pe = FastExp2(s - m_new);
    l = l * alpha + pe;
    m = m_new;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) o[e] = o[e] * alpha + pe * vf[e];
  };
  // Stage 1: prefix, no mask.
  int64_t k_delta[kPerLane], v_delta[kPerLane];
  const int64_t k0 = p.g.KOffset(0, kvh, 0), v0 = p.g.VOffset(0, kvh, 0);
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    k_delta[e] = p.g.KOffset(0, kvh, d0 + e) - k0;
    v_delta[e] = p.g.VOffset(0, kvh, d0 + e) - v0;
  }
  for (int32_t j = 0; j < lp; ++j) {
    const int64_t slot = p.kv_indices[kv_start + j];
    const int64_t kb = p.g.KOffset(slot, kvh, 0);
    const int64_t vb = p.g.VOffset(slot, kvh, 0);
    float kf[kPerLane], vf[kPerLane];
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      kf[e] = ElemToFloat<kBf16>(p.k_cache[kb + k_delta[e]]);
      vf[e] = ElemToFloat<kBf16>(p.v_cache[vb + v_delta[e]]);
    }
    update(kf, vf);
  }
  // Stage 2: extend, causal j <= i (loop bound is the early exit).
  for (int32_t j = 0; j <= i; ++j) {
    const int64_t base = (static_cast<int64_t>(qo_start + j) * hkv + kvh) * D;
    float kf[kPerLane], vf[kPerLane];
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      kf[e] = ElemToFloat<kBf16>(p.k_ext[base + d0 + e]);
      vf[e] = ElemToFloat<kBf16>(p.v_ext[base + d0 + e]);
    }
    update(kf, vf);
  }
  const float inv = 1.0f / l;  // l >= 1: row i always sees key i
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    p.out[row * D + d0 + e] = FloatToElem<kBf16>(o[e] * inv);
  }
  if (LaneId() == 0 && p.lse != nullptr) p.lse[row] = CombineLse(m, l);
}

// ------------------------------------------------------- NVIDIA tensor cores
#if defined(RADIXKV_GPU_NVIDIA)

// Keys per K/V tile: 64 for head_dim <= 128, 32 for 256 (shared memory).
template <int D>
inline constexpr int kExtendKeys = D <= 128 ? 64 : 32;

// Query rows per block: 16 per warp.
template <int kWarps>
inline constexpr int kBlockRows = 16 * kWarps;

template <int D, int kWarps>
constexpr size_t ExtendSmemBytes() {
  constexpr int kN = kExtendKeys<D>;
  return static_cast<size_t>(kBlockRows<kWarps>) * D * 2 + 2 * 2 * kN * D * 2 +
         2 * kN * sizeof(int64_t);
}

// kWarps warps x 16 query rows per block (BLOCK_M = 16 * kWarps), all
// sharing each K/V tile.
template <int D, int kWarps, bool kBf16>
__global__ void __launch_bounds__(kWarps * 32) ExtendMmaKernel(ExtendParams p) {
  constexpr int kThreads = kWarps * 32;
  constexpr int kBlockM = kBlockRows<kWarps>;
  constexpr int kN = kExtendKeys<D>;
  using Warp = mma::WarpAttention<D, kN, kBf16>;
  constexpr int kChunksPerRow = D / 8;
  constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static_assert(kThreads % kChunksPerRow == 0, "chunk assignment");
  const int32_t b = blockIdx.z;
  const int32_t h = blockIdx.y;
  const int32_t m_block = p.num_m_blocks - 1 - blockIdx.x;  // heavy first
  const int32_t qo_start = p.qo_indptr[b];
  const int32_t le = p.qo_indptr[b + 1] - qo_start;
  const int32_t m0 = m_block * kBlockM;
  if (m0 >= le) return;
  const int64_t kv_start = p.kv_indptr[b];
  const int32_t lp = static_cast<int32_t>(p.kv_indptr[b + 1] - kv_start);
  const int32_t kvh = h / p.group;
  const int32_t hkv = p.g.num_kv_heads;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;

  extern __shared__ float4 smem_f4[];
  uint16_t* q_tile = reinterpret_cast<uint16_t*>(smem_f4);  // [kBlockM][D]
  uint16_t* k_tiles = q_tile + kBlockM * D;                 // [2][kN][D]
  uint16_t* v_tiles = k_tiles + 2 * kN * D;                 // [2][kN][D]
  int64_t* bases = reinterpret_cast<int64_t*>(v_tiles + 2 * kN * D);  // [2][kN]

  const int my_chunk = tid % kChunksPerRow;
  const int my_row0 = tid / kChunksPerRow;
  // Q rows [m0, m0 + kBlockM), zero beyond Le.
#pragma unroll
  for (int r = my_row0; r < kBlockM; r += kRowsPerPass) {
    const bool valid = m0 + r < le;
    const int64_t qi =
        (static_cast<int64_t>(qo_start + m0 + r) * p.num_q_heads + h) * D +
        my_chunk * 8;
    mma::CpAsync16(q_tile + mma::SwizzledOffset<D>(r, my_chunk),
                   p.q + (valid ? qi : 0), valid);
  }
  mma::CpAsyncCommit();

  const int64_t k_delta =
      p.g.KOffset(0, kvh, my_chunk * 8) - p.g.KOffset(0, kvh, 0);
  const int64_t v_delta =
      p.g.VOffset(0, kvh, my_chunk * 8) - p.g.VOffset(0, kvh, 0);
  const bool v_strided = p.g.layout == KvLayout::kVllm;
  const int64_t v_stride = p.g.VDimStride();

  const int32_t prefix_tiles = (lp + kN - 1) / kN;
  const int32_t extend_end = le < m0 + kBlockM ? le : m0 + kBlockM;
  const int32_t extend_tiles = (extend_end + kN - 1) / kN;
  const int32_t num_tiles = prefix_tiles + extend_tiles;

  // Prefix slot of this thread's key in tile `it` (-1 if none); the load for
  // tile it + 1 is issued one tile ahead so its latency overlaps compute.
  auto load_slot = [&](int32_t it) -> int64_t {
    const int32_t key = it * kN + tid;
    return (tid < kN && it < prefix_tiles && key < lp)
               ? p.kv_indices[kv_start + key]
               : int64_t{-1};
  };
  int64_t next_slot = load_slot(0);
  auto issue = [&](int32_t it) {
    const int stage = it & 1;
    const bool prefix = it < prefix_tiles;
    const int32_t key0 = (prefix ? it : it - prefix_tiles) * kN;
    const int64_t slot = next_slot;
    next_slot = load_slot(it + 1);
    if (tid < kN) {
      const int32_t key = key0 + tid;
      int64_t kb = -1, vb = -1;
      if (prefix && slot >= 0) {
        kb = p.g.KOffset(slot, kvh, 0);
        vb = p.g.VOffset(slot, kvh, 0);
      } else if (!prefix && key < le) {
        kb = vb = (static_cast<int64_t>(qo_start + key) * hkv + kvh) * D;
      }
      bases[tid] = kb;
      bases[kN + tid] = vb;
    }
    __syncthreads();
    uint16_t* ks = k_tiles + stage * kN * D;
    uint16_t* vs = v_tiles + stage * kN * D;
    const uint16_t* ksrc = prefix ? p.k_cache : p.k_ext;
    const uint16_t* vsrc = prefix ? p.v_cache : p.v_ext;
    const int64_t kd = prefix ? k_delta : my_chunk * 8;
    const int64_t vd = prefix ? v_delta : my_chunk * 8;
#pragma unroll
    for (int r = my_row0; r < kN; r += kRowsPerPass) {
      const int64_t kb = bases[r];
      const int64_t vb = bases[kN + r];
      const int so = mma::SwizzledOffset<D>(r, my_chunk);
      mma::CpAsync16(ks + so, ksrc + (kb >= 0 ? kb + kd : 0), kb >= 0);
      if (!(prefix && v_strided)) {
        mma::CpAsync16(vs + so, vsrc + (vb >= 0 ? vb + vd : 0), vb >= 0);
      } else {
        uint32_t wv[4] = {0, 0, 0, 0};
        if (vb >= 0) {
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            wv[e / 2] |= static_cast<uint32_t>(vsrc[vb + vd + e * v_stride])
                         << (16 * (e % 2));
          }
        }
        *reinterpret_cast<uint4*>(vs + so) =
            make_uint4(wv[0], wv[1], wv[2], wv[3]);
      }
    }
    mma::CpAsyncCommit();
  };

  Warp att;
  att.Init();
  if (num_tiles > 0) issue(0);
  mma::CpAsyncWait<0>();
  __syncthreads();
  att.LoadQ(q_tile + warp * 16 * D);
  // LoadQ addresses rows relative to the warp's first row; the swizzle uses
  // (row & 7), which is unchanged by the 16-row offset.

  const int g = lane >> 2, t4 = lane & 3;
  const int32_t warp_row0 = m0 + warp * 16;  // first extend row of this warp
  for (int32_t it = 0; it < num_tiles; ++it) {
    __syncthreads();  // stage (it + 1) & 1 and `bases` are free again
    if (it + 1 < num_tiles) {
      issue(it + 1);
      mma::CpAsyncWait<1>();
    } else {
      mma::CpAsyncWait<0>();
    }
    __syncthreads();
    const int stage = it & 1;
    const bool prefix = it < prefix_tiles;
    const int32_t key0 = (prefix ? it : it - prefix_tiles) * kN;
    // Extend tiles entirely above this warp's rows contribute nothing.
    if (!prefix && key0 > warp_row0 + 15) continue;
    float s[Warp::kSTiles][4];
    att.Scores(s, k_tiles + stage * kN * D);
    const bool need_mask = prefix ? key0 + kN > lp : key0 + kN - 1 > warp_row0;
    if (need_mask) {
#pragma unroll
      for (int j = 0; j < Warp::kSTiles; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int32_t key = key0 + j * 8 + 2 * t4 + (i & 1);
          const int32_t row = warp_row0 + g + 8 * (i >> 1);
          const bool ok = prefix ? key < lp : key <= row;
          s[j][i] = ok ? s[j][i] * p.scale_log2 : -INFINITY;
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < Warp::kSTiles; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) s[j][i] *= p.scale_log2;
      }
    }
    att.Accumulate(s, v_tiles + stage * kN * D);
  }
  att.Finish();

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int32_t row = warp_row0 + g + 8 * r;
    if (row >= le) continue;
    const int64_t orow =
        static_cast<int64_t>(qo_start + row) * p.num_q_heads + h;
    const float inv = att.l[r] > 0.0f ? 1.0f / att.l[r] : 0.0f;
#pragma unroll
    for (int n = 0; n < Warp::kOTiles; ++n) {
      const uint32_t lo = FloatToElem<kBf16>(att.o[n][2 * r] * inv);
      const uint32_t hi = FloatToElem<kBf16>(att.o[n][2 * r + 1] * inv);
      *reinterpret_cast<uint32_t*>(p.out + orow * D + n * 8 + 2 * t4) =
          lo | (hi << 16);
    }
    if (t4 == 0 && p.lse != nullptr)
      p.lse[orow] = CombineLse(att.m[r], att.l[r]);
  }
}

// ---------------------------------------------------- Hopper wgmma (sm_90a)

// Keys per K/V tile of the wgmma kernel; kWG consumer warpgroups of 64 query
// rows each (BLOCK_M = 64 kWG); kOverlap: FlashAttention-3's intra-warpgroup
// overlap (P V of tile i-1 runs on the tensor cores while the warpgroup does
// the softmax of tile i), which needs 3 K/V stages instead of 2.
inline constexpr int kWgmmaKeys = 64;

template <int D, int kWG, bool kOverlap>
constexpr size_t ExtendWgmmaSmemBytes() {
  // Q tile + K and V stages (SW128 layout, attention_wgmma.h), the per-key
  // base offsets, and 1 KB of slack for the 1024-byte alignment.
  return static_cast<size_t>(64 * kWG) * D * 2 +
         (kOverlap ? 3 : 2) * 2 * static_cast<size_t>(kWgmmaKeys) * D * 2 +
         2 * kWgmmaKeys * sizeof(int64_t) + 1024;
}

// Same work split and masking as ExtendMmaKernel, with the two GEMMs on
// wgmma: each warpgroup computes S (64 x 64 keys) = Q K^T with Q and K read
// by the tensor cores straight from shared memory (descriptors, no
// ldmatrix), runs the online softmax on its accumulators, and adds P V with
// P from registers (bf16/f16) and V from shared memory (transposed by the
// descriptor). Loads: every thread issues cp.async for the next tile (double
// buffer), then fence.proxy.async so the tensor cores see the data.
template <int D, int kWG, bool kOverlap, bool kBf16>
__global__ void __launch_bounds__(128 * kWG, 1)
    ExtendWgmmaKernel(ExtendParams p) {
#if RADIXKV_HAS_WGMMA
  constexpr int kN = kWgmmaKeys;
  constexpr int kBlockM = 64 * kWG;
  constexpr int kThreads = 128 * kWG;
  constexpr int kStages = kOverlap ? 3 : 2;
  constexpr int kChunksPerRow = D / 8;
  constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  constexpr int kSTiles = kN / 8;
  constexpr int kOTiles = D / 8;
  static_assert(D == 64 || D == 128, "wgmma path: head_dim 64 or 128");
  const int32_t b = blockIdx.z;
  const int32_t h = blockIdx.y;
  const int32_t m_block = p.num_m_blocks - 1 - blockIdx.x;  // heavy first
  const int32_t qo_start = p.qo_indptr[b];
  const int32_t le = p.qo_indptr[b + 1] - qo_start;
  const int32_t m0 = m_block * kBlockM;
  if (m0 >= le) return;
  const int64_t kv_start = p.kv_indptr[b];
  const int32_t lp = static_cast<int32_t>(p.kv_indptr[b + 1] - kv_start);
  const int32_t kvh = h / p.group;
  const int32_t hkv = p.g.num_kv_heads;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wg = warp >> 2;

  extern __shared__ float4 smem_f4[];
  uint8_t* raw = reinterpret_cast<uint8_t*>(smem_f4);
  raw += (1024 - (mma::SmemAddress(raw) & 1023)) & 1023;
  uint16_t* q_tile = reinterpret_cast<uint16_t*>(raw);  // [kBlockM][D]
  uint16_t* k_tiles = q_tile + kBlockM * D;             // [kStages][kN][D]
  uint16_t* v_tiles = k_tiles + kStages * kN * D;       // [kStages][kN][D]
  int64_t* bases =
      reinterpret_cast<int64_t*>(v_tiles + kStages * kN * D);  // [2][kN]

  const int my_chunk = tid % kChunksPerRow;
  const int my_row0 = tid / kChunksPerRow;
#pragma unroll
  for (int r = my_row0; r < kBlockM; r += kRowsPerPass) {
    const bool valid = m0 + r < le;
    const int64_t qi =
        (static_cast<int64_t>(qo_start + m0 + r) * p.num_q_heads + h) * D +
        my_chunk * 8;
    mma::CpAsync16(q_tile + wgmma::TileOffset<kBlockM>(r, my_chunk),
                   p.q + (valid ? qi : 0), valid);
  }
  mma::CpAsyncCommit();

  const int64_t k_delta =
      p.g.KOffset(0, kvh, my_chunk * 8) - p.g.KOffset(0, kvh, 0);
  const int64_t v_delta =
      p.g.VOffset(0, kvh, my_chunk * 8) - p.g.VOffset(0, kvh, 0);
  const bool v_strided = p.g.layout == KvLayout::kVllm;
  const int64_t v_stride = p.g.VDimStride();

  const int32_t prefix_tiles = (lp + kN - 1) / kN;
  const int32_t extend_end = le < m0 + kBlockM ? le : m0 + kBlockM;
  const int32_t extend_tiles = (extend_end + kN - 1) / kN;
  const int32_t num_tiles = prefix_tiles + extend_tiles;

  auto load_slot = [&](int32_t it) -> int64_t {
    const int32_t key = it * kN + tid;
    return (tid < kN && it < prefix_tiles && key < lp)
               ? p.kv_indices[kv_start + key]
               : int64_t{-1};
  };
  int64_t next_slot = load_slot(0);
  auto issue = [&](int32_t it) {
    const int stage = it % kStages;
    const bool prefix = it < prefix_tiles;
    const int32_t key0 = (prefix ? it : it - prefix_tiles) * kN;
    const int64_t slot = next_slot;
    next_slot = load_slot(it + 1);
    if (tid < kN) {
      const int32_t key = key0 + tid;
      int64_t kb = -1, vb = -1;
      if (prefix && slot >= 0) {
        kb = p.g.KOffset(slot, kvh, 0);
        vb = p.g.VOffset(slot, kvh, 0);
      } else if (!prefix && key < le) {
        kb = vb = (static_cast<int64_t>(qo_start + key) * hkv + kvh) * D;
      }
      bases[tid] = kb;
      bases[kN + tid] = vb;
    }
    __syncthreads();
    uint16_t* ks = k_tiles + stage * kN * D;
    uint16_t* vs = v_tiles + stage * kN * D;
    const uint16_t* ksrc = prefix ? p.k_cache : p.k_ext;
    const uint16_t* vsrc = prefix ? p.v_cache : p.v_ext;
    const int64_t kd = prefix ? k_delta : my_chunk * 8;
    const int64_t vd = prefix ? v_delta : my_chunk * 8;
#pragma unroll
    for (int r = my_row0; r < kN; r += kRowsPerPass) {
      const int64_t kb = bases[r];
      const int64_t vb = bases[kN + r];
      const int so = wgmma::TileOffset<kN>(r, my_chunk);
      mma::CpAsync16(ks + so, ksrc + (kb >= 0 ? kb + kd : 0), kb >= 0);
      if (!(prefix && v_strided)) {
        mma::CpAsync16(vs + so, vsrc + (vb >= 0 ? vb + vd : 0), vb >= 0);
      } else {
        uint32_t wv[4] = {0, 0, 0, 0};
        if (vb >= 0) {
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            wv[e / 2] |= static_cast<uint32_t>(vsrc[vb + vd + e * v_stride])
                         << (16 * (e % 2));
          }
        }
        *reinterpret_cast<uint4*>(vs + so) =
            make_uint4(wv[0], wv[1], wv[2], wv[3]);
      }
    }
    mma::CpAsyncCommit();
  };

  float o[kOTiles * 4];
#pragma unroll
  for (int i = 0; i < kOTiles * 4; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};

  if (num_tiles > 0) issue(0);
  mma::CpAsyncWait<0>();
  wgmma::FenceProxyAsyncShared();
  __syncthreads();

  const uint32_t q_addr = mma::SmemAddress(q_tile) + wg * 64 * 128;
  const uint32_t k_addr0 = mma::SmemAddress(k_tiles);
  const uint32_t v_addr0 = mma::SmemAddress(v_tiles);
  constexpr uint32_t kTileBytes = kN * D * 2;
  const int g = lane >> 2, t4 = lane & 3;
  const int32_t warp_row0 = m0 + warp * 16;  // first row of this warp
  const int32_t wg_row0 = m0 + wg * 64;      // first row of this warpgroup
  // Tiles this warpgroup computes: a prefix [0, wg_tiles) of the block's
  // tiles (extend tiles entirely above its 64 rows contribute nothing; a
  // warpgroup past Le computes nothing). Uniform over the warpgroup, as
  // wgmma requires.
  const int32_t wg_tiles =
      wg_row0 >= le ? 0
                    : prefix_tiles + min(extend_tiles, (wg_row0 + 63) / kN + 1);
  // kOverlap: P of the previous tile (registers) and the address of its V
  // stage; its P V product is issued together with the next tile's S and
  // runs while this warpgroup does that tile's softmax. Before the first
  // tile P = 0 (a no-op product on tile 0's V stage, which holds finite
  // data), so every iteration has the same wgmma sequence: no divergent
  // wgmma waits (ptxas would serialize them, C7520).
  uint32_t pa[kN / 16][4];
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk) {
    pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0;
  }
  uint32_t v_prev = v_addr0;
  auto issue_pv = [&](uint32_t v_addr) {
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      const uint64_t db = wgmma::MakeDescriptor(v_addr + kk * 16 * 128,
                                                p.v_desc_lbo, p.v_desc_sbo);
      wgmma::MmaRS<D, kBf16>(o, pa[kk], db, 1);
    }
    wgmma::CommitGroup();
  };
  for (int32_t it = 0; it < num_tiles; ++it) {
    __syncthreads();  // the stage tile it + 1 goes to and `bases` are free
    if (it + 1 < num_tiles) {
      issue(it + 1);
      mma::CpAsyncWait<1>();
    } else {
      mma::CpAsyncWait<0>();
    }
    wgmma::FenceProxyAsyncShared();
    __syncthreads();
    if (it >= wg_tiles) continue;
    const int stage = it % kStages;
    const bool prefix = it < prefix_tiles;
    const int32_t key0 = (prefix ? it : it - prefix_tiles) * kN;
    const uint32_t k_addr = k_addr0 + stage * kTileBytes;
    const uint32_t v_addr = v_addr0 + stage * kTileBytes;

    // S = Q K^T: D / 16 k-steps, 4 per 64-dim column block.
    float s[kSTiles * 4];
#pragma unroll
    for (int i = 0; i < kSTiles * 4; ++i) s[i] = 0.0f;
    wgmma::FenceRegisters(s);
    wgmma::FenceRegisters(o);
    wgmma::Fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint32_t col = (kk & 3) * 32;  // 16 elements per k-step
      const uint64_t da = wgmma::MakeDescriptor(
          q_addr + (kk >> 2) * (kBlockM * 128) + col, 16, 1024);
      const uint64_t db = wgmma::MakeDescriptor(
          k_addr + (kk >> 2) * (kN * 128) + col, 16, 1024);
      wgmma::MmaSS<kN, kBf16>(s, da, db, 1);
    }
    wgmma::CommitGroup();
    if constexpr (kOverlap) {
      issue_pv(v_prev);
      wgmma::WaitGroup<1>();  // S done; the previous tile's P V may run on
    } else {
      wgmma::WaitGroup<0>();
    }
    wgmma::FenceRegisters(s);

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
    // Online softmax (base 2), rows g (r = 0) and g + 8 (r = 1).
    float alpha[2];
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
    if constexpr (kOverlap) {
      wgmma::WaitGroup<0>();  // O and pa are ours again
      wgmma::FenceRegisters(o);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int n = 0; n < kOTiles; ++n) {
        o[4 * n + 2 * r] *= alpha[r];
        o[4 * n + 2 * r + 1] *= alpha[r];
      }
    }
    // P packed like an mma.sync A fragment (16 keys per k-step); V is
    // MN-major (dims contiguous), LBO = next 64-dim column block.
#pragma unroll
    for (int kk = 0; kk < kN / 16; ++kk) {
      pa[kk][0] = mma::PackPair<kBf16>(s[8 * kk + 0], s[8 * kk + 1]);
      pa[kk][1] = mma::PackPair<kBf16>(s[8 * kk + 2], s[8 * kk + 3]);
      pa[kk][2] = mma::PackPair<kBf16>(s[8 * kk + 4], s[8 * kk + 5]);
      pa[kk][3] = mma::PackPair<kBf16>(s[8 * kk + 6], s[8 * kk + 7]);
    }
    if constexpr (kOverlap) {
      v_prev = v_addr;
    } else {
      wgmma::FenceRegisters(o);
      wgmma::Fence();
      issue_pv(v_addr);
      wgmma::WaitGroup<0>();
      wgmma::FenceRegisters(o);
    }
  }
  if constexpr (kOverlap) {
    // The last tile's P V (a no-op product if this warpgroup had no tile;
    // its rows are then past Le and never stored).
    wgmma::FenceRegisters(o);
    wgmma::Fence();
    issue_pv(v_prev);
    wgmma::WaitGroup<0>();
    wgmma::FenceRegisters(o);
  }
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
      const uint32_t lo = FloatToElem<kBf16>(o[4 * n + 2 * r] * inv);
      const uint32_t hi = FloatToElem<kBf16>(o[4 * n + 2 * r + 1] * inv);
      *reinterpret_cast<uint32_t*>(p.out + orow * D + n * 8 + 2 * t4) =
          lo | (hi << 16);
    }
    if (t4 == 0 && p.lse != nullptr) p.lse[orow] = CombineLse(m[r], l[r]);
  }
#else
  __trap();  // never launched: the host checks the binary's architecture
#endif  // RADIXKV_HAS_WGMMA
}

// Warp-specialized wgmma kernel (FlashAttention-3's split): warpgroup 0 is
// the producer (gathers K/V tiles through kv_indices with cp.async into
// kWsStages stages and signals a `full` mbarrier per stage), warpgroups 1 and
// 2 are consumers of 64 query rows each (BLOCK_M 128) that wait on `full`,
// run S = Q K^T, the online softmax and P V on wgmma, and release the stage
// on its `empty` mbarrier. No block-wide barrier after the Q load, so the
// consumers drift apart and one's softmax overlaps the other's wgmma.
// kWsLag: K/V tiles the producer keeps in flight beyond the one it is
// publishing (it publishes tile i after issuing tile i + kWsLag); needs
// kWsStages >= kWsLag + 1 so that it never waits for a stage the consumers
// can only free after that publication (one more stage gives slack).
inline constexpr int kWsStages = 4;
inline constexpr int kWsLag = 2;
static_assert(kWsStages >= kWsLag + 1, "producer lag vs stages");

template <int D>
constexpr size_t ExtendWgmmaWsSmemBytes() {
  return static_cast<size_t>(128) * D * 2 +
         kWsStages * 2 * static_cast<size_t>(kWgmmaKeys) * D * 2 +
         2 * 2 * kWgmmaKeys * sizeof(int64_t) +
         2 * kWsStages * sizeof(uint64_t) + 1024;
}

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

// Keeps the compiler from moving writes of pa above a wgmma wait (pa is an
// operand of the P V wgmma in flight until then).
__device__ __forceinline__ void FencePRegisters(
    uint32_t (&pa)[kWgmmaKeys / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kWgmmaKeys / 16; ++kk) {
#pragma unroll
    for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(pa[kk][i])::"memory");
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
      const uint32_t lo = FloatToElem<kBf16>(o[4 * n + 2 * r] * inv);
      const uint32_t hi = FloatToElem<kBf16>(o[4 * n + 2 * r + 1] * inv);
      *reinterpret_cast<uint32_t*>(p.out + orow * D + n * 8 + 2 * t4) =
          lo | (hi << 16);
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

// kLeanProducer (default): each producer warp gathers 16 keys of every tile
// on its own (lane l computes the K (l < 16) or V (l >= 16) element offset of
// key 16 * warp + l % 16, shared through warp shuffles, kv_indices two tiles
// ahead, fully unrolled copy loop, no named barrier). false: the first
// version (one lane per key, offsets through shared memory and a 128-thread
// named barrier; RADIXKV_WGMMA_VARIANT=ws-v1).
// kConsumerQ (default): the consumer warpgroups load Q and meet at a named
// barrier while the producer already gathers the first tiles; false: all
// 384 threads load Q before the split (RADIXKV_WGMMA_VARIANT=lean-qsync).
// kOverlap: consumers overlap the softmax of tile i with P V of tile i - 1
// (RADIXKV_WGMMA_VARIANT=lean-overlap).
template <int D, bool kBf16, bool kLeanProducer, bool kConsumerQ,
          bool kOverlap = false>
__global__ void __launch_bounds__(384, 1) ExtendWgmmaWsKernel(ExtendParams p) {
#if RADIXKV_HAS_WGMMA
  constexpr int kN = kWgmmaKeys;
  constexpr int kBlockM = 128;
  constexpr int kStages = kWsStages;
  constexpr int kChunksPerRow = D / 8;
  constexpr int kSTiles = kN / 8;
  constexpr int kOTiles = D / 8;
  static_assert(D == 64 || D == 128, "wgmma path: head_dim 64 or 128");
  const int32_t b = blockIdx.z;
  const int32_t h = blockIdx.y;
  const int32_t m_block = p.num_m_blocks - 1 - blockIdx.x;  // heavy first
  const int32_t qo_start = p.qo_indptr[b];
  const int32_t le = p.qo_indptr[b + 1] - qo_start;
  const int32_t m0 = m_block * kBlockM;
  if (m0 >= le) return;
  const int64_t kv_start = p.kv_indptr[b];
  const int32_t lp = static_cast<int32_t>(p.kv_indptr[b + 1] - kv_start);
  const int32_t kvh = h / p.group;
  const int32_t hkv = p.g.num_kv_heads;
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wg = warp >> 2;

  extern __shared__ float4 smem_f4[];
  uint8_t* raw = reinterpret_cast<uint8_t*>(smem_f4);
  raw += (1024 - (mma::SmemAddress(raw) & 1023)) & 1023;
  uint16_t* q_tile = reinterpret_cast<uint16_t*>(raw);  // [kBlockM][D]
  uint16_t* k_tiles = q_tile + kBlockM * D;             // [kStages][kN][D]
  uint16_t* v_tiles = k_tiles + kStages * kN * D;       // [kStages][kN][D]
  int64_t* bases =
      reinterpret_cast<int64_t*>(v_tiles + kStages * kN * D);    // [2][2][kN]
  uint64_t* full = reinterpret_cast<uint64_t*>(bases + 4 * kN);  // [kStages]
  uint64_t* empty = full + kStages;                              // [kStages]

  if (tid == 0) {
    for (int st = 0; st < kStages; ++st) {
      wgmma::MbarrierInit(&full[st], 128);  // every producer thread
      wgmma::MbarrierInit(&empty[st], 8);   // lane 0 of each consumer warp
    }
  }
  // Q rows [m0, m0 + 128), zero beyond Le.
  auto load_q = [&](int thread, int threads) {
    const int chunk = thread % kChunksPerRow;
#pragma unroll
    for (int r = thread / kChunksPerRow; r < kBlockM;
         r += threads / kChunksPerRow) {
      const bool valid = m0 + r < le;
      const int64_t qi =
          (static_cast<int64_t>(qo_start + m0 + r) * p.num_q_heads + h) * D +
          chunk * 8;
      mma::CpAsync16(q_tile + wgmma::TileOffset<kBlockM>(r, chunk),
                     p.q + (valid ? qi : 0), valid);
    }
    mma::CpAsyncCommit();
    mma::CpAsyncWait<0>();
    wgmma::FenceProxyAsyncShared();
  };
  if constexpr (kConsumerQ) {
    __syncthreads();  // the barrier initialization is visible
    if (wg != 0) {    // the 256 consumer threads
      load_q(tid - 128, 256);
      wgmma::NamedBarrierSync<2, 256>();
    }
  } else {
    load_q(tid, 384);
    __syncthreads();  // Q and the barrier initialization are visible
  }

  const int32_t prefix_tiles = (lp + kN - 1) / kN;
  const int32_t extend_end = le < m0 + kBlockM ? le : m0 + kBlockM;
  const int32_t extend_tiles = (extend_end + kN - 1) / kN;
  const int32_t num_tiles = prefix_tiles + extend_tiles;
  constexpr uint32_t kTileBytes = kN * D * 2;

  if (wg == 0 && kLeanProducer) {
    // ----------------------------------------------------- producer (lean)
    const WsProducerLane lane_info =
        MakeWsProducerLane<D>(p, lane, warp, kvh, qo_start, le);
    const int my_key = lane_info.key;
    auto load_slot = [&](int32_t it) -> int64_t {
      const int32_t key = it * kN + my_key;
      return (it < prefix_tiles && key < lp) ? p.kv_indices[kv_start + key]
                                             : int64_t{-1};
    };
    int64_t slot_next = load_slot(0);
    int64_t slot_next2 = load_slot(1);
    for (int32_t it = 0; it < num_tiles; ++it) {
      const int stage = it % kStages;
      if (it >= kStages) {
        wgmma::MbarrierWait(&empty[stage], ((it / kStages) - 1) & 1);
      }
      const bool prefix = it < prefix_tiles;
      const int32_t key0 = (prefix ? it : it - prefix_tiles) * kN;
      const int64_t slot = slot_next;
      slot_next = slot_next2;
      slot_next2 = load_slot(it + 2);
      WsGatherTile<D>(p, lane_info, prefix, key0, slot,
                      k_tiles + stage * kN * D, v_tiles + stage * kN * D);
      mma::CpAsyncCommit();
      if (it >= kWsLag) {  // tile it - kWsLag has landed: publish it
        mma::CpAsyncWait<kWsLag>();
        wgmma::FenceProxyAsyncShared();
        wgmma::MbarrierArrive(&full[(it - kWsLag) % kStages]);
      }
    }
    mma::CpAsyncWait<0>();
    wgmma::FenceProxyAsyncShared();
    for (int32_t it = num_tiles > kWsLag ? num_tiles - kWsLag : 0;
         it < num_tiles; ++it) {
      wgmma::MbarrierArrive(&full[it % kStages]);
    }
    return;
  }
  if (wg == 0) {
    // ------------------------------------------- producer (first version)
    constexpr int kRowsPerPass = 128 / kChunksPerRow;
    const int my_chunk = tid % kChunksPerRow;
    const int my_row0 = tid / kChunksPerRow;
    const int64_t k_delta =
        p.g.KOffset(0, kvh, my_chunk * 8) - p.g.KOffset(0, kvh, 0);
    const int64_t v_delta =
        p.g.VOffset(0, kvh, my_chunk * 8) - p.g.VOffset(0, kvh, 0);
    const bool v_strided = p.g.layout == KvLayout::kVllm;
    const int64_t v_stride = p.g.VDimStride();
    auto load_slot = [&](int32_t it) -> int64_t {
      const int32_t key = it * kN + tid;
      return (tid < kN && it < prefix_tiles && key < lp)
                 ? p.kv_indices[kv_start + key]
                 : int64_t{-1};
    };
    int64_t next_slot = load_slot(0);
    for (int32_t it = 0; it < num_tiles; ++it) {
      const int stage = it % kStages;
      if (it >= kStages) {
        wgmma::MbarrierWait(&empty[stage], ((it / kStages) - 1) & 1);
      }
      const bool prefix = it < prefix_tiles;
      const int32_t key0 = (prefix ? it : it - prefix_tiles) * kN;
      int64_t* bb = bases + (it & 1) * 2 * kN;
      const int64_t slot = next_slot;
      next_slot = load_slot(it + 1);
      if (tid < kN) {
        const int32_t key = key0 + tid;
        int64_t kb = -1, vb = -1;
        if (prefix && slot >= 0) {
          kb = p.g.KOffset(slot, kvh, 0);
          vb = p.g.VOffset(slot, kvh, 0);
        } else if (!prefix && key < le) {
          kb = vb = (static_cast<int64_t>(qo_start + key) * hkv + kvh) * D;
        }
        bb[tid] = kb;
        bb[kN + tid] = vb;
      }
      wgmma::NamedBarrierSync<1, 128>();
      uint16_t* ks = k_tiles + stage * kN * D;
      uint16_t* vs = v_tiles + stage * kN * D;
      const uint16_t* ksrc = prefix ? p.k_cache : p.k_ext;
      const uint16_t* vsrc = prefix ? p.v_cache : p.v_ext;
      const int64_t kd = prefix ? k_delta : my_chunk * 8;
      const int64_t vd = prefix ? v_delta : my_chunk * 8;
#pragma unroll
      for (int r = my_row0; r < kN; r += kRowsPerPass) {
        const int64_t kb = bb[r];
        const int64_t vb = bb[kN + r];
        const int so = wgmma::TileOffset<kN>(r, my_chunk);
        mma::CpAsync16(ks + so, ksrc + (kb >= 0 ? kb + kd : 0), kb >= 0);
        if (!(prefix && v_strided)) {
          mma::CpAsync16(vs + so, vsrc + (vb >= 0 ? vb + vd : 0), vb >= 0);
        } else {
          uint32_t wv[4] = {0, 0, 0, 0};
          if (vb >= 0) {
#pragma unroll
            for (int e = 0; e < 8; ++e) {
              wv[e / 2] |= static_cast<uint32_t>(vsrc[vb + vd + e * v_stride])
                           << (16 * (e % 2));
            }
          }
          *reinterpret_cast<uint4*>(vs + so) =
              make_uint4(wv[0], wv[1], wv[2], wv[3]);
        }
      }
      mma::CpAsyncCommit();
      if (it >= kWsLag) {  // tile it - kWsLag has landed: publish it
        mma::CpAsyncWait<kWsLag>();
        wgmma::FenceProxyAsyncShared();
        wgmma::MbarrierArrive(&full[(it - kWsLag) % kStages]);
      }
    }
    mma::CpAsyncWait<0>();
    wgmma::FenceProxyAsyncShared();
    for (int32_t it = num_tiles > kWsLag ? num_tiles - kWsLag : 0;
         it < num_tiles; ++it) {
      wgmma::MbarrierArrive(&full[it % kStages]);
    }
    return;
  }

  // -------------------------------------------------------------- consumers
  const int cw = wg - 1;                           // consumer warpgroup 0 / 1
  const int32_t warp_row0 = m0 + (warp - 4) * 16;  // first row of this warp
  const int32_t wg_row0 = m0 + cw * 64;
  const int32_t wg_tiles =
      wg_row0 >= le ? 0
                    : prefix_tiles + min(extend_tiles, (wg_row0 + 63) / kN + 1);
  const uint32_t q_addr = mma::SmemAddress(q_tile) + cw * 64 * 128;
  const uint32_t k_addr0 = mma::SmemAddress(k_tiles);
  const uint32_t v_addr0 = mma::SmemAddress(v_tiles);

  float o[kOTiles * 4];
#pragma unroll
  for (int i = 0; i < kOTiles * 4; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};

  if constexpr (kOverlap) {
    // FA3's intra-warpgroup overlap: S of tile i is issued before P V of
    // tile i - 1, and the softmax of tile i runs while that P V is in
    // flight; O is rescaled after it completed.
    // The first iteration's P V is a no-op (P = 0 on the first tile's V,
    // which has landed) so that the wgmma sequence has no branch (ptxas
    // serializes wgmma in divergent paths, C7518).
    float s[kN / 2];
    uint32_t pa[kN / 16][4] = {};
    float alpha[2];
    int prev_stage = 0;
    for (int32_t it = 0; it < wg_tiles; ++it) {
      const int stage = it % kStages;
      wgmma::MbarrierWait(&full[stage], (it / kStages) & 1);
      const bool prefix = it < prefix_tiles;
      const int32_t key0 = (prefix ? it : it - prefix_tiles) * kN;
      if (it == 0) prev_stage = stage;
      WsIssueS<D, kBf16>(s, q_addr, k_addr0 + stage * kTileBytes);
      WsIssuePV<D, kBf16>(o, pa, v_addr0 + prev_stage * kTileBytes, p);
      wgmma::WaitGroup<1>();  // S of tile it (the older group)
      wgmma::FenceRegisters(s);
      WsSoftmax(s, m, l, alpha, prefix, key0, lp, warp_row0, lane, p);
      wgmma::WaitGroup<0>();  // P V of tile it - 1: its stage is free
      wgmma::FenceRegisters(o);
      FencePRegisters(pa);
      if (it > 0 && lane == 0) wgmma::MbarrierArrive(&empty[prev_stage]);
      WsRescaleO<D>(o, alpha);
      WsPackP<kBf16>(s, pa);
      prev_stage = stage;
    }
    if (wg_tiles > 0) {
      WsIssuePV<D, kBf16>(o, pa, v_addr0 + prev_stage * kTileBytes, p);
      wgmma::WaitGroup<0>();
      wgmma::FenceRegisters(o);
      if (lane == 0) wgmma::MbarrierArrive(&empty[prev_stage]);
    }
  }
  for (int32_t it = 0; it < (kOverlap ? 0 : wg_tiles); ++it) {
    const int stage = it % kStages;
    wgmma::MbarrierWait(&full[stage], (it / kStages) & 1);
    const bool prefix = it < prefix_tiles;
    const int32_t key0 = (prefix ? it : it - prefix_tiles) * kN;
    const uint32_t k_addr = k_addr0 + stage * kTileBytes;
    const uint32_t v_addr = v_addr0 + stage * kTileBytes;

    WsConsumeTile<D, kBf16>(o, m, l, q_addr, k_addr, v_addr, prefix, key0, lp,
                            warp_row0, lane, p);
    if (lane == 0) wgmma::MbarrierArrive(&empty[stage]);
  }
  // Tiles past this warpgroup's diagonal: release them in order (waiting
  // for `full` first keeps each arrival in the phase it belongs to).
  for (int32_t it = wg_tiles; it < num_tiles; ++it) {
    const int stage = it % kStages;
    wgmma::MbarrierWait(&full[stage], (it / kStages) & 1);
    if (lane == 0) wgmma::MbarrierArrive(&empty[stage]);
  }
  WsStoreRows<D, kBf16>(o, m, l, warp_row0, le, qo_start, h, lane, p);
#else
  __trap();  // never launched: the host checks the binary's architecture
#endif  // RADIXKV_HAS_WGMMA
}

// Work-item (persistent) form of the warp-specialized kernel with the lean
// producer: FlashAttention-3's persistent tile scheduler. A work item is one
// (m-block, query head, sequence); block j processes items j, j + gridDim.x,
// ... The producer warpgroup loads each item's Q (into one of two Q
// buffers, as part of the item's first K/V tile, so `full` of that tile also
// publishes Q) and its K/V tiles while the consumers still work on the
// previous item and write its output; stage and mbarrier phase bookkeeping
// runs over one tile counter continued across items. A Q buffer is reused two
// items later, after the consumer warps released it on `q_empty`.
// p.num_items items; p.heavy_first_order: 1 -> item i is m-block index
// i / (Hq * B) (heaviest m-blocks of every sequence first across the whole
// grid, for a grid of one block per SM), 0 -> the one-block-per-item grid's
// order (m-block fastest, then head, then sequence). Items past a sequence's
// Le are skipped.
template <int D>
constexpr size_t ExtendWgmmaItemsSmemBytes() {
  return 2 * static_cast<size_t>(128) * D * 2 +
         kWsStages * 2 * static_cast<size_t>(kWgmmaKeys) * D * 2 +
         (2 * kWsStages + 2) * sizeof(uint64_t) + 1024;
}

struct ExtendItem {
  int32_t b, h, m0;
};

__device__ __forceinline__ ExtendItem DecodeExtendItem(const ExtendParams& p,
                                                       int32_t item) {
  ExtendItem w;
  int32_t x;  // m-block index counted from the heaviest
  if (p.heavy_first_order) {
    const int32_t per_x = p.num_q_heads * p.batch_size;
    x = item / per_x;
    const int32_t rem = item - x * per_x;
    w.b = rem / p.num_q_heads;
    w.h = rem - w.b * p.num_q_heads;
  } else {
    x = item % p.num_m_blocks;
    const int32_t rest = item / p.num_m_blocks;
    w.h = rest % p.num_q_heads;
    w.b = rest / p.num_q_heads;
  }
  w.m0 = (p.num_m_blocks - 1 - x) * 128;
  return w;
}

template <int D, bool kBf16>
__global__ void __launch_bounds__(384, 1)
    ExtendWgmmaItemsKernel(ExtendParams p) {
#if RADIXKV_HAS_WGMMA
  constexpr int kN = kWgmmaKeys;
  constexpr int kBlockM = 128;
  constexpr int kStages = kWsStages;
  constexpr int kChunksPerRow = D / 8;
  constexpr int kOTiles = D / 8;
  constexpr uint32_t kTileBytes = kN * D * 2;
  static_assert(D == 64 || D == 128, "wgmma path: head_dim 64 or 128");
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int wg = warp >> 2;

  extern __shared__ float4 smem_f4[];
  uint8_t* raw = reinterpret_cast<uint8_t*>(smem_f4);
  raw += (1024 - (mma::SmemAddress(raw) & 1023)) & 1023;
  uint16_t* q_tiles = reinterpret_cast<uint16_t*>(raw);  // [2][kBlockM][D]
  uint16_t* k_tiles = q_tiles + 2 * kBlockM * D;         // [kStages][kN][D]
  uint16_t* v_tiles = k_tiles + kStages * kN * D;        // [kStages][kN][D]
  uint64_t* full =
      reinterpret_cast<uint64_t*>(v_tiles + kStages * kN * D);  // [kStages]
  uint64_t* empty = full + kStages;                             // [kStages]
  uint64_t* q_empty = empty + kStages;                          // [2]

  if (tid == 0) {
    for (int st = 0; st < kStages; ++st) {
      wgmma::MbarrierInit(&full[st], 128);  // every producer thread
      wgmma::MbarrierInit(&empty[st], 8);   // lane 0 of each consumer warp
    }
    wgmma::MbarrierInit(&q_empty[0], 8);
    wgmma::MbarrierInit(&q_empty[1], 8);
  }
  __syncthreads();  // barrier initialization is visible

  int32_t tile0 = 0;  // tiles of this block's earlier items
  int32_t n = 0;      // non-empty items processed so far
  if (wg == 0) {
    // ------------------------------------------------------------ producer
    static_assert(kWsLag == 2, "the q_empty flush below assumes lag 2");
    int32_t published = 0;   // tiles [0, published) arrived on `full`
    int32_t prev_tiles = 0;  // tiles of the previous non-empty item
    for (int32_t item = blockIdx.x; item < p.num_items; item += gridDim.x) {
      const ExtendItem w = DecodeExtendItem(p, item);
      const int32_t qo_start = p.qo_indptr[w.b];
      const int32_t le = p.qo_indptr[w.b + 1] - qo_start;
      if (w.m0 >= le) continue;
      const int64_t kv_start = p.kv_indptr[w.b];
      const int32_t lp = static_cast<int32_t>(p.kv_indptr[w.b + 1] - kv_start);
      const int32_t kvh = w.h / p.group;
      const int32_t prefix_tiles = (lp + kN - 1) / kN;
      const int32_t extend_end = le < w.m0 + kBlockM ? le : w.m0 + kBlockM;
      const int32_t num_tiles = prefix_tiles + (extend_end + kN - 1) / kN;
      const WsProducerLane lane_info =
          MakeWsProducerLane<D>(p, lane, warp, kvh, qo_start, le);
      auto load_slot = [&](int32_t it) -> int64_t {
        const int32_t key = it * kN + lane_info.key;
        return (it < prefix_tiles && key < lp) ? p.kv_indices[kv_start + key]
                                               : int64_t{-1};
      };
      int64_t slot_next = load_slot(0);
      int64_t slot_next2 = load_slot(1);
      const int qb = n & 1;
      if (n >= 2) {
        // The consumers release this Q buffer after the last tile of item
        // n - 2, which the lag publishes only once kWsLag more tiles were
        // issued: if item n - 1 had fewer, publish up to it now.
        if (prev_tiles < kWsLag && published < tile0 - prev_tiles) {
          mma::CpAsyncWait<kWsLag - 1>();
          wgmma::FenceProxyAsyncShared();
          for (; published < tile0 - prev_tiles; ++published) {
            wgmma::MbarrierArrive(&full[published % kStages]);
          }
        }
        wgmma::MbarrierWait(&q_empty[qb], ((n >> 1) - 1) & 1);
      }
      for (int32_t it = 0; it < num_tiles; ++it) {
        const int32_t t = tile0 + it;
        const int stage = t % kStages;
        if (t >= kStages) {
          wgmma::MbarrierWait(&empty[stage], ((t / kStages) - 1) & 1);
        }
        if (it == 0) {  // Q rows [m0, m0 + 128), zero beyond Le
          const int chunk = tid % kChunksPerRow;
          uint16_t* q_tile = q_tiles + qb * kBlockM * D;
#pragma unroll
          for (int r = tid / kChunksPerRow; r < kBlockM;
               r += 128 / kChunksPerRow) {
            const bool valid = w.m0 + r < le;
            const int64_t qi =
                (static_cast<int64_t>(qo_start + w.m0 + r) * p.num_q_heads +
                 w.h) *
                    D +
                chunk * 8;
            mma::CpAsync16(q_tile + wgmma::TileOffset<kBlockM>(r, chunk),
                           p.q + (valid ? qi : 0), valid);
          }
        }
        const bool prefix = it < prefix_tiles;
        const int32_t key0 = (prefix ? it : it - prefix_tiles) * kN;
        const int64_t slot = slot_next;
        slot_next = slot_next2;
        slot_next2 = load_slot(it + 2);
        WsGatherTile<D>(p, lane_info, prefix, key0, slot,
                        k_tiles + stage * kN * D, v_tiles + stage * kN * D);
        mma::CpAsyncCommit();
        if (published <= t - kWsLag) {  // tile t - kWsLag has landed
          mma::CpAsyncWait<kWsLag>();
          wgmma::FenceProxyAsyncShared();
          wgmma::MbarrierArrive(&full[published % kStages]);
          ++published;
        }
      }
      tile0 += num_tiles;
      prev_tiles = num_tiles;
      ++n;
    }
    mma::CpAsyncWait<0>();
    wgmma::FenceProxyAsyncShared();
    for (; published < tile0; ++published) {
      wgmma::MbarrierArrive(&full[published % kStages]);
    }
    return;
  }

  // -------------------------------------------------------------- consumers
  const int cw = wg - 1;  // consumer warpgroup 0 / 1
  const uint32_t k_addr0 = mma::SmemAddress(k_tiles);
  const uint32_t v_addr0 = mma::SmemAddress(v_tiles);
  for (int32_t item = blockIdx.x; item < p.num_items; item += gridDim.x) {
    const ExtendItem w = DecodeExtendItem(p, item);
    const int32_t qo_start = p.qo_indptr[w.b];
    const int32_t le = p.qo_indptr[w.b + 1] - qo_start;
    if (w.m0 >= le) continue;
    const int32_t lp =
        static_cast<int32_t>(p.kv_indptr[w.b + 1] - p.kv_indptr[w.b]);
    const int32_t prefix_tiles = (lp + kN - 1) / kN;
    const int32_t extend_end = le < w.m0 + kBlockM ? le : w.m0 + kBlockM;
    const int32_t extend_tiles = (extend_end + kN - 1) / kN;
    const int32_t num_tiles = prefix_tiles + extend_tiles;
    const int32_t warp_row0 = w.m0 + (warp - 4) * 16;  // first row of warp
    const int32_t wg_row0 = w.m0 + cw * 64;
    const int32_t wg_tiles =
        wg_row0 >= le
            ? 0
            : prefix_tiles + min(extend_tiles, (wg_row0 + 63) / kN + 1);
    const int qb = n & 1;
    const uint32_t q_addr =
        mma::SmemAddress(q_tiles + qb * kBlockM * D) + cw * 64 * 128;

    float o[kOTiles * 4];
#pragma unroll
    for (int i = 0; i < kOTiles * 4; ++i) o[i] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY};
    float l[2] = {0.0f, 0.0f};
    for (int32_t it = 0; it < wg_tiles; ++it) {
      const int32_t t = tile0 + it;
      const int stage = t % kStages;
      wgmma::MbarrierWait(&full[stage], (t / kStages) & 1);
      const bool prefix = it < prefix_tiles;
      const int32_t key0 = (prefix ? it : it - prefix_tiles) * kN;
      WsConsumeTile<D, kBf16>(o, m, l, q_addr, k_addr0 + stage * kTileBytes,
                              v_addr0 + stage * kTileBytes, prefix, key0, lp,
                              warp_row0, lane, p);
      if (lane == 0) wgmma::MbarrierArrive(&empty[stage]);
    }
    // Tiles past this warpgroup's diagonal: release them in order (waiting
    // for `full` first keeps each arrival in the phase it belongs to).
    for (int32_t it = wg_tiles; it < num_tiles; ++it) {
      const int32_t t = tile0 + it;
      const int stage = t % kStages;
      wgmma::MbarrierWait(&full[stage], (t / kStages) & 1);
      if (lane == 0) wgmma::MbarrierArrive(&empty[stage]);
    }
    // Every tile of the item (and so its Q) has arrived and this warp's
    // wgmma reads of Q are complete: the producer may refill the buffer.
    if (lane == 0) wgmma::MbarrierArrive(&q_empty[qb]);
    WsStoreRows<D, kBf16>(o, m, l, warp_row0, le, qo_start, w.h, lane, p);
    tile0 += num_tiles;
    ++n;
  }
#else
  __trap();  // never launched: the host checks the binary's architecture
#endif  // RADIXKV_HAS_WGMMA
}

#endif  // RADIXKV_GPU_NVIDIA

// ---------------------------------------------------- AMD MFMA (gfx90a/94x)
#if defined(RADIXKV_GPU_AMD)

// Keys per K/V tile and wavefronts per block of ExtendMfmaKernel. LDS per
// block: K [kN][D + 4] + V^T [D][kN + 4] + 2 kN slot bases, ~35 KB for
// D = 128 (kN 64) and D = 256 (kN 32) of gfx90a's 64 KB.
template <int D>
inline constexpr int kMfmaKeys = D <= 128 ? 64 : 32;
inline constexpr int kMfmaWaves = 4;
inline constexpr int kMfmaBlockM = 16 * kMfmaWaves;  // query rows per block

template <int D>
constexpr size_t ExtendMfmaTileBytes() {
  constexpr int kN = kMfmaKeys<D>;
  return sizeof(uint16_t) * (static_cast<size_t>(kN) * mfma::KTileStride<D>() +
                             static_cast<size_t>(D) * mfma::VtTileStride<kN>());
}

template <int D>
constexpr size_t ExtendMfmaSmemBytes() {
  return ExtendMfmaTileBytes<D>() + 2 * kMfmaKeys<D> * sizeof(int64_t);
}

// MFMA extend kernel: 4 wavefronts x 16 query rows (BLOCK_M 64) of one query
// head share each K/V tile; per tile: slot bases (one thread per key, the
// shared address function), K copied row-major and V transposed into LDS
// with 16-byte global loads (vLLM's transposed V: 8 strided loads), then
// each wavefront runs mfma::WaveAttention (S^T = K Q^T, mask, online softmax
// in base 2, O^T += V^T P^T). Stages, early exit and heavy-first order as in
// ExtendMmaKernel. Single-buffered (no async copy on gfx9): a first version
// whose index math is checked on the CPU (attention_mfma_test.cc) and which
// has never run on AMD hardware (docs/kernel-notes.md "AMD / Hygon path").
template <int D, bool kBf16>
__global__ void __launch_bounds__(kMfmaWaves * 64)
    ExtendMfmaKernel(ExtendParams p) {
#if RADIXKV_HAS_MFMA
  constexpr int kThreads = kMfmaWaves * kWarpSize;
  constexpr int kN = kMfmaKeys<D>;
  using Wave = mfma::WaveAttention<D, kN, kBf16, mfma::DeviceOps>;
  constexpr int kChunksPerRow = D / 8;
  constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static_assert(kThreads % kChunksPerRow == 0, "chunk assignment");
  static_assert(ExtendMfmaTileBytes<D>() % sizeof(int64_t) == 0,
                "slot bases must be 8-byte aligned");
  const int32_t b = blockIdx.z;
  const int32_t h = blockIdx.y;
  const int32_t m_block = p.num_m_blocks - 1 - blockIdx.x;  // heavy first
  const int32_t qo_start = p.qo_indptr[b];
  const int32_t le = p.qo_indptr[b + 1] - qo_start;
  const int32_t m0 = m_block * kMfmaBlockM;
  if (m0 >= le) return;
  const int64_t kv_start = p.kv_indptr[b];
  const int32_t lp = static_cast<int32_t>(p.kv_indptr[b + 1] - kv_start);
  const int32_t kvh = h / p.group;
  const int32_t hkv = p.g.num_kv_heads;
  const int tid = threadIdx.x;
  const int lane = LaneId();
  const int wave = tid / kWarpSize;

  extern __shared__ float4 smem_f4[];
  uint16_t* k_tile = reinterpret_cast<uint16_t*>(smem_f4);
  uint16_t* vt_tile = k_tile + kN * mfma::KTileStride<D>();
  int64_t* bases = reinterpret_cast<int64_t*>(
      reinterpret_cast<char*>(smem_f4) + ExtendMfmaTileBytes<D>());  // [2][kN]

  const int my_chunk = tid % kChunksPerRow;
  const int my_row0 = tid / kChunksPerRow;
  const int64_t k_delta =
      p.g.KOffset(0, kvh, my_chunk * 8) - p.g.KOffset(0, kvh, 0);
  const int64_t v_delta =
      p.g.VOffset(0, kvh, my_chunk * 8) - p.g.VOffset(0, kvh, 0);
  const bool v_strided = p.g.layout == KvLayout::kVllm;
  const int64_t v_stride = p.g.VDimStride();

  const int32_t prefix_tiles = (lp + kN - 1) / kN;
  const int32_t extend_end = le < m0 + kMfmaBlockM ? le : m0 + kMfmaBlockM;
  const int32_t extend_tiles = (extend_end + kN - 1) / kN;
  const int32_t num_tiles = prefix_tiles + extend_tiles;

  const int32_t wave_row0 = m0 + wave * 16;  // first extend row of the wave
  const int32_t my_row = wave_row0 + mfma::LaneRow(lane);
  Wave att;
  att.Init(my_row < le ? p.q + (static_cast<int64_t>(qo_start + my_row) *
                                    p.num_q_heads +
                                h) *
                                   D
                       : nullptr);

  for (int32_t it = 0; it < num_tiles; ++it) {
    const bool prefix = it < prefix_tiles;
    const int32_t key0 = (prefix ? it : it - prefix_tiles) * kN;
    if (tid < kN) {
      const int32_t key = key0 + tid;
      int64_t kb = -1, vb = -1;
      if (prefix && key < lp) {
        const int64_t slot = p.kv_indices[kv_start + key];
        kb = p.g.KOffset(slot, kvh, 0);
        vb = p.g.VOffset(slot, kvh, 0);
      } else if (!prefix && key < le) {
        kb = vb = (static_cast<int64_t>(qo_start + key) * hkv + kvh) * D;
      }
      bases[tid] = kb;
      bases[kN + tid] = vb;
    }
    __syncthreads();
    const uint16_t* ksrc = prefix ? p.k_cache : p.k_ext;
    const uint16_t* vsrc = prefix ? p.v_cache : p.v_ext;
    const int64_t kd = prefix ? k_delta : my_chunk * 8;
    const int64_t vd = prefix ? v_delta : my_chunk * 8;
    for (int r = my_row0; r < kN; r += kRowsPerPass) {
      const int64_t kb = bases[r];
      const int64_t vb = bases[kN + r];
      uint4 kw = make_uint4(0, 0, 0, 0);
      if (kb >= 0) kw = *reinterpret_cast<const uint4*>(ksrc + kb + kd);
      uint2* kdst = reinterpret_cast<uint2*>(
          k_tile + mfma::KTileOffset<D>(r, my_chunk * 8));
      kdst[0] = make_uint2(kw.x, kw.y);
      kdst[1] = make_uint2(kw.z, kw.w);
      uint16_t vv[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (vb >= 0) {
        if (prefix && v_strided) {
#pragma unroll
          for (int e = 0; e < 8; ++e) vv[e] = vsrc[vb + vd + e * v_stride];
        } else {
          const uint4 vw = *reinterpret_cast<const uint4*>(vsrc + vb + vd);
          const uint32_t w[4] = {vw.x, vw.y, vw.z, vw.w};
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            vv[e] = static_cast<uint16_t>(w[e / 2] >> (16 * (e % 2)));
          }
        }
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        vt_tile[mfma::VtTileOffset<kN>(r, my_chunk * 8 + e)] = vv[e];
      }
    }
    __syncthreads();
    att.Tile(k_tile, vt_tile, prefix, key0, lp, wave_row0, p.scale_log2);
    __syncthreads();  // the tiles and bases are rewritten next iteration
  }
  att.Finish();

  if (my_row >= le) return;
  const int64_t orow =
      static_cast<int64_t>(qo_start + my_row) * p.num_q_heads + h;
  att.Store(p.out + orow * D, p.lse != nullptr ? p.lse + orow : nullptr);
#else
  // gfx906 and other targets without MFMA: never launched (the launcher
  // checks the device's gcnArchName first).
  __builtin_trap();
#endif  // RADIXKV_HAS_MFMA
}

#endif  // RADIXKV_GPU_AMD

template <typename Kernel>
int SetSmemLimit(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return 0;
  return static_cast<int>(hipFuncSetAttribute(
      reinterpret_cast<const void*>(kernel),
      hipFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

#if defined(RADIXKV_GPU_NVIDIA)
// Warps per extend block on the tensor-core path: 8 by default, 4 with
// RADIXKV_EXTEND_WARPS=4 (benchmarking; docs/kernel-notes.md).
int ExtendWarps() {
  static const int warps = [] {
    const char* env = std::getenv("RADIXKV_EXTEND_WARPS");
    return env != nullptr && std::atoi(env) == 4 ? 4 : 8;
  }();
  return warps;
}

template <int D, int kWarps, bool kBf16>
int LaunchExtendMma(ExtendParams p, const internal::ExtendLaunch& a,
                    hipStream_t stream) {
  constexpr int kBlockM = kBlockRows<kWarps>;
  p.num_m_blocks = (a.max_extend_len + kBlockM - 1) / kBlockM;
  const size_t smem = ExtendSmemBytes<D, kWarps>();
  auto kernel = ExtendMmaKernel<D, kWarps, kBf16>;
  if (int err = SetSmemLimit(kernel, smem)) return err;
  hipLaunchKernelGGL(kernel, dim3(p.num_m_blocks, a.num_q_heads, a.batch_size),
                     dim3(kWarps * 32), smem, stream, p);
  return static_cast<int>(hipGetLastError());
}

// Tensor-core extend kernel family: "wgmma" (Hopper, default where usable)
// or "mma" (mma.sync); RADIXKV_EXTEND_KERNEL=mma forces mma.sync (the device
// test runs both; docs/kernel-notes.md).
bool ExtendWgmmaAllowed() {
  static const bool allowed = [] {
    const char* env = std::getenv("RADIXKV_EXTEND_KERNEL");
    return env == nullptr || std::string_view(env) != "mma";
  }();
  return allowed;
}

// True if ExtendWgmmaKernel has a binary for compute capability >= 9.0 in
// this build (sm_90a): the only binaries with a real body.
template <typename Kernel>
bool WgmmaBinaryPresent(Kernel kernel) {
  cudaFuncAttributes attr;
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) error
    return false;
  }
  return attr.binaryVersion >= 90;
}

// wgmma kernel variant. Default: the warp-specialized kernel
// (ExtendWgmmaWsKernel, lean producer). RADIXKV_WGMMA_VARIANT=ws-v1 selects
// the first warp-specialized producer, `lean-qsync` the lean producer with Q
// loaded by all threads before the split, `lean-overlap` the default with
// the consumers' softmax / P V overlap; `items` the work-item kernel
// (ExtendWgmmaItemsKernel) with one block per item, `persistent` the same
// with one block per SM; 2wg|2wg-overlap|3wg select a
// block-synchronous kernel (ExtendWgmmaKernel: 2 or 3 warpgroups, with or
// without the P V / softmax overlap) for benchmarking (docs/kernel-notes.md).
enum class WgmmaVariant {
  kWarpSpecialized,
  kWarpSpecializedV1,
  kLeanQSync,
  kLeanOverlap,
  kItems,
  kPersistent,
  kSync2,
  kSync2Overlap,
  kSync3
};

// Read at every launch (one getenv, ~0.1 us) so that the benchmark can switch
// variants within one process for interleaved A/B runs.
WgmmaVariant ChosenWgmmaVariant() {
  const char* env = std::getenv("RADIXKV_WGMMA_VARIANT");
  const std::string_view v = env == nullptr ? "" : env;
  if (v == "ws-v1") return WgmmaVariant::kWarpSpecializedV1;
  if (v == "lean-qsync") return WgmmaVariant::kLeanQSync;
  if (v == "lean-overlap") return WgmmaVariant::kLeanOverlap;
  if (v == "items") return WgmmaVariant::kItems;
  if (v == "persistent") return WgmmaVariant::kPersistent;
  if (v == "2wg") return WgmmaVariant::kSync2;
  if (v == "2wg-overlap") return WgmmaVariant::kSync2Overlap;
  if (v == "3wg") return WgmmaVariant::kSync3;
  return WgmmaVariant::kWarpSpecialized;
}

template <int D, int kWG, bool kOverlap, bool kBf16>
int LaunchExtendWgmmaVariant(ExtendParams p, const internal::ExtendLaunch& a,
                             hipStream_t stream) {
  constexpr int kBlockM = 64 * kWG;
  auto kernel = ExtendWgmmaKernel<D, kWG, kOverlap, kBf16>;
  static const bool present = WgmmaBinaryPresent(kernel);
  if (!present) return -1;
  p.num_m_blocks = (a.max_extend_len + kBlockM - 1) / kBlockM;
  // V is MN-major: LBO = next 64-dim column block, SBO = next 8 keys.
  p.v_desc_lbo = kWgmmaKeys * 128;
  p.v_desc_sbo = 1024;
  if (const char* env = std::getenv("RADIXKV_WGMMA_VDESC_SWAP");
      env != nullptr && std::atoi(env) == 1) {
    p.v_desc_lbo = 1024;  // deliberately wrong: shows the test catches it
    p.v_desc_sbo = kWgmmaKeys * 128;
  }
  const size_t smem = ExtendWgmmaSmemBytes<D, kWG, kOverlap>();
  if (int err = SetSmemLimit(kernel, smem)) return err;
  hipLaunchKernelGGL(kernel, dim3(p.num_m_blocks, a.num_q_heads, a.batch_size),
                     dim3(128 * kWG), smem, stream, p);
  return static_cast<int>(hipGetLastError());
}

template <int D, bool kBf16, bool kLeanProducer, bool kConsumerQ,
          bool kOverlap = false>
int LaunchExtendWgmmaWs(ExtendParams p, const internal::ExtendLaunch& a,
                        hipStream_t stream) {
  auto kernel =
      ExtendWgmmaWsKernel<D, kBf16, kLeanProducer, kConsumerQ, kOverlap>;
  static const bool present = WgmmaBinaryPresent(kernel);
  if (!present) return -1;
  p.num_m_blocks = (a.max_extend_len + 127) / 128;
  p.v_desc_lbo = kWgmmaKeys * 128;
  p.v_desc_sbo = 1024;
  const size_t smem = ExtendWgmmaWsSmemBytes<D>();
  if (int err = SetSmemLimit(kernel, smem)) return err;
  hipLaunchKernelGGL(kernel, dim3(p.num_m_blocks, a.num_q_heads, a.batch_size),
                     dim3(384), smem, stream, p);
  return static_cast<int>(hipGetLastError());
}

// Work-item kernel: one block per SM (persistent) or one per item.
template <int D, bool kBf16>
int LaunchExtendWgmmaItems(ExtendParams p, const internal::ExtendLaunch& a,
                           hipStream_t stream, bool persistent) {
  auto kernel = ExtendWgmmaItemsKernel<D, kBf16>;
  static const bool present = WgmmaBinaryPresent(kernel);
  if (!present) return -1;
  p.num_m_blocks = (a.max_extend_len + 127) / 128;
  p.num_items = p.num_m_blocks * a.num_q_heads * a.batch_size;
  p.v_desc_lbo = kWgmmaKeys * 128;
  p.v_desc_sbo = 1024;
  int grid = p.num_items;
  if (persistent) {
    int device = 0;
    int sms = 0;
    if (hipGetDevice(&device) != hipSuccess ||
        hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount,
                              device) != hipSuccess) {
      return static_cast<int>(hipGetLastError());
    }
    // RADIXKV_EXTEND_PERSISTENT_BLOCKS=N caps the grid further (testing:
    // many items per block).
    if (const char* env = std::getenv("RADIXKV_EXTEND_PERSISTENT_BLOCKS");
        env != nullptr && std::atoi(env) > 0) {
      sms = std::min(sms, std::atoi(env));
    }
    grid = std::min(grid, sms);
    p.heavy_first_order = 1;
  }
  const size_t smem = ExtendWgmmaItemsSmemBytes<D>();
  if (int err = SetSmemLimit(kernel, smem)) return err;
  hipLaunchKernelGGL(kernel, dim3(grid), dim3(384), smem, stream, p);
  return static_cast<int>(hipGetLastError());
}

// Returns -1 (nothing launched) if the build has no sm_90a binary.
template <int D, bool kBf16>
int LaunchExtendWgmma(ExtendParams p, const internal::ExtendLaunch& a,
                      hipStream_t stream) {
  switch (ChosenWgmmaVariant()) {
    case WgmmaVariant::kSync2Overlap:
      return LaunchExtendWgmmaVariant<D, 2, true, kBf16>(p, a, stream);
    case WgmmaVariant::kSync2:
      if constexpr (D == 128) {
        return LaunchExtendWgmmaVariant<D, 2, false, kBf16>(p, a, stream);
      }
      break;
    case WgmmaVariant::kSync3:
      if constexpr (D == 128) {
        return LaunchExtendWgmmaVariant<D, 3, false, kBf16>(p, a, stream);
      }
      break;
    case WgmmaVariant::kWarpSpecializedV1:
      return LaunchExtendWgmmaWs<D, kBf16, false, false>(p, a, stream);
    case WgmmaVariant::kLeanQSync:
      return LaunchExtendWgmmaWs<D, kBf16, true, false>(p, a, stream);
    case WgmmaVariant::kLeanOverlap:
      return LaunchExtendWgmmaWs<D, kBf16, true, true, true>(p, a, stream);
    case WgmmaVariant::kItems:
      return LaunchExtendWgmmaItems<D, kBf16>(p, a, stream, false);
    case WgmmaVariant::kPersistent:
      return LaunchExtendWgmmaItems<D, kBf16>(p, a, stream, true);
    case WgmmaVariant::kWarpSpecialized:
      break;
  }
  return LaunchExtendWgmmaWs<D, kBf16, true, true>(p, a, stream);
}
#endif

#if defined(RADIXKV_GPU_AMD)
// RADIXKV_EXTEND_KERNEL=portable forces the portable SIMT kernel on AMD
// (A/B and fallback; read once per process).
bool ExtendMfmaAllowed() {
  static const bool allowed = [] {
    const char* env = std::getenv("RADIXKV_EXTEND_KERNEL");
    return env == nullptr || std::string_view(env) != "portable";
  }();
  return allowed;
}

// True if the current device has the MFMA instructions ExtendMfmaKernel
// uses (gcnArchName gfx90a / gfx94x; mfma::GcnArchHasMfma). Cached per
// device id; a failing query counts as "no MFMA" (portable kernel).
bool DeviceHasMfma() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int8_t> known[kMaxDevices] = {};  // 0 ?, 1 yes, 2 no
  int device = 0;
  if (hipGetDevice(&device) != hipSuccess || device < 0 ||
      device >= kMaxDevices) {
    (void)hipGetLastError();
    return false;
  }
  int8_t v = known[device].load(std::memory_order_relaxed);
  if (v == 0) {
    hipDeviceProp_t prop;
    const bool ok = hipGetDeviceProperties(&prop, device) == hipSuccess;
    if (!ok) (void)hipGetLastError();
    v = ok && mfma::GcnArchHasMfma(prop.gcnArchName) ? 1 : 2;
    known[device].store(v, std::memory_order_relaxed);
  }
  return v == 1;
}

template <int D, bool kBf16>
int LaunchExtendMfma(ExtendParams p, const internal::ExtendLaunch& a,
                     hipStream_t stream) {
  p.num_m_blocks = (a.max_extend_len + kMfmaBlockM - 1) / kMfmaBlockM;
  const size_t smem = ExtendMfmaSmemBytes<D>();
  auto kernel = ExtendMfmaKernel<D, kBf16>;
  if (int err = SetSmemLimit(kernel, smem)) return err;
  hipLaunchKernelGGL(kernel, dim3(p.num_m_blocks, a.num_q_heads, a.batch_size),
                     dim3(kMfmaWaves * kWarpSize), smem, stream, p);
  return static_cast<int>(hipGetLastError());
}
#endif  // RADIXKV_GPU_AMD

template <int D, bool kBf16>
int LaunchExtendTyped(ExtendParams p, const internal::ExtendLaunch& a,
                      hipStream_t stream) {
#if defined(RADIXKV_GPU_NVIDIA)
  if (a.path == internal::KernelPath::kMatrixCore) {
    if constexpr (D == 64 || D == 128) {
      if (ExtendWgmmaAllowed()) {
        const int err = LaunchExtendWgmma<D, kBf16>(p, a, stream);
        if (err != -1) return err;
      }
    }
    // 8 warps (BLOCK_M 128) for head_dim <= 128 unless RADIXKV_EXTEND_WARPS=4;
    // head_dim 256 always uses 4 (shared memory).
    if constexpr (D <= 128) {
      if (ExtendWarps() == 8) return LaunchExtendMma<D, 8, kBf16>(p, a, stream);
    }
    return LaunchExtendMma<D, 4, kBf16>(p, a, stream);
  }
#endif
#if defined(RADIXKV_GPU_AMD)
  // MFMA where the device has it (gfx90a / gfx94x), else portable.
  if (a.path == internal::KernelPath::kMatrixCore && ExtendMfmaAllowed() &&
      DeviceHasMfma()) {
    return LaunchExtendMfma<D, kBf16>(p, a, stream);
  }
#endif
  // kWarpSize is exact on the host for the targets this project builds (32
  // on NVIDIA, 64 for hipcc's gfx9 targets; see hip_compat.h).
  const int rows_per_block = kThreads / kWarpSize;
  p.num_m_blocks = (a.max_extend_len + rows_per_block - 1) / rows_per_block;
  auto kernel = ExtendPortableKernel<D, kBf16>;
  hipLaunchKernelGGL(kernel, dim3(p.num_m_blocks, a.num_q_heads, a.batch_size),
                     dim3(kThreads), 0, stream, p);
  return static_cast<int>(hipGetLastError());
}

}  // namespace

namespace internal {

int LaunchExtend(const ExtendLaunch& a) {
  if (a.batch_size == 0 || a.max_extend_len == 0) return 0;
  ExtendParams p;
  p.g = a.geometry;
  p.k_cache = static_cast<const uint16_t*>(a.k_cache);
  p.v_cache = static_cast<const uint16_t*>(a.v_cache);
  p.q = static_cast<const uint16_t*>(a.q);
  p.k_ext = static_cast<const uint16_t*>(a.k_extend);
  p.v_ext = static_cast<const uint16_t*>(a.v_extend);
  p.qo_indptr = a.qo_indptr;
  p.kv_indptr = a.kv_indptr;
  p.kv_indices = a.kv_indices;
  p.num_q_heads = a.num_q_heads;
  p.group = a.num_q_heads / a.geometry.num_kv_heads;
  p.scale_log2 = a.scale_log2;
  p.out = static_cast<uint16_t*>(a.out);
  p.lse = a.lse;
  p.num_m_blocks = 0;
  p.batch_size = a.batch_size;
  p.num_items = 0;
  p.heavy_first_order = 0;
  p.v_desc_lbo = 0;
  p.v_desc_sbo = 0;
  hipStream_t stream = static_cast<hipStream_t>(a.stream);
  const bool bf16 = a.dtype == DType::kBF16;
  switch (a.geometry.head_dim) {
    case 64:
      return bf16 ? LaunchExtendTyped<64, true>(p, a, stream)
                  : LaunchExtendTyped<64, false>(p, a, stream);
    case 128:
      return bf16 ? LaunchExtendTyped<128, true>(p, a, stream)
                  : LaunchExtendTyped<128, false>(p, a, stream);
    case 256:
      return bf16 ? LaunchExtendTyped<256, true>(p, a, stream)
                  : LaunchExtendTyped<256, false>(p, a, stream);
    default:
      return static_cast<int>(hipErrorInvalidValue);
  }
}

}  // namespace internal
}  // namespace radixkv::worker::gpu
