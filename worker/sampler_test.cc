#include "worker/sampler.h"

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::worker {
namespace {

std::vector<float> RandomLogits(int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> l(vocab);
  for (float& x : l) x = dist(rng);
  return l;
}

TEST(SamplerTest, GreedyIsArgmaxWithLowestIdOnTies) {
  Sampler s(SamplingParams{});
  EXPECT_EQ(*s.Sample(std::vector<float>{0.1f, 3.0f, -1.0f, 3.0f}), 1);
  const std::vector<float> l = RandomLogits(512, 7);
  EXPECT_EQ(*s.Sample(l), ArgMax(l));
  EXPECT_EQ(ArgMax(l), std::max_element(l.begin(), l.end()) - l.begin());
}

TEST(SamplerTest, TopK1EqualsGreedyAtAnyTemperature) {
  const uint32_t seed = 12345;
  std::printf("seed %u\n", seed);
  SamplingParams p;
  p.temperature = 1.7f;
  p.top_k = 1;
  p.seed = 99;
  Sampler s(p);
  for (uint32_t i = 0; i < 50; ++i) {
    const std::vector<float> l = RandomLogits(512, seed + i);
    EXPECT_EQ(*s.Sample(l), ArgMax(l));
  }
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDiffers) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.95f;
  p.top_k = 50;
  std::vector<std::vector<float>> steps;
  for (uint32_t i = 0; i < 64; ++i)
    steps.push_back(RandomLogits(256, 1000 + i));
  auto run = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (const auto& l : steps) out.push_back(*s.Sample(l));
    return out;
  };
  const std::vector<int32_t> a = run(42);
  EXPECT_EQ(a, run(42));
  EXPECT_NE(a, run(43));
}

// Empirical frequencies follow softmax(logits / T) restricted to the top-k
// (chi-square-like bound on a 6-token vocabulary).
TEST(SamplerTest, DistributionMatchesSoftmaxWithTemperatureAndTopK) {
  const std::vector<float> logits = {1.0f, 0.5f, -0.3f, 2.0f, 0.0f, -5.0f};
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 4;  // keeps ids 3, 0, 1, 4
  p.seed = 2024;
  Sampler s(p);
  const int n = 200000;
  std::vector<int> counts(6, 0);
  for (int i = 0; i < n; ++i) ++counts[*s.Sample(logits)];
  std::vector<double> expected(6, 0.0);
  double z = 0;
  for (int id : {3, 0, 1, 4}) z += std::exp(logits[id] / 0.7);
  for (int id : {3, 0, 1, 4}) expected[id] = std::exp(logits[id] / 0.7) / z;
  for (int id = 0; id < 6; ++id) {
    const double freq = static_cast<double>(counts[id]) / n;
    EXPECT_NEAR(freq, expected[id], 0.005) << "id " << id;
  }
  EXPECT_EQ(counts[2], 0);
  EXPECT_EQ(counts[5], 0);
}

// Top-p keeps token i while the mass before it is < top_p.
TEST(SamplerTest, TopPKeepsSmallestNucleus) {
  // probabilities 0.5, 0.3, 0.15, 0.05 (T = 1)
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f),
                                     std::log(0.15f), std::log(0.05f)};
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 5;
  for (auto [top_p, allowed] : std::vector<std::pair<float, int>>{
           {0.5f, 1}, {0.6f, 2}, {0.79f, 2}, {0.81f, 3}, {1.0f, 4}}) {
    p.top_p = top_p;
    Sampler s(p);
    std::vector<int> counts(4, 0);
    for (int i = 0; i < 20000; ++i) ++counts[*s.Sample(logits)];
    for (int id = 0; id < 4; ++id) {
      if (id < allowed) {
        EXPECT_GT(counts[id], 0) << "top_p " << top_p << " id " << id;
      } else {
        EXPECT_EQ(counts[id], 0) << "top_p " << top_p << " id " << id;
      }
    }
  }
}

TEST(SamplerTest, RejectsNanAndEmpty) {
  SamplingParams p;
  p.temperature = 1.0f;
  Sampler s(p);
  EXPECT_FALSE(s.Sample(std::vector<float>{}).ok());
  EXPECT_FALSE(s.Sample(std::vector<float>{1.0f, NAN}).ok());
}

TEST(SamplerTest, ValidateSamplingParams) {
  SamplingParams ok;
  EXPECT_TRUE(ValidateSamplingParams(ok, 1024).ok());
  SamplingParams p = ok;
  p.temperature = -0.1f;
  EXPECT_EQ(ValidateSamplingParams(p, 1024).code(),
            absl::StatusCode::kInvalidArgument);
  p = ok;
  p.top_p = 0.0f;
  EXPECT_FALSE(ValidateSamplingParams(p, 1024).ok());
  p = ok;
  p.top_p = 1.5f;
  EXPECT_FALSE(ValidateSamplingParams(p, 1024).ok());
  p = ok;
  p.top_k = -1;
  EXPECT_FALSE(ValidateSamplingParams(p, 1024).ok());
  p = ok;
  p.max_new_tokens = 0;
  EXPECT_FALSE(ValidateSamplingParams(p, 1024).ok());
  p.max_new_tokens = 1025;
  EXPECT_FALSE(ValidateSamplingParams(p, 1024).ok());
  p = ok;
  p.stop_strings = {""};
  EXPECT_FALSE(ValidateSamplingParams(p, 1024).ok());
}

TEST(StopCheckerTest, HoldsBackPartialMatchAndCutsBeforeStop) {
  StopChecker c({"END", "\n\n"});
  StopChecker::Result r = c.Append("Hello E");
  EXPECT_EQ(r.emit, "Hello ");  // "E" may start "END"
  EXPECT_FALSE(r.stopped);
  r = c.Append("Nx");
  EXPECT_EQ(r.emit, "ENx");  // disambiguated
  r = c.Append(" world\n");
  EXPECT_EQ(r.emit, " world");
  r = c.Append("\nmore");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.emit, "");
  EXPECT_TRUE(c.stopped());
  EXPECT_TRUE(c.Append("anything").stopped);
}

TEST(StopCheckerTest, StopSpanningDeltasAndFlush) {
  StopChecker c({"license"});
  std::string out;
  for (const char* d : {"the lic", "en", "se grants"}) {
    StopChecker::Result r = c.Append(d);
    out += r.emit;
    if (r.stopped) break;
  }
  EXPECT_EQ(out, "the ");
  EXPECT_TRUE(c.stopped());

  StopChecker none({"zzz"});
  EXPECT_EQ(none.Append("abz").emit, "ab");
  EXPECT_EQ(none.Flush(), "z");
  StopChecker empty({});
  EXPECT_EQ(empty.Append("text").emit, "text");
}

}  // namespace
}  // namespace radixkv::worker
