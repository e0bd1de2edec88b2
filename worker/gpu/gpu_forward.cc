#include "worker/gpu/gpu_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "worker/gpu/gpu_gemm.h"
#include "worker/gpu/gpu_kv_pool.h"
#include "worker/gpu/gpu_status.h"
#include "worker/gpu/gpu_weights.h"
#include "worker/gpu/gpu_workspace.h"
#include "worker/gpu/model_kernels.h"
#include "worker/kernels/hip/gpu_attention.h"

namespace radixkv::worker::gpu {
namespace {

// The tensor-core decode arguments (every layer alike). A fixed
// decode_partition_size >= 0 is the split-KV partition (tokens; 0 = one
// pass, vLLM's PagedAttention v1), < 0 lets ChooseDecodePartitionSize pick
// it; a split whose temporaries exceed the workspace's falls back to 0.
GpuDecodeArgs DecodeArgs(const GpuForward& f, const StepShape& sh, int layer,
                         float sm_scale) {
  const model::ModelConfig& c = *f.config;
  const GpuWorkspace& ws = *f.workspace;
  GpuDecodeArgs a;
  a.q = ws.q;
  a.kv_indptr = ws.Dev<int32_t>(ws.meta.kv_indptr);
  a.kv_indices = ws.Dev<int64_t>(ws.meta.kv_indices);
  a.batch_size = sh.batch;
  a.max_seq_len = std::max(sh.max_seq_len, 1);
  a.num_q_heads = c.num_attention_heads;
  a.sm_scale = sm_scale;
  a.window_left = c.window_left(layer);
  // A sliding window caps the tokens each sequence reads.
  const int32_t visible = a.window_left >= 0
                              ? std::min(a.max_seq_len, a.window_left + 1)
                              : a.max_seq_len;
  int32_t ps = f.decode_partition_size >= 0
                   ? f.decode_partition_size
                   : ChooseDecodePartitionSize(sh.batch, c.num_key_value_heads,
                                               c.num_attention_heads, visible,
                                               f.num_sms);
  if (DecodeWorkspaceBytes(sh.batch, c.num_attention_heads, c.head_dim,
                           a.max_seq_len, ps) > ws.split_kv_bytes) {
    ps = 0;
  }
  a.partition_size = ps;
  a.out = ws.attn;
  a.workspace = ws.split_kv;
  a.workspace_bytes = ws.split_kv_bytes;
  return a;
}

// The tensor-core extend arguments: new tokens' Q/K/V from the workspace,
// the prefix from the pool.
GpuExtendArgs ExtendArgs(const GpuForward& f, const StepShape& sh, int layer,
                         float sm_scale) {
  const GpuWorkspace& ws = *f.workspace;
  GpuExtendArgs a;
  a.q = ws.q;
  a.k_extend = ws.k_ext;
  a.v_extend = ws.v_ext;
  a.qo_indptr = ws.Dev<int32_t>(ws.meta.qo_indptr);
  a.kv_indptr = ws.Dev<int32_t>(ws.meta.kv_indptr);
  a.kv_indices = ws.Dev<int64_t>(ws.meta.kv_indices);
  a.batch_size = sh.batch;
  a.max_extend_len = sh.max_extend_len;
  a.num_q_heads = f.config->num_attention_heads;
  a.sm_scale = sm_scale;
  a.window_left = f.config->window_left(layer);
  a.out = ws.attn;
  return a;
}

absl::Status GenericAttention(const GpuForward& f, const StepShape& sh,
                              int layer, float sm_scale) {
  const GpuWorkspace& ws = *f.workspace;
  const GpuKvCache& cache = f.pool->caches[layer];
  GenericAttentionLaunch a;
  a.q = ws.q;
  a.qo_indptr = ws.Dev<int32_t>(ws.meta.qo_indptr);
  a.kv_indptr = ws.Dev<int32_t>(ws.meta.kv_indptr);
  a.kv_indices = ws.Dev<int64_t>(ws.meta.kv_indices);
  a.out_cache_loc = ws.Dev<int64_t>(ws.meta.out_cache_loc);
  a.token_seq = ws.Dev<int32_t>(ws.meta.seq);
  a.num_tokens = sh.num_tokens;
  a.num_q_heads = f.config->num_attention_heads;
  a.sm_scale = sm_scale;
  a.causal_extend = !sh.is_decode;
  a.window_left = f.config->window_left(layer);
  a.act = f.dtype;
  a.geometry = f.pool->geometry;
  a.k_cache = cache.k;
  a.v_cache = cache.v;
  a.out = ws.attn;
  return KernelError(LaunchGenericAttention(a, f.stream), "attention");
}

// Bias, RoPE and the K/V write into the pool of `layer` for n tokens; with
// tensor-core extend also the contiguous K/V copies the extend kernel reads.
absl::Status RopeAndCache(const GpuForward& f, const StepShape& sh, int layer,
                          int32_t n) {
  const model::ModelConfig& c = *f.config;
  const GpuWorkspace& ws = *f.workspace;
  const GpuKvCache& cache = f.pool->caches[layer];
  const bool tc_extend = f.tensor_core_attention && !sh.is_decode;
  RopeCacheLaunch rl;
  rl.qkv = ws.qkv;
  rl.bias = f.weights->layers[layer].qkv_bias;
  rl.inv_freq = f.weights->inv_freq;
  rl.positions = ws.Dev<int32_t>(ws.meta.positions);
  rl.out_cache_loc = ws.Dev<int64_t>(ws.meta.out_cache_loc);
  rl.num_tokens = n;
  rl.num_q_heads = c.num_attention_heads;
  rl.num_kv_heads = c.num_key_value_heads;
  rl.head_dim = c.head_dim;
  rl.q_norm = f.weights->layers[layer].q_norm;
  rl.k_norm = f.weights->layers[layer].k_norm;
  rl.norm_eps = static_cast<float>(c.rms_norm_eps);
  rl.act = f.dtype;
  rl.q = ws.q;
  rl.k_out = tc_extend ? ws.k_ext : nullptr;
  rl.v_out = tc_extend ? ws.v_ext : nullptr;
  rl.geometry = f.pool->geometry;
  rl.k_cache = cache.k;
  rl.v_cache = cache.v;
  return KernelError(LaunchRopeAndCache(rl, f.stream), "rope+cache");
}

// The four GEMMs of a layer over n rows (the forward and the timing hook).
// QKV and gate/up read h; given `norm`, they compute h = RMSNorm(norm) first
// (fused into the GEMM where GpuGemm::RunNormed can).
absl::Status NormedInputGemm(const GpuForward& f, const RmsNormInput* norm,
                             const void* w, float* c, int64_t n, int64_t out,
                             int64_t k) {
  if (norm != nullptr) {
    return f.gemm->RunNormed(*norm, f.workspace->h, w, c, n, out, k);
  }
  return f.gemm->Run(f.workspace->h, w, c, n, out, k, 0.0f);
}

absl::Status QkvProj(const GpuForward& f, const GpuLayerWeights& w, int64_t n,
                     const RmsNormInput* norm = nullptr) {
  const model::ModelConfig& c = *f.config;
  const int64_t qkv_dim =
      (int64_t{c.num_attention_heads} + 2 * c.num_key_value_heads) * c.head_dim;
  return NormedInputGemm(f, norm, w.qkv, f.workspace->qkv, n, qkv_dim,
                         c.hidden_size);
}

absl::Status OProj(const GpuForward& f, const GpuLayerWeights& w, int64_t n) {
  const model::ModelConfig& c = *f.config;
  return f.gemm->Run(f.workspace->attn, w.o, f.workspace->x, n, c.hidden_size,
                     int64_t{c.num_attention_heads} * c.head_dim, 1.0f);
}

absl::Status GateUpProj(const GpuForward& f, const GpuLayerWeights& w,
                        int64_t n, const RmsNormInput* norm = nullptr) {
  const model::ModelConfig& c = *f.config;
  return NormedInputGemm(f, norm, w.gate_up, f.workspace->gate_up, n,
                         2 * int64_t{c.intermediate_size}, c.hidden_size);
}

absl::Status DownProj(const GpuForward& f, const GpuLayerWeights& w,
                      int64_t n) {
  const model::ModelConfig& c = *f.config;
  return f.gemm->Run(f.workspace->act, w.down, f.workspace->x, n, c.hidden_size,
                     c.intermediate_size, 1.0f);
}

absl::Status EnqueueLayer(const GpuForward& f, const StepShape& sh, int layer) {
  const model::ModelConfig& c = *f.config;
  const GpuWorkspace& ws = *f.workspace;
  const GpuLayerWeights& w = f.weights->layers[layer];
  const int32_t n = sh.num_tokens;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float sm_scale =
      static_cast<float>(1.0 / std::sqrt(double(c.head_dim)));
  const RmsNormInput input_norm{ws.x, nullptr, w.input_norm, eps};
  RADIXKV_RETURN_IF_ERROR(QkvProj(f, w, n, &input_norm));
  RADIXKV_RETURN_IF_ERROR(RopeAndCache(f, sh, layer, n));
  RADIXKV_RETURN_IF_ERROR(EnqueueAttention(f, sh, layer, sm_scale));
  if (w.o_bias != nullptr) {
    RADIXKV_RETURN_IF_ERROR(KernelError(
        LaunchAddBias(ws.x, w.o_bias, n, c.hidden_size, f.stream), "o bias"));
  }
  RADIXKV_RETURN_IF_ERROR(OProj(f, w, n));
  const RmsNormInput post_norm{ws.x, nullptr, w.post_norm, eps};
  RADIXKV_RETURN_IF_ERROR(GateUpProj(f, w, n, &post_norm));
  RADIXKV_RETURN_IF_ERROR(
      KernelError(LaunchSiluAndMul(ws.gate_up, n, c.intermediate_size, ws.act,
                                   f.dtype, f.stream),
                  "silu"));
  return DownProj(f, w, n);
}

}  // namespace

absl::Status EnqueueLmHead(const GpuForward& f, const int32_t* row_index,
                           int32_t rows) {
  const model::ModelConfig& c = *f.config;
  const GpuWorkspace& ws = *f.workspace;
  return f.gemm->RunNormed({ws.x, row_index, f.weights->final_norm,
                            static_cast<float>(c.rms_norm_eps)},
                           ws.rows, f.weights->lm_head, ws.logits, rows,
                           c.vocab_size, c.hidden_size);
}

absl::Status EnqueueAttention(const GpuForward& f, const StepShape& sh,
                              int layer, float sm_scale) {
  if (!f.tensor_core_attention) {
    return GenericAttention(f, sh, layer, sm_scale);
  }
  const GpuKvCache& cache = f.pool->caches[layer];
  if (sh.is_decode) {
    return Decode(cache, DecodeArgs(f, sh, layer, sm_scale), f.stream);
  }
  return Extend(cache, ExtendArgs(f, sh, layer, sm_scale), f.stream);
}

absl::Status EnqueueForward(const GpuForward& f, const StepShape& sh) {
  const model::ModelConfig& c = *f.config;
  const GpuWorkspace& ws = *f.workspace;
  RADIXKV_RETURN_IF_ERROR(KernelError(
      LaunchEmbeddingGather(f.weights->embed, f.dtype,
                            ws.Dev<int32_t>(ws.meta.ids), sh.num_tokens,
                            c.hidden_size, ws.x, f.stream),
      "embedding"));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    RADIXKV_RETURN_IF_ERROR(EnqueueLayer(f, sh, l));
  }
  if (sh.logit_rows > f.max_logit_rows) return absl::OkStatus();
  RADIXKV_RETURN_IF_ERROR(
      EnqueueLmHead(f, ws.Dev<int32_t>(ws.meta.rows), sh.logit_rows));
  if (sh.output == StepOutput::kArgmax) {
    return KernelError(LaunchArgmax(ws.logits, sh.logit_rows, c.vocab_size,
                                    ws.tokens, f.stream),
                       "argmax");
  }
  if (sh.output == StepOutput::kSample) {
    return KernelError(
        LaunchSample(ws.logits, sh.logit_rows, c.vocab_size,
                     ws.Dev<DeviceSamplingParams>(ws.meta.params), ws.tokens,
                     f.stream),
        "sample");
  }
  return absl::OkStatus();
}

