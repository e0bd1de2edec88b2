// CpuModelExecutor: a LLaMA-family causal LM (LLaMA 2/3, Mistral, Qwen2,
// Qwen3 dense) on the CPU backend, implementing ModelExecutor over the paged
// KV pool and the CPU attention kernels.
//
// Per layer (HF transformers' LlamaDecoderLayer / Qwen2DecoderLayer /
// Qwen3DecoderLayer / MistralDecoderLayer):
//   h   = RMSNorm(x) * w_in                       (fp32, eps from config)
//   q,k,v = h Wq^T (+bq), h Wk^T (+bk), h Wv^T (+bv)   one fused GEMM
//   q,k = RMSNorm per head * w_qnorm / w_knorm    (Qwen3 only)
//   q,k = RoPE(q, k, position)                    rotate-half layout
//   ReshapeAndCache(k, v -> out_cache_loc)
//   a   = ExtendAttention (prefill / extend) or DecodeAttention (decode),
//         softmax scale 1/sqrt(head_dim), GQA, the layer's sliding window
//         (config.window_left(layer); every token stays cached, only the
//         attention reads skip out-of-window keys)
//   x  += a Wo^T
//   h   = RMSNorm(x) * w_post
//   x  += (silu(h Wg^T) * (h Wu^T)) Wd^T          fused gate/up GEMM
// then logits = RMSNorm(x) * w_final  lm_head^T (lm_head = embed_tokens when
// tie_word_embeddings). GEMMs: OpenBLAS cblas_sgemm, weights fp32 in memory
// (bf16/fp16 checkpoints are widened exactly at load).
//
// RoPE follows HF's fp32 arithmetic: exponent 2i/D in float32, theta^exponent
// rounded to float32 (torch's float32 pow; at most 1 ulp apart), inv_freq =
// 1 / that in float32, llama3 smoothing (HF _compute_llama3_parameters) with
// every operation in float32, angle = float(position) * inv_freq[i] rounded
// to float32, then cos/sin; dimension i pairs with i + D/2 (rotate_half).
// Measured against the transformers golden: max |logit diff| <= 4.3e-6.
#ifndef RADIXKV_WORKER_CPU_CPU_MODEL_EXECUTOR_H_
#define RADIXKV_WORKER_CPU_CPU_MODEL_EXECUTOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/model_config.h"
#include "worker/kernels/cpu/cpu_thread_pool.h"
#include "worker/kv_pool.h"
#include "worker/model_executor.h"

namespace radixkv::worker {

// How to build a CpuModelExecutor.
struct CpuModelExecutorOptions {
  // Hugging Face checkpoint directory: config.json plus model.safetensors or
  // model.safetensors.index.json + shards.
  std::string model_dir;
  // KV pool size: at least this many slots when > 0 ...
  int64_t kv_capacity_slots = 0;
  // ... else the largest pool within this many bytes (K+V, all layers).
  int64_t kv_budget_bytes = int64_t{256} << 20;
  // Tokens per page, a power of two in [1, 128].
  int32_t page_size = 16;
  KvLayout kv_layout = KvLayout::kBSHD;
  DType kv_dtype = DType::kF32;
  // Threads for attention (CpuThreadPool) and GEMMs (OpenBLAS; process-wide
  // setting, applied with openblas_set_num_threads at Create).
  int num_threads = 2;
  // Paged decode: 0 = v1 (one pass); > 0 = v2 split-KV with this many tokens
  // per partition.
  int32_t decode_partition_size = 0;
  // Linear layers over at most this many token rows use one BLAS GEMV per row
  // (no weight packing) instead of a GEMM; decode steps of small batches.
  int32_t gemv_max_rows = 8;
};

class CpuModelExecutor final : public ModelExecutor {
 public:
  // Loads config and weights, allocates the KV pool. Errors: NOT_FOUND
  // (missing config/checkpoint/tensor), INVALID_ARGUMENT (bad config, tensor
  // with the wrong shape, bad pool options), RESOURCE_EXHAUSTED (pool).
  static absl::StatusOr<std::unique_ptr<CpuModelExecutor>> Create(
      const CpuModelExecutorOptions& options);

  ~CpuModelExecutor() override;

  const model::ModelConfig& config() const override { return config_; }
  absl::Status Forward(const ForwardBatch& batch,
                       std::vector<float>* logits) override;
  int64_t capacity_slots() const override { return pool_->capacity_slots(); }
  int32_t page_size() const override { return pool_->page_size(); }
  std::string device() const override { return "cpu"; }

  // The paged pool (for tests and benchmarks).
  KvPool& kv_pool() { return *pool_; }

 private:
  struct LayerWeights {
    std::vector<float> input_norm;  // [H]
    std::vector<float> qkv;         // [(Hq + 2 Hkv) D, H]
    std::vector<float> qkv_bias;    // [(Hq + 2 Hkv) D] or empty
    std::vector<float> o;           // [H, Hq D]
    std::vector<float> o_bias;      // [H] or empty
    std::vector<float> q_norm;      // [D] (Qwen3) or empty
    std::vector<float> k_norm;      // [D] (Qwen3) or empty
    std::vector<float> post_norm;   // [H]
    std::vector<float> gate_up;     // [2 I, H]: gate rows then up rows
    std::vector<float> down;        // [H, I]
  };

  CpuModelExecutor() = default;
  absl::Status LoadWeights();
  // cos/sin [num_tokens, D/2] for the batch positions.
  void ComputeRope(const std::vector<int32_t>& positions);

  CpuModelExecutorOptions options_;
  model::ModelConfig config_;
  std::vector<float> inv_freq_;  // [D/2], HF fp32 values
  std::vector<float> embed_;     // [V, H]
  std::vector<float> final_norm_;
  std::vector<float> lm_head_;  // [V, H]; empty when tied (use embed_)
  std::vector<LayerWeights> layers_;
  std::unique_ptr<KvPool> pool_;
  std::unique_ptr<CpuThreadPool> threads_;

  // Per-Forward scratch, reused.
  std::vector<float> x_, h_, qkv_, q_, k_, v_, attn_, gate_up_, act_;
  std::vector<float> rope_cos_, rope_sin_, rows_;
};

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_CPU_CPU_MODEL_EXECUTOR_H_
