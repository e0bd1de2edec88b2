// Paged decode attention v1 / v2 (split-KV) and the combine kernel.
//
// vLLM's PagedAttention v1/v2 (csrc/attention/attention_kernels.cu: split-KV
// partitions merged by a combine with online-softmax rescaling; exp2 with
// log2(e) folded into the scale), with the KV head on the grid: each block
// loads a K/V tile once and serves every query head of its GQA group.
//
// Grid: x = kv head (x head chunk of 16 query heads when the GQA group is
// larger than 16), y = sequence, z = partition (v2; 1 for v1). A block owns
// the tokens [z * partition_size, min(len, (z + 1) * partition_size)) of its
// sequence (v1: the whole context) and produces for each query head of the
// group either the final output (v1) or the partition's (m, l, O) triple
// (v2), which CombineKernel merges with worker/kernels/attention_combine.h
// (or, opt-in with RADIXKV_DECODE_FUSED_COMBINE=1, the last partition block
// of each (sequence, kv head) merges them: CombineIfLastBlock).
//
// Two implementations of the partition kernel:
//   * DecodeMmaKernel (NVIDIA): 4 warps, each streams 16-key K/V tiles of the
//     partition through its own cp.async double buffer in shared memory and
//     runs Q K^T and P V on tensor cores (attention_mma.h) with the query
//     heads of the group as the 16 rows of the MMA tile; the warps' partial
//     results are merged in shared memory at the end.
//   * DecodePortableKernel (AMD, and a cross-check on NVIDIA): SIMT, warp
//     width from hip_compat.h; each warp walks tokens, the lanes split
//     head_dim, and the compile-time GQA group size kGroup (1, 2, 4, 8, 16;
//     0 = generic, up to 16 at run time) sizes the per-head register arrays.
//
// Addressing: every K/V address is KvCacheGeometry::KOffset/VOffset of the
// token's slot (worker/kv_cache_layout.h). The offset is split into a
// per-token base KOffset(slot, head, 0), computed once per token, plus a
// loop-invariant per-lane dim delta KOffset(0, head, d) - KOffset(0, head, 0)
// (the layouts are linear in (slot part, dim part); docs/kernel-notes.md
// "Shared building blocks").
#include "worker/kernels/hip/hip_compat.h"
// clang-format off
#include <cstdlib>
#include <string_view>

#include "worker/kernels/attention_combine.h"
#include "worker/kernels/hip/attention_mma.h"
#include "worker/kernels/hip/gpu_kernel_launch.h"
#include "worker/kv_cache_layout.h"
// clang-format on

