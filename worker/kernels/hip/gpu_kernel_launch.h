// Internal launch interface between the host API (gpu_attention.cc, built by
// the host C++ compiler) and the HIP kernel translation units (*.hip, built by
// nvcc or hipcc). Plain structs and functions only: no Abseil and no GPU
// runtime headers, so both sides include it. Arguments are validated by
// gpu_attention.cc before any launcher is called; launchers only map them to
// grids and return the runtime's error code (0 = success).
//
// Not part of the public API: callers use worker/kernels/hip/gpu_attention.h.
#ifndef RADIXKV_WORKER_KERNELS_HIP_GPU_KERNEL_LAUNCH_H_
#define RADIXKV_WORKER_KERNELS_HIP_GPU_KERNEL_LAUNCH_H_

#include <stddef.h>
#include <stdint.h>

#include "worker/kv_cache_layout.h"
#include "worker/numeric_types.h"

namespace radixkv::worker::gpu::internal {

// Which implementation a launcher uses. kMatrixCore: NVIDIA tensor cores
// (mma.sync, sm_80+; extend with head_dim 64/128 uses Hopper wgmma when the
// build has an sm_90a binary); on AMD the MFMA extend kernel when the device
// is gfx90a / gfx94x (else portable; decode is always portable on AMD);
// kPortable: SIMT code that only relies on hip_compat.h (AMD decode, AMD
// extend without MFMA, and a cross-check on NVIDIA).
enum class KernelPath : int { kMatrixCore = 0, kPortable = 1 };

// True if this build has matrix-core kernels (nvcc builds; hipcc builds for
// the MFMA extend kernel).
bool HasMatrixCorePath();

// Human-readable message of a runtime error code.
const char* ErrorString(int error);

// Multiprocessor count of the current device (0 on failure).
int DeviceMultiprocessorCount();

// Arrival counters of the fused decode combine at the start of a v2 decode
// workspace (gpu_attention.h kDecodeCounterBytes = 4 * this).
inline constexpr int32_t kDecodeCounterSlots = 4096;

struct DecodeLaunch {
  KvCacheGeometry geometry;
  DType dtype;  // kBF16 or kF16 (Q, K, V, O)
  const void* k_cache;
  const void* v_cache;
  const void* q;              // [B, Hq, D]
  const int32_t* kv_indptr;   // device [B+1]
  const int64_t* kv_indices;  // device
  int32_t batch_size;
  int32_t num_q_heads;
  int32_t max_seq_len;     // grid sizing: max over b of kv_indptr diff
  float scale_log2;        // sm_scale * log2(e)
  int32_t partition_size;  // 0 = v1, > 0 = v2 (multiple of 64)
  int32_t num_partitions;  // v2: ceil(visible tokens / partition_size), >= 1
  int32_t window_left;     // -1 = whole context, else the last w + 1 tokens
  void* out;               // [B, Hq, D]
  float* lse;              // optional [B, Hq]
  float* partial_max;      // v2: [B, Hq, num_partitions]
  float* partial_sum;      // v2: [B, Hq, num_partitions]
  float* partial_out;      // v2: [B, Hq, num_partitions, D]
  int32_t* counters;       // v2: kDecodeCounterBytes / 4 arrival counters,
                           // 0 between launches (fused combine)
  KernelPath path;
  void* stream;
};
int LaunchDecode(const DecodeLaunch& a);

struct ExtendLaunch {
  KvCacheGeometry geometry;
  DType dtype;
  const void* k_cache;
  const void* v_cache;
  const void* q;              // [total_q, Hq, D]
  const void* k_extend;       // [total_q, Hkv, D]
  const void* v_extend;       // [total_q, Hkv, D]
  const int32_t* qo_indptr;   // device [B+1]
  const int32_t* kv_indptr;   // device [B+1]
  const int64_t* kv_indices;  // device
  int32_t batch_size;
  int32_t num_q_heads;
  int32_t max_extend_len;  // grid sizing
  float scale_log2;
  int32_t window_left;  // -1 = full causal, else keys >= position - w
  void* out;            // [total_q, Hq, D]
  float* lse;           // optional [total_q, Hq]
  KernelPath path;
  void* stream;
};
int LaunchExtend(const ExtendLaunch& a);

struct ReshapeAndCacheLaunch {
  KvCacheGeometry geometry;
  DType dtype;
  void* k_cache;
  void* v_cache;
  const void* k;  // [num_tokens, Hkv, D]
  const void* v;
  const int64_t* out_cache_loc;  // device [num_tokens]
  int32_t num_tokens;
  void* stream;
};
int LaunchReshapeAndCache(const ReshapeAndCacheLaunch& a);

// Layout-compatible with radixkv::worker::PageCopy (static_assert in
// gpu_attention.cc).
struct DevicePageCopy {
  int64_t src_page;
  int64_t dst_page;
  int32_t num_tokens;
};

// One layer's device K and V base pointers.
struct DeviceKvLayer {
  void* k;
  void* v;
};

struct CopyBlocksLaunch {
  KvCacheGeometry geometry;
  DType dtype;
  const DeviceKvLayer* layers;  // device [num_layers]
  int32_t num_layers;
  const DevicePageCopy* ops;  // device [num_ops]
  int32_t num_ops;
  void* stream;
};
int LaunchCopyBlocks(const CopyBlocksLaunch& a);

// Host-to-device async copy used by CopyBlocks to stage its ops.
int CopyToDeviceAsync(void* dst, const void* src, size_t bytes, void* stream);

}  // namespace radixkv::worker::gpu::internal

#endif  // RADIXKV_WORKER_KERNELS_HIP_GPU_KERNEL_LAUNCH_H_
