// Device kernels of the GPU model backend; see model_kernels.h for the
// contracts. HIP C++ through worker/kernels/hip/hip_compat.h (nvcc: -x cu).
// The runtime headers first: numeric_types.h uses their device intrinsics.
#include "worker/kernels/hip/hip_compat.h"
// (separate block: keep the order)
#include <float.h>
#include <math.h>

#include <algorithm>

#include "worker/gpu/model_kernels.h"

namespace radixkv::worker::gpu {
namespace {

// Whether p may be read as 16-byte vectors (float4 / uint4).
__host__ __device__ __forceinline__ bool Aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

// ------------------------------------------------------------ element access

template <DType kDType>
struct Elem;

template <>
struct Elem<DType::kF32> {
  using T = float;
  static __device__ __forceinline__ float Load(const T* p, int64_t i) {
    return p[i];
  }
  static __device__ __forceinline__ void Store(T* p, int64_t i, float v) {
    p[i] = v;
  }
};

template <>
struct Elem<DType::kBF16> {
  using T = uint16_t;
  static __device__ __forceinline__ float Load(const T* p, int64_t i) {
    return Bf16BitsToFloat(p[i]);
  }
  static __device__ __forceinline__ void Store(T* p, int64_t i, float v) {
    p[i] = FloatToBf16Bits(v);
  }
};

template <>
struct Elem<DType::kF16> {
  using T = uint16_t;
  static __device__ __forceinline__ float Load(const T* p, int64_t i) {
    return HalfBitsToFloat(p[i]);
  }
  static __device__ __forceinline__ void Store(T* p, int64_t i, float v) {
    p[i] = FloatToHalfBits(v);
  }
};

// Calls fn.template operator()<kDType>() for the runtime dtype.
template <typename Fn>
int DispatchDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32:
      return fn.template operator()<DType::kF32>();
    case DType::kBF16:
      return fn.template operator()<DType::kBF16>();
    case DType::kF16:
      return fn.template operator()<DType::kF16>();
  }
  return static_cast<int>(hipErrorInvalidValue);
}

int LastError() { return static_cast<int>(hipGetLastError()); }

// -------------------------------------------------------- block reductions

// Sum / max over the block; every thread gets the result. blockDim.x must be
// a multiple of kWarpSize and <= 1024. `scratch` holds >= 32 floats.
__device__ __forceinline__ float BlockReduceSum(float v, float* scratch) {
  v = WarpReduceSum(v);
  const int warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  __syncthreads();  // scratch may still be read by a previous reduction
  if (LaneId() == 0) scratch[warp] = v;
  __syncthreads();
  float r = LaneId() < num_warps ? scratch[LaneId()] : 0.0f;
  return WarpReduceSum(r);
}

__device__ __forceinline__ float BlockReduceMax(float v, float* scratch) {
  v = WarpReduceMax(v);
  const int warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  __syncthreads();
  if (LaneId() == 0) scratch[warp] = v;
  __syncthreads();
  float r = LaneId() < num_warps ? scratch[LaneId()] : -INFINITY;
  return WarpReduceMax(r);
}

// (value, index) argmax over the block, lowest index on ties; result valid in
// every thread. NaN values never win.
__device__ __forceinline__ void BlockArgmax(float& v, int32_t& idx, float* sv,
                                            int32_t* si) {
  sv[threadIdx.x] = v;
  si[threadIdx.x] = idx;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      const float ov = sv[threadIdx.x + stride];
      const int32_t oi = si[threadIdx.x + stride];
      const float mv = sv[threadIdx.x];
      const int32_t mi = si[threadIdx.x];
      if (ov > mv || (ov == mv && oi < mi) || (mi < 0 && oi >= 0)) {
        sv[threadIdx.x] = ov;
        si[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  v = sv[0];
  idx = si[0];
  __syncthreads();
}

// ----------------------------------------------------------------- kernels

template <DType kW>
__global__ void EmbeddingGatherKernel(const typename Elem<kW>::T* embed,
                                      const int32_t* ids, int32_t hidden,
                                      float* x) {
  const int64_t t = blockIdx.x;
  const int64_t row = static_cast<int64_t>(ids[t]) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    x[t * hidden + i] = Elem<kW>::Load(embed, row + i);
  }
}

// Threads of an RMSNorm row: the standalone kernel and the GEMM prologue of
// SmallBatchGemmKernel<..., kNorm = true> both reduce a row with this many
// threads in the same order, so that the fused and unfused paths give the
// same bits.
constexpr int kGemvWarps = 8;
constexpr int kNormThreads = kGemvWarps * kWarpSize;

// A row of one block is latency-bound (16 KB at hidden 4096): rows whose
// length is a multiple of 4 and whose start is 16-byte aligned (every
// model's hidden size) are read as float4s, kNormLoads in flight per thread.
constexpr int kNormLoads = 4;

__device__ __forceinline__ bool Float4Row(const float* p, int32_t n) {
  return n % 4 == 0 && Aligned16(p);
}

// rsqrt(mean(xr[0, hidden)^2) + eps), valid in every thread of a block of
// kNormThreads threads; `scratch` holds >= 32 floats.
__device__ __forceinline__ float RowInvRms(const float* xr, int32_t hidden,
                                           float eps, float* scratch) {
  float ss = 0.0f;
  if (Float4Row(xr, hidden)) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    const int32_t n4 = hidden / 4;
    for (int32_t base = threadIdx.x; base < n4;
         base += kNormThreads * kNormLoads) {
      float4 v[kNormLoads];
#pragma unroll
      for (int u = 0; u < kNormLoads; ++u) {
        const int32_t i = base + u * kNormThreads;
        v[u] = i < n4 ? x4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kNormLoads; ++u) {
        ss += v[u].x * v[u].x + v[u].y * v[u].y + v[u].z * v[u].z +
              v[u].w * v[u].w;
      }
    }
  } else {
    for (int i = threadIdx.x; i < hidden; i += kNormThreads) {
      ss += xr[i] * xr[i];
    }
  }
  ss = BlockReduceSum(ss, scratch);
  return rsqrtf(ss / static_cast<float>(hidden) + eps);
}

