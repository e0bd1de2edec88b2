#include "model/checkpoint_tensors.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/rope.h"
#include "model/safetensors_test_writer.h"
#include "model/testing/shared_test_data.h"

namespace radixkv::model {
namespace {

using testing::RawTensor;

ModelConfig TinyConfig() {
  absl::StatusOr<ModelConfig> c = ParseModelConfig(R"({
    "model_type": "llama", "vocab_size": 16, "hidden_size": 8,
    "intermediate_size": 12, "num_hidden_layers": 1,
    "num_attention_heads": 2, "num_key_value_heads": 1})");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

RawTensor F32(const std::string& name, std::vector<int64_t> shape,
              float value = 0.0f) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n, value);
  return RawTensor{name, "F32", std::move(shape),
                   std::string(reinterpret_cast<const char*>(v.data()),
                               v.size() * sizeof(float))};
}

// Every tensor TinyConfig's executor consumes, with its shape.
std::vector<RawTensor> TinyTensors() {
  const std::string p = "model.layers.0.";
  return {F32("model.embed_tokens.weight", {16, 8}),
          F32("model.norm.weight", {8}),
          F32("lm_head.weight", {16, 8}),
          F32(p + "input_layernorm.weight", {8}),
          F32(p + "post_attention_layernorm.weight", {8}),
          F32(p + "self_attn.q_proj.weight", {8, 8}),
          F32(p + "self_attn.k_proj.weight", {4, 8}),
          F32(p + "self_attn.v_proj.weight", {4, 8}),
          F32(p + "self_attn.o_proj.weight", {8, 8}),
          F32(p + "mlp.gate_proj.weight", {12, 8}),
          F32(p + "mlp.up_proj.weight", {12, 8}),
          F32(p + "mlp.down_proj.weight", {8, 12})};
}

absl::Status Check(const ModelConfig& config,
                   const std::vector<RawTensor>& tensors) {
  const std::string path =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/model.safetensors");
  if (absl::Status s = testing::WriteSafetensors(path, tensors); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::unique_ptr<SafetensorsReader>> reader =
      SafetensorsReader::Open(path);
  if (!reader.ok()) return reader.status();
  return CheckCheckpointTensors(config, **reader);
}

TEST(CheckpointTensorsTest, ExactlyTheConsumedTensorsAreAccepted) {
  EXPECT_TRUE(Check(TinyConfig(), TinyTensors()).ok());
  EXPECT_EQ(ConsumedTensorNames(TinyConfig()).size(), 12u);
}

TEST(CheckpointTensorsTest, ATensorTheExecutorWouldNotReadIsRefused) {
  for (const std::string& extra :
       {"model.layers.0.self_attn.q_norm.weight",  // Qwen3
        "model.layers.0.self_attn.k_norm.weight",
        "model.layers.0.mlp.experts.0.gate_proj.weight",  // MoE
        "model.layers.0.self_attn.q_proj.bias"}) {  // bias without the config
    std::vector<RawTensor> tensors = TinyTensors();
    tensors.push_back(F32(extra, {4}));
    absl::Status s = Check(TinyConfig(), tensors);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << extra;
    EXPECT_NE(std::string(s.message()).find("tensor " + extra),
              std::string::npos)
        << s;
  }
}

TEST(CheckpointTensorsTest, AMissingTensorIsNamed) {
  std::vector<RawTensor> tensors = TinyTensors();
  tensors.erase(tensors.begin() + 6);  // k_proj
  absl::Status s = Check(TinyConfig(), tensors);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(
      std::string(s.message()).find("model.layers.0.self_attn.k_proj.weight"),
      std::string::npos)
      << s;
}

TEST(CheckpointTensorsTest, SavedRopeBufferMustMatchTheConfig) {
  const ModelConfig config = TinyConfig();
  const std::vector<float> inv_freq = RopeInvFreq(config);
  const std::string name = "model.layers.0.self_attn.rotary_emb.inv_freq";
  RawTensor good{name,
                 "F32",
                 {static_cast<int64_t>(inv_freq.size())},
                 std::string(reinterpret_cast<const char*>(inv_freq.data()),
                             inv_freq.size() * sizeof(float))};
  std::vector<RawTensor> tensors = TinyTensors();
  tensors.push_back(good);
  EXPECT_TRUE(Check(config, tensors).ok());
  tensors.back() = F32(name, {static_cast<int64_t>(inv_freq.size())}, 0.5f);
  absl::Status s = Check(config, tensors);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("RoPE frequencies"),
            std::string::npos)
      << s;
}

TEST(CheckpointTensorsTest, TiedLmHeadIsAcceptedOnlyAsACopy) {
  ModelConfig config = TinyConfig();
  config.tie_word_embeddings = true;
  std::vector<RawTensor> tensors = TinyTensors();  // lm_head all zeros too
  EXPECT_TRUE(Check(config, tensors).ok());
  tensors[2] = F32("lm_head.weight", {16, 8}, 1.0f);
  absl::Status s = Check(config, tensors);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("tie_word_embeddings"),
            std::string::npos)
      << s;
  tensors.erase(tensors.begin() + 2);
  EXPECT_TRUE(Check(config, tensors).ok());
}

TEST(CheckpointTensorsTest, GoldenAndEmbeddedCheckpointsPass) {
  absl::StatusOr<std::string> shared = testing::FindSharedDir();
  ASSERT_TRUE(shared.ok()) << shared.status();
  std::vector<std::string> dirs;
  for (const char* m :
       {"llama-tiny-fp32", "llama3-gqa-bf16", "qwen2-tiny-fp32"}) {
    dirs.push_back(absl::StrCat(*shared, "/golden/models/", m));
  }
  absl::StatusOr<std::string> embedded = testing::EmbeddedModelDir();
  ASSERT_TRUE(embedded.ok()) << embedded.status();
  dirs.push_back(*embedded);
  for (const std::string& dir : dirs) {
    absl::StatusOr<ModelConfig> config = LoadModelConfig(dir);
    ASSERT_TRUE(config.ok()) << config.status();
    auto reader = SafetensorsReader::Open(dir);
    ASSERT_TRUE(reader.ok()) << reader.status();
    EXPECT_TRUE(CheckCheckpointTensors(*config, **reader).ok()) << dir;
  }
}

}  // namespace
}  // namespace radixkv::model
