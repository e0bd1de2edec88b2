// Parallel sampling through the scheduler (GenerateRequest.n > 1): one
// prefill, a Fork at the last prompt token, copy-on-write of the shared
// partial page, independent streams, per-sample ends, commits and aborts;
// logprobs of the host path.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "worker/logit_processors.h"
#include "worker/sampler.h"
#include "worker/scheduler.h"
#include "worker/testing/fake_kv_cache_client.h"
#include "worker/testing/fake_model_executor.h"
#include "worker/testing/scheduler_fixture.h"

namespace radixkv::worker {
namespace {

using testing::FakeKvCacheClient;
using testing::FakeModelExecutor;

// Fails the test when a forward writes K/V into a page that more than one
// holder references (the cache service's ref counts): the property that
// makes sharing through Fork safe. (A sequence of n = 1 may write the free
// tail of a last page whose head its keep_lease Commit put in the tree;
// tests of such requests turn the check off.)
class PageWriteCheckingExecutor : public FakeModelExecutor {
 public:
  using FakeModelExecutor::FakeModelExecutor;
  void set_cache(const FakeKvCacheClient* cache) { cache_ = cache; }
  void set_check_writes(bool check) { check_ = check; }
  int64_t writes() const { return writes_; }

  absl::Status Forward(const ForwardBatch& batch,
                       std::vector<float>* logits) override {
    for (int64_t slot : batch.out_cache_loc) {
      ++writes_;
      if (!check_) continue;
      EXPECT_EQ(cache_->page_refs(slot / page_size()), 1)
          << "write into shared page " << slot / page_size() << " (slot "
          << slot << ")";
    }
    return FakeModelExecutor::Forward(batch, logits);
  }

 private:
  const FakeKvCacheClient* cache_ = nullptr;
  bool check_ = true;
  int64_t writes_ = 0;
};

struct Sample {
  std::vector<int32_t> tokens;
  std::vector<v1::TokenLogprobs> logprobs;
  bool finished = false;
  v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
};

struct Outcome {
  std::map<int32_t, Sample> samples;  // by sample_index
  absl::Status status;
  int32_t stream_ends = 0;  // events with finished and !more_samples
};

class SchedulerForkTest : public testing::SchedulerFixture {
 protected:
  // The fixture over a PageWriteCheckingExecutor.
  void InitChecked(int64_t capacity, int32_t page_size) {
    auto executor =
        std::make_unique<PageWriteCheckingExecutor>(capacity, page_size);
    checked_ = executor.get();
    Init(capacity, page_size, {}, true, std::move(executor));
    checked_->set_cache(cache_.get());
  }

  static v1::GenerateRequest SamplesRequest(const std::string& id,
                                            const std::vector<int32_t>& prompt,
                                            int max_new_tokens, int n) {
    v1::GenerateRequest r = Request(id, prompt, max_new_tokens);
    r.mutable_sampling()->set_ignore_eos(true);
    r.set_n(n);
    return r;
  }