// y[i] = act(w[i] * (xr[i] * inv_rms)) for i < hidden over the block.
template <DType kA>
__device__ __forceinline__ void NormalizeRow(const float* xr, const float* w,
                                             float inv_rms, int32_t hidden,
                                             typename Elem<kA>::T* y) {
  if (Float4Row(xr, hidden) && Float4Row(w, hidden)) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    const float4* w4 = reinterpret_cast<const float4*>(w);
    for (int32_t i = threadIdx.x; i < hidden / 4; i += kNormThreads) {
      const float4 xv = x4[i];
      const float4 wv = w4[i];
      Elem<kA>::Store(y, 4 * i, wv.x * (xv.x * inv_rms));
      Elem<kA>::Store(y, 4 * i + 1, wv.y * (xv.y * inv_rms));
      Elem<kA>::Store(y, 4 * i + 2, wv.z * (xv.z * inv_rms));
      Elem<kA>::Store(y, 4 * i + 3, wv.w * (xv.w * inv_rms));
    }
  } else {
    for (int i = threadIdx.x; i < hidden; i += kNormThreads) {
      Elem<kA>::Store(y, i, w[i] * (xr[i] * inv_rms));
    }
  }
}

template <DType kA>
__global__ void __launch_bounds__(kNormThreads)
    RmsNormKernel(const float* x, const int32_t* row_index, const float* w,
                  float eps, int32_t hidden, typename Elem<kA>::T* y) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const int64_t src = row_index != nullptr ? row_index[r] : r;
  const float* xr = x + src * hidden;
  NormalizeRow<kA>(xr, w, RowInvRms(xr, hidden, eps, scratch), hidden,
                   y + r * hidden);
}

// Block (t, y) of a (num_tokens, Y) grid handles token t's rotated heads
// [(Hq + Hkv) y / Y, (Hq + Hkv) (y + 1) / Y) and V heads [Hkv y / Y,
// Hkv (y + 1) / Y): with few tokens (decode) Y > 1 spreads one token over
// many SMs instead of one block's serial loop.
template <DType kA>
__global__ void RopeAndCacheKernel(RopeCacheLaunch a) {
  using E = Elem<kA>;
  using T = typename E::T;
  const int64_t t = blockIdx.x;
  const int32_t D = a.head_dim;
  const int32_t half = D / 2;
  const int32_t Hq = a.num_q_heads;
  const int32_t Hkv = a.num_kv_heads;
  const int32_t y = blockIdx.y, Y = gridDim.y;
  const int32_t h_begin = (Hq + Hkv) * y / Y;
  const int32_t h_end = (Hq + Hkv) * (y + 1) / Y;
  const int32_t v_begin = Hkv * y / Y, v_end = Hkv * (y + 1) / Y;
  const int64_t qkv_dim = static_cast<int64_t>(Hq + 2 * Hkv) * D;
  const float* row = a.qkv + t * qkv_dim;
  const float pos = static_cast<float>(a.positions[t]);
  const int64_t slot = a.out_cache_loc != nullptr ? a.out_cache_loc[t] : -1;
  auto value = [&](int64_t i) {
    return a.bias != nullptr ? row[i] + a.bias[i] : row[i];
  };
  // Qwen3 (transformers Qwen3Attention): RMSNorm of every q and k head
  // before RoPE; one warp per head computes its 1 / rms.
  extern __shared__ float inv_rms[];  // [Hq + Hkv] with q_norm
  if (a.q_norm != nullptr) {
    const int warps = blockDim.x / kWarpSize;
    for (int h = h_begin + threadIdx.x / kWarpSize; h < h_end; h += warps) {
      float ss = 0.0f;
      for (int d = LaneId(); d < D; d += kWarpSize) {
        const float x = value(static_cast<int64_t>(h) * D + d);
        ss += x * x;
      }
      ss = WarpReduceSum(ss);
      if (LaneId() == 0) {
        inv_rms[h] = rsqrtf(ss / static_cast<float>(D) + a.norm_eps);
      }
    }
    __syncthreads();
  }
  auto normed = [&](int h, int d) {
    const float x = value(static_cast<int64_t>(h) * D + d);
    if (a.q_norm == nullptr) return x;
    return (h < Hq ? a.q_norm[d] : a.k_norm[d]) * (x * inv_rms[h]);
  };
  // q and k: rotate pairs (i, i + half).
  for (int idx = threadIdx.x; idx < (h_end - h_begin) * half;
       idx += blockDim.x) {
    const int h = h_begin + idx / half;
    const int i = idx - (h - h_begin) * half;
    float s, c;
    sincosf(pos * a.inv_freq[i], &s, &c);
    const float x0 = normed(h, i);
    const float x1 = normed(h, i + half);
    const float y0 = x0 * c - x1 * s;
    const float y1 = x1 * c + x0 * s;
    if (h < Hq) {
      T* q = static_cast<T*>(a.q) + (t * Hq + h) * D;
      E::Store(q, i, y0);
      E::Store(q, i + half, y1);
    } else {
      const int kh = h - Hq;
      if (a.k_out != nullptr) {
        T* k = static_cast<T*>(a.k_out) + (t * Hkv + kh) * D;
        E::Store(k, i, y0);
        E::Store(k, i + half, y1);
      }
      if (slot >= 0) {
        T* kc = static_cast<T*>(a.k_cache);
        E::Store(kc, a.geometry.KOffset(slot, kh, i), y0);
        E::Store(kc, a.geometry.KOffset(slot, kh, i + half), y1);
      }
    }
  }
  // v: copy.
  for (int idx = v_begin * D + threadIdx.x; idx < v_end * D;
       idx += blockDim.x) {
    const int vh = idx / D;
    const int d = idx - vh * D;
    const float v = value(static_cast<int64_t>(Hq + Hkv) * D + idx);
    if (a.v_out != nullptr) {
      E::Store(static_cast<T*>(a.v_out), t * Hkv * D + idx, v);
    }
    if (slot >= 0) {
      E::Store(static_cast<T*>(a.v_cache), a.geometry.VOffset(slot, vh, d), v);
    }
  }
}

