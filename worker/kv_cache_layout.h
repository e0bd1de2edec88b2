// Paged KV cache geometry and THE address function of the pool.
//
// Every kernel (CPU in worker/kernels/cpu/, HIP on the GPU backend) computes
// element offsets through KvCacheGeometry::KOffset / VOffset, so a layout is
// defined in exactly one place. Header-only; usable from host C++ and from
// HIP/CUDA device code (no Abseil, no std containers).
//
// Terms (docs/background.md §1.2, §1.5):
//   page      a physical block of page_size consecutive token positions;
//   slot      a token position in the pool: slot = page * page_size + offset,
//             0 <= offset < page_size (the cache service hands out slots);
//   B, H, D   page_size, num_kv_heads, head_dim;
//   x         16 / elem_bytes: elements per 16-byte vector (vLLM K layout).
//
// Layouts, per layer, K and V each a separate tensor (element units):
//   kBSHD  K,V [num_pages, B, H, D]        (default; SGLang token pool when
//          offset = ((page*B + off)*H + h)*D + d     page_size == 1)
//   kBHSD  K,V [num_pages, H, B, D]
//          offset = ((page*H + h)*B + off)*D + d
//   kVllm  K [num_pages, H, D/x, B, x]
//          offset = (((page*H + h)*(D/x) + d/x)*B + off)*x + d%x
//          V [num_pages, H, D, B]          (vLLM's V layout)
//          offset = ((page*H + h)*D + d)*B + off
//
// All offsets are int64_t: pools with more than 2^31 elements per layer are
// normal (e.g. 2^20 pages * 16 * 8 heads * 128 dims = 2^34 elements).
#ifndef RADIXKV_WORKER_KV_CACHE_LAYOUT_H_
#define RADIXKV_WORKER_KV_CACHE_LAYOUT_H_

#include <stdint.h>

#include "worker/numeric_types.h"  // RADIXKV_HOST_DEVICE

namespace radixkv::worker {

// Memory layout of one layer's K and V tensors (background.md §1.5). The
// numeric values are stable (they may appear in configs and kernel launch
// arguments).
enum class KvLayout : int {
  kBSHD = 0,  // [num_pages, page_size, num_kv_heads, head_dim]
  kBHSD = 1,  // [num_pages, num_kv_heads, page_size, head_dim]
  kVllm =
      2,  // K [pages, heads, head_dim/x, page_size, x], V [.., D, page_size]
};

// Human-readable name: "bshd", "bhsd", "vllm".
RADIXKV_HOST_DEVICE inline constexpr const char* KvLayoutName(KvLayout l) {
  return l == KvLayout::kBSHD ? "bshd"
                              : (l == KvLayout::kBHSD ? "bhsd" : "vllm");
}

// Shape of one layer of the paged KV pool plus the address arithmetic.
// Plain aggregate: copy it freely into kernel arguments.
//
// Validity (checked by KvPool::Create, not here): num_pages >= 1,
// page_size >= 1, num_kv_heads >= 1, head_dim >= 1, elem_bytes in {2, 4},
// and for kVllm head_dim % (16 / elem_bytes) == 0.
struct KvCacheGeometry {
  int64_t num_pages = 0;     // physical pages per layer
  int32_t page_size = 0;     // tokens (slots) per page
  int32_t num_kv_heads = 0;  // H
  int32_t head_dim = 0;      // D, elements
  int32_t elem_bytes = 0;    // bytes per stored element (4 fp32, 2 bf16/fp16)
  KvLayout layout = KvLayout::kBSHD;

  // Total token positions (slots) per layer: num_pages * page_size.
  RADIXKV_HOST_DEVICE int64_t capacity_slots() const {
    return num_pages * static_cast<int64_t>(page_size);
  }

  // Elements of ONE of K or V for one layer:
  // num_pages * page_size * num_kv_heads * head_dim.
  RADIXKV_HOST_DEVICE int64_t ElementsPerLayer() const {
    return capacity_slots() * static_cast<int64_t>(num_kv_heads) *
           static_cast<int64_t>(head_dim);
  }

  // Bytes of one of K or V for one layer: ElementsPerLayer() * elem_bytes.
  RADIXKV_HOST_DEVICE int64_t BytesPerLayer() const {
    return ElementsPerLayer() * static_cast<int64_t>(elem_bytes);
  }

  // x of the vLLM K layout: elements per 16-byte vector (4 fp32, 8 bf16/fp16).
  RADIXKV_HOST_DEVICE int32_t vllm_x() const { return 16 / elem_bytes; }

  // Element offset of K[slot, kv_head, dim] from the start of the layer's K
  // tensor. slot in [0, capacity_slots()), kv_head in [0, num_kv_heads),
  // dim in [0, head_dim); no bounds checks (callers validate slots once).
  RADIXKV_HOST_DEVICE int64_t KOffset(int64_t slot, int32_t kv_head,
                                      int32_t dim) const {
    const int64_t page = slot / page_size;
    const int64_t off = slot - page * page_size;
    const int64_t B = page_size, H = num_kv_heads, D = head_dim;
    switch (layout) {
      case KvLayout::kBSHD:
        return ((page * B + off) * H + kv_head) * D + dim;
      case KvLayout::kBHSD:
        return ((page * H + kv_head) * B + off) * D + dim;
      case KvLayout::kVllm:
      default: {
        const int64_t x = vllm_x();
        return (((page * H + kv_head) * (D / x) + dim / x) * B + off) * x +
               dim % x;
      }
    }
  }

  // Element offset of V[slot, kv_head, dim] from the start of the layer's V
  // tensor. Same contract as KOffset.
  RADIXKV_HOST_DEVICE int64_t VOffset(int64_t slot, int32_t kv_head,
                                      int32_t dim) const {
    if (layout != KvLayout::kVllm) return KOffset(slot, kv_head, dim);
    const int64_t page = slot / page_size;
    const int64_t off = slot - page * page_size;
    const int64_t B = page_size, H = num_kv_heads, D = head_dim;
    return ((page * H + kv_head) * D + dim) * B + off;
  }

  // A K row (one token, one head) is contiguous over head_dim for kBSHD and
  // kBHSD, and contiguous in runs of vllm_x() dims for kVllm.
  // Element stride between dims d and d+1 of one token's V row:
  // 1 for kBSHD/kBHSD, page_size for kVllm.
  RADIXKV_HOST_DEVICE int64_t VDimStride() const {
    return layout == KvLayout::kVllm ? page_size : 1;
  }
};

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_KV_CACHE_LAYOUT_H_