namespace radixkv::worker::gpu {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxRows = 16;  // query heads per block (one MMA M tile)

struct DecodeParams {
  KvCacheGeometry g;
  const uint16_t* k_cache;
  const uint16_t* v_cache;
  const uint16_t* q;
  const int32_t* kv_indptr;
  const int64_t* kv_indices;
  int32_t num_q_heads;
  int32_t group;        // query heads per kv head
  int32_t head_chunks;  // ceil(group / 16)
  float scale_log2;
  int32_t partition_size;  // 0 = v1
  int32_t num_partitions;
  int32_t window_left;  // -1 = whole context; else the last w + 1 tokens
  uint16_t* out;
  float* lse;
  float* partial_max;
  float* partial_sum;
  float* partial_out;
  int32_t* counters;  // v2 fused combine: arrival counters; nullptr = the
                      // separate CombineKernel merges the partitions
};

// First context token a sequence of seq_len tokens reads: 0, or with a
// sliding window the first of its last window_left + 1 tokens (the query is
// the last token). Partitions split [VisibleBegin, seq_len), so pages wholly
// before the window are never read and get no partition.
__device__ __forceinline__ int32_t VisibleBegin(const DecodeParams& p,
                                                int32_t seq_len) {
  const int32_t first = seq_len - 1 - p.window_left;
  return p.window_left >= 0 && first > 0 ? first : 0;
}

// Partitions of a sequence of seq_len tokens (v2).
__device__ __forceinline__ int32_t NumPartitions(const DecodeParams& p,
                                                 int32_t seq_len) {
  return (seq_len - VisibleBegin(p, seq_len) + p.partition_size - 1) /
         p.partition_size;
}

// Block-level coordinates shared by both partition kernels.
struct BlockWork {
  int32_t kv_head;
  int32_t first_head;  // first query head of this block
  int32_t rows;        // query heads of this block, 1..16
  int64_t seq_start;   // kv_indptr[b]
  int32_t seq_len;
  int32_t begin;  // token range [begin, end) of this block within the seq
  int32_t end;
  bool skip;  // v2 partition entirely past the sequence: nothing to write
};

__device__ __forceinline__ BlockWork GetBlockWork(const DecodeParams& p) {
  BlockWork w;
  const int32_t chunk = blockIdx.x % p.head_chunks;
  w.kv_head = blockIdx.x / p.head_chunks;
  w.first_head = w.kv_head * p.group + chunk * kMaxRows;
  const int32_t left = p.group - chunk * kMaxRows;
  w.rows = left < kMaxRows ? left : kMaxRows;
  const int32_t b = blockIdx.y;
  w.seq_start = p.kv_indptr[b];
  w.seq_len = static_cast<int32_t>(p.kv_indptr[b + 1] - w.seq_start);
  const int32_t first = VisibleBegin(p, w.seq_len);
  if (p.partition_size == 0) {
    w.begin = first;
    w.end = w.seq_len;
    w.skip = false;
  } else {
    w.begin = first + blockIdx.z * p.partition_size;
    const int32_t e = w.begin + p.partition_size;
    w.end = e < w.seq_len ? e : w.seq_len;
    w.skip = w.begin >= w.seq_len;  // combine reads NumPartitions entries
  }
  return w;
}

// Merges kWarps per-warp partial results of `rows` query heads held in shared
// memory (m, l in the base-2 domain; o_norm = O / l, 0 when l = 0) with the
// online-softmax rescaling (attention_combine.h) and writes the block's result:
// the final output + LSE (v1) or the partition's (m, l, O) triple (v2).
template <int D, int kWarps, bool kBf16>
__device__ void MergeWarpsAndStore(const DecodeParams& p, const BlockWork& w,
                                   const float* m_s, const float* l_s,
                                   const float* o_s) {
  const int32_t b = blockIdx.y;
  for (int idx = threadIdx.x; idx < w.rows * D; idx += blockDim.x) {
    const int row = idx / D;
    const int d = idx - row * D;
    const float M = CombineMax(m_s + row, kWarps, kMaxRows);
    const float L = CombineExpSum(m_s + row, l_s + row, kWarps, M, kMaxRows);
    float acc = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) {
      const float wt = CombineWeight(m_s[wi * kMaxRows + row],
                                     l_s[wi * kMaxRows + row], M, L);
      acc += wt * o_s[(wi * kMaxRows + row) * D + d];
    }
    const int64_t bh =
        static_cast<int64_t>(b) * p.num_q_heads + w.first_head + row;
    if (p.partition_size == 0) {
      p.out[bh * D + d] = FloatToElem<kBf16>(acc);
      if (d == 0 && p.lse != nullptr) p.lse[bh] = CombineLse(M, L);
    } else {
      const int64_t bhp = bh * p.num_partitions + blockIdx.z;
      p.partial_out[bhp * D + d] = acc;
      if (d == 0) {
        p.partial_max[bhp] = M;
        p.partial_sum[bhp] = L;
      }
    }
  }
}

// Fused combine (v2): out = 0 and lse = -inf for the rows of a 0-length
// sequence (no partition block of it does any work; partition 0 writes this).
template <int D, bool kBf16>
__device__ void StoreEmptyRows(const DecodeParams& p, const BlockWork& w) {
  const int64_t bh0 =
      static_cast<int64_t>(blockIdx.y) * p.num_q_heads + w.first_head;
  for (int idx = threadIdx.x; idx < w.rows * D; idx += blockDim.x) {
    p.out[bh0 * D + idx] = FloatToElem<kBf16>(0.0f);
    if (idx % D == 0 && p.lse != nullptr) p.lse[bh0 + idx / D] = -INFINITY;
  }
}

