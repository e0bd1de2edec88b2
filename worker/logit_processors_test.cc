#include "worker/logit_processors.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/sampler.h"

namespace radixkv::worker {
namespace {

// One case of worker/testdata/sampler_reference.txt (numpy float64).
struct ReferenceCase {
  std::string name;
  double rep = 1, freq = 0, pres = 0, temperature = 1, top_p = 1, min_p = 0;
  int32_t top_k = 0;
  std::vector<float> logits;
  std::vector<int32_t> prompt, output, kept;
  std::vector<double> penalized, logprobs;
};

template <typename T>
std::vector<T> ReadAll(std::istringstream& in) {
  std::vector<T> out;
  T v;
  while (in >> v) out.push_back(v);
  return out;
}

std::vector<ReferenceCase> LoadCases() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  const std::string path = std::string(srcdir != nullptr ? srcdir : ".") + "/" +
                           (ws != nullptr ? ws : "") +
                           "/worker/testdata/sampler_reference.txt";
  std::ifstream file(path);
  std::vector<ReferenceCase> cases;
  std::string line;
  while (std::getline(file, line)) {
    std::istringstream in(line);
    std::string key;
    in >> key;
    if (key == "case") {
      cases.emplace_back();
      in >> cases.back().name;
    } else if (cases.empty() || key.empty() || key[0] == '#') {
      continue;
    } else if (key == "params") {
      ReferenceCase& c = cases.back();
      in >> c.rep >> c.freq >> c.pres >> c.temperature >> c.top_k >> c.top_p >>
          c.min_p;
    } else if (key == "logits") {
      cases.back().logits = ReadAll<float>(in);
    } else if (key == "prompt") {
      cases.back().prompt = ReadAll<int32_t>(in);
    } else if (key == "output") {
      cases.back().output = ReadAll<int32_t>(in);
    } else if (key == "penalized") {
      cases.back().penalized = ReadAll<double>(in);
    } else if (key == "logprobs") {
      cases.back().logprobs = ReadAll<double>(in);
    } else if (key == "kept") {
      cases.back().kept = ReadAll<int32_t>(in);
    }
  }
  return cases;
}

TEST(LogitProcessorsTest, MatchesTheNumpyReference) {
  const std::vector<ReferenceCase> cases = LoadCases();
  ASSERT_EQ(cases.size(), 9u) << "worker/testdata/sampler_reference.txt";
  for (const ReferenceCase& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(c.logits.size(), c.penalized.size());
    std::vector<double> x(c.logits.begin(), c.logits.end());
    ApplyPenalties({c.rep, c.freq, c.pres}, c.prompt, c.output, &x);
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_NEAR(x[i], c.penalized[i], 1e-12) << "token " << i;
    }
    const std::vector<double> logprobs = LogSoftmax(x, c.temperature);
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_NEAR(logprobs[i], c.logprobs[i], 1e-12) << "token " << i;
    }
    std::vector<double> probs;
    EXPECT_EQ(
        KeptCandidates(x, c.temperature, c.top_k, c.top_p, c.min_p, &probs),
        c.kept);
    EXPECT_EQ(probs.size(), c.kept.size());
    const auto top = TopLogprobs(logprobs, 5);
    ASSERT_EQ(top.size(), 5u);
    for (size_t i = 0; i < top.size(); ++i) {
      EXPECT_EQ(top[i].second, logprobs[top[i].first]);
      if (i > 0) {
        EXPECT_GE(top[i - 1].second, top[i].second);
      }
    }
  }
}

TEST(LogitProcessorsTest, SamplerReportsReferenceLogprobsAndDrawsOnlyKept) {
  for (const ReferenceCase& c : LoadCases()) {
    SCOPED_TRACE(c.name);
    SamplingParams params;
    params.temperature = static_cast<float>(c.temperature);
    params.top_k = c.top_k;
    params.top_p = static_cast<float>(c.top_p);
    params.min_p = static_cast<float>(c.min_p);
    params.repetition_penalty = static_cast<float>(c.rep);
    params.frequency_penalty = static_cast<float>(c.freq);
    params.presence_penalty = static_cast<float>(c.pres);
    params.logprobs = 20;  // more than the vocab of 16: clamped
    params.seed = 7;
    Sampler sampler(params);
    for (int draw = 0; draw < 50; ++draw) {
      absl::StatusOr<SampledToken> s =
          sampler.SampleWithHistory(c.logits, c.prompt, c.output);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_NE(std::find(c.kept.begin(), c.kept.end(), s->token), c.kept.end())
          << "drew " << s->token << ", truncated away";
      // Float parameters: the float64 reference within their rounding.
      EXPECT_NEAR(s->logprob, c.logprobs[s->token], 1e-6);
      ASSERT_EQ(s->top.size(), 16u);
      EXPECT_NEAR(s->top[0].second, c.logprobs[c.kept[0]], 1e-6);
    }
    // Greedy: the argmax of the penalized logits, logprobs at temperature 1.
    params.temperature = 0;
    Sampler greedy(params);
    absl::StatusOr<SampledToken> g =
        greedy.SampleWithHistory(c.logits, c.prompt, c.output);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(g->token, c.kept[0]);
    const std::vector<double> at_one = LogSoftmax(c.penalized, 1.0);
    EXPECT_NEAR(g->logprob, at_one[g->token], 1e-6);
  }
}

TEST(LogitProcessorsTest, NeutralPenaltiesChangeNothing) {
  std::vector<double> x = {1.5, -2.0, 0.25};
  const std::vector<double> before = x;
  ApplyPenalties({}, {0, 1, 2}, {0, 0, 1}, &x);
  EXPECT_EQ(x, before);
  // Ids outside the vocabulary are ignored.
  ApplyPenalties({2.0, 1.0, 1.0}, {7, -1}, {9}, &x);
  EXPECT_EQ(x, before);
}

}  // namespace
}  // namespace radixkv::worker
