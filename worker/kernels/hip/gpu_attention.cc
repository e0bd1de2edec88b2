// Host side of the GPU kernels: argument validation, the decode partition
// heuristic, workspace carving and the dependency batching of CopyBlocks.
// Built by the host C++ compiler; launches go through gpu_kernel_launch.h.
#include "worker/kernels/hip/gpu_attention.h"

#include <cstdlib>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/kernels/attention_combine.h"
#include "worker/kernels/hip/gpu_kernel_launch.h"

namespace radixkv::worker::gpu {
namespace {

using internal::DeviceKvLayer;
using internal::DevicePageCopy;

static_assert(
    sizeof(DevicePageCopy) == sizeof(PageCopy) &&
        offsetof(PageCopy, src_page) == offsetof(DevicePageCopy, src_page) &&
        offsetof(PageCopy, dst_page) == offsetof(DevicePageCopy, dst_page) &&
        offsetof(PageCopy, num_tokens) == offsetof(DevicePageCopy, num_tokens),
    "DevicePageCopy must mirror PageCopy");

constexpr int32_t kPartitionMultiple = 64;

size_t AlignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

absl::Status CheckCache(const GpuKvCache& cache) {
  const KvCacheGeometry& g = cache.geometry;
  if (cache.dtype != DType::kBF16 && cache.dtype != DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPU kernels support bf16 and f16, got ", DTypeName(cache.dtype)));
  }
  if (g.elem_bytes != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("geometry.elem_bytes must be 2, got ", g.elem_bytes));
  }
  if (g.head_dim != 64 && g.head_dim != 128 && g.head_dim != 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim must be 64, 128 or 256, got ", g.head_dim));
  }
  if (g.num_kv_heads < 1 || g.page_size < 1 || g.num_pages < 1) {
    return absl::InvalidArgumentError("empty cache geometry");
  }
  if (cache.k == nullptr || cache.v == nullptr) {
    return absl::InvalidArgumentError("null K/V cache pointer");
  }
  return absl::OkStatus();
}

absl::Status CheckHeads(const GpuKvCache& cache, int32_t num_q_heads) {
  const int32_t hkv = cache.geometry.num_kv_heads;
  if (num_q_heads < hkv || num_q_heads % hkv != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_q_heads (", num_q_heads,
        ") must be a positive multiple of num_kv_heads (", hkv, ")"));
  }
  return absl::OkStatus();
}

absl::Status LaunchStatus(int err, const char* what) {
  if (err == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, " launch failed: ", internal::ErrorString(err)));
}

internal::KernelPath ToInternal(KernelPath path) {
  if (path == KernelPath::kPortable || !internal::HasMatrixCorePath()) {
    return internal::KernelPath::kPortable;
  }
  return internal::KernelPath::kMatrixCore;
}

}  // namespace

bool HasMatrixCoreKernels() { return internal::HasMatrixCorePath(); }

int32_t ChooseDecodePartitionSize(int32_t batch_size, int32_t num_kv_heads,
                                  int32_t num_q_heads, int32_t max_seq_len,
                                  int num_sms) {
  if (const char* env = std::getenv(kDecodePartitionSizeEnv)) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && v >= 0 && v <= (1 << 24)) {
      return static_cast<int32_t>((v + kPartitionMultiple - 1) /
                                  kPartitionMultiple * kPartitionMultiple);
    }
  }
  if (max_seq_len <= 0 || batch_size <= 0 || num_kv_heads <= 0) return 0;
  if (num_sms <= 0) num_sms = internal::DeviceMultiprocessorCount();
  if (num_sms <= 0) num_sms = 132;
  const int32_t group = num_q_heads / num_kv_heads;
  const int64_t base_blocks =
      static_cast<int64_t>(batch_size) * num_kv_heads * ((group + 15) / 16);
  // Fitted to the H200 sweep in docs/kernel-notes.md ("Partition size"):
  // long partitions amortize the per-block Q load, merge and partial-result
  // traffic, so split only as much as needed to occupy the GPU.
  //  * v1 once the (kv head x sequence x head chunk) grid has >= 4 blocks
  //    per multiprocessor (B=256 x 1024: v1 84% vs P=512 77% of copy BW);
  //  * else the largest partition in {2048, 1024, 512, 256} that gives
  //    >= 1.5 blocks per multiprocessor (B=64 x 4096: P=2048 85% vs v1 76%;
  //    B=1 x 32768: P=1024 54% vs P=2048 40% vs P=256 36%).
  if (base_blocks >= 4 * static_cast<int64_t>(num_sms)) return 0;
  const int64_t target = 3 * static_cast<int64_t>(num_sms) / 2;
  for (int32_t p : {2048, 1024, 512, 256}) {
    if (max_seq_len <= p) continue;  // one partition would hold everything
    const int64_t parts = (max_seq_len + p - 1) / p;
    if (base_blocks * parts >= target) return p;
  }
  return max_seq_len > 256 ? 256 : 0;
}

