// Extend attention on AMD matrix cores (MFMA 16x16x16 bf16/fp16; gfx90a and
// gfx94x, wave64) with the wavefront tile of attention_mfma.h. Compiled in
// CI, never run (no AMD hardware): docs/kernel-notes.md "AMD / Hygon path".
// The dispatch (extend_attention.hip) takes it when the device's
// gcnArchName has MFMA; gfx906's pass compiles a trap body.
#include "worker/kernels/hip/hip_compat.h"
// clang-format off
#include "worker/kernels/hip/attention_mfma.h"
#include "worker/kernels/hip/extend_attention.h"
#include "worker/kv_cache_layout.h"
// clang-format on

#if !defined(RADIXKV_GPU_AMD)
#error "extend_attention_mfma.hip is AMD-only (hipcc)"
#endif

namespace radixkv::worker::gpu::extend {
namespace {

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
// in base 2, O^T += V^T P^T). Stages, early exit and heavy-first order as
// described in extend_attention.hip. Single-buffered (no async copy on
// gfx9): a first version whose index math is checked on the CPU
// (attention_mfma_test.cc) and which has never run on AMD hardware.
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

  const mfma::BlockTiles tiles(lp, le, m0, kMfmaBlockM, kN, p.window_left);
  const int32_t num_tiles = tiles.num_tiles();

  const int32_t wave_row0 = m0 + wave * 16;  // first extend row of the wave
  const int32_t my_row = wave_row0 + mfma::LaneRow(lane);
  Wave att;
  att.Init(my_row < le ? p.q + (static_cast<int64_t>(qo_start + my_row) *
                                    p.num_q_heads +
                                h) *
                                   D
                       : nullptr);

  for (int32_t it = 0; it < num_tiles; ++it) {
    const bool prefix = tiles.prefix(it);
    const int32_t key0 = tiles.key0(it, kN);
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
    att.Tile(k_tile, vt_tile, prefix, key0, lp, wave_row0, p.scale_log2,
             p.window_left);
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

template <int D, bool kBf16>
int LaunchExtendMfma(ExtendParams p, const internal::ExtendLaunch& a) {
  p.num_m_blocks = (a.max_extend_len + kMfmaBlockM - 1) / kMfmaBlockM;
  const size_t smem = ExtendMfmaSmemBytes<D>();
  auto kernel = ExtendMfmaKernel<D, kBf16>;
  if (int err = SetSmemLimit(kernel, smem)) return err;
  hipLaunchKernelGGL(kernel, dim3(p.num_m_blocks, a.num_q_heads, a.batch_size),
                     dim3(kMfmaWaves * kWarpSize), smem,
                     static_cast<hipStream_t>(a.stream), p);
  return static_cast<int>(hipGetLastError());
}

}  // namespace

int LaunchMfma(ExtendParams p, const internal::ExtendLaunch& a) {
  return WithHeadDimAndDtype(a, [&](auto d, auto bf16) {
    return LaunchExtendMfma<decltype(d)::value, decltype(bf16)::value>(p, a);
  });
}

}  // namespace radixkv::worker::gpu::extend
