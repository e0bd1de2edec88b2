#include "worker/gpu/gpu_workspace.h"

#include <algorithm>

#include "worker/gpu/decode_graphs.h"
#include "worker/gpu/device_memory.h"
#include "worker/gpu/gpu_status.h"
#include "worker/gpu/model_kernels.h"
#include "worker/kernels/hip/gpu_attention.h"

namespace radixkv::worker::gpu {

StepMetadataLayout LayoutStepMetadata(int64_t max_batch_size,
                                      int64_t max_tokens_per_step,
                                      int64_t max_logit_rows,
                                      int64_t max_kv_indices) {
  const int64_t B = max_batch_size, T = max_tokens_per_step;
  size_t off = 0;
  auto region = [&](size_t bytes) {
    const size_t at = off;
    off += AlignUp16(bytes);
    return at;
  };
  StepMetadataLayout l;
  l.qo_indptr = region((B + 1) * 4);
  l.kv_indptr = region((B + 1) * 4);
  l.params = region(B * sizeof(DeviceSamplingParams));
  l.ids = region(T * 4);
  l.positions = region(T * 4);
  l.seq = region(T * 4);
  l.rows = region(std::max(max_logit_rows, T) * 4);
  l.out_cache_loc = region(T * 8);
  l.kv_indices = region(max_kv_indices * 8);
  l.bytes = off;
  return l;
}

GpuModelExecutorOptions WithWorkspaceDefaults(
    GpuModelExecutorOptions o, const model::ModelConfig& config) {
  o.max_logit_rows = std::max(o.max_logit_rows, o.max_batch_size);
  if (o.max_context_len <= 0) {
    o.max_context_len = static_cast<int32_t>(
        std::min<int64_t>(config.max_position_embeddings, 32768));
  }
  return o;
}

int64_t ResolveMaxKvIndices(const GpuModelExecutorOptions& o,
                            int64_t capacity_slots) {
  if (o.max_kv_indices > 0) return o.max_kv_indices;
  return std::max<int64_t>(capacity_slots,
                           int64_t{o.max_batch_size} * o.max_context_len);
}

size_t SplitKvWorkspaceBytes(const GpuModelExecutorOptions& o,
                             const model::ModelConfig& c, int num_sms) {
  size_t need = 0;
  ForEachDecodeBucket(
      o.max_batch_size, o.max_context_len, [&](int32_t bb, int32_t cb) {
        const int32_t ps =
            o.decode_partition_size >= 0
                ? o.decode_partition_size
                : ChooseDecodePartitionSize(bb, c.num_key_value_heads,
                                            c.num_attention_heads, cb, num_sms);
        need = std::max(need, DecodeWorkspaceBytes(bb, c.num_attention_heads,
                                                   c.head_dim, cb, ps));
      });
  return need;
}

absl::Status AllocateActivations(const GpuModelExecutorOptions& o,
                                 const model::ModelConfig& c,
                                 bool tensor_core_attention, int num_sms,
                                 DeviceMemory* m, GpuWorkspace* ws,
                                 int64_t* bytes) {
  const int64_t T = o.max_tokens_per_step, R = o.max_logit_rows;
  const int64_t H = c.hidden_size, D = c.head_dim;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const int64_t I = c.intermediate_size, V = c.vocab_size;
  const int64_t eb = DTypeBytes(o.dtype);
  RADIXKV_RETURN_IF_ERROR(m->AllocT(T * H, &ws->x, bytes));
  RADIXKV_RETURN_IF_ERROR(m->Alloc(T * H * eb, &ws->h, bytes));
  RADIXKV_RETURN_IF_ERROR(m->AllocT(T * (Hq + 2 * Hkv) * D, &ws->qkv, bytes));
  RADIXKV_RETURN_IF_ERROR(m->Alloc(T * Hq * D * eb, &ws->q, bytes));
  RADIXKV_RETURN_IF_ERROR(m->Alloc(T * Hkv * D * eb, &ws->k_ext, bytes));
  RADIXKV_RETURN_IF_ERROR(m->Alloc(T * Hkv * D * eb, &ws->v_ext, bytes));
  RADIXKV_RETURN_IF_ERROR(m->Alloc(T * Hq * D * eb, &ws->attn, bytes));
  RADIXKV_RETURN_IF_ERROR(m->AllocT(T * 2 * I, &ws->gate_up, bytes));
  RADIXKV_RETURN_IF_ERROR(m->Alloc(T * I * eb, &ws->act, bytes));
  RADIXKV_RETURN_IF_ERROR(m->Alloc(R * H * eb, &ws->rows, bytes));
  RADIXKV_RETURN_IF_ERROR(m->AllocT(R * V, &ws->logits, bytes));
  RADIXKV_RETURN_IF_ERROR(m->AllocT(R, &ws->tokens, bytes));
  ws->blas_bytes = size_t{32} << 20;
  RADIXKV_RETURN_IF_ERROR(m->Alloc(ws->blas_bytes, &ws->blas, bytes));
  if (!tensor_core_attention) return absl::OkStatus();
  ws->split_kv_bytes = SplitKvWorkspaceBytes(o, c, num_sms);
  RADIXKV_RETURN_IF_ERROR(m->Alloc(ws->split_kv_bytes, &ws->split_kv, bytes));
  if (ws->split_kv_bytes == 0) return absl::OkStatus();
  return RuntimeError(hipMemset(ws->split_kv, 0, ws->split_kv_bytes),
                      "decode ws zero-fill");
}

absl::Status AllocateStepMetadata(const GpuModelExecutorOptions& o,
                                  const model::ModelConfig& c, DeviceMemory* m,
                                  GpuWorkspace* ws, int64_t* bytes) {
  const int64_t R = o.max_logit_rows;
  ws->meta = LayoutStepMetadata(o.max_batch_size, o.max_tokens_per_step, R,
                                o.max_kv_indices);
  void* p = nullptr;
  RADIXKV_RETURN_IF_ERROR(m->Alloc(ws->meta.bytes, &p, bytes));
  ws->meta_dev = static_cast<char*>(p);
  RADIXKV_RETURN_IF_ERROR(
      m->AllocPinned(ws->meta.bytes, &p, "pinned metadata"));
  ws->meta_host = static_cast<char*>(p);
  RADIXKV_RETURN_IF_ERROR(
      m->AllocPinned(R * c.vocab_size * sizeof(float), &p, "pinned logits"));
  ws->logits_host = static_cast<float*>(p);
  RADIXKV_RETURN_IF_ERROR(m->AllocPinned(R * 4, &p, "pinned tokens"));
  ws->tokens_host = static_cast<int32_t*>(p);
  return absl::OkStatus();
}

}  // namespace radixkv::worker::gpu
