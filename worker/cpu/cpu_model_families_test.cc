// CpuModelExecutor on the families beyond LLaMA: Qwen3's per-head q/k norms
// and Mistral / Qwen2 sliding windows, on checkpoints derived from the
// golden ones (shared/golden) by editing config.json and the tensor list.
// Transformers' own logits for these families are checked by
// cpu_model_executor_family_golden_test; this file checks properties that
// hold whatever the weights:
//   - a one-layer model with window W: the logits at position p depend only
//     on tokens p - W + 1 .. p, and RoPE makes them depend on relative
//     positions only, so they equal the last-position logits of those W
//     tokens fed alone (a window one key too wide or too narrow breaks it);
//   - a window at least as long as the sequence is full attention;
//   - prefix reuse with a cached prefix longer than the window, and
//     token-by-token paged decode (v1 and split-KV), equal one-shot prefill;
//   - Qwen3: q_norm/k_norm make the logits invariant to scaling q_proj and
//     k_proj (RMSNorm divides the scale out), which they are not without.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/safetensors_reader.h"
#include "model/safetensors_test_writer.h"
#include "model/testing/shared_test_data.h"
#include "nlohmann/json.hpp"
#include "worker/cpu/cpu_model_executor.h"
#include "worker/testing/golden_checkpoints.h"
#include "worker/testing/model_family_golden.h"