// Fused combine (v2), called by every non-empty partition block after it
// stored its (m, l, O) partials: the CUDA threadFenceReduction "last block"
// pattern. Each thread fences its partial stores, then one thread counts the
// block in on its (sequence, kv head, head chunk) counter; the block that
// arrives last (ceil(len / P) arrivals) resets the counter to 0 for the next
// launch and merges the partitions with the online-softmax rescaling
// (attention_combine.h): one warp per query head, lanes over head_dim, the
// (m, l) scans spread over the lanes.
template <int D, bool kBf16>
__device__ void CombineIfLastBlock(const DecodeParams& p) {
  __shared__ int is_last;
  __threadfence();  // this thread's partials are visible device-wide
  __syncthreads();  // ... for every thread of the block
  // Recomputed rather than kept live through the main loop (registers).
  const BlockWork w = GetBlockWork(p);
  const int32_t np = NumPartitions(p, w.seq_len);
  if (threadIdx.x == 0) {
    int32_t* counter = p.counters + blockIdx.y * gridDim.x + blockIdx.x;
    const int32_t arrived = atomicAdd(counter, 1) + 1;
    is_last = arrived == np;
    if (arrived == np) atomicExch(counter, 0);  // self-cleaning
  }
  __syncthreads();
  if (!is_last) return;
  __threadfence();  // order the partial loads after the counter

  static_assert(D % kWarpSize == 0, "head_dim must be a multiple of warp");
  constexpr int kPerLane = D / kWarpSize;
  constexpr int kWarps = kThreads / kWarpSize;
  const int lane = LaneId();
  const int warp = threadIdx.x / kWarpSize;
  for (int row = warp; row < w.rows; row += kWarps) {
    const int64_t bh =
        static_cast<int64_t>(blockIdx.y) * p.num_q_heads + w.first_head + row;
    const float* pm = p.partial_max + bh * p.num_partitions;
    const float* ps = p.partial_sum + bh * p.num_partitions;
    const float* po = p.partial_out + bh * p.num_partitions * D;
    float mx = -INFINITY;
    for (int32_t i = lane; i < np; i += kWarpSize) mx = fmaxf(mx, pm[i]);
    mx = WarpReduceMax(mx);
    float sum = 0.0f;
    for (int32_t i = lane; i < np; i += kWarpSize) {
      sum += CombineRescaledSum(pm[i], ps[i], mx);
    }
    const float L = WarpReduceSum(sum);
    float acc[kPerLane];
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) acc[e] = 0.0f;
#pragma unroll 4
    for (int32_t i = 0; i < np; ++i) {
      const float wt = CombineWeight(pm[i], ps[i], mx, L);
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) {
        acc[e] += wt * po[static_cast<int64_t>(i) * D + e * kWarpSize + lane];
      }
    }
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      p.out[bh * D + e * kWarpSize + lane] = FloatToElem<kBf16>(acc[e]);
    }
    if (lane == 0 && p.lse != nullptr) p.lse[bh] = CombineLse(mx, L);
  }
}

// Common exit of both partition kernels for a block with no tokens.
template <int D, bool kBf16>
__device__ __forceinline__ void SkippedBlock(const DecodeParams& p,
                                             const BlockWork& w) {
  if (p.counters != nullptr && w.seq_len == 0 && blockIdx.z == 0) {
    StoreEmptyRows<D, kBf16>(p, w);
  }
}

// ------------------------------------------------------------ portable SIMT

template <int D, int kGroup, bool kBf16>
__global__ void __launch_bounds__(kThreads)
    DecodePortableKernel(DecodeParams p) {
  static_assert(D % kWarpSize == 0, "head_dim must be a multiple of warp");
  constexpr int kPerLane = D / kWarpSize;
  constexpr int kWarps = kThreads / kWarpSize;
  constexpr int kRows = kGroup > 0 ? kGroup : kMaxRows;
  const BlockWork w = GetBlockWork(p);
  if (w.skip) {
    SkippedBlock<D, kBf16>(p, w);
    return;
  }
  const int rows = kGroup > 0 ? kGroup : w.rows;
  const int lane = LaneId();
  const int warp = threadIdx.x / kWarpSize;
  const int d0 = lane * kPerLane;

  float qf[kRows][kPerLane];
  float o[kRows][kPerLane];
  float m[kRows];
  float l[kRows];
  const int32_t b = blockIdx.y;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      o[r][e] = 0.0f;
      qf[r][e] = 0.0f;
      if (r < rows) {
        const int64_t qi =
            (static_cast<int64_t>(b) * p.num_q_heads + w.first_head + r) * D +
            d0 + e;
        qf[r][e] = ElemToFloat<kBf16>(p.q[qi]) * p.scale_log2;
      }
    }
  }
  // Loop-invariant dim deltas of this lane (k_delta / v_delta).
  int64_t k_delta[kPerLane];
  int64_t v_delta[kPerLane];
  const int64_t k0 = p.g.KOffset(0, w.kv_head, 0);
  const int64_t v0 = p.g.VOffset(0, w.kv_head, 0);
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    k_delta[e] = p.g.KOffset(0, w.kv_head, d0 + e) - k0;
    v_delta[e] = p.g.VOffset(0, w.kv_head, d0 + e) - v0;
  }

  for (int32_t t = w.begin + warp; t < w.end; t += kWarps) {
    const int64_t slot = p.kv_indices[w.seq_start + t];
    const int64_t kb = p.g.KOffset(slot, w.kv_head, 0);
    const int64_t vb = p.g.VOffset(slot, w.kv_head, 0);
    float kf[kPerLane];
    float vf[kPerLane];
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      kf[e] = ElemToFloat<kBf16>(p.k_cache[kb + k_delta[e]]);
      vf[e] = ElemToFloat<kBf16>(p.v_cache[vb + v_delta[e]]);
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      if (kGroup == 0 && r >= rows) continue;  // warp-uniform
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) dot += qf[r][e] * kf[e];
      const float s = WarpReduceSum(dot);
      const float m_new = fmaxf(m[r], s);
      const float alpha = FastExp2(m[r] - m_new);  // m = -inf -> 0
      const float pe = FastExp2(s - m_new);
      l[r] = l[r] * alpha + pe;
      m[r] = m_new;
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) o[r][e] = o[r][e] * alpha + pe * vf[e];
    }
  }

  extern __shared__ float4 smem_f4[];
  float* m_s = reinterpret_cast<float*>(smem_f4);
  float* l_s = m_s + kWarps * kMaxRows;
  float* o_s = l_s + kWarps * kMaxRows;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r >= rows) continue;
    if (lane == 0) {
      m_s[warp * kMaxRows + r] = m[r];
      l_s[warp * kMaxRows + r] = l[r];
    }
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      o_s[(warp * kMaxRows + r) * D + d0 + e] = o[r][e] * inv;
    }
  }
  __syncthreads();
  MergeWarpsAndStore<D, kWarps, kBf16>(p, w, m_s, l_s, o_s);
  if (p.counters != nullptr) CombineIfLastBlock<D, kBf16>(p);
}

