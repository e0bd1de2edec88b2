// The paged KV pool on the device: K and V of every layer in one allocation
// (layer l's K at 2l * BytesPerLayer, its V at (2l + 1) * BytesPerLayer),
// each addressed by worker/kv_cache_layout.h, and the cache service's
// copy-on-write page copies over it.
#ifndef RADIXKV_WORKER_GPU_GPU_KV_POOL_H_
#define RADIXKV_WORKER_GPU_GPU_KV_POOL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/model_config.h"
#include "worker/gpu/gpu_model_executor.h"
#include "worker/kernels/hip/gpu_attention.h"
#include "worker/kv_cache_layout.h"

namespace radixkv::worker::gpu {

class DeviceMemory;

struct GpuKvPool {
  KvCacheGeometry geometry;
  char* base = nullptr;            // device, 2 * layers * BytesPerLayer
  std::vector<GpuKvCache> caches;  // per layer
  void** layer_k = nullptr;        // device [layers] of caches[l].k
  void** layer_v = nullptr;        // device [layers] of caches[l].v
  void* copy_scratch = nullptr;    // CopyBlocks staging (tensor cores)
  size_t copy_scratch_bytes = 0;
  size_t copy_scratch_ops = 0;  // ops one CopyBlocks call stages
};

// True when the pool is sized from the free device memory: neither
// kv_capacity_slots nor kv_budget_bytes is set.
bool SizesPoolFromFreeMemory(const GpuModelExecutorOptions& options);

// Pages of the pool whose pages take page_bytes each (K + V, all layers):
// kv_capacity_slots rounded up to pages, else kv_budget_bytes rounded down
// to pages, else memory_fraction of free_device_bytes less 512 MiB of
// headroom (graphs, BLAS internals, the metadata block), rounded down.
// free_device_bytes is read only in the last case.
int64_t KvPoolPages(const GpuModelExecutorOptions& options, int64_t page_bytes,
                    size_t free_device_bytes);

// Allocates the pool for `options` (dtype, page_size, kv_layout, size) and
// the per-layer pointer arrays of the generic copy kernel, plus with
// tensor-core kernels the CopyBlocks scratch for 256 ops. The pool's bytes
// are counted nowhere (pool_bytes()), the pointer arrays' and scratch's in
// *table_bytes. Errors: RESOURCE_EXHAUSTED (no page fits, out of memory),
// INTERNAL.
absl::StatusOr<GpuKvPool> AllocateKvPool(const GpuModelExecutorOptions& options,
                                         const model::ModelConfig& config,
                                         bool tensor_core_kernels,
                                         DeviceMemory* memory,
                                         int64_t* table_bytes);

// Enqueues `ops` (validated, worker/kernels/cpu/copy_blocks.h semantics) on
// `stream` (a hipStream_t) for every layer: one CopyBlocks call when the
// pool has scratch for them all (tensor-core kernels, at most
// copy_scratch_ops ops), else one generic kernel per op. Errors:
// CopyBlocks', INTERNAL for a launch error.
absl::Status CopyPages(const GpuKvPool& pool, absl::Span<const PageCopy> ops,
                       void* stream);

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_GPU_KV_POOL_H_