static_assert(kDecodeCounterBytes ==
                  sizeof(int32_t) * internal::kDecodeCounterSlots,
              "counter region and launcher disagree");

size_t DecodeWorkspaceBytes(int32_t batch_size, int32_t num_q_heads,
                            int32_t head_dim, int32_t max_seq_len,
                            int32_t partition_size) {
  if (partition_size <= 0 || max_seq_len <= 0) return 0;
  const size_t parts =
      (static_cast<size_t>(max_seq_len) + partition_size - 1) / partition_size;
  const size_t rows = static_cast<size_t>(batch_size) * num_q_heads * parts;
  return kDecodeCounterBytes + 2 * AlignUp(rows * sizeof(float), 16) +
         AlignUp(rows * head_dim * sizeof(float), 16);
}

absl::Status Decode(const GpuKvCache& cache, const GpuDecodeArgs& args,
                    void* stream) {
  if (absl::Status s = CheckCache(cache); !s.ok()) return s;
  if (absl::Status s = CheckHeads(cache, args.num_q_heads); !s.ok()) return s;
  if (args.batch_size < 0 || args.max_seq_len < 0) {
    return absl::InvalidArgumentError("negative batch_size or max_seq_len");
  }
  if (args.batch_size == 0) return absl::OkStatus();
  if (args.q == nullptr || args.kv_indptr == nullptr || args.out == nullptr ||
      (args.kv_indices == nullptr && args.max_seq_len > 0)) {
    return absl::InvalidArgumentError("null decode pointer");
  }
  if (args.window_left < -1) {
    return absl::InvalidArgumentError("window_left < -1");
  }
  // Tokens a sequence actually reads: a window caps them at window_left + 1,
  // which sizes the split (pages before the window get no partition).
  const int32_t visible_len =
      args.window_left >= 0 && args.window_left < args.max_seq_len
          ? args.window_left + 1
          : args.max_seq_len;
  int32_t partition_size = args.partition_size;
  if (partition_size < 0) {
    partition_size =
        ChooseDecodePartitionSize(args.batch_size, cache.geometry.num_kv_heads,
                                  args.num_q_heads, visible_len);
  }
  if (partition_size % kPartitionMultiple != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "partition_size must be a multiple of 64, got ", partition_size));
  }
  if (partition_size > 0 && args.max_seq_len == 0) partition_size = 0;
  internal::DecodeLaunch a{};
  a.geometry = cache.geometry;
  a.dtype = cache.dtype;
  a.k_cache = cache.k;
  a.v_cache = cache.v;
  a.q = args.q;
  a.kv_indptr = args.kv_indptr;
  a.kv_indices = args.kv_indices;
  a.batch_size = args.batch_size;
  a.num_q_heads = args.num_q_heads;
  a.max_seq_len = args.max_seq_len;
  a.scale_log2 = args.sm_scale * kLog2e;
  a.partition_size = partition_size;
  a.window_left = args.window_left;
  a.out = args.out;
  a.lse = args.lse;
  a.path = ToInternal(args.path);
  a.stream = stream;
  if (partition_size > 0) {
    const size_t need = DecodeWorkspaceBytes(args.batch_size, args.num_q_heads,
                                             cache.geometry.head_dim,
                                             visible_len, partition_size);
    if (args.workspace == nullptr || args.workspace_bytes < need) {
      return absl::InvalidArgumentError(absl::StrCat("decode v2 needs ", need,
                                                     " workspace bytes, got ",
                                                     args.workspace_bytes));
    }
    a.num_partitions = (visible_len + partition_size - 1) / partition_size;
    const size_t rows = static_cast<size_t>(args.batch_size) *
                        args.num_q_heads * a.num_partitions;
    a.counters = static_cast<int32_t*>(args.workspace);
    char* ws = static_cast<char*>(args.workspace) + kDecodeCounterBytes;
    a.partial_max = reinterpret_cast<float*>(ws);
    a.partial_sum =
        reinterpret_cast<float*>(ws + AlignUp(rows * sizeof(float), 16));
    a.partial_out =
        reinterpret_cast<float*>(ws + 2 * AlignUp(rows * sizeof(float), 16));
  } else {
    a.num_partitions = 1;
  }
  return LaunchStatus(internal::LaunchDecode(a), "paged decode");
}

