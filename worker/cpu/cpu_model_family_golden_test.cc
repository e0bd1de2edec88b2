// Golden tests of CpuModelExecutor on the model families beyond LLaMA
// against Hugging Face transformers in float64
// (tools/golden/make_model_family_golden.py writes
// worker/testdata/model_families/<name>/): Qwen3 (q/k norms, explicit
// head_dim), Mistral with sliding_window 64, Qwen2 with a window on the
// layers from max_window_layers on. For the 1,500-token sequence:
//   - one-shot prefill: max |logit diff| <= 1e-3 at the stored positions,
//     argmax equal to transformers' at every position whose top-2 margin is
//     at least 1e-3;
//   - a cached prefix of 700 tokens (longer than every window) extended to
//     1,500: the same bounds;
//   - greedy generation of 32 tokens after a 1,000-token prompt by paged
//     decode (v1 and split-KV v2): token-identical.
// Skips, naming the generator, while the data folder is absent.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/testing/shared_test_data.h"
#include "nlohmann/json.hpp"
#include "worker/cpu/cpu_model_executor.h"

namespace radixkv::worker {
namespace {

using Json = nlohmann::json;

constexpr double kMaxAbsTol = 1e-3;     // fp32 compute vs float64
constexpr double kLowMargin = 1e-3;     // argmax compared only above this
constexpr double kGreedyMargin = 1e-4;  // a step this close may flip

std::string FamilyDir(const std::string& name) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/",
                      workspace != nullptr ? workspace : "radixkv",
                      "/worker/testdata/model_families/", name);
}

struct FamilyGolden {
  std::string dir;
  Json json;
  std::vector<int32_t> sequence;
  std::vector<int> positions;  // rows of `logits`
  std::vector<float> logits;   // [positions.size(), vocab]
  int vocab = 0;
};

// Loads <dir>/golden.json and logits.f32; false (and a skip) when absent.
bool LoadFamily(const std::string& name, FamilyGolden* g) {
  g->dir = FamilyDir(name);
  absl::StatusOr<Json> json =
      model::testing::ReadJsonFile(g->dir + "/golden.json");
  if (!json.ok()) return false;
  g->json = *json;
  g->vocab = g->json["vocab_size"].get<int>();
  g->sequence = g->json["sequence"].get<std::vector<int32_t>>();
  g->positions = g->json["logit_positions"].get<std::vector<int>>();
  absl::StatusOr<std::vector<float>> logits = model::testing::ReadF32File(
      g->dir + "/logits.f32", g->positions.size() * g->vocab);
  EXPECT_TRUE(logits.ok()) << logits.status();
  if (!logits.ok()) return false;
  g->logits = *logits;
  return true;
}

