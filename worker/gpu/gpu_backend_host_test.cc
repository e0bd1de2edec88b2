// CPU-only checks of the GPU backend (CI has no GPU): ForwardBatch
// validation rules, Create() without a device, and the random checkpoint
// writer read back through the checkpoint reader and the tokenizer loader.
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/model_config.h"
#include "model/safetensors_reader.h"
#include "model/tokenizer/load_tokenizer.h"
#include "worker/forward_batch_examples.h"
#include "worker/forward_batch_validation.h"
#include "worker/gpu/gpu_model_executor.h"

namespace radixkv::worker {
namespace {

using testing::TwoSequenceDecodeBatch;

TEST(ValidateForwardBatch, AcceptsConsistentDecode) {
  EXPECT_TRUE(ValidateForwardBatch(TwoSequenceDecodeBatch(), 100, 64, 16).ok());
}

TEST(ValidateForwardBatch, RejectsEachViolation) {
  struct Case {
    const char* what;
    void (*edit)(ForwardBatch&);
  };
  const Case cases[] = {
      {"token id", [](ForwardBatch& b) { b.input_ids[1] = 100; }},
      {"slot", [](ForwardBatch& b) { b.kv_indices[0] = 64; }},
      {"out_cache_loc", [](ForwardBatch& b) { b.out_cache_loc[0] = -1; }},
      {"last slot", [](ForwardBatch& b) { b.kv_indices[4] = 18; }},
      {"kv_indptr", [](ForwardBatch& b) { b.kv_indptr[2] = 4; }},
      {"lengths", [](ForwardBatch& b) { b.positions.pop_back(); }},
      {"copy op",
       [](ForwardBatch& b) {
         b.copy_ops.push_back({0, 4, 1});
       }},
      {"copy tokens",
       [](ForwardBatch& b) {
         b.copy_ops.push_back({0, 1, 17});
       }},
      {"position", [](ForwardBatch& b) { b.positions[0] = -3; }},
  };
  for (const Case& c : cases) {
    ForwardBatch b = TwoSequenceDecodeBatch();
    c.edit(b);
    absl::Status s = ValidateForwardBatch(b, 100, 64, 16);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument)
        << c.what << ": " << s;
  }
}

TEST(RandomCheckpoint, WriterOutputLoads) {
  const std::string out = absl::StrCat(std::getenv("TEST_TMPDIR"), "/ckpt");
  const std::string cmd = absl::StrCat(
      "worker/gpu/make_random_checkpoint --out=", out,
      " --layers=2 --hidden=64 --heads=4 --kv_heads=2 --head_dim=16"
      " --intermediate=96 --vocab=50 --dtype=bf16 > /dev/null");
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  absl::StatusOr<model::ModelConfig> c = model::LoadModelConfig(out);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_hidden_layers, 2);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->vocab_size, 50);
  auto r = model::SafetensorsReader::Open(out);
  ASSERT_TRUE(r.ok()) << r.status();
  auto q =
      (*r)->ReadFloat32("model.layers.1.self_attn.q_proj.weight", {64, 64});
  ASSERT_TRUE(q.ok()) << q.status();
  double sum_sq = 0;
  for (float v : *q) sum_sq += double(v) * v;
  const double std_dev = std::sqrt(sum_sq / q->size());
  EXPECT_NEAR(std_dev, 0.02, 0.004);  // --init_std default
  auto norm = (*r)->ReadFloat32("model.norm.weight", {64});
  ASSERT_TRUE(norm.ok());
  for (float v : *norm) {
    EXPECT_GE(v, 0.9f);
    EXPECT_LE(v, 1.1f);
  }
}

// The llama3 RoPE and tokenizer options of the writer (the 8B preset's,
// on a small shape): the config parses as llama3, and the byte-level
// tokenizer.json loads, round-trips text and names its special tokens.
TEST(RandomCheckpoint, Llama3RopeAndByteLevelTokenizerLoad) {
  const std::string out = absl::StrCat(std::getenv("TEST_TMPDIR"), "/l3");
  const std::string cmd = absl::StrCat(
      "worker/gpu/make_random_checkpoint --out=", out,
      " --layers=1 --hidden=64 --heads=4 --kv_heads=2 --head_dim=16"
      " --intermediate=96 --vocab=70000 --rope_type=llama3 --tokenizer"
      " --threads=3 > /dev/null");
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  absl::StatusOr<model::ModelConfig> c = model::LoadModelConfig(out);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope.type, model::RopeType::kLlama3);
  EXPECT_EQ(c->rope.factor, 8.0);
  EXPECT_EQ(c->rope.original_max_position_embeddings, 8192);
  absl::StatusOr<model::LoadedTokenizer> t = model::LoadTokenizer(out);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->tokenizer->vocab_size(), 70000);
  const std::string text = "Hello, world! \xc3\xa9t\xc3\xa9 42";
  auto ids = t->tokenizer->Encode(text, false);
  ASSERT_TRUE(ids.ok()) << ids.status();
  // "Hello, world!..." splits (GPT-2 regex) into words whose byte pairs are
  // tokens 256 + 256 * a + b: fewer ids than bytes.
  EXPECT_LT(ids->size(), text.size());
  for (int32_t id : *ids) EXPECT_LT(id, 70000 - 256);
  auto back = t->tokenizer->Decode(*ids, false);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, text);
  auto special = t->tokenizer->Encode("<|end_of_text|>", false);
  ASSERT_TRUE(special.ok()) << special.status();
  EXPECT_EQ(*special, std::vector<int32_t>{70000 - 255});
}

TEST(GpuModelExecutor, CreateFailsCleanlyWithoutDeviceOrCheckpoint) {
  GpuModelExecutorOptions o;
  o.model_dir = "/nonexistent";
  auto e = GpuModelExecutor::Create(o);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), absl::StatusCode::kNotFound) << e.status();
  o.page_size = 24;
  EXPECT_EQ(GpuModelExecutor::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace radixkv::worker