absl::Status Extend(const GpuKvCache& cache, const GpuExtendArgs& args,
                    void* stream) {
  if (absl::Status s = CheckCache(cache); !s.ok()) return s;
  if (absl::Status s = CheckHeads(cache, args.num_q_heads); !s.ok()) return s;
  if (args.batch_size < 0 || args.max_extend_len < 0) {
    return absl::InvalidArgumentError("negative batch_size or max_extend_len");
  }
  if (args.batch_size == 0 || args.max_extend_len == 0) {
    return absl::OkStatus();
  }
  if (args.q == nullptr || args.k_extend == nullptr ||
      args.v_extend == nullptr || args.qo_indptr == nullptr ||
      args.kv_indptr == nullptr || args.out == nullptr) {
    return absl::InvalidArgumentError("null extend pointer");
  }
  if (args.window_left < -1) {
    return absl::InvalidArgumentError("window_left < -1");
  }
  internal::ExtendLaunch a{};
  a.geometry = cache.geometry;
  a.dtype = cache.dtype;
  a.k_cache = cache.k;
  a.v_cache = cache.v;
  a.q = args.q;
  a.k_extend = args.k_extend;
  a.v_extend = args.v_extend;
  a.qo_indptr = args.qo_indptr;
  a.kv_indptr = args.kv_indptr;
  a.kv_indices = args.kv_indices;
  a.batch_size = args.batch_size;
  a.num_q_heads = args.num_q_heads;
  a.max_extend_len = args.max_extend_len;
  a.scale_log2 = args.sm_scale * kLog2e;
  a.window_left = args.window_left;
  a.out = args.out;
  a.lse = args.lse;
  a.path = ToInternal(args.path);
  a.stream = stream;
  return LaunchStatus(internal::LaunchExtend(a), "extend attention");
}

absl::Status ReshapeAndCache(const GpuKvCache& cache, const void* k,
                             const void* v, const int64_t* out_cache_loc,
                             int32_t num_tokens, void* stream) {
  if (absl::Status s = CheckCache(cache); !s.ok()) return s;
  if (num_tokens < 0) return absl::InvalidArgumentError("num_tokens < 0");
  if (num_tokens == 0) return absl::OkStatus();
  if (k == nullptr || v == nullptr || out_cache_loc == nullptr) {
    return absl::InvalidArgumentError("null reshape_and_cache pointer");
  }
  internal::ReshapeAndCacheLaunch a{};
  a.geometry = cache.geometry;
  a.dtype = cache.dtype;
  a.k_cache = cache.k;
  a.v_cache = cache.v;
  a.k = k;
  a.v = v;
  a.out_cache_loc = out_cache_loc;
  a.num_tokens = num_tokens;
  a.stream = stream;
  return LaunchStatus(internal::LaunchReshapeAndCache(a), "reshape_and_cache");
}

size_t CopyBlocksScratchBytes(size_t num_ops, size_t num_layers) {
  return AlignUp(num_layers * sizeof(DeviceKvLayer), 16) +
         AlignUp(num_ops * sizeof(DevicePageCopy), 16);
}