__global__ void AddBiasKernel(float* x, const float* bias, int32_t hidden) {
  const int64_t t = blockIdx.x;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    x[t * hidden + i] += bias[i];
  }
}

// Thread x of block (bx, by) handles elements [4 j, 4 j + 4) of tokens by,
// by + gridDim.y, ... with j = bx blockDim.x + x: float4 loads where the
// rows allow (inter a multiple of 4, gu 16-byte aligned), no 64-bit
// division per element (at 4,096 prompt tokens of the 8B shape this kernel
// moves 0.6 GB; the per-element token index once bound it at 40% of copy
// bandwidth).
template <DType kA>
__global__ void SiluAndMulKernel(const float* gu, int32_t num_tokens,
                                 int32_t inter, typename Elem<kA>::T* out) {
  const int32_t j = blockIdx.x * blockDim.x + threadIdx.x;
  if (4 * j >= inter) return;
  const bool vec = inter % 4 == 0 && Aligned16(gu);
  for (int64_t t = blockIdx.y; t < num_tokens; t += gridDim.y) {
    const float* g = gu + t * 2 * inter;
    const float* u = g + inter;
    const int64_t o = t * inter + 4 * j;
    float gv[4], uv[4];
    if (vec) {
      const float4 g4 = reinterpret_cast<const float4*>(g)[j];
      const float4 u4 = reinterpret_cast<const float4*>(u)[j];
      gv[0] = g4.x, gv[1] = g4.y, gv[2] = g4.z, gv[3] = g4.w;
      uv[0] = u4.x, uv[1] = u4.y, uv[2] = u4.z, uv[3] = u4.w;
    } else {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const bool in = 4 * j + q < inter;
        gv[q] = in ? g[4 * j + q] : 0.0f;
        uv[q] = in ? u[4 * j + q] : 0.0f;
      }
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if (4 * j + q < inter) {
        Elem<kA>::Store(out, o + q, gv[q] / (1.0f + expf(-gv[q])) * uv[q]);
      }
    }
  }
}

constexpr int kMaxDimsPerLane = 256 / 32;
// Warps of a GenericAttentionKernel block, and keys each warp scores per
// iteration. One warp walking a 1,024-key context one key at a time spent
// ~1 us per key on dependent load -> warp reduction -> softmax update
// rounds; the block's warps now take interleaved runs of kGenericKeys keys
// (their loads and reductions independent) and merge their partial
// softmax states once at the end.
constexpr int kGenericWarps = 4;
constexpr int kGenericKeys = 8;