template <int D>
size_t PortableSmemBytes() {
  // Worst case over warp widths: 32-wide warps give the most warps.
  constexpr int kWarps = kThreads / 32;
  return sizeof(float) * (2 * kWarps * kMaxRows + kWarps * kMaxRows * D);
}

// ------------------------------------------------------- NVIDIA tensor cores
#if defined(RADIXKV_GPU_NVIDIA)

constexpr int kMmaWarps = kThreads / 32;

template <int D, int kKeys, int kStages>
constexpr size_t MmaSmemBytes() {
  // q tile + per warp {kStages x (K, V) x kKeys x D} 16-bit elements +
  // per warp key bases (K, V) as int64. The fp32 merge area reuses the K/V
  // buffers after the main loop.
  constexpr size_t q_bytes = kMaxRows * D * 2;
  constexpr size_t kv_bytes = kMmaWarps * kStages * 2 * kKeys * D * 2;
  constexpr size_t base_bytes = kMmaWarps * 2 * kKeys * 8;
  constexpr size_t merge_bytes =
      sizeof(float) * (2 * kMmaWarps * kMaxRows + kMmaWarps * kMaxRows * D);
  static_assert(merge_bytes <= kv_bytes, "merge area must fit the K/V area");
  return q_bytes + kv_bytes + base_bytes;
}

