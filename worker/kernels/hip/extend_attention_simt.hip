// Extend attention, portable SIMT kernel: one warp per query row, the lanes
// split head_dim, warp width from hip_compat.h (32 on NVIDIA, 64 on gfx9).
// The AMD path where the device has no MFMA (gfx906, ...) or with
// RADIXKV_EXTEND_KERNEL=portable, and the cross-check of the matrix-core
// kernels on NVIDIA (KernelPath::kPortable). Semantics and stages as in
// extend_attention.hip; the key loop has no tiles, so both stages walk keys
// one at a time (stage 2 up to the row itself: the causal early exit).
#include "worker/kernels/hip/hip_compat.h"
// clang-format off
#include "worker/kernels/attention_combine.h"
#include "worker/kernels/hip/extend_attention.h"
#include "worker/kv_cache_layout.h"
// clang-format on

namespace radixkv::worker::gpu::extend {
namespace {

constexpr int kThreads = 128;

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
  // Sliding window: keys from position lp + i - window_left on (prefix key j
  // is position j, new key j is lp + j); the loops start there.
  const int32_t lo = p.window_left >= 0 ? lp + i - p.window_left : 0;
  // Stage 1: prefix, no mask.
  int64_t k_delta[kPerLane], v_delta[kPerLane];
  const int64_t k0 = p.g.KOffset(0, kvh, 0), v0 = p.g.VOffset(0, kvh, 0);
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    k_delta[e] = p.g.KOffset(0, kvh, d0 + e) - k0;
    v_delta[e] = p.g.VOffset(0, kvh, d0 + e) - v0;
  }
  for (int32_t j = lo > 0 ? lo : 0; j < lp; ++j) {
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
  for (int32_t j = lo > lp ? lo - lp : 0; j <= i; ++j) {
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

}  // namespace

int LaunchPortable(ExtendParams p, const internal::ExtendLaunch& a) {
  // kWarpSize is exact on the host for the targets this project builds (32
  // on NVIDIA, 64 for hipcc's gfx9 targets; see hip_compat.h).
  const int rows_per_block = kThreads / kWarpSize;
  p.num_m_blocks = (a.max_extend_len + rows_per_block - 1) / rows_per_block;
  return WithHeadDimAndDtype(a, [&](auto d, auto bf16) {
    auto kernel =
        ExtendPortableKernel<decltype(d)::value, decltype(bf16)::value>;
    hipLaunchKernelGGL(
        kernel, dim3(p.num_m_blocks, a.num_q_heads, a.batch_size),
        dim3(kThreads), 0, static_cast<hipStream_t>(a.stream), p);
    return static_cast<int>(hipGetLastError());
  });
}

}  // namespace radixkv::worker::gpu::extend