// One block of kGenericWarps warps per (query head, query token).
template <DType kA>
__global__ void GenericAttentionKernel(GenericAttentionLaunch a) {
  using E = Elem<kA>;
  using T = typename E::T;
  const int h = blockIdx.x;
  const int64_t t = blockIdx.y;
  const int lane = LaneId();
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int32_t D = a.geometry.head_dim;
  const int32_t Hq = a.num_q_heads;
  const int32_t group = Hq / a.geometry.num_kv_heads;
  const int32_t kvh = h / group;
  const int32_t b = a.token_seq[t];
  const int32_t q_start = a.qo_indptr[b];
  const int32_t kv_start = a.kv_indptr[b];
  const int32_t n_prefix = a.kv_indptr[b + 1] - kv_start;
  const int32_t n_ext =
      a.causal_extend ? static_cast<int32_t>(t - q_start) + 1 : 0;
  const int32_t n_keys = n_prefix + n_ext;
  const float scale_log2 = a.sm_scale * 1.4426950408889634f;
  const T* q = static_cast<const T*>(a.q) + (t * Hq + h) * D;
  const T* kc = static_cast<const T*>(a.k_cache);
  const T* vc = static_cast<const T*>(a.v_cache);
  float qr[kMaxDimsPerLane];
  float acc[kMaxDimsPerLane];
#pragma unroll
  for (int j = 0; j < kMaxDimsPerLane; ++j) {
    const int d = lane + j * kWarpSize;
    qr[j] = d < D ? E::Load(q, d) : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY;
  float l = 0.0f;
  // Keys are positions 0 .. n_keys - 1 and this token is the last one it
  // attends; a window starts at its left edge.
  const int32_t window_first =
      a.window_left >= 0 ? n_keys - 1 - a.window_left : 0;
  const int32_t first = window_first > 0 ? window_first : 0;
  for (int32_t base = first + warp * kGenericKeys; base < n_keys;
       base += kGenericWarps * kGenericKeys) {
    int64_t slot[kGenericKeys];
    float s[kGenericKeys];
#pragma unroll
    for (int u = 0; u < kGenericKeys; ++u) {
      const int32_t n = base + u;
      slot[u] = n >= n_keys    ? -1
                : n < n_prefix ? a.kv_indices[kv_start + n]
                               : a.out_cache_loc[q_start + n - n_prefix];
      float dot = 0.0f;
#pragma unroll
      for (int j = 0; j < kMaxDimsPerLane; ++j) {
        const int d = lane + j * kWarpSize;
        if (d < D && slot[u] >= 0) {
          dot += qr[j] * E::Load(kc, a.geometry.KOffset(slot[u], kvh, d));
        }
      }
      s[u] = dot;
    }
    float m_new = m;
#pragma unroll
    for (int u = 0; u < kGenericKeys; ++u) {
      s[u] = slot[u] >= 0 ? WarpReduceSum(s[u]) * scale_log2 : -INFINITY;
      m_new = fmaxf(m_new, s[u]);
    }
    // base < n_keys: at least s[0] is finite, so m_new is.
    const float alpha = exp2f(m - m_new);
    float p[kGenericKeys];
    l *= alpha;
#pragma unroll
    for (int u = 0; u < kGenericKeys; ++u) {
      p[u] = exp2f(s[u] - m_new);
      l += p[u];
    }
#pragma unroll
    for (int j = 0; j < kMaxDimsPerLane; ++j) {
      const int d = lane + j * kWarpSize;
      if (d >= D) continue;
      float v = acc[j] * alpha;
#pragma unroll
      for (int u = 0; u < kGenericKeys; ++u) {
        if (slot[u] >= 0) {
          v += p[u] * E::Load(vc, a.geometry.VOffset(slot[u], kvh, d));
        }
      }
      acc[j] = v;
    }
    m = m_new;
  }
  // Merge the warps' (m, l, acc) states: out = sum_w acc_w 2^(m_w - M) /
  // sum_w l_w 2^(m_w - M), M = max_w m_w (a warp without keys has l = 0).
  __shared__ float warp_m[kGenericWarps], warp_l[kGenericWarps];
  __shared__ float warp_acc[kGenericWarps][kMaxDimsPerLane * kWarpSize];
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < kMaxDimsPerLane; ++j) {
    const int d = lane + j * kWarpSize;
    if (d < D) warp_acc[warp][d] = acc[j];
  }
  __syncthreads();
  if (warp != 0) return;
  float m_all = -INFINITY;
#pragma unroll
  for (int w = 0; w < kGenericWarps; ++w) m_all = fmaxf(m_all, warp_m[w]);
  float scale[kGenericWarps];
  float l_all = 0.0f;
#pragma unroll
  for (int w = 0; w < kGenericWarps; ++w) {
    scale[w] = warp_l[w] > 0.0f ? exp2f(warp_m[w] - m_all) : 0.0f;
    l_all += warp_l[w] * scale[w];
  }
  const float inv_l = l_all > 0.0f ? 1.0f / l_all : 0.0f;
  T* out = static_cast<T*>(a.out) + (t * Hq + h) * D;
#pragma unroll
  for (int j = 0; j < kMaxDimsPerLane; ++j) {
    const int d = lane + j * kWarpSize;
    if (d >= D) continue;
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kGenericWarps; ++w) o += warp_acc[w][d] * scale[w];
    E::Store(out, d, o * inv_l);
  }
}

template <typename U>
__global__ void CopyPageKernel(void* const* layer_k, void* const* layer_v,
                               KvCacheGeometry g, int64_t src_page,
                               int64_t dst_page, int32_t num_tokens) {
  const int layer = blockIdx.x;
  const bool is_v = blockIdx.y == 1;
  U* base = static_cast<U*>(is_v ? layer_v[layer] : layer_k[layer]);
  const int64_t per_token = static_cast<int64_t>(g.num_kv_heads) * g.head_dim;
  for (int64_t e = threadIdx.x; e < per_token * num_tokens; e += blockDim.x) {
    const int64_t tok = e / per_token;
    const int32_t rem = static_cast<int32_t>(e - tok * per_token);
    const int32_t h = rem / g.head_dim;
    const int32_t d = rem - h * g.head_dim;
    const int64_t src = src_page * g.page_size + tok;
    const int64_t dst = dst_page * g.page_size + tok;
    if (is_v) {
      base[g.VOffset(dst, h, d)] = base[g.VOffset(src, h, d)];
    } else {
      base[g.KOffset(dst, h, d)] = base[g.KOffset(src, h, d)];
    }
  }
}

// 8 x 16-bit elements (one 16-byte load) to floats.
template <DType kDType>
__device__ __forceinline__ void Unpack8(const uint4& v, float* f) {
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint16_t lo = static_cast<uint16_t>(words[i] & 0xffffu);
    const uint16_t hi = static_cast<uint16_t>(words[i] >> 16);
    if constexpr (kDType == DType::kBF16) {
      f[2 * i] = Bf16BitsToFloat(lo);
      f[2 * i + 1] = Bf16BitsToFloat(hi);
    } else {
      f[2 * i] = HalfBitsToFloat(lo);
      f[2 * i + 1] = HalfBitsToFloat(hi);
    }
  }
}

constexpr int kGemvUnroll = 4;

// The RMSNorm of the fused GEMM prologue (LaunchSmallBatchGemmRmsNorm).
struct GemvNorm {
  const float* x = nullptr;
  const int32_t* row_index = nullptr;
  const float* weight = nullptr;
  float eps = 0.0f;
};

// Lane `lane`'s kGemvUnroll 16-byte loads of weight row `col` from chunk
// offset `base` (zeros past the row or past n).
__device__ __forceinline__ void LoadWeightChunk(const uint4* w, int64_t col,
                                                int32_t base, int32_t n,
                                                int32_t k8, uint4* wv) {
#pragma unroll
  for (int u = 0; u < kGemvUnroll; ++u) {
    const int32_t i = base + u * kWarpSize;
    wv[u] = col < n && i < k8 ? w[col * k8 + i] : make_uint4(0, 0, 0, 0);
  }
}