// kKeys: keys per warp tile (16 or 32); kStages: cp.async pipeline depth per
// warp (tiles in flight + 1).
// kFused: v2 with the fused combine (CombineIfLastBlock; p.counters set).
// __launch_bounds__(..., 3) keeps it at 3 blocks/SM (<= 168 registers):
// without the bound the fused tail lifted ptxas from 153 to 189 registers
// (2 blocks/SM, which cost the large batches ~10 points, see
// kernel-notes.md); with it ptxas reports 168 registers and a 20-byte spill
// at head_dim 128. kFused = false is the unchanged kernel (153 registers).
template <int D, int kKeys, int kStages, bool kBf16, bool kFused>
__global__ void __launch_bounds__(kThreads, kFused&& D <= 128 ? 3 : 1)
    DecodeMmaKernel(DecodeParams p) {
  using Warp = mma::WarpAttention<D, kKeys, kBf16>;
  constexpr int kChunksPerRow = D / 8;
  constexpr int kRowsPerPass = 32 / kChunksPerRow > 0 ? 32 / kChunksPerRow : 1;
  constexpr int kPasses = kKeys / kRowsPerPass;
  static_assert(kChunksPerRow <= 32, "head_dim <= 256");
  const BlockWork w = GetBlockWork(p);
  if (w.skip) {
    if constexpr (kFused) SkippedBlock<D, kBf16>(p, w);
    return;
  }
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;

  extern __shared__ float4 smem_f4[];
  uint16_t* q_tile = reinterpret_cast<uint16_t*>(smem_f4);
  uint16_t* kv_area = q_tile + kMaxRows * D;
  uint16_t* k_tiles = kv_area + warp * (kStages * 2 * kKeys * D);
  uint16_t* v_tiles = k_tiles + kStages * kKeys * D;  // [kStages][N][D]
  int64_t* bases = reinterpret_cast<int64_t*>(kv_area + kMmaWarps * kStages *
                                                            2 * kKeys * D) +
                   warp * 2 * kKeys;  // [K: N][V: N]

  // Stage Q (rows >= w.rows zero) into shared memory.
  const int32_t b = blockIdx.y;
  for (int c = threadIdx.x; c < kMaxRows * kChunksPerRow; c += kThreads) {
    const int row = c / kChunksPerRow;
    const int chunk = c - row * kChunksPerRow;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row < w.rows) {
      const int64_t qi =
          (static_cast<int64_t>(b) * p.num_q_heads + w.first_head + row) * D +
          chunk * 8;
      v = *reinterpret_cast<const uint4*>(p.q + qi);
    }
    *reinterpret_cast<uint4*>(q_tile + mma::SwizzledOffset<D>(row, chunk)) = v;
  }
  __syncthreads();

  Warp att;
  att.Init();
  att.LoadQ(q_tile);

  // This lane always copies chunk `my_chunk` of rows lane / kChunksPerRow +
  // i * kRowsPerPass: its dim deltas are loop-invariant.
  const int my_chunk = lane % kChunksPerRow;
  const int my_row0 = lane / kChunksPerRow;
  const bool lane_copies = lane < kRowsPerPass * kChunksPerRow;
  const int64_t k_delta =
      p.g.KOffset(0, w.kv_head, my_chunk * 8) - p.g.KOffset(0, w.kv_head, 0);
  const int64_t v_delta =
      p.g.VOffset(0, w.kv_head, my_chunk * 8) - p.g.VOffset(0, w.kv_head, 0);
  const bool v_strided = p.g.layout == KvLayout::kVllm;
  const int64_t v_stride = p.g.VDimStride();

  const int32_t num_tiles = (w.end - w.begin + kKeys - 1) / kKeys;
  const int32_t my_tiles =
      num_tiles > warp ? (num_tiles - warp + kMmaWarps - 1) / kMmaWarps : 0;

  // Slot of this lane's key in tile `it` (-1 past the partition end). The
  // kv_indices load for tile it + 1 is issued one tile ahead (next_slot), so
  // its global-memory latency is off the critical path of issue().
  auto load_slot = [&](int32_t it) -> int64_t {
    const int32_t key = w.begin + (warp + it * kMmaWarps) * kKeys + lane;
    return (lane < kKeys && it < my_tiles && key < w.end)
               ? p.kv_indices[w.seq_start + key]
               : int64_t{-1};
  };
  int64_t next_slot = load_slot(0);
  auto issue = [&](int32_t it) {
    const int stage = it % kStages;
    const int64_t slot = next_slot;
    next_slot = load_slot(it + 1);
    if (lane < kKeys) {
      int64_t kb = -1, vb = -1;
      if (slot >= 0) {
        kb = p.g.KOffset(slot, w.kv_head, 0);
        vb = p.g.VOffset(slot, w.kv_head, 0);
      }
      bases[lane] = kb;
      bases[kKeys + lane] = vb;
    }
    WarpSync();
    if (lane_copies) {
      uint16_t* ks = k_tiles + stage * kKeys * D;
      uint16_t* vs = v_tiles + stage * kKeys * D;
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        const int row = my_row0 + i * kRowsPerPass;
        const int64_t kb = bases[row];
        const int64_t vb = bases[kKeys + row];
        const int so = mma::SwizzledOffset<D>(row, my_chunk);
        mma::CpAsync16(ks + so, p.k_cache + (kb >= 0 ? kb + k_delta : 0),
                       kb >= 0);
        if (!v_strided) {
          mma::CpAsync16(vs + so, p.v_cache + (vb >= 0 ? vb + v_delta : 0),
                         vb >= 0);
        } else {
          uint32_t wv[4] = {0, 0, 0, 0};
          if (vb >= 0) {
#pragma unroll
            for (int e = 0; e < 8; ++e) {
              wv[e / 2] |=
                  static_cast<uint32_t>(p.v_cache[vb + v_delta + e * v_stride])
                  << (16 * (e % 2));
            }
          }
          *reinterpret_cast<uint4*>(vs + so) =
              make_uint4(wv[0], wv[1], wv[2], wv[3]);
        }
      }
    }
    mma::CpAsyncCommit();
    WarpSync();  // bases are rewritten by the next issue
  };

  // Prologue: kStages - 1 tiles in flight.
  for (int32_t it = 0; it < kStages - 1 && it < my_tiles; ++it) issue(it);
  for (int32_t it = 0; it < my_tiles; ++it) {
    // Refill the stage consumed in iteration it - 1, then wait for tile it.
    if (it + kStages - 1 < my_tiles) issue(it + kStages - 1);
    const int32_t issued = my_tiles < it + kStages ? my_tiles : it + kStages;
    const int32_t pending = issued - it - 1;  // groups allowed in flight
    if (pending >= 2) {
      mma::CpAsyncWait<2>();
    } else if (pending == 1) {
      mma::CpAsyncWait<1>();
    } else {
      mma::CpAsyncWait<0>();
    }
    WarpSync();
    const int stage = it % kStages;
    float s[Warp::kSTiles][4];
    att.Scores(s, k_tiles + stage * kKeys * D);
    const int32_t key0 = w.begin + (warp + it * kMmaWarps) * kKeys;
    const int t4 = lane & 3;
#pragma unroll
    for (int j = 0; j < Warp::kSTiles; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int32_t key = key0 + j * 8 + 2 * t4 + (i & 1);
        s[j][i] = key < w.end ? s[j][i] * p.scale_log2 : -INFINITY;
      }
    }
    att.Accumulate(s, v_tiles + stage * kKeys * D);
    WarpSync();
  }
  att.Finish();

  __syncthreads();  // every warp is done with the K/V area: reuse it
  float* m_s = reinterpret_cast<float*>(kv_area);
  float* l_s = m_s + kMmaWarps * kMaxRows;
  float* o_s = l_s + kMmaWarps * kMaxRows;
  const int g = lane >> 2, t4 = lane & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = g + 8 * r;
    if (t4 == 0) {
      m_s[warp * kMaxRows + row] = att.m[r];
      l_s[warp * kMaxRows + row] = att.l[r];
    }
    const float inv = att.l[r] > 0.0f ? 1.0f / att.l[r] : 0.0f;
