// Golden tests of CpuModelExecutor against Hugging Face transformers
// (shared/golden, see its README "How a C++ test should compare"):
//   - logits of all three checkpoints for the 4 sequences (fp32 compute;
//     bf16 weights upcast): max abs <= 1e-3, argmax equal except at the
//     listed low-margin positions, where the robust rule applies;
//   - greedy generations, 24 tokens, token-identical (EOS not stopping);
//   - the embedded demo model: val_len64 logits and the greedy sample.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/testing/shared_test_data.h"
#include "model/tokenizer/incremental_detokenizer.h"
#include "model/tokenizer/load_tokenizer.h"
#include "nlohmann/json.hpp"
#include "worker/cpu/cpu_model_executor.h"
#include "worker/offline_generation.h"
#include "worker/testing/golden_checkpoints.h"

namespace radixkv::worker {
namespace {

using Json = nlohmann::json;
using testing::PrefillAllLogits;

constexpr int kVocab = testing::kGoldenVocab;

std::unique_ptr<CpuModelExecutor> MakeExecutor(const std::string& dir,
                                               int64_t slots = 4096) {
  CpuModelExecutorOptions o;
  o.model_dir = dir;
  o.kv_capacity_slots = slots;
  o.page_size = 16;
  absl::StatusOr<std::unique_ptr<CpuModelExecutor>> e =
      CpuModelExecutor::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// Compares logits [L, V] with the golden per the README rules.
void ExpectMatchesGolden(const std::vector<float>& got,
                         const std::vector<float>& golden, int64_t length,
                         const std::vector<int>& low_margin_positions,
                         const std::string& what) {
  ASSERT_EQ(got.size(), golden.size()) << what;
  double max_abs = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_abs = std::max(max_abs, std::fabs(double(got[i]) - golden[i]));
  }
  std::printf("%-40s max |cpp - golden| = %.3g\n", what.c_str(), max_abs);
  EXPECT_LE(max_abs, 1e-3) << what;
  for (int64_t p = 0; p < length; ++p) {
    const float* g = &golden[p * kVocab];
    const float* c = &got[p * kVocab];
    const int cpp_arg = std::max_element(c, c + kVocab) - c;
    const int gold_arg = std::max_element(g, g + kVocab) - g;
    if (std::find(low_margin_positions.begin(), low_margin_positions.end(),
                  p) != low_margin_positions.end()) {
      EXPECT_GE(g[cpp_arg], g[gold_arg] - 1e-3) << what << " position " << p;
    } else {
      EXPECT_EQ(cpp_arg, gold_arg) << what << " position " << p;
    }
  }
}

class GoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> shared = model::testing::FindSharedDir();
    ASSERT_TRUE(shared.ok()) << shared.status();
    shared_ = *shared;
  }
  std::string shared_;
};

TEST_F(GoldenTest, LogitsAllModelsAllSequences) {
  absl::StatusOr<Json> index =
      model::testing::ReadJsonFile(shared_ + "/golden/logits_index.json");
  ASSERT_TRUE(index.ok()) << index.status();
  const Json& seqs = (*index)["sequences"];
  ASSERT_EQ(seqs.size(), 4u);
  int files = 0;
  for (const char* model : testing::kGoldenModels) {
    std::unique_ptr<CpuModelExecutor> e =
        MakeExecutor(shared_ + "/golden/models/" + model);
    ASSERT_NE(e, nullptr);
    const Json& entries = (*index)["models"][model]["files"];
    ASSERT_EQ(entries.size(), 4u) << model;
    for (const Json& f : entries) {
      const int seq = f["sequence"].get<int>();
      const int64_t len = f["length"].get<int64_t>();
      const std::vector<int32_t> ids =
          seqs[seq]["ids"].get<std::vector<int32_t>>();
      ASSERT_EQ(static_cast<int64_t>(ids.size()), len);
      absl::StatusOr<std::vector<float>> golden = model::testing::ReadF32File(
          shared_ + "/golden/" + f["file"].get<std::string>(), len * kVocab);
      ASSERT_TRUE(golden.ok()) << golden.status();
      ExpectMatchesGolden(
          PrefillAllLogits(*e, ids), *golden, len,
          f["positions_with_top2_margin_below_1em3"].get<std::vector<int>>(),
          absl::StrCat(model, " seq", seq, " len", len));
      ++files;
    }
  }
  EXPECT_EQ(files, 12);
}

// Greedy generation through prefill + paged decode (the serving path's
// kernels) equals transformers' float64 greedy loop, all 24 tokens.
TEST_F(GoldenTest, GreedyGenerationsTokenIdentical) {
  absl::StatusOr<Json> gen =
      model::testing::ReadJsonFile(shared_ + "/golden/generation.json");
  ASSERT_TRUE(gen.ok()) << gen.status();
  int compared = 0;
  for (const char* model : testing::kGoldenModels) {
    std::unique_ptr<CpuModelExecutor> e =
        MakeExecutor(shared_ + "/golden/models/" + model);
    ASSERT_NE(e, nullptr);
    const Json& cases = (*gen)["models"][model];
    ASSERT_EQ(cases.size(), 3u);
    // All three prompts in one batch (ragged prefill, batched decode).
    std::vector<OfflineRequest> requests;
    for (const Json& c : cases) {
      OfflineRequest r;
      r.prompt_ids = c["prompt_ids"].get<std::vector<int32_t>>();
      r.params.max_new_tokens = 24;
      r.params.ignore_eos = true;  // the golden loop does not stop at EOS
      requests.push_back(r);
    }
    absl::StatusOr<std::vector<OfflineResult>> out =
        GenerateOffline(*e, requests, e->config().eos_token_ids);
    ASSERT_TRUE(out.ok()) << out.status();
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ((*out)[i].output_ids,
                cases[i]["generated_ids"].get<std::vector<int32_t>>())
          << model << " prompt " << i;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 9);
}

