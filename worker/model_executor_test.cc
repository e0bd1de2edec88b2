// ModelExecutor::ForwardSample's default implementation (Forward + the host
// Sampler), through the fake executor: the tokens equal those of Forward
// followed by Sampler::Sample on the same logits, rows that need no token
// draw nothing, and bad arguments are rejected before the forward runs.
#include "worker/model_executor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"
#include "worker/logit_processors.h"
#include "worker/sampler.h"
#include "worker/testing/fake_model_executor.h"

namespace radixkv::worker {
namespace {

using testing::FakeModelExecutor;

// Prefill of two sequences, prompts {5, 6, 7} (slots 0..2) and {8, 9}
// (slots 3, 4), no cached prefix.
ForwardBatch TwoPrompts() {
  ForwardBatch b;
  b.input_ids = {5, 6, 7, 8, 9};
  b.positions = {0, 1, 2, 0, 1};
  b.qo_indptr = {0, 3, 5};
  b.kv_indptr = {0, 0, 0};
  b.out_cache_loc = {0, 1, 2, 3, 4};
  return b;
}

std::vector<float> Logits(const ForwardBatch& batch) {
  FakeModelExecutor fresh(64, 1);
  std::vector<float> logits;
  EXPECT_TRUE(fresh.Forward(batch, &logits).ok());
  return logits;
}

SamplingParams Hot(uint64_t seed) {
  SamplingParams p;
  p.temperature = 5.0f;  // logits 10 vs 0: the argmax has p ~ 0.1
  p.seed = seed;
  return p;
}

TEST(ModelExecutorForwardSampleTest, GreedyRowsAreTheArgmax) {
  FakeModelExecutor e(64, 1);
  std::vector<SequenceSampling> s(2);
  std::vector<int32_t> tokens;
  ASSERT_TRUE(e.ForwardSample(TwoPrompts(), s, &tokens).ok());
  EXPECT_EQ(tokens, (std::vector<int32_t>{e.NextToken({5, 6, 7}),
                                          e.NextToken({8, 9})}));
  EXPECT_EQ(e.batches().size(), 1u);
}

TEST(ModelExecutorForwardSampleTest,
     HostSamplerStreamMatchesForwardPlusSample) {
  const ForwardBatch batch = TwoPrompts();
  const std::vector<float> logits = Logits(batch);
  const absl::Span<const float> row0(logits.data(), 64);
  const absl::Span<const float> row1(logits.data() + 64, 64);
  // Reference: Forward, then each request's Sampler on its row, 8 steps.
  Sampler ref0(Hot(11)), ref1(Hot(12));
  Sampler host0(Hot(11)), host1(Hot(12));
  FakeModelExecutor e(64, 1);
  std::vector<int32_t> drawn, expected;
  for (int step = 0; step < 8; ++step) {
    std::vector<SequenceSampling> s(2);
    for (int b = 0; b < 2; ++b) {
      s[b].temperature = 5.0f;
      s[b].seed = 11 + b;
      s[b].step = step;
    }
    s[0].host_sampler = &host0;
    s[1].host_sampler = &host1;
    std::vector<int32_t> tokens;
    ASSERT_TRUE(e.ForwardSample(batch, s, &tokens).ok());
    drawn.insert(drawn.end(), tokens.begin(), tokens.end());
    expected.push_back(*ref0.Sample(row0));
    expected.push_back(*ref1.Sample(row1));
  }
  EXPECT_EQ(drawn, expected);
  // Not all the argmax: the draws really are random.
  int argmax = 0;
  for (size_t i = 0; i < drawn.size(); ++i) {
    argmax += drawn[i] == ArgMax(i % 2 == 0 ? row0 : row1);
  }
  EXPECT_LT(argmax, 16);
}

TEST(ModelExecutorForwardSampleTest, RowWithoutTokenDrawsNothing) {
  const ForwardBatch batch = TwoPrompts();
  const std::vector<float> logits = Logits(batch);
  Sampler host(Hot(3)), ref(Hot(3));
  FakeModelExecutor e(64, 1);
  std::vector<SequenceSampling> s(2);
  s[0].needs_token = false;
  s[0].temperature = 5.0f;
  s[0].host_sampler = &host;
  std::vector<int32_t> tokens;
  ASSERT_TRUE(e.ForwardSample(batch, s, &tokens).ok());
  EXPECT_EQ(tokens[0], -1);
  EXPECT_EQ(tokens[1], e.NextToken({8, 9}));
  // `host` is still at the start of its stream.
  for (int i = 0; i < 8; ++i) {
    const absl::Span<const float> row(logits.data(), 64);
    EXPECT_EQ(*host.Sample(row), *ref.Sample(row)) << i;
  }
}

TEST(ModelExecutorForwardSampleTest, WithoutHostSamplerReproducesPerSeedStep) {
  const ForwardBatch batch = TwoPrompts();
  auto run = [&](uint64_t seed, uint64_t step) {
    FakeModelExecutor e(64, 1);
    std::vector<SequenceSampling> s(2);
    for (SequenceSampling& x : s) {
      x.temperature = 5.0f;
      x.seed = seed;
      x.step = step;
    }
    std::vector<int32_t> tokens;
    EXPECT_TRUE(e.ForwardSample(batch, s, &tokens).ok());
    return tokens;
  };
  std::vector<int32_t> all;
  for (uint64_t step = 0; step < 8; ++step) {
    const std::vector<int32_t> t = run(99, step);
    EXPECT_EQ(t, run(99, step));
    for (int32_t id : t) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, FakeModelExecutor::kVocabSize);
    }
    all.insert(all.end(), t.begin(), t.end());
  }
  // Different steps give different draws (16 draws, p(argmax) ~ 0.1).
  std::sort(all.begin(), all.end());
  EXPECT_GT(std::unique(all.begin(), all.end()) - all.begin(), 2);
}