#pragma unroll
    for (int n = 0; n < Warp::kOTiles; ++n) {
      float* dst = o_s + (warp * kMaxRows + row) * D + n * 8 + 2 * t4;
      dst[0] = att.o[n][2 * r] * inv;
      dst[1] = att.o[n][2 * r + 1] * inv;
    }
  }
  __syncthreads();
  MergeWarpsAndStore<D, kMmaWarps, kBf16>(p, w, m_s, l_s, o_s);
  if constexpr (kFused) CombineIfLastBlock<D, kBf16>(p);
}

#endif  // RADIXKV_GPU_NVIDIA

// --------------------------------------------------------------- combine

// grid = (Hq, B), one block per (sequence, query head); vLLM's v2 reduce
// step.
// Reads the ceil(len / partition_size) partitions the sequence has.
template <int D, bool kBf16>
__global__ void __launch_bounds__(kThreads) CombineKernel(DecodeParams p) {
  const int32_t h = blockIdx.x;
  const int32_t b = blockIdx.y;
  const int32_t np = NumPartitions(
      p, static_cast<int32_t>(p.kv_indptr[b + 1] - p.kv_indptr[b]));
  const int64_t bh = static_cast<int64_t>(b) * p.num_q_heads + h;
  const float* pm = p.partial_max + bh * p.num_partitions;
  const float* ps = p.partial_sum + bh * p.num_partitions;
  const float* po = p.partial_out + bh * p.num_partitions * D;
  // Stage the partitions' (m, l) in shared memory with one coalesced pass,
  // so that the serial CombineMax / CombineExpSum scans below read shared
  // memory instead of issuing 2 * np dependent global loads per thread.
  extern __shared__ float4 smem_f4[];
  const int32_t padded = (p.num_partitions + 3) / 4 * 4;
  float* m_s = reinterpret_cast<float*>(smem_f4);  // [num_partitions]
  float* l_s = m_s + padded;                       // [num_partitions]
  float* weights = l_s + padded;                   // [num_partitions]
  for (int i = threadIdx.x; i < np; i += blockDim.x) {
    m_s[i] = pm[i];
    l_s[i] = ps[i];
  }
  __syncthreads();
  const float M = CombineMax(m_s, np);
  const float L = CombineExpSum(m_s, l_s, np, M);
  for (int i = threadIdx.x; i < np; i += blockDim.x) {
    weights[i] = CombineWeight(m_s[i], l_s[i], M, L);
  }
  __syncthreads();
  // O = sum_i w_i O_i with the partitions spread over thread groups: each
  // thread owns 4 consecutive dims (one float4) and every kGroups-th
  // partition, so a thread's loads are independent and in flight together
  // (a single thread walking all partitions made this kernel latency-bound:
  // 14 us of a 60 us decode at B=1 x 32768, measured with ncu). Every
  // partition i < np holds >= 1 token, so its O_i is written and finite.
  constexpr int kLanesPerRow = D / 4;
  constexpr int kGroups = kThreads / kLanesPerRow;
  static_assert(kGroups >= 1 && kThreads % kLanesPerRow == 0, "combine shape");
  __shared__ float4 red[kThreads];
  const int col = threadIdx.x % kLanesPerRow;
  const int grp = threadIdx.x / kLanesPerRow;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
  for (int i = grp; i < np; i += kGroups) {
    const float wt = weights[i];
    const float4 v = *reinterpret_cast<const float4*>(
        po + static_cast<int64_t>(i) * D + col * 4);
    acc.x += wt * v.x;
    acc.y += wt * v.y;
    acc.z += wt * v.z;
    acc.w += wt * v.w;
  }
  red[threadIdx.x] = acc;
  __syncthreads();
  if (grp == 0) {
    for (int gi = 1; gi < kGroups; ++gi) {
      const float4 v = red[gi * kLanesPerRow + col];
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    uint16_t* o = p.out + bh * D + col * 4;
    o[0] = FloatToElem<kBf16>(acc.x);
    o[1] = FloatToElem<kBf16>(acc.y);
    o[2] = FloatToElem<kBf16>(acc.z);
    o[3] = FloatToElem<kBf16>(acc.w);
  }
  if (threadIdx.x == 0 && p.lse != nullptr) p.lse[bh] = CombineLse(M, L);
}

// ------------------------------------------------------------- dispatch

// DecodeMmaKernel runs 16-key warp tiles and a 2-stage pipeline. Measured on
// the H200 (docs/kernel-notes.md): 32-key tiles (fewer resident blocks) and
// 3 stages were both slower.
constexpr int kDecodeTileKeys = 16;

#if defined(RADIXKV_GPU_NVIDIA)
template <int D, int kKeys, bool kBf16>
int LaunchDecodeMma(const DecodeParams& p, dim3 grid, hipStream_t stream) {
  constexpr int kStages = 2;
  const size_t smem = MmaSmemBytes<D, kKeys, kStages>();
  auto kernel = p.counters != nullptr
                    ? DecodeMmaKernel<D, kKeys, kStages, kBf16, true>
                    : DecodeMmaKernel<D, kKeys, kStages, kBf16, false>;
  if (int err = SetSmemLimit(kernel, smem)) return err;
  hipLaunchKernelGGL(kernel, grid, dim3(kThreads), smem, stream, p);
  return static_cast<int>(hipGetLastError());
}
#endif  // RADIXKV_GPU_NVIDIA

template <int D, int kGroup, bool kBf16>
int LaunchPortable(const DecodeParams& p, dim3 grid, hipStream_t stream) {
  const size_t smem = PortableSmemBytes<D>();
  auto kernel = DecodePortableKernel<D, kGroup, kBf16>;
  if (int err = SetSmemLimit(kernel, smem)) return err;
  hipLaunchKernelGGL(kernel, grid, dim3(kThreads), smem, stream, p);
  return static_cast<int>(hipGetLastError());
}

template <int D, bool kBf16>
int LaunchPortableGroup(const DecodeParams& p, dim3 grid, hipStream_t stream) {
  switch (p.group) {
    case 1:
      return LaunchPortable<D, 1, kBf16>(p, grid, stream);
    case 2:
      return LaunchPortable<D, 2, kBf16>(p, grid, stream);
    case 4:
      return LaunchPortable<D, 4, kBf16>(p, grid, stream);
    case 8:
      return LaunchPortable<D, 8, kBf16>(p, grid, stream);
    case 16:
      return LaunchPortable<D, 16, kBf16>(p, grid, stream);
    default:
      return LaunchPortable<D, 0, kBf16>(p, grid, stream);
  }
}

template <int D, bool kBf16>
int LaunchDecodeTyped(const DecodeParams& p, internal::KernelPath path,
                      int32_t batch, hipStream_t stream) {
  const int32_t num_kv_heads = p.g.num_kv_heads;
  const dim3 grid(num_kv_heads * p.head_chunks, batch,
                  p.partition_size == 0 ? 1 : p.num_partitions);
  int err = 0;
#if defined(RADIXKV_GPU_NVIDIA)
  if (path == internal::KernelPath::kMatrixCore) {
    err = LaunchDecodeMma<D, kDecodeTileKeys, kBf16>(p, grid, stream);
  } else {
    err = LaunchPortableGroup<D, kBf16>(p, grid, stream);
  }
#else
  (void)path;
  err = LaunchPortableGroup<D, kBf16>(p, grid, stream);
#endif
  if (err != 0 || p.partition_size == 0 || p.counters != nullptr) return err;
  // m, l, weights: each rounded up to whole float4s (the compiler may read
  // them with vector loads past the last partition; memcheck flagged it).
  const size_t smem =
      sizeof(float) * (3 * ((p.num_partitions + 3) / 4 * 4) + 4);
  auto combine = CombineKernel<D, kBf16>;
  if ((err = SetSmemLimit(combine, smem))) return err;
  hipLaunchKernelGGL(combine, dim3(p.num_q_heads, batch), dim3(kThreads), smem,
                     stream, p);
  return static_cast<int>(hipGetLastError());
}

template <bool kBf16>
int LaunchDecodeDim(const DecodeParams& p, internal::KernelPath path,
                    int32_t batch, hipStream_t stream) {
  switch (p.g.head_dim) {
    case 64:
      return LaunchDecodeTyped<64, kBf16>(p, path, batch, stream);
    case 128:
      return LaunchDecodeTyped<128, kBf16>(p, path, batch, stream);
    case 256:
      return LaunchDecodeTyped<256, kBf16>(p, path, batch, stream);
    default:
      return static_cast<int>(hipErrorInvalidValue);
  }
}

}  // namespace

