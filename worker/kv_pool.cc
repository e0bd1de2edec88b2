#include "worker/kv_pool.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace radixkv::worker {
namespace {

constexpr int64_t kAlignBytes = 64;
constexpr size_t kHugePageBytes = size_t{2} << 20;

int64_t AlignUp(int64_t bytes) {
  return (bytes + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
}

bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

absl::Status ValidateGeometry(int num_layers, const KvCacheGeometry& g,
                              DType dtype) {
  if (num_layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_layers must be >= 1, got ", num_layers));
  }
  if (g.num_pages < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_pages must be >= 1, got ", g.num_pages));
  }
  if (!IsPowerOfTwo(g.page_size) || g.page_size > 128) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_size must be a power of two in [1, 128], got ", g.page_size));
  }
  if (g.num_kv_heads < 1 || g.head_dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_kv_heads and head_dim must be >= 1, got ",
                     g.num_kv_heads, " and ", g.head_dim));
  }
  if (g.elem_bytes != DTypeBytes(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("elem_bytes ", g.elem_bytes,
                                                   " does not match dtype ",
                                                   DTypeName(dtype)));
  }
  if (g.layout != KvLayout::kBSHD && g.layout != KvLayout::kBHSD &&
      g.layout != KvLayout::kVllm) {
    return absl::InvalidArgumentError("unknown KvLayout");
  }
  if (g.layout == KvLayout::kVllm && g.head_dim % g.vllm_x() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("vllm layout needs head_dim % ", g.vllm_x(),
                     " == 0, got head_dim ", g.head_dim));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<KvPool>> KvPool::Create(int num_layers,
                                                       KvCacheGeometry geometry,
                                                       DType dtype) {
  if (geometry.elem_bytes == 0) geometry.elem_bytes = DTypeBytes(dtype);
  if (absl::Status s = ValidateGeometry(num_layers, geometry, dtype); !s.ok()) {
    return s;
  }
  const int64_t layer_bytes = AlignUp(geometry.BytesPerLayer());
  const int64_t total = 2 * static_cast<int64_t>(num_layers) * layer_bytes;
  // Over-map by one huge page so the tensors can start 2 MiB aligned.
  const size_t mapped = static_cast<size_t>(total) + kHugePageBytes;
  void* mapping = mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", total, " bytes for the KV pool"));
  }
  // Kernels gather one row per token from pages in arbitrary order across the
  // whole pool: with 4 KiB pages nearly every row is a TLB miss. Ask for
  // transparent huge pages (advisory; ignored where THP is off).
  const uintptr_t aligned =
      (reinterpret_cast<uintptr_t>(mapping) + kHugePageBytes - 1) &
      ~static_cast<uintptr_t>(kHugePageBytes - 1);
  madvise(reinterpret_cast<void*>(aligned), static_cast<size_t>(total),
          MADV_HUGEPAGE);
  return std::unique_ptr<KvPool>(new KvPool(num_layers, geometry, dtype,
                                            mapping, mapped,
                                            reinterpret_cast<void*>(aligned)));
}

absl::StatusOr<std::unique_ptr<KvPool>> KvPool::CreateFromBudget(
    int num_layers, int64_t budget_bytes, int32_t page_size,
    int32_t num_kv_heads, int32_t head_dim, KvLayout layout, DType dtype) {
  if (num_layers < 1 || page_size < 1 || num_kv_heads < 1 || head_dim < 1) {
    return absl::InvalidArgumentError(
        "num_layers, page_size, num_kv_heads and head_dim must be >= 1");
  }
  const int64_t page_bytes =
      BytesPerSlot(num_layers, num_kv_heads, head_dim, dtype) * page_size;
  const int64_t num_pages = budget_bytes / page_bytes;
  if (num_pages < 1) {
    return absl::InvalidArgumentError(absl::StrCat("budget of ", budget_bytes,
                                                   " bytes holds no page of ",
                                                   page_bytes, " bytes"));
  }
  return Create(num_layers,
                KvCacheGeometry{num_pages, page_size, num_kv_heads, head_dim,
                                DTypeBytes(dtype), layout},
                dtype);
}

absl::StatusOr<std::unique_ptr<KvPool>> KvPool::CreateFromCapacity(
    int num_layers, int64_t capacity_slots, int32_t page_size,
    int32_t num_kv_heads, int32_t head_dim, KvLayout layout, DType dtype) {
  if (capacity_slots < 1 || page_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("capacity_slots and page_size must be >= 1, got ",
                     capacity_slots, " and ", page_size));
  }
  const int64_t num_pages = (capacity_slots + page_size - 1) / page_size;
  return Create(num_layers,
                KvCacheGeometry{num_pages, page_size, num_kv_heads, head_dim,
                                DTypeBytes(dtype), layout},
                dtype);
}

int64_t KvPool::BytesPerSlot(int num_layers, int32_t num_kv_heads,
                             int32_t head_dim, DType dtype) {
  return 2 * static_cast<int64_t>(num_layers) * num_kv_heads * head_dim *
         DTypeBytes(dtype);
}

KvPool::KvPool(int num_layers, KvCacheGeometry geometry, DType dtype,
               void* mapping, size_t mapped_bytes, void* base)
    : num_layers_(num_layers),
      geometry_(geometry),
      dtype_(dtype),
      mapping_(mapping),
      mapped_bytes_(mapped_bytes),
      base_(base),
      layer_stride_bytes_(AlignUp(geometry.BytesPerLayer())) {}

KvPool::~KvPool() { munmap(mapping_, mapped_bytes_); }

namespace {
[[noreturn]] void LayerOutOfRange(int layer, int num_layers) {
  std::fprintf(stderr, "KvPool: layer %d out of range [0, %d)\n", layer,
               num_layers);
  std::abort();
}
}  // namespace

void* KvPool::k_data(int layer) {
  if (layer < 0 || layer >= num_layers_) LayerOutOfRange(layer, num_layers_);
  return static_cast<char*>(base_) + (2 * layer) * layer_stride_bytes_;
}

void* KvPool::v_data(int layer) {
  if (layer < 0 || layer >= num_layers_) LayerOutOfRange(layer, num_layers_);
  return static_cast<char*>(base_) + (2 * layer + 1) * layer_stride_bytes_;
}

const void* KvPool::k_data(int layer) const {
  return const_cast<KvPool*>(this)->k_data(layer);
}

const void* KvPool::v_data(int layer) const {
  return const_cast<KvPool*>(this)->v_data(layer);
}

int64_t KvPool::total_bytes() const {
  return 2 * static_cast<int64_t>(num_layers_) * geometry_.BytesPerLayer();
}

}  // namespace radixkv::worker