absl::Status EnqueueLayerGemms(const GpuForward& f, int layer,
                               int64_t num_tokens) {
  const GpuLayerWeights& w = f.weights->layers[layer];
  RADIXKV_RETURN_IF_ERROR(QkvProj(f, w, num_tokens));
  RADIXKV_RETURN_IF_ERROR(OProj(f, w, num_tokens));
  RADIXKV_RETURN_IF_ERROR(GateUpProj(f, w, num_tokens));
  return DownProj(f, w, num_tokens);
}

absl::Status ChunkedLogits(const GpuForward& f, int32_t rows, float* logits) {
  const GpuWorkspace& ws = *f.workspace;
  const int64_t V = f.config->vocab_size;
  hipStream_t s = static_cast<hipStream_t>(f.stream);
  for (int32_t r0 = 0; r0 < rows; r0 += f.max_logit_rows) {
    const int32_t n = std::min(f.max_logit_rows, rows - r0);
    RADIXKV_RETURN_IF_ERROR(
        EnqueueLmHead(f, ws.Dev<int32_t>(ws.meta.rows) + r0, n));
    RADIXKV_RETURN_IF_ERROR(RuntimeError(
        hipMemcpyAsync(ws.logits_host, ws.logits, n * V * sizeof(float),
                       hipMemcpyDeviceToHost, s),
        "logits download"));
    RADIXKV_RETURN_IF_ERROR(RuntimeError(hipStreamSynchronize(s), "step"));
    std::memcpy(logits + static_cast<size_t>(r0) * V, ws.logits_host,
                n * V * sizeof(float));
  }
  return absl::OkStatus();
}

}  // namespace radixkv::worker::gpu
