// ReshapeAndCache: write the new tokens' K and V (fp32 activations) into
// their slots of the paged KV pool, converting to the pool's dtype (round to
// nearest even) and scattering into its layout (background.md §1.5; vLLM's
// reshape_and_cache kernel). Same semantics as the HIP kernel.
#ifndef RADIXKV_WORKER_KERNELS_CPU_RESHAPE_AND_CACHE_H_
#define RADIXKV_WORKER_KERNELS_CPU_RESHAPE_AND_CACHE_H_

#include <cstdint>

#include "absl/types/span.h"
#include "worker/kernels/cpu/cpu_thread_pool.h"
#include "worker/kv_pool.h"

namespace radixkv::worker {

// Writes token t's K/V to slot out_cache_loc[t] of layer `layer`.
//   k, v           [num_tokens, num_kv_heads, head_dim] fp32, contiguous
//                  (num_tokens = out_cache_loc.size(), heads/dims from
//                  pool.geometry())
//   out_cache_loc  [num_tokens] slots in [0, pool.capacity_slots()); a
//                  negative slot marks a padding token and is skipped (vLLM
//                  slot_mapping convention).
//   threads        optional; parallel over tokens.
// A slot >= capacity_slots() or a layer out of range is a programming error
// and aborts (memory safety over silent corruption). Duplicate slots: the
// last token wins only when run inline; callers must not pass duplicates.
void ReshapeAndCache(KvPool& pool, int layer, const float* k, const float* v,
                     absl::Span<const int64_t> out_cache_loc,
                     CpuThreadPool* threads = nullptr);

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_KERNELS_CPU_RESHAPE_AND_CACHE_H_