  static Outcome CollectSamples(RequestStream& stream) {
    Outcome out;
    GenerateEvent e;
    while (stream.Pop(&e, absl::ZeroDuration())) {
      EXPECT_EQ(out.stream_ends, 0) << "event after the stream's end";
      Sample& s = out.samples[e.sample_index];
      EXPECT_FALSE(s.finished) << "sample " << e.sample_index;
      s.tokens.insert(s.tokens.end(), e.token_ids.begin(), e.token_ids.end());
      s.logprobs.insert(s.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
      if (e.finished) {
        s.finished = true;
        s.reason = e.finish_reason;
        if (!e.more_samples) {
          ++out.stream_ends;
          out.status = e.status;
        }
      }
    }
    return out;
  }

  PageWriteCheckingExecutor* checked_ = nullptr;
};

TEST_F(SchedulerForkTest,
       GreedySamplesShareOnePrefillAndNeverWriteASharedPage) {
  InitChecked(512, 4);
  // 9 shared positions: pages 0-1 full, page 2 holds one position, so every
  // child's first write (position 9) lands in the shared partial page
  // unless it was copied first.
  const std::vector<int32_t> prompt = RandomPrompt(10);
  auto stream = Submit(SamplesRequest("fork", prompt, 6, 4));
  RunUntilIdle();
  Outcome out = CollectSamples(*stream);
  ASSERT_TRUE(out.status.ok()) << out.status;
  EXPECT_EQ(out.stream_ends, 1);
  ASSERT_EQ(out.samples.size(), 4u);
  const std::vector<int32_t> greedy = executor_->Generate(prompt, 6);
  for (const auto& [index, sample] : out.samples) {
    EXPECT_TRUE(sample.finished) << index;
    EXPECT_EQ(sample.reason, v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(sample.tokens, greedy) << "sample " << index;
  }
  EXPECT_EQ(cache_->calls("Acquire"), 1);
  EXPECT_EQ(cache_->calls("Fork"), 1);
  // The prompt but its last token was computed once, in extend batches;
  // the children computed the last prompt token each.
  int64_t extend_tokens = 0;
  int copy_ops = 0;
  for (const auto& b : executor_->batches()) {
    if (!b.is_decode) extend_tokens += b.num_tokens;
    copy_ops += b.num_copy_ops;
  }
  EXPECT_EQ(extend_tokens, 9);
  // 9 prompt positions + 4 x (last prompt token + 5 generated with KV).
  EXPECT_EQ(checked_->writes(), 9 + 4 * 6);
  // Copy-on-write of the shared partial page: one copy per child but the
  // last (by then the page is its alone).
  EXPECT_EQ(copy_ops, 3);
  // Every child committed the prompt and its own tokens.
  std::vector<int32_t> expected = prompt;
  expected.insert(expected.end(), greedy.begin(), greedy.end() - 1);
  ASSERT_EQ(cache_->commits().size(), 4u);
  for (const auto& c : cache_->commits()) EXPECT_EQ(c, expected);
  EXPECT_EQ(cache_->active_leases(), 0);
  EXPECT_EQ(scheduler_->Stats().requests_finished, 1);
}

TEST_F(SchedulerForkTest, SeededSamplesDrawFromSeedPlusIndex) {
  InitChecked(1024, 16);
  const std::vector<int32_t> prompt = RandomPrompt(21);
  v1::GenerateRequest r = SamplesRequest("seeded", prompt, 8, 3);
  r.mutable_sampling()->set_temperature(5.0f);
  r.mutable_sampling()->set_seed(100);
  auto stream = Submit(r);
  RunUntilIdle();
  Outcome out = CollectSamples(*stream);
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_EQ(out.samples.size(), 3u);
  for (int32_t i = 0; i < 3; ++i) {
    SamplingParams params;
    params.temperature = 5.0f;
    params.seed = 100 + i;
    Sampler sampler(params);
    std::vector<int32_t> context = prompt, expected;
    for (int k = 0; k < 8; ++k) {
      absl::StatusOr<int32_t> t = sampler.Sample(executor_->Logits(context));
      ASSERT_TRUE(t.ok());
      expected.push_back(*t);
      context.push_back(*t);
    }
    EXPECT_EQ(out.samples[i].tokens, expected) << "sample " << i;
  }
  EXPECT_NE(out.samples[0].tokens, out.samples[1].tokens);
  // Sample 0 is what n = 1 with the same seed gives.
  checked_->set_check_writes(false);
  v1::GenerateRequest single = r;
  single.set_request_id("single");
  single.set_n(1);
  auto one = Submit(single);
  RunUntilIdle();
  Outcome o1 = CollectSamples(*one);
  EXPECT_EQ(o1.samples[0].tokens, out.samples[0].tokens);
}

TEST_F(SchedulerForkTest, AbortReleasesEveryChild) {
  InitChecked(512, 4);
  auto stream = Submit(SamplesRequest("abort", RandomPrompt(10), 50, 4));
  for (int i = 0; i < 200 && cache_->calls("Fork") == 0; ++i) {
    scheduler_->Step();
  }
  ASSERT_EQ(cache_->calls("Fork"), 1);
  scheduler_->Step();
  EXPECT_EQ(cache_->active_leases(), 4);
  ASSERT_TRUE(scheduler_->Abort("abort"));
  RunUntilIdle();
  Outcome out = CollectSamples(*stream);
  EXPECT_EQ(out.status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(out.stream_ends, 1);
  EXPECT_EQ(cache_->active_leases(), 0);
  EXPECT_EQ(cache_->free_pages(), cache_->num_pages());
  EXPECT_EQ(scheduler_->Stats().requests_aborted, 1);
}

TEST_F(SchedulerForkTest, OneTokenPromptSamplesAcquireTheirOwnLeases) {
  InitChecked(512, 4);
  checked_->set_check_writes(false);  // n = 1 leases (see above)
  auto stream = Submit(SamplesRequest("one", {7}, 3, 3));
  RunUntilIdle();
  Outcome out = CollectSamples(*stream);
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_EQ(out.samples.size(), 3u);
  for (const auto& [i, s] : out.samples) {
    EXPECT_EQ(s.tokens, executor_->Generate({7}, 3)) << i;
  }
  EXPECT_EQ(cache_->calls("Fork"), 0);
  EXPECT_EQ(cache_->calls("Acquire"), 3);
  EXPECT_EQ(cache_->active_leases(), 0);
}

TEST_F(SchedulerForkTest, LogprobsAreTheLogSoftmaxOfTheExecutorsLogits) {
  InitChecked(512, 4);
  const std::vector<int32_t> prompt = RandomPrompt(6);
  v1::GenerateRequest r = SamplesRequest("lp", prompt, 4, 2);
  r.mutable_sampling()->set_logprobs(3);
  auto stream = Submit(r);
  RunUntilIdle();
  Outcome out = CollectSamples(*stream);
  ASSERT_TRUE(out.status.ok()) << out.status;
  ASSERT_EQ(out.samples.size(), 2u);
  for (const auto& [index, s] : out.samples) {
    ASSERT_EQ(s.logprobs.size(), s.tokens.size());
    std::vector<int32_t> context = prompt;
    for (size_t k = 0; k < s.tokens.size(); ++k) {
      const std::vector<float> logits = executor_->Logits(context);
      const std::vector<double> ref =
          LogSoftmax(std::vector<double>(logits.begin(), logits.end()), 1.0);
      const v1::TokenLogprobs& lp = s.logprobs[k];
      EXPECT_EQ(lp.sampled().token_id(), s.tokens[k]);
      EXPECT_NEAR(lp.sampled().logprob(), ref[s.tokens[k]], 1e-12);
      ASSERT_EQ(lp.top_size(), 3);
      EXPECT_EQ(lp.top(0).token_id(), s.tokens[k]);  // greedy
      for (const v1::TokenLogprob& t : lp.top()) {
        EXPECT_NEAR(t.logprob(), ref[t.token_id()], 1e-12);
      }
      // The alternatives tie (0 logits): lower ids first.
      EXPECT_LT(lp.top(1).token_id(), lp.top(2).token_id());
      context.push_back(s.tokens[k]);
    }
  }
}

}  // namespace
}  // namespace radixkv::worker
