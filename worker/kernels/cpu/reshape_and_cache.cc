#include "worker/kernels/cpu/reshape_and_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "worker/kv_cache_layout.h"
#include "worker/numeric_types.h"

namespace radixkv::worker {
namespace {

// Writes one token's K and V rows (all kv heads) into `slot`.
template <typename T>
void WriteToken(const KvCacheGeometry& g, T* k_cache, T* v_cache,
                const float* k_row, const float* v_row, int64_t slot) {
  const int32_t H = g.num_kv_heads, D = g.head_dim;
  for (int32_t h = 0; h < H; ++h) {
    const float* k_src = k_row + static_cast<int64_t>(h) * D;
    const float* v_src = v_row + static_cast<int64_t>(h) * D;
    if (g.layout != KvLayout::kVllm) {
      T* k_dst = k_cache + g.KOffset(slot, h, 0);
      T* v_dst = v_cache + g.VOffset(slot, h, 0);
      for (int32_t d = 0; d < D; ++d) k_dst[d] = FromFloat<T>(k_src[d]);
      for (int32_t d = 0; d < D; ++d) v_dst[d] = FromFloat<T>(v_src[d]);
    } else {
      // K: runs of x contiguous dims, runs page_size * x apart.
      // V: one element per dim, page_size apart (vLLM's V, background.md §1.5).
      const int32_t x = g.vllm_x();
      const int64_t run_stride = static_cast<int64_t>(g.page_size) * x;
      T* k_dst = k_cache + g.KOffset(slot, h, 0);
      for (int32_t d0 = 0; d0 < D; d0 += x) {
        T* run = k_dst + (d0 / x) * run_stride;
        for (int32_t i = 0; i < x; ++i) run[i] = FromFloat<T>(k_src[d0 + i]);
      }
      T* v_dst = v_cache + g.VOffset(slot, h, 0);
      for (int32_t d = 0; d < D; ++d) {
        v_dst[static_cast<int64_t>(d) * g.page_size] = FromFloat<T>(v_src[d]);
      }
    }
  }
}

template <typename T>
void ReshapeAndCacheTyped(KvPool& pool, int layer, const float* k,
                          const float* v,
                          absl::Span<const int64_t> out_cache_loc,
                          CpuThreadPool* threads) {
  const KvCacheGeometry& g = pool.geometry();
  T* k_cache = static_cast<T*>(pool.k_data(layer));
  T* v_cache = static_cast<T*>(pool.v_data(layer));
  const int64_t row = static_cast<int64_t>(g.num_kv_heads) * g.head_dim;
  const int64_t num_tokens = static_cast<int64_t>(out_cache_loc.size());
  // A task writes a chunk of tokens: the per-token work is small.
  constexpr int64_t kTokensPerTask = 16;
  const int64_t num_tasks = (num_tokens + kTokensPerTask - 1) / kTokensPerTask;
  ParallelFor(threads, num_tasks, [&](int64_t task) {
    const int64_t end = std::min(num_tokens, (task + 1) * kTokensPerTask);
    for (int64_t t = task * kTokensPerTask; t < end; ++t) {
      const int64_t slot = out_cache_loc[t];
      if (slot < 0) continue;  // padding token
      WriteToken(g, k_cache, v_cache, k + t * row, v + t * row, slot);
    }
  });
}

}  // namespace

void ReshapeAndCache(KvPool& pool, int layer, const float* k, const float* v,
                     absl::Span<const int64_t> out_cache_loc,
                     CpuThreadPool* threads) {
  const int64_t capacity = pool.capacity_slots();
  for (size_t t = 0; t < out_cache_loc.size(); ++t) {
    if (out_cache_loc[t] >= capacity) {
      std::fprintf(stderr,
                   "ReshapeAndCache: out_cache_loc[%zu] = %lld outside the "
                   "pool (capacity %lld slots)\n",
                   t, static_cast<long long>(out_cache_loc[t]),
                   static_cast<long long>(capacity));
      std::abort();
    }
  }
  switch (pool.dtype()) {
    case DType::kF32:
      return ReshapeAndCacheTyped<float>(pool, layer, k, v, out_cache_loc,
                                         threads);
    case DType::kBF16:
      return ReshapeAndCacheTyped<bf16_t>(pool, layer, k, v, out_cache_loc,
                                          threads);
    case DType::kF16:
      return ReshapeAndCacheTyped<fp16_t>(pool, layer, k, v, out_cache_loc,
                                          threads);
  }
}

}  // namespace radixkv::worker
