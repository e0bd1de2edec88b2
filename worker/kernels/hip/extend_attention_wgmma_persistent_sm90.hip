// Benchmark-only extend kernel (sm_90a): the work-item form of the
// warp-specialized wgmma kernel, FlashAttention-3's persistent tile
// scheduler, with one block per SM. Not in the serving library: it is linked
// only into :gpu_attention_persistent_ab, for the benchmark's A/B against the
// default (--extend-variants=default,persistent) and the device suite's run
// of the extend cases on it (RADIXKV_WGMMA_VARIANT=persistent). Measured not
// faster than the default on all three benchmark shapes; docs/kernel-notes.md
// "Hopper wgmma kernel".
//
// A work item is one (m-block, query head, sequence); block j processes
// items j, j + gridDim.x, ..., heaviest m-blocks of every sequence first
// across the whole grid (item i is m-block index i / (Hq * B)); items past a
// sequence's Le are skipped. The producer warpgroup loads each item's Q (into
// one of two Q buffers, as part of the item's first K/V tile, so `full` of
// that tile also publishes Q) and its K/V tiles while the consumers still
// work on the previous item and write its output; stage and mbarrier phase
// bookkeeping runs over one tile counter continued across items. A Q buffer
// is reused two items later, after the consumer warps released it on
// `q_empty`. RADIXKV_EXTEND_PERSISTENT_BLOCKS=N caps the grid at N blocks
// (testing: many items per block).
#include "worker/kernels/hip/hip_compat.h"
// clang-format off
#include <algorithm>
#include <cstdlib>

#include "worker/kernels/hip/attention_mma.h"
#include "worker/kernels/hip/attention_wgmma.h"
#include "worker/kernels/hip/extend_attention.h"
#include "worker/kernels/hip/extend_attention_wgmma_ws.h"
#include "worker/kv_cache_layout.h"
// clang-format on

#if !defined(RADIXKV_GPU_NVIDIA)
#error "extend_attention_wgmma_persistent_sm90.hip is NVIDIA-only (nvcc)"
#endif

namespace radixkv::worker::gpu::extend {
namespace {

struct ExtendItemsParams : ExtendParams {
  int32_t batch_size;
  int32_t num_items;  // num_m_blocks * Hq * B
};

// Two Q buffers, kWsStages K and V stages, the full / empty / q_empty
// mbarriers, and 1 KB of slack for the 1024-byte alignment.
template <int D>
constexpr size_t ExtendWgmmaItemsSmemBytes() {
  return 2 * static_cast<size_t>(128) * D * 2 +
         kWsStages * 2 * static_cast<size_t>(kWgmmaKeys) * D * 2 +
         (2 * kWsStages + 2) * sizeof(uint64_t) + 1024;
}

struct ExtendItem {
  int32_t b, h, m0;
};

__device__ __forceinline__ ExtendItem
DecodeExtendItem(const ExtendItemsParams& p, int32_t item) {
  ExtendItem w;
  const int32_t per_x = p.num_q_heads * p.batch_size;
  const int32_t x = item / per_x;  // m-block index counted from the heaviest
  const int32_t rem = item - x * per_x;
  w.b = rem / p.num_q_heads;
  w.h = rem - w.b * p.num_q_heads;
  w.m0 = (p.num_m_blocks - 1 - x) * 128;
  return w;
}

template <int D, bool kBf16>
__global__ void __launch_bounds__(384, 1)
    ExtendWgmmaItemsKernel(ExtendItemsParams p) {
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

template <int D, bool kBf16>
int LaunchExtendWgmmaItems(const ExtendParams& base,
                           const internal::ExtendLaunch& a) {
  auto kernel = ExtendWgmmaItemsKernel<D, kBf16>;
  static const bool present = WgmmaBinaryPresent(kernel);
  if (!present) return kNotLaunched;
  ExtendItemsParams p;
  static_cast<ExtendParams&>(p) = base;
  p.num_m_blocks = (a.max_extend_len + 127) / 128;
  p.batch_size = a.batch_size;
  p.num_items = p.num_m_blocks * a.num_q_heads * a.batch_size;
  p.v_desc_lbo = kVDescLbo;
  p.v_desc_sbo = kVDescSbo;
  int device = 0;
  int sms = 0;
  if (hipGetDevice(&device) != hipSuccess ||
      hipDeviceGetAttribute(&sms, hipDeviceAttributeMultiprocessorCount,
                            device) != hipSuccess) {
    return static_cast<int>(hipGetLastError());
  }
  if (const char* env = std::getenv("RADIXKV_EXTEND_PERSISTENT_BLOCKS");
      env != nullptr && std::atoi(env) > 0) {
    sms = std::min(sms, std::atoi(env));
  }
  const int grid = std::min(p.num_items, sms);
  const size_t smem = ExtendWgmmaItemsSmemBytes<D>();
  if (int err = SetSmemLimit(kernel, smem)) return err;
  hipLaunchKernelGGL(kernel, dim3(grid), dim3(384), smem,
                     static_cast<hipStream_t>(a.stream), p);
  return static_cast<int>(hipGetLastError());
}

}  // namespace

int LaunchWgmmaPersistent(ExtendParams p, const internal::ExtendLaunch& a) {
  return WithHeadDimAndDtype(a, [&](auto d, auto bf16) {
    constexpr int D = decltype(d)::value;
    if constexpr (D == 64 || D == 128) {
      return LaunchExtendWgmmaItems<D, decltype(bf16)::value>(p, a);
    } else {
      return kNotLaunched;
    }
  });
}

}  // namespace radixkv::worker::gpu::extend