namespace radixkv::worker {
namespace {

using Json = nlohmann::json;
using model::testing::RawTensor;

constexpr int kVocab = testing::kGoldenVocab;
constexpr int32_t kPageSize = 16;
// Same fp32 computation in another order (see cpu_model_executor_test.cc).
constexpr double kEquivalenceTol = 1e-5;

std::string SharedDir() {
  absl::StatusOr<std::string> shared = model::testing::FindSharedDir();
  EXPECT_TRUE(shared.ok()) << shared.status();
  return shared.ok() ? *shared : "";
}

std::vector<int32_t> GoldenSequence3() {
  absl::StatusOr<Json> index =
      model::testing::ReadJsonFile(SharedDir() + "/golden/logits_index.json");
  EXPECT_TRUE(index.ok()) << index.status();
  if (!index.ok()) return {};
  return (*index)["sequences"][3]["ids"].get<std::vector<int32_t>>();
}

// Writes a checkpoint derived from golden model `base` into a fresh folder:
// config.json edited by `edit_config`; tensors of the base for which `keep`
// holds, transformed by `edit_tensor`, then `extra`. Returns the folder.
std::string DeriveCheckpoint(
    const std::string& base, const std::function<void(Json&)>& edit_config,
    const std::function<bool(const std::string&)>& keep = {},
    const std::function<void(RawTensor&)>& edit_tensor = {},
    const std::vector<RawTensor>& extra = {}) {
  static int counter = 0;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp",
                                       "/family_", getpid(), "_", counter++);
  ::mkdir(dir.c_str(), 0755);
  const std::string src = SharedDir() + "/golden/models/" + base;
  absl::StatusOr<Json> config =
      model::testing::ReadJsonFile(src + "/config.json");
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return dir;
  edit_config(*config);
  std::ofstream(dir + "/config.json") << config->dump(2);
  absl::StatusOr<std::unique_ptr<model::SafetensorsReader>> reader =
      model::SafetensorsReader::Open(src);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return dir;
  std::vector<RawTensor> tensors;
  for (const std::string& name : (*reader)->TensorNames()) {
    if (keep && !keep(name)) continue;
    const model::SafetensorsTensor* t = *(*reader)->Find(name);
    RawTensor r{
        name, t->dtype_name, t->shape,
        std::string(reinterpret_cast<const char*>(t->data), t->num_bytes)};
    if (edit_tensor) edit_tensor(r);
    tensors.push_back(std::move(r));
  }
  tensors.insert(tensors.end(), extra.begin(), extra.end());
  EXPECT_TRUE(
      model::testing::WriteSafetensors(dir + "/model.safetensors", tensors)
          .ok());
  return dir;
}

// llama-tiny-fp32 (2 layers, 4 heads, 2 kv heads, head_dim 32) as a
// MistralForCausalLM with the given window and layer count.
std::string MistralCheckpoint(int window, int layers) {
  return DeriveCheckpoint(
      "llama-tiny-fp32",
      [&](Json& c) {
        c["architectures"] = {"MistralForCausalLM"};
        c["model_type"] = "mistral";
        c["sliding_window"] = window;
        c["num_hidden_layers"] = layers;
      },
      [&](const std::string& name) {
        return name.rfind("model.layers.", 0) != 0 ||
               std::stoi(name.substr(13)) < layers;
      });
}

std::unique_ptr<CpuModelExecutor> MakeExecutor(const std::string& dir,
                                               int32_t partition = 0) {
  CpuModelExecutorOptions o;
  o.model_dir = dir;
  o.kv_capacity_slots = 256 * kPageSize;
  o.page_size = kPageSize;
  o.decode_partition_size = partition;
  absl::StatusOr<std::unique_ptr<CpuModelExecutor>> e =
      CpuModelExecutor::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// Extend of ids[begin:end) with ids[0:begin) cached at slots 0..begin-1,
// the logits of every new token.
ForwardBatch Extend(const std::vector<int32_t>& ids, int begin, int end) {
  return testing::ExtendBatch(ids, begin, end, /*all_logits=*/true);
}

std::vector<float> Logits(ModelExecutor& e, const ForwardBatch& b) {
  std::vector<float> logits;
  const absl::Status s = e.Forward(b, &logits);
  EXPECT_TRUE(s.ok()) << s;
  return logits;
}

double MaxAbsDiff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i)
    m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

TEST(SlidingWindowModelTest, OneLayerLogitsDependOnTheLastWindowOnly) {
  const std::vector<int32_t> ids = GoldenSequence3();
  ASSERT_GE(ids.size(), 300u);
  for (int window : {1, 16, 17, 40}) {
    std::unique_ptr<CpuModelExecutor> e =
        MakeExecutor(MistralCheckpoint(window, 1));
    ASSERT_NE(e, nullptr);
    const std::vector<float> full = Logits(*e, Extend(ids, 0, 300));
    double worst = 0;
    for (int p : {window - 1, window, 100, 163, 299}) {
      const std::vector<int32_t> tail(ids.begin() + p - window + 1,
                                      ids.begin() + p + 1);
      const std::vector<float> alone = Logits(*e, Extend(tail, 0, window));
      worst = std::max(worst, MaxAbsDiff(&alone[size_t(window - 1) * kVocab],
                                         &full[size_t(p) * kVocab], kVocab));
    }
    std::printf(
        "window %d: max |logits(S)[p] - logits(S[p-W+1..p])[-1]| = "
        "%.3g\n",
        window, worst);
    // RoPE at positions up to 299 vs 0..W-1: fp32 angle rounding only.
    EXPECT_LE(worst, 1e-4) << "window " << window;
  }
}

TEST(SlidingWindowModelTest, WindowLongerThanTheSequenceIsFullAttention) {
  const std::vector<int32_t> ids = GoldenSequence3();
  std::unique_ptr<CpuModelExecutor> windowed =
      MakeExecutor(MistralCheckpoint(300, 2));
  std::unique_ptr<CpuModelExecutor> full =
      MakeExecutor(SharedDir() + "/golden/models/llama-tiny-fp32");
  ASSERT_NE(windowed, nullptr);
  ASSERT_NE(full, nullptr);
  const std::vector<float> a = Logits(*windowed, Extend(ids, 0, 300));
  const std::vector<float> b = Logits(*full, Extend(ids, 0, 300));
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(MaxAbsDiff(a.data(), b.data(), a.size()), 0.0);
  // A window of 64 does change the logits past position 64.
  std::unique_ptr<CpuModelExecutor> w64 =
      MakeExecutor(MistralCheckpoint(64, 2));
  const std::vector<float> c = Logits(*w64, Extend(ids, 0, 300));
  EXPECT_EQ(MaxAbsDiff(c.data(), b.data(), 64 * kVocab), 0.0);
  EXPECT_GT(MaxAbsDiff(&c[200 * kVocab], &b[200 * kVocab], kVocab), 1e-3);
}

// Qwen2 with the window on layer 1 only (max_window_layers 1) and Mistral
// with window 24 on both layers: a cached prefix of 200 tokens (far longer
// than the window) reused by an extend, and decode v1 / split-KV v2 token by
// token, equal the one-shot prefill.
TEST(SlidingWindowModelTest, PrefixReuseAndDecodeEqualPrefill) {
  const std::vector<int32_t> ids = GoldenSequence3();
  const std::string qwen2 = DeriveCheckpoint("qwen2-tiny-fp32", [](Json& c) {
    c["use_sliding_window"] = true;
    c["sliding_window"] = 24;
    c["max_window_layers"] = 1;
    c.erase("layer_types");
  });
  for (const std::string& dir : {qwen2, MistralCheckpoint(24, 2)}) {
    for (int32_t partition : {0, 16}) {
      std::unique_ptr<CpuModelExecutor> e = MakeExecutor(dir, partition);
      ASSERT_NE(e, nullptr);
      if (dir == qwen2) {
        EXPECT_EQ(e->config().window_left(0), -1);
        EXPECT_EQ(e->config().window_left(1), 23);
      }
      const std::vector<float> full = Logits(*e, Extend(ids, 0, 300));
      Logits(*e, Extend(ids, 0, 200));
      const std::vector<float> ext = Logits(*e, Extend(ids, 200, 300));
      EXPECT_LE(MaxAbsDiff(ext.data(), &full[200 * kVocab], ext.size()),
                kEquivalenceTol)
          << dir;
      double worst = 0;
      Logits(*e, Extend(ids, 0, 1));
      for (int p = 1; p < 120; ++p) {
        const std::vector<float> l =
            Logits(*e, testing::DecodeBatch(std::vector<int32_t>(
                           ids.begin(), ids.begin() + p + 1)));
        worst = std::max(
            worst, MaxAbsDiff(l.data(), &full[size_t(p) * kVocab], kVocab));
      }
      EXPECT_LE(worst, kEquivalenceTol) << dir << " partition " << partition;
    }
  }
}

// A Qwen3 checkpoint from qwen2-tiny-fp32's weights (no biases) plus random
// q_norm / k_norm weights; q_proj and k_proj optionally scaled by `scale`.
std::string Qwen3Checkpoint(float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(1.0f, 0.1f);
  std::vector<RawTensor> norms;
  for (int l = 0; l < 2; ++l) {
    for (const char* n : {"q_norm", "k_norm"}) {
      std::string bytes(32 * sizeof(float), '\0');
      for (int i = 0; i < 32; ++i) {
        const float w = dist(rng);
        std::memcpy(&bytes[i * sizeof(float)], &w, sizeof(float));
      }
      norms.push_back(RawTensor{
          absl::StrCat("model.layers.", l, ".self_attn.", n, ".weight"),
          "F32",
          {32},
          bytes});
    }
  }
  return DeriveCheckpoint(
      "qwen2-tiny-fp32",
      [](Json& c) {
        c["architectures"] = {"Qwen3ForCausalLM"};
        c["model_type"] = "qwen3";
        c["head_dim"] = 32;
        c["attention_bias"] = false;
      },
      [](const std::string& name) {
        return name.find(".bias") == std::string::npos;
      },
      [scale](RawTensor& t) {
        if (t.name.find("q_proj") == std::string::npos &&
            t.name.find("k_proj") == std::string::npos) {
          return;
        }
        for (size_t i = 0; i < t.bytes.size(); i += sizeof(float)) {
          float v;
          std::memcpy(&v, &t.bytes[i], sizeof(float));
          v *= scale;
          std::memcpy(&t.bytes[i], &v, sizeof(float));
        }
      },
      norms);
}

TEST(Qwen3ModelTest, QkNormDividesOutTheProjectionScale) {
  const std::vector<int32_t> ids = GoldenSequence3();
  std::unique_ptr<CpuModelExecutor> base = MakeExecutor(Qwen3Checkpoint(1, 5));
  std::unique_ptr<CpuModelExecutor> scaled =
      MakeExecutor(Qwen3Checkpoint(4, 5));
  ASSERT_NE(base, nullptr);
  ASSERT_NE(scaled, nullptr);
  EXPECT_TRUE(base->config().qk_norm);
  const std::vector<float> a = Logits(*base, Extend(ids, 0, 300));
  const std::vector<float> b = Logits(*scaled, Extend(ids, 0, 300));
  const double d = MaxAbsDiff(a.data(), b.data(), a.size());
  std::printf("Qwen3 q/k projections x4: max logit diff %.3g\n", d);
  // Only eps = rms_norm_eps inside the rsqrt does not scale: ~1e-6 relative.
  EXPECT_LE(d, 1e-4);
  // The same weights as Qwen2 without the norms (and without biases) differ.
  std::unique_ptr<CpuModelExecutor> no_norm = MakeExecutor(DeriveCheckpoint(
      "qwen2-tiny-fp32",
      [](Json& c) {
        c["architectures"] = {"LlamaForCausalLM"};
        c["model_type"] = "llama";
        for (const char* k :
             {"use_sliding_window", "max_window_layers", "layer_types"}) {
          c.erase(k);
        }
      },
      [](const std::string& name) {
        return name.find(".bias") == std::string::npos;
      }));
  ASSERT_NE(no_norm, nullptr);
  const std::vector<float> c = Logits(*no_norm, Extend(ids, 0, 300));
  EXPECT_GT(MaxAbsDiff(a.data(), c.data(), a.size()), 1e-2);
}

}  // namespace
}  // namespace radixkv::worker
