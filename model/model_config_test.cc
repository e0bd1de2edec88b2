#include "model/model_config.h"

#include <string>

#include "gtest/gtest.h"
#include "model/testing/shared_test_data.h"

namespace radixkv::model {
namespace {

TEST(ModelConfigTest, GoldenLlama3GqaBf16Transformers5Form) {
  absl::StatusOr<std::string> shared = testing::FindSharedDir();
  ASSERT_TRUE(shared.ok()) << shared.status();
  absl::StatusOr<ModelConfig> c =
      LoadModelConfig(*shared + "/golden/models/llama3-gqa-bf16");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->vocab_size, 512);
  EXPECT_EQ(c->hidden_size, 256);
  EXPECT_EQ(c->intermediate_size, 512);
  EXPECT_EQ(c->num_hidden_layers, 3);
  EXPECT_EQ(c->num_attention_heads, 8);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->gqa_group_size(), 4);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_EQ(c->rope.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c->rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c->rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c->rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c->rope.high_freq_factor, 4.0);
  EXPECT_EQ(c->rope.original_max_position_embeddings, 256);
  EXPECT_EQ(c->max_position_embeddings, 4096);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>({2}));
  EXPECT_EQ(c->dtype, "bfloat16");
}

TEST(ModelConfigTest, GoldenQwen2HasQkvBiasAndDerivedHeadDim) {
  absl::StatusOr<std::string> shared = testing::FindSharedDir();
  ASSERT_TRUE(shared.ok()) << shared.status();
  absl::StatusOr<ModelConfig> c =
      LoadModelConfig(*shared + "/golden/models/qwen2-tiny-fp32");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "qwen2");
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->o_bias);
  EXPECT_EQ(c->head_dim, 32);  // 128 / 4, no head_dim field
  EXPECT_EQ(c->num_key_value_heads, 1);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_EQ(c->rope.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c->rope.theta, 1e6);
  EXPECT_FALSE(c->tie_word_embeddings);
}

TEST(ModelConfigTest, Transformers4FormWithRopeScalingAndEosList) {
  const char* json = R"({
    "model_type": "llama", "vocab_size": 1000, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-6, "rope_theta": 500000.0,
    "rope_scaling": {"type": "llama3", "factor": 32.0,
                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192},
    "torch_dtype": "float16", "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009], "attention_bias": true})";
  absl::StatusOr<ModelConfig> c = ParseModelConfig(json);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->rope.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c->rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c->rope.factor, 32.0);
  EXPECT_EQ(c->rope.original_max_position_embeddings, 8192);
  EXPECT_EQ(c->dtype, "float16");
  EXPECT_EQ(c->bos_token_id, 128000);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>({128001, 128008, 128009}));
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_TRUE(c->o_bias);
  EXPECT_FALSE(c->tie_word_embeddings);
}

TEST(ModelConfigTest, Transformers4FormWithoutScalingIsDefaultRope) {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(R"({
    "model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
    "num_hidden_layers": 1, "num_attention_heads": 2, "rope_theta": 1234.5,
    "rope_scaling": null})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c->rope.theta, 1234.5);
  EXPECT_EQ(c->num_key_value_heads, 2);  // defaults to num_attention_heads
  EXPECT_EQ(c->bos_token_id, -1);
  EXPECT_TRUE(c->eos_token_ids.empty());
}

