// GpuModelExecutor: a LLaMA-family causal LM (LLaMA 2/3, Qwen2) on one GPU,
// implementing ModelExecutor (worker/model_executor.h) so the scheduler and
// the services run unchanged; CpuModelExecutor
// (worker/cpu/cpu_model_executor.h) is the reference it is tested against.
//
// `dtype` (options) is the storage/compute type of weights, activations and
// the KV pool: kF32 (exact checks against the golden data; GEMMs in fp32
// without TF32, attention through the generic kernel) or kBF16/kF16
// (serving; the tensor-core attention kernels for head_dim 64/128/256).
// Weights, workspace and pool are allocated once in Create; a step
// allocates no device memory. Decode steps run as CUDA/HIP graphs keyed by
// (batch bucket, context bucket, output) (decode_graphs.h); the kernel
// sequence of a step is described in gpu_forward.h.
//
// Not thread-safe: one Forward at a time (like every ModelExecutor).
#ifndef RADIXKV_WORKER_GPU_GPU_MODEL_EXECUTOR_H_
#define RADIXKV_WORKER_GPU_GPU_MODEL_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/model_config.h"
#include "worker/kv_cache_layout.h"
#include "worker/model_executor.h"
#include "worker/numeric_types.h"

namespace radixkv::worker {

namespace gpu {
enum class StepOutput : int;  // step_metadata.h
class DeviceLogitProcessing;  // device_logit_processing.h
}  // namespace gpu

struct GpuModelExecutorOptions {
  // Hugging Face checkpoint directory (config.json + safetensors).
  std::string model_dir;
  // Weights, activations and KV pool dtype on the device.
  DType dtype = DType::kBF16;
  // Tokens per page, a power of two in [1, 128].
  int32_t page_size = 16;
  KvLayout kv_layout = KvLayout::kBSHD;
  // Pool size: exactly this many slots (rounded up to pages) when > 0 ...
  int64_t kv_capacity_slots = 0;
  // ... else this many bytes (K+V, all layers) when > 0 ...
  int64_t kv_budget_bytes = 0;
  // ... else this fraction of the device memory still free after weights and
  // workspace (less 512 MiB of headroom), in (0, 1]; like vLLM's
  // gpu_memory_utilization, but of the free remainder.
  double memory_fraction = 0.85;
  // Workspace capacity: tokens per step (prefill chunk), sequences per step,
  // logit rows per GEMM chunk (return_all_logits larger than this is chunked
  // outside graphs), kv_indices entries per step (0 = max(capacity_slots,
  // max_batch_size * max_context_len)).
  int32_t max_tokens_per_step = 8192;
  int32_t max_batch_size = 256;
  int32_t max_logit_rows = 512;
  int64_t max_kv_indices = 0;
  // Longest context a decode graph is bucketed for (0 = the model's
  // max_position_embeddings, at most 32768). Longer contexts run eagerly.
  int32_t max_context_len = 0;
  // Capture decode steps as graphs.
  bool use_graphs = true;
  // Paged decode partition size for the tensor-core kernels: -1 = heuristic
  // (worker/kernels/hip/gpu_attention.h ChooseDecodePartitionSize), 0 = v1.
  int32_t decode_partition_size = -1;
  // Use the worker/kernels/hip attention kernels where they apply (2-byte
  // dtype, head_dim 64/128/256); false = always the generic kernel.
  bool use_tensor_core_attention = true;
  // GEMMs over at most this many rows (2-byte dtypes, K a multiple of 8) use
  // the weight-streaming kernel of model_kernels.h instead of the vendor
  // GEMM (decode steps of small batches); 0 = always the vendor GEMM, <= 16.
  // Default 2 from the H200 sweep in docs/perf.md (faster at 1-2 rows,
  // slower from 4: every weight chunk re-reads `rows` activation chunks).
  int32_t small_batch_gemm_max_rows = 2;
  // The weight-streaming kernel of a GEMM whose input is an RMSNorm (QKV,
  // gate/up, LM head) normalizes its rows itself (GpuGemm::RunNormed): no
  // RMSNorm launch at those batch sizes, same bits. false = the separate
  // kernel (benchmark A/B, tests).
  bool fuse_rms_norm = true;
  // Per-shape GEMM autotuning (gpu_gemm_tuner.h): the first eager step of a
  // decode bucket times GemmEx, the weight-streaming kernel and cuBLASLt's
  // heuristic and split-K algorithms for each of its GEMM shapes and keeps
  // the fastest (a few ms per new bucket). Off: the rule above.
  bool gemm_autotune = false;
  // CUDA/HIP device ordinal.
  int device_id = 0;
};

// Sampling parameters of one sequence for ForwardSample (temperature 0 =
// greedy). `step` advances the per-sequence random stream.
struct GpuSamplingParams {
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  uint64_t step = 0;
  // 0 = off; applied after top-p (model_kernels.h LaunchSample). Last, so
  // that {temperature, top_k, top_p, seed, step} initializers keep meaning.
  float min_p = 0.0f;
};

// Wall-clock phases of the last step (seconds; host timers around the
// stream's completion), for benchmarks.
struct GpuStepInfo {
  bool graph_replayed = false;  // the step ran as a captured graph
  int32_t batch_bucket = 0;     // padded batch of a decode graph, else B
};

class GpuModelExecutor final : public ModelExecutor {
 public:
  // Loads config + weights onto the device, allocates workspace and pool.
  // Errors: NOT_FOUND / INVALID_ARGUMENT as CpuModelExecutor::Create (bad
  // checkpoint or options), RESOURCE_EXHAUSTED (device memory), INTERNAL or
  // UNAVAILABLE (no device, runtime/BLAS failure).
  static absl::StatusOr<std::unique_ptr<GpuModelExecutor>> Create(
      const GpuModelExecutorOptions& options);

