// ModelConfig: the architecture hyper-parameters of a LLaMA-family causal LM
// (LLaMA 2/3, Mistral, Qwen2, Qwen3 dense), parsed from a Hugging Face
// config.json. docs/architecture.md ("Model families") lists the accepted
// architectures and config features.
//
// Both config.json forms are accepted:
//   - transformers 5: `rope_parameters` {rope_type, rope_theta, factor, ...}
//     and `dtype`;
//   - transformers 4: top-level `rope_theta`, optional `rope_scaling` dict
//     {rope_type|type, factor, ...} and `torch_dtype`.
#ifndef RADIXKV_MODEL_MODEL_CONFIG_H_
#define RADIXKV_MODEL_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace radixkv::model {

// Rotary position embedding variant (HF `rope_type`).
enum class RopeType : int {
  kDefault = 0,  // inv_freq[i] = theta^(-2i/head_dim)
  kLlama3 = 1,   // Llama 3.1 frequency smoothing (HF
                 // _compute_llama3_parameters)
};

// RoPE parameters. Only the fields of the active type are meaningful.
struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  // llama3 only.
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// Architecture of a LLaMA-family model. Shapes in elements.
struct ModelConfig {
  std::string model_type;  // "llama", "qwen2", ...
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;
  int32_t intermediate_size = 0;
  int32_t num_hidden_layers = 0;
  int32_t num_attention_heads = 0;
  int32_t num_key_value_heads = 0;
  int32_t head_dim = 0;  // defaults to hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  int64_t max_position_embeddings = 2048;
  bool tie_word_embeddings = false;
  // q/k/v projections carry a bias (Qwen2 always; LLaMA when
  // attention_bias is true). o_proj has a bias only for LLaMA attention_bias.
  bool qkv_bias = false;
  bool o_bias = false;
  // Qwen3: per-head RMSNorm of q and of k (weights q_norm / k_norm
  // [head_dim], eps rms_norm_eps) between the projections and RoPE.
  bool qk_norm = false;
  // Per layer l < num_hidden_layers: the Hugging Face sliding window W of
  // that layer (query at position i sees keys j with i - W < j <= i,
  // transformers masking_utils.sliding_window_overlay), 0 = full causal
  // attention. Empty = every layer full.
  std::vector<int32_t> sliding_window_by_layer;
  int32_t bos_token_id = -1;           // -1: none
  std::vector<int32_t> eos_token_ids;  // may be empty
  std::string dtype = "float32";       // checkpoint storage dtype

  // GQA group size: query heads per KV head.
  int32_t gqa_group_size() const {
    return num_attention_heads / num_key_value_heads;
  }

  // The attention kernels' window_left of `layer` (W - 1), -1 for full
  // attention (worker/kernels/cpu/extend_attention.h).
  int32_t window_left(int layer) const {
    if (layer < 0 || layer >= static_cast<int>(sliding_window_by_layer.size()))
      return -1;
    const int32_t w = sliding_window_by_layer[layer];
    return w > 0 ? w - 1 : -1;
  }

  // True when some layer uses a sliding window.
  bool has_sliding_window() const {
    for (int32_t w : sliding_window_by_layer) {
      if (w > 0) return true;
    }
    return false;
  }
};

// Parses the text of a config.json. Returns INVALID_ARGUMENT for malformed
// JSON, missing required fields (vocab_size, hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads), inconsistent shapes (heads not
// divisible by kv heads, odd head_dim), unsupported hidden_act (only silu),
// unsupported rope_type (only default and llama3) and, by name, any field
// that selects a computation the executors do not implement (MoE,
// soft-capping, other norms, ...).
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text);

// Reads and parses `<model_dir>/config.json`. NOT_FOUND if the file is absent.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_MODEL_CONFIG_H_