absl::Status CopyBlocks(absl::Span<const GpuKvCache> layers,
                        absl::Span<const PageCopy> ops, void* scratch,
                        size_t scratch_bytes, void* stream) {
  if (ops.empty() || layers.empty()) return absl::OkStatus();
  const GpuKvCache& first = layers[0];
  if (absl::Status s = CheckCache(first); !s.ok()) return s;
  const KvCacheGeometry& g = first.geometry;
  for (const GpuKvCache& l : layers) {
    if (absl::Status s = CheckCache(l); !s.ok()) return s;
    const KvCacheGeometry& lg = l.geometry;
    if (l.dtype != first.dtype || lg.num_pages != g.num_pages ||
        lg.page_size != g.page_size || lg.num_kv_heads != g.num_kv_heads ||
        lg.head_dim != g.head_dim || lg.layout != g.layout) {
      return absl::InvalidArgumentError("layers differ in geometry or dtype");
    }
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const PageCopy& op = ops[i];
    if (op.src_page < 0 || op.src_page >= g.num_pages || op.dst_page < 0 ||
        op.dst_page >= g.num_pages || op.num_tokens < 0 ||
        op.num_tokens > g.page_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "page copy op ", i, " out of range: src_page=", op.src_page,
          " dst_page=", op.dst_page, " num_tokens=", op.num_tokens,
          " (num_pages=", g.num_pages, ", page_size=", g.page_size, ")"));
    }
  }
  const size_t need = CopyBlocksScratchBytes(ops.size(), layers.size());
  if (scratch == nullptr || scratch_bytes < need) {
    return absl::InvalidArgumentError(absl::StrCat(
        "copy_blocks needs ", need, " scratch bytes, got ", scratch_bytes));
  }
  // Order-preserving batches of mutually independent ops (no-ops dropped).
  std::vector<DevicePageCopy> staged;
  std::vector<size_t> batch_end;
  staged.reserve(ops.size());
  std::unordered_set<int64_t> reads, writes;
  for (const PageCopy& op : ops) {
    if (op.src_page == op.dst_page || op.num_tokens == 0) continue;
    if (writes.count(op.src_page) || writes.count(op.dst_page) ||
        reads.count(op.dst_page)) {
      batch_end.push_back(staged.size());
      reads.clear();
      writes.clear();
    }
    reads.insert(op.src_page);
    writes.insert(op.dst_page);
    staged.push_back({op.src_page, op.dst_page, op.num_tokens});
  }
  if (staged.empty()) return absl::OkStatus();
  batch_end.push_back(staged.size());
  std::vector<DeviceKvLayer> layer_ptrs;
  layer_ptrs.reserve(layers.size());
  for (const GpuKvCache& l : layers) layer_ptrs.push_back({l.k, l.v});

  char* base = static_cast<char*>(scratch);
  auto* d_layers = reinterpret_cast<DeviceKvLayer*>(base);
  auto* d_ops = reinterpret_cast<DevicePageCopy*>(
      base + AlignUp(layers.size() * sizeof(DeviceKvLayer), 16));
  if (int err = internal::CopyToDeviceAsync(
          d_layers, layer_ptrs.data(),
          layer_ptrs.size() * sizeof(DeviceKvLayer), stream)) {
    return LaunchStatus(err, "copy_blocks staging");
  }
  if (int err = internal::CopyToDeviceAsync(
          d_ops, staged.data(), staged.size() * sizeof(DevicePageCopy),
          stream)) {
    return LaunchStatus(err, "copy_blocks staging");
  }
  size_t begin = 0;
  for (size_t end : batch_end) {
    internal::CopyBlocksLaunch a{};
    a.geometry = g;
    a.dtype = first.dtype;
    a.layers = d_layers;
    a.num_layers = static_cast<int32_t>(layers.size());
    a.ops = d_ops + begin;
    a.num_ops = static_cast<int32_t>(end - begin);
    a.stream = stream;
    if (int err = internal::LaunchCopyBlocks(a)) {
      return LaunchStatus(err, "copy_blocks");
    }
    begin = end;
  }
  return absl::OkStatus();
}

}  // namespace radixkv::worker::gpu