  ~GpuModelExecutor() override;
  GpuModelExecutor(const GpuModelExecutor&) = delete;
  GpuModelExecutor& operator=(const GpuModelExecutor&) = delete;

  const model::ModelConfig& config() const override { return config_; }

  // ModelExecutor::Forward: logits [B, vocab] (or [num_tokens, vocab]) fp32,
  // copied to the host. Errors as documented there, plus INVALID_ARGUMENT
  // when the batch exceeds the workspace (max_tokens_per_step,
  // max_batch_size, max_kv_indices).
  absl::Status Forward(const ForwardBatch& batch,
                       std::vector<float>* logits) override;

  // ModelExecutor::ForwardSample on the device (the serving path): argmax
  // (all rows greedy) or the sampling kernel below run after the LM head,
  // inside the decode graph, and only the B token ids are copied to the
  // host. host_sampler is ignored; the random stream is keyed by (seed,
  // step), so a seed reproduces on this backend but draws other tokens than
  // the host Sampler. Rows with needs_token false are computed greedily and
  // reported as -1. As on the host path, a row that needs a token and whose
  // logits contain a NaN gets kSamplingFailedToken (the kernels write
  // gpu::kDeviceSamplingFailedToken) and the call still succeeds, so the
  // scheduler fails that sequence alone. min_p runs in the sampling kernel;
  // penalties and logprobs run on the device after the forward, outside the
  // decode graph (device_logit_processing.h: the logprobs are fp32, of the
  // penalized logits over the temperature, before truncation), and only B
  // tokens plus B x (1 + k) logprobs come back. A batch whose distinct
  // history tokens exceed that buffer (max_kv_indices + max_batch_size in
  // all) is sampled on the host (ModelExecutor::ForwardSample). Prompt
  // logprobs (prompt_targets) run on the device after the sampling, over
  // the step's final hidden states in chunks of max_logit_rows rows
  // (device_prompt_logprobs.h: fp32, raw logits); only rows x (1 + k)
  // values come back.
  absl::Status ForwardSample(const ForwardBatch& batch,
                             absl::Span<const SequenceSampling> sampling,
                             std::vector<int32_t>* token_ids) override;

  // Forward plus sampling on the device: tokens [B] (one per sequence; the
  // batch must not ask for return_all_logits). params: [B]. Only the token
  // ids cross to the host, unless `logits` is non-null. Per row: temperature
  // 0 = argmax (lowest id on ties); else temperature, top-k, top-p, min_p and
  // one draw from SplitMix64(seed ^ SplitMix64(step)) (model_kernels.hip). A
  // row whose logits contain a NaN gets kSamplingFailedToken.
  absl::Status ForwardSample(const ForwardBatch& batch,
                             absl::Span<const GpuSamplingParams> params,
                             std::vector<int32_t>* tokens,
                             std::vector<float>* logits = nullptr);

  int64_t capacity_slots() const override;
  int32_t page_size() const override { return options_.page_size; }
  std::string device() const override;

  // Bytes of weights, workspace and pool on the device.
  int64_t weight_bytes() const { return weight_bytes_; }
  int64_t workspace_bytes() const { return workspace_bytes_; }
  int64_t pool_bytes() const;
  // Changes small_batch_gemm_max_rows for later steps (benchmarks); drops
  // the captured graphs.
  void set_small_batch_gemm_max_rows(int32_t rows);
  // Changes fuse_rms_norm for later steps; drops the captured graphs.
  void set_fuse_rms_norm(bool on);
  // Turns GEMM autotuning on or off for later steps (benchmarks: both arms
  // in one process); drops the captured graphs, keeps the tuned choices.
  void set_gemm_autotune(bool on);
  // The tuned GEMM shapes and their choices, one line each.
  std::string gemm_tuning() const;
  // Turns decode graphs on or off for later steps (captured graphs stay).
  void set_use_graphs(bool on) { options_.use_graphs = on; }
  // Number of captured graphs and how the last step ran.
  int num_graphs() const;
  const GpuStepInfo& last_step() const { return last_step_; }
  // True if attention runs on the worker/kernels/hip tensor-core kernels.
  bool uses_tensor_core_attention() const { return tc_attention_; }

  // Benchmark hooks: enqueue only the attention kernels / only the GEMMs of
  // every layer for the metadata of the previous step, then synchronize;
  // returns seconds measured with device events. FAILED_PRECONDITION
  // before any step.
  absl::StatusOr<double> TimeAttentionOnly(int iterations);
  absl::StatusOr<double> TimeGemmsOnly(int iterations);

 private:
  struct Impl;
  GpuModelExecutor() = default;
  // The token of every row of a validated ForwardSample; *on_host is set
  // when the batch went to ModelExecutor::ForwardSample (which also fills
  // the prompt logprobs).
  absl::Status SampleRows(const ForwardBatch& batch,
                          absl::Span<const SequenceSampling> sampling,
                          std::vector<int32_t>* token_ids, bool* on_host);
  absl::Status Run(const ForwardBatch& batch, gpu::StepOutput output,
                   absl::Span<const GpuSamplingParams> params,
                   std::vector<int32_t>* tokens, std::vector<float>* logits,
                   gpu::DeviceLogitProcessing* processing = nullptr);

  GpuModelExecutorOptions options_;
  model::ModelConfig config_;
  bool tc_attention_ = false;
  int64_t weight_bytes_ = 0;
  int64_t workspace_bytes_ = 0;
  GpuStepInfo last_step_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_GPU_GPU_MODEL_EXECUTOR_H_