TEST(ModelConfigTest, RejectsBadConfigs) {
  const std::string base =
      R"("model_type": "llama", "vocab_size": 10, "hidden_size": 8,
         "intermediate_size": 16, "num_hidden_layers": 1)";
  struct Case {
    std::string json;
    std::string expected_substring;
  };
  for (const Case& c : std::vector<Case>{
           {"{", "malformed"},
           {"{" + base + "}", "num_attention_heads"},
           {"{" + base + R"(, "num_attention_heads": 3,
              "num_key_value_heads": 2})",
            "divisible"},
           {"{" + base + R"(, "num_attention_heads": 2,
              "rope_parameters": {"rope_type": "yarn", "factor": 4}})",
            "yarn"},
           {"{" + base + R"(, "num_attention_heads": 2,
              "rope_parameters": {"rope_type": "llama3", "factor": 8}})",
            "low_freq_factor"},
           {"{" + base + R"(, "num_attention_heads": 2,
              "hidden_act": "gelu"})",
            "gelu"},
       }) {
    absl::StatusOr<ModelConfig> r = ParseModelConfig(c.json);
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find(c.expected_substring),
              std::string::npos)
        << r.status();
  }
  EXPECT_EQ(LoadModelConfig("/nonexistent-dir").status().code(),
            absl::StatusCode::kNotFound);
}

// A config the executors do not implement fails to load, naming the field:
// loading it would give silently wrong logits (MoE, soft-capping, other
// norms, a window on a model type that has none).
TEST(ModelConfigTest, RefusesArchitecturesAndFeaturesNotImplemented) {
  const std::string shape =
      R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
         "num_hidden_layers": 1, "num_attention_heads": 2)";
  struct Case {
    std::string fields;
    std::string expected_substring;
  };
  for (const Case& c : std::vector<Case>{
           {R"("architectures": ["Qwen3MoeForCausalLM"],
               "model_type": "qwen3_moe")",
            "model_type 'qwen3_moe' is not supported"},
           {R"("architectures": ["Qwen3ForCausalLM"], "model_type": "llama")",
            "architecture 'Qwen3ForCausalLM'"},
           {R"("vocab_size2": 1)", "model_type"},
           {R"("model_type": "llama", "sliding_window": 4096)",
            "sliding_window 4096"},
           {R"("model_type": "mistral", "sliding_window": 0)",
            "sliding_window out of range"},
           {R"("model_type": "qwen2", "use_sliding_window": true,
               "sliding_window": null)",
            "sliding_window is null"},
           {R"("model_type": "qwen3", "layer_types": ["full_attention",
               "full_attention"])",
            "list of 1 layer types"},
           {R"("model_type": "mistral", "sliding_window": 8,
               "layer_types": ["chunked_attention"])",
            "\"chunked_attention\" is not implemented"},
           {R"("model_type": "qwen3", "num_experts": 128)", "'num_experts'"},
           {R"("model_type": "qwen3", "decoder_sparse_step": 1)",
            "'decoder_sparse_step'"},
           {R"("model_type": "mistral", "norm_type": "layernorm")",
            "'norm_type'"},
           {R"("model_type": "llama", "use_sliding_window": false)",
            "'use_sliding_window' is not a llama field"},
           {R"("model_type": "qwen2", "layer_types": ["sliding_attention"])",
            "sliding_attention"},
           {R"("model_type": "llama", "num_local_experts": 8)",
            "'num_local_experts'"},
           {R"("model_type": "qwen2", "num_experts": 64)", "'num_experts'"},
           {R"("model_type": "llama", "attn_logit_softcapping": 50.0)",
            "'attn_logit_softcapping'"},
           {R"("model_type": "llama", "final_logit_softcapping": 30.0)",
            "'final_logit_softcapping'"},
           {R"("model_type": "llama", "quantization_config": {})",
            "'quantization_config'"},
           {R"("model_type": "llama", "use_qk_norm": true)", "'use_qk_norm'"},
           {R"("model_type": "llama",
               "rope_parameters": {"rope_type": "default",
                                   "partial_rotary_factor": 0.5})",
            "rope parameter 'partial_rotary_factor'"},
           {R"("model_type": "gemma")", "model_type 'gemma'"},
       }) {
    const std::string json = "{" + shape + ", " + c.fields + "}";
    absl::StatusOr<ModelConfig> r = ParseModelConfig(json);
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(r.status().message()).find(c.expected_substring),
              std::string::npos)
        << r.status();
  }
}

