#include "worker/gpu/gpu_kv_pool.h"

#include <algorithm>

#include "worker/gpu/device_memory.h"
#include "worker/gpu/gpu_status.h"
#include "worker/gpu/model_kernels.h"

namespace radixkv::worker::gpu {

namespace {

// The per-layer views of pool->base and the device arrays of their K and V
// pointers (counted in *table_bytes).
absl::Status MapLayers(DType dtype, int32_t layers, DeviceMemory* memory,
                       int64_t* table_bytes, GpuKvPool* pool) {
  const int64_t layer_bytes = pool->geometry.BytesPerLayer();
  std::vector<void*> ks, vs;
  for (int l = 0; l < layers; ++l) {
    GpuKvCache cache;
    cache.geometry = pool->geometry;
    cache.dtype = dtype;
    cache.k = pool->base + (2 * l) * layer_bytes;
    cache.v = pool->base + (2 * l + 1) * layer_bytes;
    pool->caches.push_back(cache);
    ks.push_back(cache.k);
    vs.push_back(cache.v);
  }
  RADIXKV_RETURN_IF_ERROR(
      memory->AllocT(ks.size(), &pool->layer_k, table_bytes));
  RADIXKV_RETURN_IF_ERROR(
      memory->AllocT(vs.size(), &pool->layer_v, table_bytes));
  hipMemcpy(pool->layer_k, ks.data(), ks.size() * sizeof(void*),
            hipMemcpyHostToDevice);
  hipMemcpy(pool->layer_v, vs.data(), vs.size() * sizeof(void*),
            hipMemcpyHostToDevice);
  return absl::OkStatus();
}

}  // namespace

bool SizesPoolFromFreeMemory(const GpuModelExecutorOptions& o) {
  return o.kv_capacity_slots <= 0 && o.kv_budget_bytes <= 0;
}

int64_t KvPoolPages(const GpuModelExecutorOptions& o, int64_t page_bytes,
                    size_t free_device_bytes) {
  if (o.kv_capacity_slots > 0) {
    return (o.kv_capacity_slots + o.page_size - 1) / o.page_size;
  }
  if (o.kv_budget_bytes > 0) return o.kv_budget_bytes / page_bytes;
  const double usable = std::max(
      0.0, static_cast<double>(free_device_bytes) - (512.0 * (1 << 20)));
  return static_cast<int64_t>(usable * o.memory_fraction) / page_bytes;
}

absl::StatusOr<GpuKvPool> AllocateKvPool(const GpuModelExecutorOptions& o,
                                         const model::ModelConfig& c,
                                         bool tensor_core_kernels,
                                         DeviceMemory* memory,
                                         int64_t* table_bytes) {
  const int32_t L = c.num_hidden_layers;
  const int64_t slot_bytes =
      2 * int64_t{L} * c.num_key_value_heads * c.head_dim * DTypeBytes(o.dtype);
  size_t free_bytes = 0, total_bytes = 0;
  if (SizesPoolFromFreeMemory(o)) {
    RADIXKV_RETURN_IF_ERROR(
        RuntimeError(hipMemGetInfo(&free_bytes, &total_bytes), "memGetInfo"));
  }
  const int64_t num_pages =
      KvPoolPages(o, slot_bytes * o.page_size, free_bytes);
  if (num_pages < 1) {
    return absl::ResourceExhaustedError("KV pool would have no pages");
  }
  GpuKvPool pool;
  pool.geometry =
      KvCacheGeometry{num_pages,  o.page_size,         c.num_key_value_heads,
                      c.head_dim, DTypeBytes(o.dtype), o.kv_layout};
  void* p = nullptr;
  RADIXKV_RETURN_IF_ERROR(memory->Alloc(
      static_cast<size_t>(2 * pool.geometry.BytesPerLayer() * L), &p, nullptr));
  pool.base = static_cast<char*>(p);
  RADIXKV_RETURN_IF_ERROR(MapLayers(o.dtype, L, memory, table_bytes, &pool));
  if (tensor_core_kernels) {
    pool.copy_scratch_ops = 256;
    pool.copy_scratch_bytes = CopyBlocksScratchBytes(pool.copy_scratch_ops, L);
    RADIXKV_RETURN_IF_ERROR(memory->Alloc(pool.copy_scratch_bytes,
                                          &pool.copy_scratch, table_bytes));
  }
  return pool;
}

absl::Status CopyPages(const GpuKvPool& pool, absl::Span<const PageCopy> ops,
                       void* stream) {
  if (ops.empty()) return absl::OkStatus();
  if (ops.size() <= pool.copy_scratch_ops) {
    return CopyBlocks(pool.caches, ops, pool.copy_scratch,
                      pool.copy_scratch_bytes, stream);
  }
  const int32_t layers = static_cast<int32_t>(pool.caches.size());
  for (const PageCopy& op : ops) {
    RADIXKV_RETURN_IF_ERROR(KernelError(
        LaunchCopyPage(pool.layer_k, pool.layer_v, layers, pool.geometry,
                       op.src_page, op.dst_page, op.num_tokens, stream),
        "copy page"));
  }
  return absl::OkStatus();
}

}  // namespace radixkv::worker::gpu