// Each warp streams its weight rows one chunk ahead (registers double
// buffered: chunk i + 1 is in flight while chunk i is multiplied). With
// kNorm, the block first writes the kM normalized rows of `norm` into
// shared memory in the dtype, exactly as RmsNormKernel writes them to global
// memory, and reads `a` from there, with the first weight chunk already in
// flight; it loops over column groups (the grid is capped so that the
// prologue runs about once per resident block).
template <DType kDType, int kM, bool kNorm>
__global__ void __launch_bounds__(kGemvWarps* kWarpSize)
    SmallBatchGemmKernel(const uint4* a, const uint4* w, float* c, int32_t n,
                         int32_t k8, float beta, GemvNorm norm) {
  extern __shared__ uint4 normed[];
  const int warp = threadIdx.x / kWarpSize;
  const int lane = LaneId();
  const int64_t col_stride = static_cast<int64_t>(gridDim.x) * kGemvWarps;
  constexpr int32_t kChunk = kWarpSize * kGemvUnroll;
  int64_t col = static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp;
  uint4 next[kGemvUnroll];
  LoadWeightChunk(w, col, lane, n, k8, next);
  if constexpr (kNorm) {
    __shared__ float scratch[32];
    using T = typename Elem<kDType>::T;
    T* out = reinterpret_cast<T*>(normed);
    const int32_t k = k8 * 8;
    for (int m = 0; m < kM; ++m) {
      const int64_t src = norm.row_index != nullptr ? norm.row_index[m] : m;
      const float* xr = norm.x + src * k;
      NormalizeRow<kDType>(xr, norm.weight, RowInvRms(xr, k, norm.eps, scratch),
                           k, out + int64_t{m} * k);
    }
    __syncthreads();
    a = normed;
  }
  for (; col < n; col += col_stride) {
    float acc[kM];
#pragma unroll
    for (int m = 0; m < kM; ++m) acc[m] = 0.0f;
    for (int32_t base = lane; base < k8; base += kChunk) {
      uint4 wv[kGemvUnroll];
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) wv[u] = next[u];
      if (base + kChunk < k8) {
        LoadWeightChunk(w, col, base + kChunk, n, k8, next);
      } else {
        LoadWeightChunk(w, col + col_stride, lane, n, k8, next);
      }
#pragma unroll
      for (int u = 0; u < kGemvUnroll; ++u) {
        const int32_t i = base + u * kWarpSize;
        if (i >= k8) break;
        float wf[8];
        Unpack8<kDType>(wv[u], wf);
#pragma unroll
        for (int m = 0; m < kM; ++m) {
          float af[8];
          Unpack8<kDType>(a[static_cast<int64_t>(m) * k8 + i], af);
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[m] += af[j] * wf[j];
        }
      }
    }
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      const float s = WarpReduceSum(acc[m]);
      if (lane == 0) {
        float* o = c + static_cast<int64_t>(m) * n + col;
        *o = beta != 0.0f ? s + beta * *o : s;
      }
    }
  }
}

constexpr int kRowThreads = 1024;

// One logit of a row argmax: v at index i; NaNs never win and are flagged.
__device__ __forceinline__ void ArgmaxVisit(float v, int32_t i, float& best,
                                            int32_t& best_i, bool& saw_nan) {
  saw_nan = saw_nan || v != v;
  if ((v > best || best_i < 0) && !(v != v)) {
    best = v;
    best_i = i;
  }
}

// Loads of a row argmax each thread keeps in flight: the row (0.5 MB at a
// 128K vocabulary) is read by one block, so the loop is bound by load
// latency, not bandwidth (docs/kernel-notes.md "Decode step, kernel by
// kernel").
constexpr int kArgmaxLoads = 4;

// Argmax of row[0, vocab) over the block (lowest index on ties) into `best`
// and `best_i`, valid in every thread; or, when the row holds a NaN, true
// in every thread and no argmax. sv / si: kRowThreads shared-memory slots.
// A 16-byte aligned row is read as float4s, kArgmaxLoads per thread per
// round; each thread visits its indices in increasing order, so its first
// maximum is its lowest index and BlockArgmax breaks ties between threads.
__device__ __forceinline__ bool RowArgmaxOrNan(const float* row, int32_t vocab,
                                               float* sv, int32_t* si,
                                               float& best, int32_t& best_i) {
  best = -INFINITY;
  best_i = -1;
  bool saw_nan = false;
  int32_t scalar_from = 0;
  if (Aligned16(row)) {
    const float4* row4 = reinterpret_cast<const float4*>(row);
    const int32_t n4 = vocab / 4;
    const int32_t stride = blockDim.x * kArgmaxLoads;
    for (int32_t base = threadIdx.x; base < n4; base += stride) {
      float4 v[kArgmaxLoads];
#pragma unroll
      for (int u = 0; u < kArgmaxLoads; ++u) {
        const int32_t i = base + u * blockDim.x;
        if (i < n4) v[u] = row4[i];
      }
#pragma unroll
      for (int u = 0; u < kArgmaxLoads; ++u) {
        const int32_t i = base + u * blockDim.x;
        if (i >= n4) break;
        ArgmaxVisit(v[u].x, 4 * i, best, best_i, saw_nan);
        ArgmaxVisit(v[u].y, 4 * i + 1, best, best_i, saw_nan);
        ArgmaxVisit(v[u].z, 4 * i + 2, best, best_i, saw_nan);
        ArgmaxVisit(v[u].w, 4 * i + 3, best, best_i, saw_nan);
      }
    }
    scalar_from = 4 * n4;
  }
  for (int32_t i = scalar_from + threadIdx.x; i < vocab; i += blockDim.x) {
    ArgmaxVisit(row[i], i, best, best_i, saw_nan);
  }
  // Also a barrier for BlockArgmax's first shared-memory write.
  if (__syncthreads_or(saw_nan)) return true;
  BlockArgmax(best, best_i, sv, si);
  return false;
}

