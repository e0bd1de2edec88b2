// The per-step device buffers of GpuModelExecutor, allocated once for the
// capacities in the options (max_tokens_per_step T, max_batch_size B,
// max_logit_rows R, max_kv_indices) and reused by every step: activations,
// the logits and token outputs, the BLAS workspace, the split-KV
// temporaries of the tensor-core decode kernels, and the step metadata (one
// pinned host block mirrored by one device block, uploaded with one copy).
#ifndef RADIXKV_WORKER_GPU_GPU_WORKSPACE_H_
#define RADIXKV_WORKER_GPU_GPU_WORKSPACE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "model/model_config.h"
#include "worker/gpu/gpu_model_executor.h"

namespace radixkv::worker::gpu {

class DeviceMemory;

// Byte offsets of the regions of the metadata block, each 16-byte aligned.
struct StepMetadataLayout {
  size_t qo_indptr = 0;      // int32 [B + 1]
  size_t kv_indptr = 0;      // int32 [B + 1]
  size_t params = 0;         // DeviceSamplingParams [B]
  size_t ids = 0;            // int32 [T] input ids
  size_t positions = 0;      // int32 [T]
  size_t seq = 0;            // int32 [T] sequence of each token
  size_t rows = 0;           // int32 [max(R, T)] x row of each logit row
  size_t out_cache_loc = 0;  // int64 [T]
  size_t kv_indices = 0;     // int64 [max_kv_indices], last: a step uploads
                             // up to its own kv_indices only
  size_t bytes = 0;          // the whole block
};

// The layout for these capacities. The rows region has one entry per logit
// row: a return_all_logits prefill has one per token (up to T, computed in
// chunks of R rows), decode one per sequence.
StepMetadataLayout LayoutStepMetadata(int64_t max_batch_size,
                                      int64_t max_tokens_per_step,
                                      int64_t max_logit_rows,
                                      int64_t max_kv_indices);

// `options` with the workspace capacities that depend on nothing allocated
// resolved: max_logit_rows raised to at least max_batch_size (a decode step
// has one logit row per sequence) and max_context_len 0 replaced by the
// model's max_position_embeddings, at most 32768.
GpuModelExecutorOptions WithWorkspaceDefaults(GpuModelExecutorOptions options,
                                              const model::ModelConfig& config);

// max_kv_indices, or when it is 0 the larger of the pool's capacity and
// max_batch_size * max_context_len (options resolved as above).
int64_t ResolveMaxKvIndices(const GpuModelExecutorOptions& options,
                            int64_t capacity_slots);

// Bytes of split-KV temporaries that cover every decode graph bucket
// (decode_graphs.h) with the partition size it gets: the fixed
// decode_partition_size, or gpu::ChooseDecodePartitionSize's choice on a
// device with num_sms SMs.
size_t SplitKvWorkspaceBytes(const GpuModelExecutorOptions& options,
                             const model::ModelConfig& config, int num_sms);

// Device pointers (host pointers for the pinned mirrors). Shapes for T
// tokens of hidden size H, Hq / Hkv heads of head_dim D, intermediate size
// I, vocabulary V; `dtype` is the compute dtype.
struct GpuWorkspace {
  float* x = nullptr;         // fp32 [T, H] residual stream
  void* h = nullptr;          // dtype [T, H] normed input of a GEMM
  float* qkv = nullptr;       // fp32 [T, (Hq + 2 Hkv) D]
  void* q = nullptr;          // dtype [T, Hq, D] rotated queries
  void* k_ext = nullptr;      // dtype [T, Hkv, D] new tokens' K (extend)
  void* v_ext = nullptr;      // dtype [T, Hkv, D] new tokens' V (extend)
  void* attn = nullptr;       // dtype [T, Hq, D]
  float* gate_up = nullptr;   // fp32 [T, 2 I]
  void* act = nullptr;        // dtype [T, I]
  void* rows = nullptr;       // dtype [R, H] normed logit rows
  float* logits = nullptr;    // fp32 [R, V]
  int32_t* tokens = nullptr;  // [R] argmax / sampled tokens
  void* blas = nullptr;       // vendor GEMM workspace
  size_t blas_bytes = 0;
  void* split_kv = nullptr;  // zero-filled once (gpu_attention.h)
  size_t split_kv_bytes = 0;

  StepMetadataLayout meta;
  char* meta_host = nullptr;       // pinned [meta.bytes]
  char* meta_dev = nullptr;        // [meta.bytes]
  float* logits_host = nullptr;    // pinned [R, V]
  int32_t* tokens_host = nullptr;  // pinned [R]

  // The metadata region at byte offset `off`, on the device / the host.
  template <typename T>
  T* Dev(size_t off) const {
    return reinterpret_cast<T*>(meta_dev + off);
  }
  template <typename T>
  T* Host(size_t off) const {
    return reinterpret_cast<T*>(meta_host + off);
  }
};

// Allocates the activations, outputs, BLAS workspace and (with tensor-core
// attention) the split-KV temporaries for `options` (resolved by
// WithWorkspaceDefaults), adding their bytes to *bytes. Errors:
// RESOURCE_EXHAUSTED, INTERNAL.
absl::Status AllocateActivations(const GpuModelExecutorOptions& options,
                                 const model::ModelConfig& config,
                                 bool tensor_core_attention, int num_sms,
                                 DeviceMemory* memory, GpuWorkspace* ws,
                                 int64_t* bytes);

// Allocates the metadata block (device and pinned host) and the pinned
// logits / tokens mirrors for `options` with max_kv_indices resolved; the
// device block is added to *bytes. Errors as AllocateActivations.
absl::Status AllocateStepMetadata(const GpuModelExecutorOptions& options,
                                  const model::ModelConfig& config,
                                  DeviceMemory* memory, GpuWorkspace* ws,
                                  int64_t* bytes);

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_GPU_WORKSPACE_H_