TEST(ModelExecutorForwardSampleTest, BadArgumentsRunNoForward) {
  FakeModelExecutor e(64, 1);
  std::vector<int32_t> tokens;
  ForwardBatch batch = TwoPrompts();
  std::vector<SequenceSampling> one(1), two(2);
  EXPECT_EQ(e.ForwardSample(batch, one, &tokens).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e.ForwardSample(batch, two, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<SequenceSampling> bad = two;
  bad[1].temperature = -1.0f;
  EXPECT_EQ(e.ForwardSample(batch, bad, &tokens).code(),
            absl::StatusCode::kInvalidArgument);
  bad = two;
  bad[0].top_p = 0.0f;
  EXPECT_EQ(e.ForwardSample(batch, bad, &tokens).code(),
            absl::StatusCode::kInvalidArgument);
  bad = two;
  bad[0].top_k = -2;
  EXPECT_EQ(e.ForwardSample(batch, bad, &tokens).code(),
            absl::StatusCode::kInvalidArgument);
  batch.return_all_logits = true;
  EXPECT_EQ(e.ForwardSample(batch, two, &tokens).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(e.batches().empty());
  // A forward failure is returned as is.
  e.FailNextForward();
  EXPECT_EQ(e.ForwardSample(TwoPrompts(), two, &tokens).code(),
            absl::StatusCode::kInternal);
}

// Prompt targets: their rows' raw log-softmax (float64) of the all-token
// logits, while each sequence's token still comes from its last row.
TEST(ModelExecutorForwardSampleTest, PromptTargetsGetTheirRowsLogprobs) {
  ForwardBatch all = TwoPrompts();
  all.return_all_logits = true;
  const std::vector<float> rows = Logits(all);
  ASSERT_EQ(rows.size(), 5u * FakeModelExecutor::kVocabSize);
  FakeModelExecutor e(64, 1);
  std::vector<SequenceSampling> s(2);
  // Sequence 0: rows 0 and 1 are followed by prompt tokens 6 and 7.
  const std::vector<int32_t> targets = {6, 7};
  std::vector<SampledToken> out(2);
  s[0].prompt_logprobs = 3;
  s[0].prompt_targets = targets;
  s[0].prompt_logprobs_out = out.data();
  s[0].temperature = 2.0f;  // does not apply to prompt logprobs
  s[0].repetition_penalty = 1.7f;
  std::vector<int32_t> tokens;
  ASSERT_TRUE(e.ForwardSample(TwoPrompts(), s, &tokens).ok());
  EXPECT_EQ(tokens[1], e.NextToken({8, 9}));
  for (int i = 0; i < 2; ++i) {
    const std::vector<double> ref =
        LogSoftmax(std::vector<double>(
                       rows.begin() + i * FakeModelExecutor::kVocabSize,
                       rows.begin() + (i + 1) * FakeModelExecutor::kVocabSize),
                   1.0);
    EXPECT_EQ(out[i].token, targets[i]);
    EXPECT_DOUBLE_EQ(out[i].logprob, ref[targets[i]]);
    ASSERT_EQ(out[i].top.size(), 3u);
    for (const auto& [id, lp] : out[i].top) EXPECT_DOUBLE_EQ(lp, ref[id]);
  }
}

TEST(ModelExecutorForwardSampleTest, BadPromptTargetsRunNoForward) {
  FakeModelExecutor e(64, 1);
  std::vector<int32_t> tokens;
  std::vector<SampledToken> out(4);
  const std::vector<int32_t> four = {1, 2, 3, 4}, negative = {-1};
  auto with = [&](absl::Span<const int32_t> targets, int32_t k,
                  SampledToken* dst) {
    std::vector<SequenceSampling> s(2);
    s[0].prompt_targets = targets;
    s[0].prompt_logprobs = k;
    s[0].prompt_logprobs_out = dst;
    return e.ForwardSample(TwoPrompts(), s, &tokens).code();
  };
  // More targets than the sequence's 3 new tokens.
  EXPECT_EQ(with(four, 1, out.data()), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with(negative, 1, out.data()), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with(four, 1, nullptr), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with({}, 21, out.data()), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(with(absl::MakeConstSpan(four).subspan(0, 1), -1, out.data()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(e.batches().empty());
  // A target beyond the vocabulary is caught where the row is read.
  const std::vector<int32_t> huge = {FakeModelExecutor::kVocabSize};
  EXPECT_EQ(with(huge, 0, out.data()), absl::StatusCode::kInvalidArgument);
}

// A row whose logits are NaN cannot be sampled: that row alone reports
// kSamplingFailedToken, the other row gets its token and the call succeeds.
TEST(ModelExecutorForwardSampleTest, NonFiniteRowFailsAlone) {
  class NanRow : public FakeModelExecutor {
   public:
    using FakeModelExecutor::FakeModelExecutor;
    absl::Status Forward(const ForwardBatch& batch,
                         std::vector<float>* logits) override {
      absl::Status st = FakeModelExecutor::Forward(batch, logits);
      std::fill(logits->begin() + 64, logits->begin() + 128, std::nanf(""));
      return st;
    }
  };
  NanRow e(64, 1);
  std::vector<SequenceSampling> s(2);
  s[1].temperature = 1.0f;  // the random path rejects NaN too
  std::vector<int32_t> tokens;
  ASSERT_TRUE(e.ForwardSample(TwoPrompts(), s, &tokens).ok());
  EXPECT_EQ(tokens, (std::vector<int32_t>{e.NextToken({5, 6, 7}),
                                          kSamplingFailedToken}));
  s[1].temperature = 0.0f;
  ASSERT_TRUE(e.ForwardSample(TwoPrompts(), s, &tokens).ok());
  EXPECT_EQ(tokens[1], kSamplingFailedToken);
}

}  // namespace
}  // namespace radixkv::worker