__global__ void __launch_bounds__(kRowThreads)
    ArgmaxKernel(const float* logits, int32_t vocab, int32_t* tokens) {
  __shared__ float sv[kRowThreads];
  __shared__ int32_t si[kRowThreads];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float best;
  int32_t best_i;
  const bool nan = RowArgmaxOrNan(row, vocab, sv, si, best, best_i);
  if (threadIdx.x == 0) {
    tokens[blockIdx.x] = nan ? kDeviceSamplingFailedToken : best_i;
  }
}

// Order-preserving map of a float to uint32 (larger float -> larger key).
__device__ __forceinline__ uint32_t OrderedKey(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Radix select from the top over the OrderedKeys of row[0, vocab) (no
// NaN) with weights weight(i) >= 0 of type W (an integer type, so that
// every sum is exact and independent of the order the threads add in):
// the key v of the element where the weight summed from the largest key
// down first reaches `need` (0 < need <= the total weight), i.e. the
// largest K with sum(weight(i) : key(i) >= K) >= need. Four passes of 8-bit
// digits from the top, each a shared-memory histogram of the weights of the
// keys that match the digits chosen so far (runs of one digit are summed in
// registers first: logits cluster, so the first passes would otherwise
// send most atomics to one or two bins), then a 256-bin block scan from the
// top that picks the digit where the sum reaches the need. Four passes over
// the row instead of the 32 of a bisection on the key. Call from every
// thread of a block of >= 256 threads; returns the key to all.
template <typename W, typename WeightFn>
__device__ uint32_t SelectKeyFromTop(const float* row, int32_t vocab, W need,
                                     WeightFn weight) {
  __shared__ W hist[256];
  __shared__ uint32_t prefix;
  __shared__ W remaining;
  if (threadIdx.x == 0) {
    prefix = 0;
    remaining = need;
  }
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    if (threadIdx.x < 256) hist[threadIdx.x] = 0;
    __syncthreads();
    const uint32_t want = prefix;
    int32_t run_bin = -1;
    W run = 0;
    for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) {
      const uint32_t key = OrderedKey(row[i]);
      if ((key & mask) != want) continue;
      const int32_t bin = static_cast<int32_t>((key >> shift) & 255u);
      if (bin != run_bin) {
        if (run > 0) atomicAdd(&hist[run_bin], run);
        run_bin = bin;
        run = 0;
      }
      run += weight(i);
    }
    if (run > 0) atomicAdd(&hist[run_bin], run);
    __syncthreads();
    // Inclusive scan of the bins from digit 255 down (thread t holds digit
    // 255 - t), Hillis-Steele in place.
    const int32_t t = threadIdx.x;
    const W own = t < 256 ? hist[255 - t] : W{0};
    for (int offset = 1; offset < 256; offset *= 2) {
      const W add = t < 256 && t >= offset ? hist[255 - (t - offset)] : W{0};
      __syncthreads();
      if (t < 256) hist[255 - t] += add;
      __syncthreads();
    }
    const W left = remaining;
    __syncthreads();
    if (t < 256) {
      const W incl = hist[255 - t];
      if (incl >= left && incl - own < left) {
        prefix = want | (static_cast<uint32_t>(255 - t) << shift);
        remaining = left - (incl - own);
      }
    }
    mask |= 255u << shift;
    __syncthreads();
  }
  return prefix;
}

// Sum of v over the block, exact (integer atomics in shared memory).
__device__ unsigned long long BlockSumU64(unsigned long long v) {
  __shared__ unsigned long long sum;
  if (threadIdx.x == 0) sum = 0;
  __syncthreads();
  if (v != 0) atomicAdd(&sum, v);
  __syncthreads();
  const unsigned long long r = sum;
  __syncthreads();
  return r;
}

// Fixed-point scale of the top-p masses: a probability relative to the
// argmax's, in (0, 1], becomes an integer of at most 2^40, so a row of up
// to 2^23 tokens sums in 64 bits without overflow, exactly.
constexpr double kMassScale = 1099511627776.0;  // 2^40

