// KvPool: the physical paged KV cache of one worker, in host memory (CPU
// backend). Per layer one K and one V tensor of KvCacheGeometry's layout,
// elements of DType (fp32 / bf16 / fp16). Allocated once at start and kept for
// the life of the worker (one-time allocation from a memory budget,
// docs/background.md §1.2). Which slot holds which token is decided by the
// cache service, not here; the pool only owns bytes and the address arithmetic
// (worker/kv_cache_layout.h).
//
// Memory: one anonymous mapping, zero-filled lazily by the OS, backed by
// transparent huge pages where available (kernels gather rows from pages in
// arbitrary order); 64-byte aligned tensors, layer l's K at
// base + 2l * AlignUp64(BytesPerLayer()), its V right after.
#ifndef RADIXKV_WORKER_KV_POOL_H_
#define RADIXKV_WORKER_KV_POOL_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "worker/kv_cache_layout.h"
#include "worker/numeric_types.h"

namespace radixkv::worker {

class KvPool {
 public:
  // Creates a pool of num_layers layers with the given geometry.
  // geometry.elem_bytes may be 0 (filled from dtype); otherwise it must equal
  // DTypeBytes(dtype).
  // Errors: INVALID_ARGUMENT if num_layers < 1, num_pages < 1, page_size is
  // not a power of two in [1, 128], num_kv_heads < 1, head_dim < 1, head_dim
  // not a multiple of 16 / elem_bytes for KvLayout::kVllm, or elem_bytes
  // mismatching dtype; RESOURCE_EXHAUSTED if the memory cannot be mapped.
  static absl::StatusOr<std::unique_ptr<KvPool>> Create(
      int num_layers, KvCacheGeometry geometry, DType dtype);

  // Creates the largest pool that fits budget_bytes (K and V of every layer):
  // num_pages = floor(budget_bytes / (2 * num_layers * page_size *
  // num_kv_heads * head_dim * DTypeBytes(dtype))).
  // Errors: as Create; INVALID_ARGUMENT if the budget holds no full page.
  static absl::StatusOr<std::unique_ptr<KvPool>> CreateFromBudget(
      int num_layers, int64_t budget_bytes, int32_t page_size,
      int32_t num_kv_heads, int32_t head_dim, KvLayout layout, DType dtype);

  // Creates a pool holding at least capacity_slots token positions:
  // num_pages = ceil(capacity_slots / page_size). Errors: as Create.
  static absl::StatusOr<std::unique_ptr<KvPool>> CreateFromCapacity(
      int num_layers, int64_t capacity_slots, int32_t page_size,
      int32_t num_kv_heads, int32_t head_dim, KvLayout layout, DType dtype);

  // Bytes one slot occupies over all layers, K and V:
  // 2 * num_layers * num_kv_heads * head_dim * DTypeBytes(dtype).
  static int64_t BytesPerSlot(int num_layers, int32_t num_kv_heads,
                              int32_t head_dim, DType dtype);

  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  // Start of layer `layer`'s K / V tensor (element type per dtype()), 64-byte
  // aligned. layer in [0, num_layers()); out of range is a programming error
  // (checked, aborts).
  void* k_data(int layer);
  void* v_data(int layer);
  const void* k_data(int layer) const;
  const void* v_data(int layer) const;

  const KvCacheGeometry& geometry() const { return geometry_; }
  DType dtype() const { return dtype_; }
  int num_layers() const { return num_layers_; }
  // Token positions per layer: num_pages * page_size.
  int64_t capacity_slots() const { return geometry_.capacity_slots(); }
  int32_t page_size() const { return geometry_.page_size; }
  // Bytes of K plus V over all layers.
  int64_t total_bytes() const;

 private:
  KvPool(int num_layers, KvCacheGeometry geometry, DType dtype, void* mapping,
         size_t mapped_bytes, void* base);

  int num_layers_;
  KvCacheGeometry geometry_;
  DType dtype_;
  void* mapping_;        // what mmap returned (for munmap)
  size_t mapped_bytes_;  // bytes mapped
  void* base_;           // first tensor, 2 MiB aligned inside the mapping
  int64_t layer_stride_bytes_;  // bytes of one K (or V) tensor, 64-aligned
};

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_KV_POOL_H_
