// Extend attention on Hopper wgmma (sm_90a, head_dim 64 / 128): the default
// on the H200. ExtendWgmmaWsKernel is FlashAttention-3's warp-specialized
// split adapted to paged K/V (pieces in extend_attention_wgmma_ws.h): a
// producer warpgroup gathers K/V tiles through kv_indices into 4 stages, two
// consumer warpgroups of 64 query rows each run S = Q K^T, the online
// softmax and P V on wgmma. Stages, causal bounds and heavy-first block
// order as described in extend_attention.hip; design and measurements in
// docs/kernel-notes.md "Hopper wgmma kernel".
//
// The instruction bodies exist only in the sm_90a device pass
// (RADIXKV_HAS_WGMMA); the launcher returns kNotLaunched when the build has
// no sm_90a binary of the kernel, and the dispatch falls back to mma.sync.
//
// Build definition RADIXKV_TEST_SWAP_V_DESCRIPTOR (only the device test's
// negative-control library :gpu_attention_vdesc_swap sets it): the launcher
// passes the V descriptor's LBO and SBO swapped, a wrong operand layout that
// the device test's extend cases must fail on.
#include "worker/kernels/hip/hip_compat.h"
// clang-format off
#include "worker/kernels/hip/attention_mma.h"
#include "worker/kernels/hip/attention_wgmma.h"
#include "worker/kernels/hip/extend_attention.h"
#include "worker/kernels/hip/extend_attention_wgmma_ws.h"
#include "worker/kv_cache_layout.h"
// clang-format on

#if !defined(RADIXKV_GPU_NVIDIA)
#error "extend_attention_wgmma_sm90.hip is NVIDIA-only (nvcc)"
#endif

namespace radixkv::worker::gpu::extend {
namespace {

// Q tile, kWsStages K and V stages (SW128 layout), the full / empty
// mbarriers, and 1 KB of slack for the 1024-byte alignment.
template <int D>
constexpr size_t ExtendWgmmaWsSmemBytes() {
  return static_cast<size_t>(128) * D * 2 +
         kWsStages * 2 * static_cast<size_t>(kWgmmaKeys) * D * 2 +
         2 * kWsStages * sizeof(uint64_t) + 1024;
}

// One block per (m-block of 128 query rows, query head, sequence). The
// consumer warpgroups load Q and meet at a named barrier while the producer
// already gathers the first tiles; each producer warp gathers 16 keys of
// every tile on its own (WsGatherTile: kv_indices two tiles ahead, row
// addresses shared by warp shuffles, fully unrolled copies) and publishes
// tile i after issuing tile i + kWsLag. No block-wide barrier after the
// start, so the consumers drift apart and one's softmax overlaps the other's
// wgmma.
template <int D, bool kBf16>
__global__ void __launch_bounds__(384, 1) ExtendWgmmaWsKernel(ExtendParams p) {
#if RADIXKV_HAS_WGMMA
  constexpr int kN = kWgmmaKeys;
  constexpr int kBlockM = 128;
  constexpr int kStages = kWsStages;
  constexpr int kChunksPerRow = D / 8;
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
  uint64_t* full =
      reinterpret_cast<uint64_t*>(v_tiles + kStages * kN * D);  // [kStages]
  uint64_t* empty = full + kStages;                             // [kStages]

  if (tid == 0) {
    for (int st = 0; st < kStages; ++st) {
      wgmma::MbarrierInit(&full[st], 128);  // every producer thread
      wgmma::MbarrierInit(&empty[st], 8);   // lane 0 of each consumer warp
    }
  }
  __syncthreads();  // the barrier initialization is visible
  if (wg != 0) {
    // The 256 consumer threads load Q rows [m0, m0 + 128), zero beyond Le.
    const int thread = tid - 128;
    const int chunk = thread % kChunksPerRow;
#pragma unroll
    for (int r = thread / kChunksPerRow; r < kBlockM;
         r += 256 / kChunksPerRow) {
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
    wgmma::NamedBarrierSync<2, 256>();
  }

  const int32_t prefix_tiles = (lp + kN - 1) / kN;
  const int32_t extend_end = le < m0 + kBlockM ? le : m0 + kBlockM;
  const int32_t extend_tiles = (extend_end + kN - 1) / kN;
  const int32_t num_tiles = prefix_tiles + extend_tiles;
  constexpr uint32_t kTileBytes = kN * D * 2;

  if (wg == 0) {
    // ------------------------------------------------------------ producer
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

  // -------------------------------------------------------------- consumers
  const int cw = wg - 1;                           // consumer warpgroup 0 / 1
  const int32_t warp_row0 = m0 + (warp - 4) * 16;  // first row of this warp
  const int32_t wg_row0 = m0 + cw * 64;
  // Tiles this warpgroup computes: a prefix [0, wg_tiles) of the block's
  // tiles (extend tiles entirely above its 64 rows contribute nothing; a
  // warpgroup past Le computes nothing). Uniform over the warpgroup, as
  // wgmma requires.
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

  for (int32_t it = 0; it < wg_tiles; ++it) {
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

template <int D, bool kBf16>
int LaunchExtendWgmmaWs(ExtendParams p, const internal::ExtendLaunch& a) {
  auto kernel = ExtendWgmmaWsKernel<D, kBf16>;
  static const bool present = WgmmaBinaryPresent(kernel);
  if (!present) return kNotLaunched;
  p.num_m_blocks = (a.max_extend_len + 127) / 128;
#if defined(RADIXKV_TEST_SWAP_V_DESCRIPTOR)
  p.v_desc_lbo = kVDescSbo;  // deliberately wrong: the negative control
  p.v_desc_sbo = kVDescLbo;
#else
  p.v_desc_lbo = kVDescLbo;
  p.v_desc_sbo = kVDescSbo;
#endif
  const size_t smem = ExtendWgmmaWsSmemBytes<D>();
  if (int err = SetSmemLimit(kernel, smem)) return err;
  hipLaunchKernelGGL(kernel, dim3(p.num_m_blocks, a.num_q_heads, a.batch_size),
                     dim3(384), smem, static_cast<hipStream_t>(a.stream), p);
  return static_cast<int>(hipGetLastError());
}

}  // namespace

int LaunchWgmma(ExtendParams p, const internal::ExtendLaunch& a) {
  return WithHeadDimAndDtype(a, [&](auto d, auto bf16) {
    constexpr int D = decltype(d)::value;
    if constexpr (D == 64 || D == 128) {
      return LaunchExtendWgmmaWs<D, decltype(bf16)::value>(p, a);
    } else {
      return kNotLaunched;
    }
  });
}

}  // namespace radixkv::worker::gpu::extend