__device__ __forceinline__ uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void __launch_bounds__(kRowThreads)
    SampleKernel(const float* logits, int32_t vocab,
                 const DeviceSamplingParams* params, int32_t* tokens) {
  __shared__ float sv[kRowThreads];
  __shared__ int32_t si[kRowThreads];
  __shared__ float scratch[32];
  __shared__ int32_t chosen;
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const DeviceSamplingParams p = params[blockIdx.x];
  // Argmax first: the greedy answer and the fallback of a draw.
  float best;
  int32_t best_i;
  if (RowArgmaxOrNan(row, vocab, sv, si, best, best_i)) {
    if (threadIdx.x == 0) tokens[blockIdx.x] = kDeviceSamplingFailedToken;
    return;
  }
  if (!(p.temperature > 0.0f)) {
    if (threadIdx.x == 0) tokens[blockIdx.x] = best_i;
    return;
  }
  const float inv_t = 1.0f / p.temperature;
  // top-k: the k-th largest key (exactly: the largest K with count(key >=
  // K) >= k; ties at K are all kept).
  const uint32_t k_threshold =
      p.top_k > 0 && p.top_k < vocab
          ? SelectKeyFromTop<int32_t>(row, vocab, p.top_k,
                                      [](int32_t) { return 1; })
          : 0;
  auto prob = [&](int32_t i) {
    const float v = row[i];
    if (v != v || OrderedKey(v) < k_threshold) return 0.0f;
    return expf((v - best) * inv_t);
  };
  // top-p: the largest key K with mass(key >= K) >= top_p * total, the
  // masses in fixed point (exact sums, independent of thread order).
  uint32_t p_threshold = k_threshold;
  if (p.top_p < 1.0f) {
    auto mass = [&](int32_t i) {
      return static_cast<unsigned long long>(static_cast<double>(prob(i)) *
                                             kMassScale);
    };
    unsigned long long total = 0;
    for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) total += mass(i);
    total = BlockSumU64(total);
    const unsigned long long need = min(
        total, static_cast<unsigned long long>(ceil(
                   static_cast<double>(p.top_p) * static_cast<double>(total))));
    if (need > 0) {
      p_threshold =
          SelectKeyFromTop<unsigned long long>(row, vocab, need, mass);
    }
  }
  // min_p after top-p, as the CPU sampler: prob(i) is relative to the
  // argmax's probability (exp(0) = 1), so the threshold is min_p itself.
  auto kept = [&](int32_t i) {
    if (OrderedKey(row[i]) < p_threshold) return 0.0f;
    const float q = prob(i);
    return q >= p.min_p ? q : 0.0f;
  };
  // Contiguous chunk per thread, block-wide inclusive scan of chunk sums.
  const int32_t chunk = (vocab + blockDim.x - 1) / blockDim.x;
  const int32_t begin = threadIdx.x * chunk;
  const int32_t end = min(vocab, begin + chunk);
  float mine = 0.0f;
  for (int32_t i = begin; i < end; ++i) mine += kept(i);
  sv[threadIdx.x] = mine;
  if (threadIdx.x == 0) chosen = -1;
  __syncthreads();
  for (int offset = 1; offset < static_cast<int>(blockDim.x); offset *= 2) {
    const float add = threadIdx.x >= offset ? sv[threadIdx.x - offset] : 0.0f;
    __syncthreads();
    sv[threadIdx.x] += add;
    __syncthreads();
  }
  const float kept_total = sv[blockDim.x - 1];
  const uint64_t bits = SplitMix64(p.seed ^ SplitMix64(p.step));
  const float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
  const float target = u * kept_total;
  float cum = sv[threadIdx.x] - mine;  // exclusive prefix
  if (mine > 0.0f && target >= cum && target < cum + mine) {
    int32_t pick = -1;
    for (int32_t i = begin; i < end; ++i) {
      const float pi = kept(i);
      if (pi > 0.0f) {
        pick = i;
        cum += pi;
        if (target < cum) break;
      }
    }
    atomicMax(&chosen, pick);
  }
  __syncthreads();
  if (threadIdx.x == 0) tokens[blockIdx.x] = chosen >= 0 ? chosen : best_i;
}

}  // namespace

const char* ModelKernelErrorString(int error) {
  return hipGetErrorString(static_cast<hipError_t>(error));
}

int LaunchEmbeddingGather(const void* embed, DType weight, const int32_t* ids,
                          int32_t num_tokens, int32_t hidden, float* x,
                          void* stream) {
  if (num_tokens == 0) return 0;
  return DispatchDType(weight, [&]<DType kW>() {
    hipLaunchKernelGGL(EmbeddingGatherKernel<kW>, dim3(num_tokens), dim3(256),
                       0, static_cast<hipStream_t>(stream),
                       static_cast<const typename Elem<kW>::T*>(embed), ids,
                       hidden, x);
    return LastError();
  });
}

int LaunchRmsNorm(const float* x, const int32_t* row_index, const float* w,
                  float eps, int32_t rows, int32_t hidden, void* y, DType act,
                  void* stream) {
  if (rows == 0) return 0;
  return DispatchDType(act, [&]<DType kA>() {
    hipLaunchKernelGGL(RmsNormKernel<kA>, dim3(rows), dim3(kNormThreads), 0,
                       static_cast<hipStream_t>(stream), x, row_index, w, eps,
                       hidden, static_cast<typename Elem<kA>::T*>(y));
    return LastError();
  });
}

int LaunchRopeAndCache(const RopeCacheLaunch& a, void* stream) {
  if (a.num_tokens == 0) return 0;
  return DispatchDType(a.act, [&]<DType kA>() {
    const size_t smem = a.q_norm != nullptr
                            ? sizeof(float) * (a.num_q_heads + a.num_kv_heads)
                            : 0;
    // About two blocks per SM of an H200 (132 SMs) in all, at most one
    // rotated head per block.
    constexpr int32_t kTargetBlocks = 264;
    const int32_t split =
        std::clamp((kTargetBlocks + a.num_tokens - 1) / a.num_tokens, 1,
                   a.num_q_heads + a.num_kv_heads);
    hipLaunchKernelGGL(RopeAndCacheKernel<kA>, dim3(a.num_tokens, split),
                       dim3(256), smem, static_cast<hipStream_t>(stream), a);
    return LastError();
  });
}

int LaunchAddBias(float* x, const float* bias, int32_t num_tokens,
                  int32_t hidden, void* stream) {
  if (num_tokens == 0) return 0;
  hipLaunchKernelGGL(AddBiasKernel, dim3(num_tokens), dim3(256), 0,
                     static_cast<hipStream_t>(stream), x, bias, hidden);
  return LastError();
}

int LaunchSiluAndMul(const float* gate_up, int32_t num_tokens, int32_t inter,
                     void* out, DType act, void* stream) {
  if (num_tokens == 0 || inter == 0) return 0;
  constexpr int kThreads = 256;
  const dim3 grid((inter + 4 * kThreads - 1) / (4 * kThreads),
                  std::min(num_tokens, 65535));
  return DispatchDType(act, [&]<DType kA>() {
    hipLaunchKernelGGL(SiluAndMulKernel<kA>, grid, dim3(kThreads), 0,
                       static_cast<hipStream_t>(stream), gate_up, num_tokens,
                       inter, static_cast<typename Elem<kA>::T*>(out));
    return LastError();
  });
}