// RADIXKV_DECODE_FUSED_COMBINE=1 selects the fused combine (opt-in); unset
// or anything else, the separate CombineKernel. Measured on the H200
// (kernel-notes.md, 2026-11-29): the fused kernel is slower on every shape
// (B=1 x 32768 68-70 us vs 54-57 us; B=64 x 4096 334 us vs 288 us): the
// partition kernel itself slows down under the 168-register cap (spill),
// far more than the combine launch it saves.
bool FusedCombineEnabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("RADIXKV_DECODE_FUSED_COMBINE");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return enabled;
}

namespace internal {

// NVIDIA: tensor-core decode and extend. AMD: the build holds the MFMA
// extend kernel (gfx90a / gfx94x); the extend launcher still checks the
// device at run time, and decode has no matrix-core kernel on AMD (it always
// takes the portable kernel).
bool HasMatrixCorePath() { return true; }

int LaunchDecode(const DecodeLaunch& a) {
  if (a.batch_size == 0) return 0;
  DecodeParams p;
  p.g = a.geometry;
  p.k_cache = static_cast<const uint16_t*>(a.k_cache);
  p.v_cache = static_cast<const uint16_t*>(a.v_cache);
  p.q = static_cast<const uint16_t*>(a.q);
  p.kv_indptr = a.kv_indptr;
  p.kv_indices = a.kv_indices;
  p.num_q_heads = a.num_q_heads;
  p.group = a.num_q_heads / a.geometry.num_kv_heads;
  p.head_chunks = (p.group + kMaxRows - 1) / kMaxRows;
  p.scale_log2 = a.scale_log2;
  p.partition_size = a.partition_size;
  p.num_partitions = a.partition_size == 0 ? 1 : a.num_partitions;
  p.window_left = a.window_left;
  p.out = static_cast<uint16_t*>(a.out);
  p.lse = a.lse;
  p.partial_max = a.partial_max;
  p.partial_sum = a.partial_sum;
  p.partial_out = a.partial_out;
  p.counters = nullptr;
  if (a.partition_size > 0 && FusedCombineEnabled()) {
    const int64_t columns = static_cast<int64_t>(a.batch_size) *
                            a.geometry.num_kv_heads * p.head_chunks;
    if (columns <= internal::kDecodeCounterSlots) {
      p.counters = a.counters;
    }
  }
  hipStream_t stream = static_cast<hipStream_t>(a.stream);
  if (a.dtype == DType::kBF16) {
    return LaunchDecodeDim<true>(p, a.path, a.batch_size, stream);
  }
  return LaunchDecodeDim<false>(p, a.path, a.batch_size, stream);
}

}  // namespace internal
}  // namespace radixkv::worker::gpu