std::unique_ptr<CpuModelExecutor> MakeExecutor(const std::string& dir,
                                               int32_t partition) {
  CpuModelExecutorOptions o;
  o.model_dir = dir;
  o.kv_capacity_slots = 2048;
  o.page_size = 16;
  o.decode_partition_size = partition;
  absl::StatusOr<std::unique_ptr<CpuModelExecutor>> e =
      CpuModelExecutor::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// Extend of ids[begin:end) over ids[0:begin) cached at slots 0..begin-1;
// slot = position.
ForwardBatch Extend(const std::vector<int32_t>& ids, int begin, int end,
                    bool all_logits) {
  ForwardBatch b;
  b.qo_indptr = {0, end - begin};
  b.kv_indptr = {0, begin};
  for (int p = 0; p < begin; ++p) b.kv_indices.push_back(p);
  for (int p = begin; p < end; ++p) {
    b.input_ids.push_back(ids[p]);
    b.positions.push_back(p);
    b.out_cache_loc.push_back(p);
  }
  b.return_all_logits = all_logits;
  return b;
}

int ArgMax(const float* row, int n) {
  return static_cast<int>(std::max_element(row, row + n) - row);
}

// Compares logits of positions [begin, end) (rows of `got`) with the golden.
void ExpectLogitsMatch(const FamilyGolden& g, const std::vector<float>& got,
                       int begin, int end, const std::string& what) {
  const int V = g.vocab;
  ASSERT_EQ(got.size(), static_cast<size_t>(end - begin) * V) << what;
  double max_abs = 0;
  int compared = 0;
  for (size_t r = 0; r < g.positions.size(); ++r) {
    const int p = g.positions[r];
    if (p < begin || p >= end) continue;
    ++compared;
    for (int v = 0; v < V; ++v) {
      max_abs =
          std::max(max_abs, std::fabs(double(got[size_t(p - begin) * V + v]) -
                                      g.logits[r * V + v]));
    }
  }
  const std::vector<int> argmax = g.json["argmax"].get<std::vector<int>>();
  const std::vector<double> margin =
      g.json["top2_margin"].get<std::vector<double>>();
  int mismatched = 0, skipped = 0;
  for (int p = begin; p < end; ++p) {
    if (margin[p] < kLowMargin) {
      ++skipped;
      continue;
    }
    const int a = ArgMax(&got[size_t(p - begin) * V], V);
    if (a != argmax[p] && mismatched++ < 5) {
      ADD_FAILURE() << what << " position " << p << ": argmax " << a
                    << ", transformers " << argmax[p] << " (margin "
                    << margin[p] << ")";
    }
  }
  std::printf(
      "%-34s max |cpp - golden| = %.3g over %d rows; argmax %d/%d "
      "(%d low-margin skipped)\n",
      what.c_str(), max_abs, compared, end - begin - skipped - mismatched,
      end - begin - skipped, skipped);
  EXPECT_GT(compared, 0) << what;
  EXPECT_LE(max_abs, kMaxAbsTol) << what;
  EXPECT_EQ(mismatched, 0) << what;
}

class ModelFamilyGoldenTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ModelFamilyGoldenTest, LogitsMatchTransformers) {
  FamilyGolden g;
  if (!LoadFamily(GetParam(), &g)) {
    GTEST_SKIP() << g.dir << " is absent: run "
                 << "tools/golden/make_model_family_golden.py --out "
                    "worker/testdata/model_families (needs torch and "
                    "transformers)";
  }
  std::unique_ptr<CpuModelExecutor> e = MakeExecutor(g.dir, 0);
  ASSERT_NE(e, nullptr);
  const int n = static_cast<int>(g.sequence.size());
  std::vector<float> logits;
  ASSERT_TRUE(e->Forward(Extend(g.sequence, 0, n, true), &logits).ok());
  ExpectLogitsMatch(g, logits, 0, n, absl::StrCat(GetParam(), " prefill"));

  // A cached prefix longer than every window, then the rest as an extend.
  const int split = 700;
  ASSERT_TRUE(e->Forward(Extend(g.sequence, 0, split, false), &logits).ok());
  ASSERT_TRUE(e->Forward(Extend(g.sequence, split, n, true), &logits).ok());
  ExpectLogitsMatch(g, logits, split, n,
                    absl::StrCat(GetParam(), " prefix 700 + extend"));
}

TEST_P(ModelFamilyGoldenTest, GreedyGenerationMatchesTransformers) {
  FamilyGolden g;
  if (!LoadFamily(GetParam(), &g)) {
    GTEST_SKIP() << g.dir << " is absent (see LogitsMatchTransformers)";
  }
  const Json& gen = g.json["generation"];
  const int prompt = gen["prompt_length"].get<int>();
  const std::vector<int32_t> want =
      gen["generated_ids"].get<std::vector<int32_t>>();
  const std::vector<double> margins =
      gen["step_top2_margins"].get<std::vector<double>>();
  for (int32_t partition : {0, 64}) {
    std::unique_ptr<CpuModelExecutor> e = MakeExecutor(g.dir, partition);
    ASSERT_NE(e, nullptr);
    std::vector<int32_t> ids(g.sequence.begin(), g.sequence.begin() + prompt);
    std::vector<float> logits;
    ASSERT_TRUE(e->Forward(Extend(ids, 0, prompt, false), &logits).ok());
    std::vector<int32_t> got;
    for (size_t step = 0; step < want.size(); ++step) {
      got.push_back(ArgMax(logits.data(), g.vocab));
      if (got.back() != want[step] && margins[step] < kGreedyMargin) {
        std::printf("%s: step %zu has top-2 margin %.3g; compared up to it\n",
                    GetParam(), step, margins[step]);
        break;
      }
      ASSERT_EQ(got.back(), want[step])
          << GetParam() << " partition " << partition << " step " << step;
      ids.push_back(got.back());
      const int p = static_cast<int>(ids.size()) - 1;
      ForwardBatch d = Extend(ids, p, p + 1, false);
      d.is_decode = true;
      d.kv_indices.push_back(p);  // decode: the context includes the token
      d.kv_indptr = {0, p + 1};
      ASSERT_TRUE(e->Forward(d, &logits).ok());
    }
    std::printf("%s partition %d: %zu greedy tokens equal\n", GetParam(),
                partition, got.size());
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ModelFamilyGoldenTest,
                         ::testing::Values("qwen3-tiny", "mistral-window64",
                                           "qwen2-window100"),
                         [](const auto& info) {
                           std::string s = info.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

}  // namespace
}  // namespace radixkv::worker