// With EOS stopping, qwen2 + "Copyright holders may" stops at its 3rd token
// exactly like HF generate.
TEST_F(GoldenTest, GreedyStopsAtEosLikeHfGenerate) {
  absl::StatusOr<Json> gen =
      model::testing::ReadJsonFile(shared_ + "/golden/generation.json");
  ASSERT_TRUE(gen.ok()) << gen.status();
  for (const char* model : testing::kGoldenModels) {
    std::unique_ptr<CpuModelExecutor> e =
        MakeExecutor(shared_ + "/golden/models/" + model);
    ASSERT_NE(e, nullptr);
    for (const Json& c : (*gen)["models"][model]) {
      OfflineRequest r;
      r.prompt_ids = c["prompt_ids"].get<std::vector<int32_t>>();
      r.params.max_new_tokens = 24;
      absl::StatusOr<std::vector<OfflineResult>> out =
          GenerateOffline(*e, {r}, e->config().eos_token_ids);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ((*out)[0].output_ids,
                c["hf_generate_new_ids"].get<std::vector<int32_t>>())
          << model;
    }
  }
}

// The embedded default model (models/radixkv-demo-llama, bf16 weights,
// fp32 compute): golden logits of 64 validation tokens.
TEST_F(GoldenTest, EmbeddedDemoModelValidationLogits) {
  absl::StatusOr<std::string> dir = model::testing::EmbeddedModelDir();
  ASSERT_TRUE(dir.ok()) << dir.status();
  absl::StatusOr<Json> index = model::testing::ReadJsonFile(
      shared_ + "/demo-model/golden/logits_index.json");
  ASSERT_TRUE(index.ok()) << index.status();
  const Json& f = (*index)["files"][0];
  const std::vector<int32_t> ids = f["token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 64u);
  absl::StatusOr<std::vector<float>> golden = model::testing::ReadF32File(
      shared_ + "/demo-model/" + f["file"].get<std::string>(), 64 * kVocab);
  ASSERT_TRUE(golden.ok()) << golden.status();
  std::unique_ptr<CpuModelExecutor> e = MakeExecutor(*dir);
  ASSERT_NE(e, nullptr);
  std::vector<int> low_margin;
  if (f.contains("positions_with_top2_margin_below_1em3")) {
    low_margin =
        f["positions_with_top2_margin_below_1em3"].get<std::vector<int>>();
  }
  ExpectMatchesGolden(PrefillAllLogits(*e, ids), *golden, 64, low_margin,
                      "radixkv-demo-llama val_len64");
}

// Text in, text out with the embedded model: greedy continuation of
// "The license grants you the freedom to" equals samples.json (48 tokens,
// transformers fp32 on the GPU; min step margin 0.024 >> fp32 error).
TEST_F(GoldenTest, EmbeddedDemoModelGreedySample) {
  absl::StatusOr<std::string> dir = model::testing::EmbeddedModelDir();
  ASSERT_TRUE(dir.ok()) << dir.status();
  absl::StatusOr<Json> samples = model::testing::ReadJsonFile(
      shared_ + "/demo-model/radixkv-demo-llama/samples.json");
  ASSERT_TRUE(samples.ok()) << samples.status();
  absl::StatusOr<model::LoadedTokenizer> loaded = model::LoadTokenizer(*dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const model::Tokenizer* tok = loaded->tokenizer.get();
  std::unique_ptr<CpuModelExecutor> e = MakeExecutor(*dir);
  ASSERT_NE(e, nullptr);
  const Json* item = nullptr;
  for (const Json& it : (*samples)["items"]) {
    if (it["prompt"] == "The license grants you the freedom to") item = &it;
  }
  ASSERT_NE(item, nullptr);
  absl::StatusOr<std::vector<int32_t>> prompt =
      tok->Encode("The license grants you the freedom to", true);
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(*prompt, (*item)["prompt_ids"].get<std::vector<int32_t>>());
  OfflineRequest r;
  r.prompt_ids = *prompt;
  r.params.max_new_tokens = 48;
  r.params.ignore_eos = true;
  absl::StatusOr<std::vector<OfflineResult>> out =
      GenerateOffline(*e, {r}, e->config().eos_token_ids);
  ASSERT_TRUE(out.ok()) << out.status();
  const std::vector<int32_t> expected =
      (*item)["greedy"]["output_ids"].get<std::vector<int32_t>>();
  EXPECT_EQ((*out)[0].output_ids, expected);
  absl::StatusOr<std::string> text =
      tok->Decode((*out)[0].output_ids, /*skip_special_tokens=*/true);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, (*item)["greedy"]["new_text"].get<std::string>());
  // Streaming the same tokens gives the same text, delta by delta.
  model::IncrementalDetokenizer detok = *model::IncrementalDetokenizer::Create(
      tok, *prompt, /*skip_special_tokens=*/true);
  std::string streamed;
  for (int32_t id : (*out)[0].output_ids) {
    absl::StatusOr<std::string> delta = detok.Append(id);
    ASSERT_TRUE(delta.ok());
    streamed += *delta;
  }
  streamed += *detok.Flush();
  EXPECT_EQ(streamed, " " + *text);  // prompt context keeps the word space
  std::printf("demo model: %s|%s\n", "The license grants you the freedom to",
              text->c_str());
}

}  // namespace
}  // namespace radixkv::worker
