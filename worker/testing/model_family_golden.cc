#include "worker/testing/model_family_golden.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "model/testing/shared_test_data.h"

namespace radixkv::worker::testing {
namespace {

using Json = nlohmann::json;

int ArgMax(const float* row, int n) {
  return static_cast<int>(std::max_element(row, row + n) - row);
}

// Compares logits of positions [begin, end) (rows of `got`) with the golden.
void ExpectRowsMatch(const FamilyGolden& g, const std::vector<float>& got,
                     int begin, int end, const FamilyTolerance& tol,
                     const std::string& what) {
  const int V = g.vocab;
  ASSERT_EQ(got.size(), static_cast<size_t>(end - begin) * V) << what;
  double max_abs = 0;
  int compared = 0;
  for (size_t r = 0; r < g.positions.size(); ++r) {
    const int p = g.positions[r];
    if (p < begin || p >= end) continue;
    ++compared;
    for (int v = 0; v < V; ++v) {
      const double d =
          got[size_t(p - begin) * V + v] - double(g.logits[r * V + v]);
      max_abs = std::max(max_abs, std::fabs(d));
    }
  }
  const std::vector<int> argmax = g.json["argmax"].get<std::vector<int>>();
  const std::vector<double> margin =
      g.json["top2_margin"].get<std::vector<double>>();
  int mismatched = 0, skipped = 0;
  for (int p = begin; p < end; ++p) {
    if (margin[p] < tol.low_margin) {
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
      "%-40s max |diff| %.3g over %d rows; argmax %d/%d equal (%d "
      "below margin %.0e)\n",
      what.c_str(), max_abs, compared, end - begin - skipped - mismatched,
      end - begin - skipped, skipped, tol.low_margin);
  EXPECT_GT(compared, 0) << what;
  EXPECT_LE(max_abs, tol.max_abs) << what;
  EXPECT_EQ(mismatched, 0) << what;
}

}  // namespace

std::string FamilyTestName(const char* model) {
  std::string s = model;
  for (char& ch : s) ch = ch == '-' ? '_' : ch;
  return s;
}

ForwardBatch ExtendBatch(const std::vector<int32_t>& ids, int begin, int end,
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

ForwardBatch DecodeBatch(const std::vector<int32_t>& ids) {
  const int p = static_cast<int>(ids.size()) - 1;
  ForwardBatch d = ExtendBatch(ids, p, p + 1, false);
  d.is_decode = true;
  d.kv_indices.push_back(p);
  d.kv_indptr = {0, p + 1};
  return d;
}

std::string FamilyDir(const std::string& name) {
  if (const char* dir = std::getenv("RADIXKV_MODEL_FAMILY_DIR")) {
    return absl::StrCat(dir, "/", name);
  }
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/",
                      workspace != nullptr ? workspace : "radixkv",
                      "/worker/testdata/model_families/", name);
}

bool LoadFamilyGolden(const std::string& dir, FamilyGolden* g) {
  g->dir = dir;
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

void ExpectFamilyLogits(ModelExecutor& e, const FamilyGolden& g,
                        const FamilyTolerance& tol, const std::string& what) {
  const int n = static_cast<int>(g.sequence.size());
  std::vector<float> logits;
  absl::Status s = e.Forward(ExtendBatch(g.sequence, 0, n, true), &logits);
  ASSERT_TRUE(s.ok()) << s;
  ExpectRowsMatch(g, logits, 0, n, tol, what + " prefill");
  // A cached prefix longer than every window, then the rest as an extend.
  const int split = 700;
  s = e.Forward(ExtendBatch(g.sequence, 0, split, false), &logits);
  ASSERT_TRUE(s.ok()) << s;
  s = e.Forward(ExtendBatch(g.sequence, split, n, true), &logits);
  ASSERT_TRUE(s.ok()) << s;
  ExpectRowsMatch(g, logits, split, n, tol, what + " prefix 700 + extend");
}

void ExpectFamilyGreedy(ModelExecutor& e, const FamilyGolden& g,
                        const FamilyTolerance& tol, const std::string& what) {
  const Json& gen = g.json["generation"];
  const int prompt = gen["prompt_length"].get<int>();
  const std::vector<int32_t> want =
      gen["generated_ids"].get<std::vector<int32_t>>();
  const std::vector<double> margins =
      gen["step_top2_margins"].get<std::vector<double>>();
  std::vector<int32_t> ids(g.sequence.begin(), g.sequence.begin() + prompt);
  std::vector<float> logits;
  absl::Status s = e.Forward(ExtendBatch(ids, 0, prompt, false), &logits);
  ASSERT_TRUE(s.ok()) << s;
  size_t equal = 0;
  for (size_t step = 0; step < want.size(); ++step) {
    const int32_t token = ArgMax(logits.data(), g.vocab);
    if (token != want[step] && margins[step] < tol.greedy_margin) {
      std::printf("%s: step %zu has top-2 margin %.3g; compared up to it\n",
                  what.c_str(), step, margins[step]);
      break;
    }
    ASSERT_EQ(token, want[step]) << what << " step " << step;
    ++equal;
    ids.push_back(token);
    s = e.Forward(DecodeBatch(ids), &logits);
    ASSERT_TRUE(s.ok()) << s;
  }
  std::printf("%-40s %zu greedy tokens equal\n", what.c_str(), equal);
}

}  // namespace radixkv::worker::testing
