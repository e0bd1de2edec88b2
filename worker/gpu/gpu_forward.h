// The forward of one GpuModelExecutor step as a kernel sequence on one
// stream, over the metadata already uploaded to the workspace. Same math as
// CpuModelExecutor (HF LlamaDecoderLayer):
//   x = embed[input_ids]                          gather, fp32 residual
//   per layer:
//     h = RMSNorm(x) w_in                         -> dtype
//     qkv = h Wqkv^T                              fp32 out
//     q,k = RoPE(qkv (+bias)); K,V -> pool slots  one fused kernel
//     a = Extend / Decode attention               worker/kernels/hip tensor-
//                                                 core kernels, or the
//                                                 generic kernel
//     x += a Wo^T (+ o bias)                      beta = 1: the residual add
//                                                 is fused into the GEMM
//     h = RMSNorm(x) w_post
//     x += (silu(h Wg^T) * (h Wu^T)) Wd^T         fused gate/up GEMM
//   logits = RMSNorm(x[rows]) lm_head^T           fp32 [rows, vocab]
//   tokens = argmax / sample(logits)              by StepOutput
// Accumulation is fp32 everywhere.
#ifndef RADIXKV_WORKER_GPU_GPU_FORWARD_H_
#define RADIXKV_WORKER_GPU_GPU_FORWARD_H_

#include <cstdint>

#include "absl/status/status.h"
#include "model/model_config.h"
#include "worker/gpu/step_metadata.h"
#include "worker/numeric_types.h"

namespace radixkv::worker::gpu {

class GpuGemm;
struct GpuKvPool;
struct GpuWeights;
struct GpuWorkspace;

// What a step's kernels read and write; all owned by the executor.
struct GpuForward {
  const model::ModelConfig* config = nullptr;
  const GpuWeights* weights = nullptr;
  const GpuKvPool* pool = nullptr;
  const GpuWorkspace* workspace = nullptr;
  const GpuGemm* gemm = nullptr;
  void* stream = nullptr;  // hipStream_t
  DType dtype = DType::kBF16;
  // Attention through the worker/kernels/hip tensor-core kernels.
  bool tensor_core_attention = false;
  // GpuModelExecutorOptions::decode_partition_size.
  int32_t decode_partition_size = -1;
  // Rows of the logits buffer (resolved max_logit_rows).
  int32_t max_logit_rows = 0;
  int num_sms = 0;
};

// Enqueues the step of `shape`: embedding, every layer, and when
// shape.logit_rows <= max_logit_rows the LM head and the argmax / sampling
// of shape.output (larger all-token logits: ChunkedLogits after it). No
// synchronization. Errors: INVALID_ARGUMENT / INTERNAL of a launch.
absl::Status EnqueueForward(const GpuForward& f, const StepShape& shape);

// Enqueues the attention of `layer` for `shape` with softmax scale sm_scale.
absl::Status EnqueueAttention(const GpuForward& f, const StepShape& shape,
                              int layer, float sm_scale);

// Enqueues the four GEMMs of `layer` over `num_tokens` rows (benchmarks).
absl::Status EnqueueLayerGemms(const GpuForward& f, int layer,
                               int64_t num_tokens);

// Final norm and LM head of `rows` (<= max_logit_rows) logit rows into the
// workspace's logits (fp32 [rows, vocab]); row i reads residual row
// row_index[i] (device int32 [rows]). After a step's forward the residual
// stream holds every new token's final hidden state. No synchronization.
absl::Status EnqueueLmHead(const GpuForward& f, const int32_t* row_index,
                           int32_t rows);

// After EnqueueForward of an all-token step of `rows` logit rows:
// final norm and LM head in chunks of max_logit_rows rows, each copied to
// logits + r0 * vocab (host, [rows, vocab]) after synchronizing the stream.
absl::Status ChunkedLogits(const GpuForward& f, int32_t rows, float* logits);

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_GPU_FORWARD_H_