int LaunchGenericAttention(const GenericAttentionLaunch& a, void* stream) {
  if (a.num_tokens == 0) return 0;
  if (a.geometry.head_dim > kMaxDimsPerLane * kWarpSize) {
    return static_cast<int>(hipErrorInvalidValue);
  }
  return DispatchDType(a.act, [&]<DType kA>() {
    hipLaunchKernelGGL(GenericAttentionKernel<kA>,
                       dim3(a.num_q_heads, a.num_tokens),
                       dim3(kGenericWarps * kWarpSize), 0,
                       static_cast<hipStream_t>(stream), a);
    return LastError();
  });
}

int LaunchCopyPage(void* const* layer_k, void* const* layer_v,
                   int32_t num_layers, const KvCacheGeometry& geometry,
                   int64_t src_page, int64_t dst_page, int32_t num_tokens,
                   void* stream) {
  if (num_layers == 0 || num_tokens == 0) return 0;
  if (geometry.elem_bytes == 4) {
    hipLaunchKernelGGL(CopyPageKernel<uint32_t>, dim3(num_layers, 2), dim3(256),
                       0, static_cast<hipStream_t>(stream), layer_k, layer_v,
                       geometry, src_page, dst_page, num_tokens);
  } else {
    hipLaunchKernelGGL(CopyPageKernel<uint16_t>, dim3(num_layers, 2), dim3(256),
                       0, static_cast<hipStream_t>(stream), layer_k, layer_v,
                       geometry, src_page, dst_page, num_tokens);
  }
  return LastError();
}

namespace {

// Launches SmallBatchGemmKernel<kD, rows, kNorm> for rows in [kM, kMaxM].
template <DType kD, bool kNorm, int kMaxM, int kM = 1>
int LaunchGemvRows(int32_t rows, dim3 grid, size_t smem, hipStream_t s,
                   const uint4* a, const uint4* w, float* c, int32_t n,
                   int32_t k8, float beta, const GemvNorm& norm) {
  if constexpr (kM > kMaxM) {
    return static_cast<int>(hipErrorInvalidValue);
  } else {
    if (rows != kM) {
      return LaunchGemvRows<kD, kNorm, kMaxM, kM + 1>(rows, grid, smem, s, a, w,
                                                      c, n, k8, beta, norm);
    }
    hipLaunchKernelGGL((SmallBatchGemmKernel<kD, kM, kNorm>), grid,
                       dim3(kGemvWarps * kWarpSize), smem, s, a, w, c, n, k8,
                       beta, norm);
    return LastError();
  }
}

template <bool kNorm, int kMaxM>
int LaunchGemv(DType dtype, int32_t rows, dim3 grid, size_t smem, void* stream,
               const void* a, const void* w, float* c, int32_t n, int32_t k,
               float beta, const GemvNorm& norm) {
  hipStream_t s = static_cast<hipStream_t>(stream);
  const uint4* a4 = static_cast<const uint4*>(a);
  const uint4* w4 = static_cast<const uint4*>(w);
  return dtype == DType::kBF16
             ? LaunchGemvRows<DType::kBF16, kNorm, kMaxM>(
                   rows, grid, smem, s, a4, w4, c, n, k / 8, beta, norm)
             : LaunchGemvRows<DType::kF16, kNorm, kMaxM>(
                   rows, grid, smem, s, a4, w4, c, n, k / 8, beta, norm);
}

}  // namespace

int LaunchSmallBatchGemm(const void* a, const void* w, float* c, int32_t rows,
                         int32_t n, int32_t k, float beta, DType dtype,
                         void* stream) {
  if (rows < 1 || rows > 16 || k % 8 != 0 || dtype == DType::kF32 ||
      !Aligned16(a) || !Aligned16(w)) {
    return static_cast<int>(hipErrorInvalidValue);
  }
  if (n == 0) return 0;
  const dim3 grid((n + kGemvWarps - 1) / kGemvWarps);
  return LaunchGemv<false, 16>(dtype, rows, grid, 0, stream, a, w, c, n, k,
                               beta, GemvNorm{});
}

int LaunchSmallBatchGemmRmsNorm(const float* x, const int32_t* row_index,
                                const float* norm_weight, float eps,
                                const void* w, float* c, int32_t rows,
                                int32_t n, int32_t k, float beta, DType dtype,
                                void* stream) {
  const size_t smem = static_cast<size_t>(rows) * k * 2;
  if (rows < 1 || rows > kFusedNormMaxRows || k % 8 != 0 ||
      dtype == DType::kF32 || smem > kFusedNormMaxBytes || !Aligned16(w)) {
    return static_cast<int>(hipErrorInvalidValue);
  }
  if (n == 0) return 0;
  // At most ~8 resident blocks per SM of a 132-SM H200: each block
  // normalizes its rows once, then streams several column groups.
  constexpr int32_t kMaxBlocks = 1024;
  const dim3 grid(std::min((n + kGemvWarps - 1) / kGemvWarps, kMaxBlocks));
  return LaunchGemv<true, kFusedNormMaxRows>(
      dtype, rows, grid, smem, stream, nullptr, w, c, n, k, beta,
      GemvNorm{x, row_index, norm_weight, eps});
}

int LaunchArgmax(const float* logits, int32_t rows, int32_t vocab,
                 int32_t* tokens, void* stream) {
  if (rows == 0) return 0;
  hipLaunchKernelGGL(ArgmaxKernel, dim3(rows), dim3(kRowThreads), 0,
                     static_cast<hipStream_t>(stream), logits, vocab, tokens);
  return LastError();
}

int LaunchSample(const float* logits, int32_t rows, int32_t vocab,
                 const DeviceSamplingParams* params, int32_t* tokens,
                 void* stream) {
  if (rows == 0) return 0;
  hipLaunchKernelGGL(SampleKernel, dim3(rows), dim3(kRowThreads), 0,
                     static_cast<hipStream_t>(stream), logits, vocab, params,
                     tokens);
  return LastError();
}

}  // namespace radixkv::worker::gpu
