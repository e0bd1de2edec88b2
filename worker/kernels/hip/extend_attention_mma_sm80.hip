// Extend attention on NVIDIA tensor cores with mma.sync m16n8k16 (sm_80 and
// newer; attention_mma.h): the path for head_dim 256, for builds without an
// sm_90a binary and for RADIXKV_EXTEND_KERNEL=mma (on sm_90a, head_dim 64 /
// 128 otherwise take the wgmma kernel). kWarps warps x 16 query rows per
// block (BLOCK_M 128 with 8 warps) share each K/V tile; tiles are
// double-buffered with cp.async (zero-fill past the end); per-key addresses
// are computed once per tile by one thread per key (KOffset(slot, head, 0))
// plus a per-thread loop-invariant dim delta. Stages, causal bounds and
// heavy-first block order as described in extend_attention.hip.
#include "worker/kernels/hip/hip_compat.h"
// clang-format off
#include <cstdlib>

#include "worker/kernels/attention_combine.h"
#include "worker/kernels/hip/attention_mma.h"
#include "worker/kernels/hip/extend_attention.h"
#include "worker/kv_cache_layout.h"
// clang-format on

#if !defined(RADIXKV_GPU_NVIDIA)
#error "extend_attention_mma_sm80.hip is NVIDIA-only (nvcc)"
#endif

namespace radixkv::worker::gpu::extend {
namespace {

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

  // Sliding window: the block's first row (position lp + m0) sees keys
  // from position lo on, so tiles wholly before lo (prefix pages included)
  // are never loaded; `first_*` count tiles from the start of each stage.
  const bool windowed = p.window_left >= 0;
  const int32_t lo = windowed ? lp + m0 - p.window_left : 0;
  const int32_t all_prefix = (lp + kN - 1) / kN;
  const int32_t first_prefix = lo <= 0 ? 0 : lo >= lp ? all_prefix : lo / kN;
  const int32_t first_extend = lo <= lp ? 0 : (lo - lp) / kN;
  const int32_t prefix_tiles = all_prefix - first_prefix;
  const int32_t extend_end = le < m0 + kBlockM ? le : m0 + kBlockM;
  const int32_t extend_tiles = (extend_end + kN - 1) / kN - first_extend;
  const int32_t num_tiles = prefix_tiles + extend_tiles;

  // Prefix slot of this thread's key in tile `it` (-1 if none); the load for
  // tile it + 1 is issued one tile ahead so its latency overlaps compute.
  auto load_slot = [&](int32_t it) -> int64_t {
    const int32_t key = (first_prefix + it) * kN + tid;
    return (tid < kN && it < prefix_tiles && key < lp)
               ? p.kv_indices[kv_start + key]
               : int64_t{-1};
  };
  int64_t next_slot = load_slot(0);
  auto issue = [&](int32_t it) {
    const int stage = it & 1;
    const bool prefix = it < prefix_tiles;
    const int32_t key0 = prefix ? (first_prefix + it) * kN
                                : (first_extend + it - prefix_tiles) * kN;
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
    const int32_t key0 = prefix ? (first_prefix + it) * kN
                                : (first_extend + it - prefix_tiles) * kN;
    // Extend tiles entirely above this warp's rows contribute nothing.
    if (!prefix && key0 > warp_row0 + 15) continue;
    // Absolute position of the tile's first key; the window edges of this
    // warp's rows are lp + row - window_left.
    const int32_t pos0 = prefix ? key0 : lp + key0;
    const int32_t edge0 = lp + warp_row0 - p.window_left;
    // Tiles wholly left of every row's window contribute nothing.
    if (windowed && pos0 + kN - 1 < edge0) continue;
    float s[Warp::kSTiles][4];
    att.Scores(s, k_tiles + stage * kN * D);
    const bool cut = windowed && pos0 < edge0 + 15;
    const bool need_mask =
        cut || (prefix ? key0 + kN > lp : key0 + kN - 1 > warp_row0);
    if (need_mask) {
#pragma unroll
      for (int j = 0; j < Warp::kSTiles; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int32_t key = key0 + j * 8 + 2 * t4 + (i & 1);
          const int32_t row = warp_row0 + g + 8 * (i >> 1);
          const bool causal = prefix ? key < lp : key <= row;
          const bool in_window =
              !windowed || (prefix ? key : lp + key) >= lp + row - p.window_left;
          s[j][i] = causal && in_window ? s[j][i] * p.scale_log2 : -INFINITY;
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
      *reinterpret_cast<uint32_t*>(p.out + orow * D + n * 8 + 2 * t4) =
          PackElemPair<kBf16>(att.o[n][2 * r] * inv, att.o[n][2 * r + 1] * inv);
    }
    if (t4 == 0 && p.lse != nullptr)
      p.lse[orow] = CombineLse(att.m[r], att.l[r]);
  }
}

// Warps per block for head_dim <= 128: 8 by default, 4 with
// RADIXKV_EXTEND_WARPS=4 (benchmarking; docs/kernel-notes.md). Read once.
int ExtendWarps() {
  static const int warps = [] {
    const char* env = std::getenv("RADIXKV_EXTEND_WARPS");
    return env != nullptr && std::atoi(env) == 4 ? 4 : 8;
  }();
  return warps;
}

template <int D, int kWarps, bool kBf16>
int LaunchExtendMma(ExtendParams p, const internal::ExtendLaunch& a) {
  constexpr int kBlockM = kBlockRows<kWarps>;
  p.num_m_blocks = (a.max_extend_len + kBlockM - 1) / kBlockM;
  const size_t smem = ExtendSmemBytes<D, kWarps>();
  auto kernel = ExtendMmaKernel<D, kWarps, kBf16>;
  if (int err = SetSmemLimit(kernel, smem)) return err;
  hipLaunchKernelGGL(kernel, dim3(p.num_m_blocks, a.num_q_heads, a.batch_size),
                     dim3(kWarps * 32), smem,
                     static_cast<hipStream_t>(a.stream), p);
  return static_cast<int>(hipGetLastError());
}

}  // namespace

int LaunchMma(ExtendParams p, const internal::ExtendLaunch& a) {
  return WithHeadDimAndDtype(a, [&](auto d, auto bf16) {
    constexpr int D = decltype(d)::value;
    constexpr bool kBf16 = decltype(bf16)::value;
    // head_dim 256 always uses 4 warps (shared memory).
    if constexpr (D <= 128) {
      if (ExtendWarps() == 8) return LaunchExtendMma<D, 8, kBf16>(p, a);
    }
    return LaunchExtendMma<D, 4, kBf16>(p, a);
  });
}

}  // namespace radixkv::worker::gpu::extend