TEST(ModelConfigTest, AcceptsTheFullAttentionFormsOfEachFamily) {
  const std::string shape =
      R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
         "num_hidden_layers": 2, "num_attention_heads": 2)";
  for (const std::string& fields : std::vector<std::string>{
           // Mistral v0.2+ without a window is the LLaMA computation.
           R"("architectures": ["MistralForCausalLM"], "model_type": "mistral",
              "sliding_window": null)",
           // Qwen2 carries a window size that applies only when used.
           R"("architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
              "use_sliding_window": false, "sliding_window": 131072,
              "max_window_layers": 21,
              "layer_types": ["full_attention", "full_attention"])",
           R"("architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "pretraining_tp": 1, "attention_dropout": 0.0,
              "_name_or_path": "x", "max_length": 20, "do_sample": false)",
       }) {
    const std::string json = "{" + shape + ", " + fields + "}";
    EXPECT_TRUE(ParseModelConfig(json).ok())
        << json << ": " << ParseModelConfig(json).status();
  }
}

// Sliding windows per layer as transformers assigns them: Mistral on every
// layer, Qwen2/Qwen3 from max_window_layers on and only with
// use_sliding_window, an explicit layer_types list over both rules.
TEST(ModelConfigTest, SlidingWindowsPerLayer) {
  const std::string shape =
      R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
         "num_hidden_layers": 4, "num_attention_heads": 2)";
  struct Case {
    std::string fields;
    std::vector<int32_t> windows;
  };
  for (const Case& c : std::vector<Case>{
           {R"("model_type": "mistral", "sliding_window": 64)",
            {64, 64, 64, 64}},
           {R"("model_type": "mistral", "sliding_window": null)", {0, 0, 0, 0}},
           {R"("model_type": "qwen2", "use_sliding_window": true,
               "sliding_window": 32, "max_window_layers": 1)",
            {0, 32, 32, 32}},
           {R"("model_type": "qwen2", "use_sliding_window": false,
               "sliding_window": 32, "max_window_layers": 1)",
            {0, 0, 0, 0}},
           {R"("model_type": "qwen2", "use_sliding_window": true,
               "sliding_window": 32)",
            {0, 0, 0, 0}},  // max_window_layers defaults to 28
           {R"("model_type": "qwen3", "use_sliding_window": true,
               "sliding_window": 16, "max_window_layers": 1,
               "layer_types": ["full_attention", "sliding_attention",
                               "full_attention", "sliding_attention"])",
            {0, 16, 0, 16}},
       }) {
    const std::string json = "{" + shape + ", " + c.fields + "}";
    absl::StatusOr<ModelConfig> r = ParseModelConfig(json);
    ASSERT_TRUE(r.ok()) << json << ": " << r.status();
    EXPECT_EQ(r->sliding_window_by_layer, c.windows) << json;
    for (int l = 0; l < 4; ++l) {
      EXPECT_EQ(r->window_left(l), c.windows[l] > 0 ? c.windows[l] - 1 : -1);
    }
  }
}

// Qwen3 dense: explicit head_dim (not hidden / heads), q/k norms, no bias
// unless attention_bias (then on all four projections, as LLaMA).
TEST(ModelConfigTest, Qwen3) {
  absl::StatusOr<ModelConfig> r = ParseModelConfig(
      R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
          "vocab_size": 10, "hidden_size": 64, "intermediate_size": 16,
          "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 32, "attention_bias": false,
          "rope_parameters": {"rope_type": "default", "rope_theta": 1e6},
          "use_sliding_window": false, "sliding_window": null,
          "max_window_layers": 2,
          "layer_types": ["full_attention", "full_attention"]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->qk_norm);
  EXPECT_FALSE(r->qkv_bias);
  EXPECT_FALSE(r->o_bias);
  EXPECT_EQ(r->head_dim, 32);
  EXPECT_FALSE(r->has_sliding_window());
}

}  // namespace
}  // namespace radixkv::model
