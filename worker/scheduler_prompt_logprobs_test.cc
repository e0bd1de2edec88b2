// Prompt logprobs through the scheduler (SamplingParams.prompt_logprobs):
// one entry per prompt token after the first, the raw log-softmax of the
// executor's logits at the position before it (no penalty, no
// temperature), over chunked prefill, without prefix reuse, in the first
// token's event of sample 0 only.
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "worker/logit_processors.h"
#include "worker/scheduler.h"
#include "worker/testing/fake_model_executor.h"
#include "worker/testing/scheduler_fixture.h"

namespace radixkv::worker {
namespace {

class SchedulerPromptLogprobsTest : public testing::SchedulerFixture {
 protected:
  // Every event of `stream`, in order.
  static std::vector<GenerateEvent> Events(RequestStream& stream) {
    std::vector<GenerateEvent> events;
    GenerateEvent e;
    while (stream.Pop(&e, absl::ZeroDuration())) events.push_back(e);
    return events;
  }

  // Checks `entries` against the float64 log-softmax of the executor's
  // logits after each prompt prefix, with `k` alternatives.
  void ExpectRawPromptLogprobs(const std::vector<int32_t>& prompt,
                               const std::vector<v1::TokenLogprobs>& entries,
                               int k) {
    ASSERT_EQ(entries.size(), prompt.size() - 1);
    for (size_t i = 0; i + 1 < prompt.size(); ++i) {
      const std::vector<int32_t> context(prompt.begin(),
                                         prompt.begin() + i + 1);
      const std::vector<float> logits = executor_->Logits(context);
      const std::vector<double> ref =
          LogSoftmax(std::vector<double>(logits.begin(), logits.end()), 1.0);
      const v1::TokenLogprobs& e = entries[i];
      EXPECT_EQ(e.sampled().token_id(), prompt[i + 1]) << "entry " << i;
      EXPECT_NEAR(e.sampled().logprob(), ref[prompt[i + 1]], 1e-12);
      ASSERT_EQ(e.top_size(), k) << "entry " << i;
      if (k == 0) continue;
      // The fake's logits: 10 at NextToken(context), 0 elsewhere.
      EXPECT_EQ(e.top(0).token_id(), executor_->NextToken(context));
      for (const v1::TokenLogprob& t : e.top()) {
        EXPECT_NEAR(t.logprob(), ref[t.token_id()], 1e-12);
      }
    }
  }
};

TEST_F(SchedulerPromptLogprobsTest, EveryPromptPositionOverPrefillChunks) {
  SchedulerOptions options;
  options.max_prefill_tokens = 5;  // 23 tokens: five chunks
  Init(512, 4, options);
  const std::vector<int32_t> prompt = RandomPrompt(23);
  v1::GenerateRequest r = Request("p", prompt, 3);
  // Processors change the sampled tokens' logprobs, never the prompt's.
  r.mutable_sampling()->set_temperature(0.7f);
  r.mutable_sampling()->set_repetition_penalty(1.5f);
  r.mutable_sampling()->set_logprobs(1);
  r.mutable_sampling()->mutable_prompt_logprobs()->set_top(2);
  auto stream = Submit(r);
  RunUntilIdle();
  const std::vector<GenerateEvent> events = Events(*stream);
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(events.back().status.ok()) << events.back().status;
  ExpectRawPromptLogprobs(prompt, events.front().prompt_logprobs, 2);
  EXPECT_FALSE(events.front().token_ids.empty());
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_TRUE(events[i].prompt_logprobs.empty()) << "event " << i;
  }
}

TEST_F(SchedulerPromptLogprobsTest, ZeroAlternativesGiveThePromptTokenOnly) {
  Init(512, 4);
  const std::vector<int32_t> prompt = RandomPrompt(9);
  v1::GenerateRequest r = Request("p0", prompt, 1);
  r.mutable_sampling()->mutable_prompt_logprobs()->set_top(0);
  auto stream = Submit(r);
  RunUntilIdle();
  const std::vector<GenerateEvent> events = Events(*stream);
  ASSERT_FALSE(events.empty());
  ExpectRawPromptLogprobs(prompt, events.front().prompt_logprobs, 0);
}

TEST_F(SchedulerPromptLogprobsTest, ACachedPromptIsComputedAgain) {
  Init(512, 4);
  const std::vector<int32_t> prompt = RandomPrompt(20);
  auto first = Submit(Request("warm", prompt, 2));
  RunUntilIdle();
  ASSERT_TRUE(Collect(*first).status.ok());

  v1::GenerateRequest r = Request("again", prompt, 2);
  r.mutable_sampling()->mutable_prompt_logprobs()->set_top(1);
  auto stream = Submit(r);
  RunUntilIdle();
  const std::vector<GenerateEvent> events = Events(*stream);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().usage.cached_tokens(), 0);
  ExpectRawPromptLogprobs(prompt, events.front().prompt_logprobs, 1);

  // Without prompt logprobs the cached prefix is reused again.
  auto third = Submit(Request("reuse", prompt, 2));
  RunUntilIdle();
  EXPECT_GT(Collect(*third).usage.cached_tokens(), 0);
}

TEST_F(SchedulerPromptLogprobsTest, ParallelSamplesSendThemOnceWithSampleZero) {
  Init(512, 4);
  const std::vector<int32_t> prompt = RandomPrompt(11);
  v1::GenerateRequest r = Request("n", prompt, 3);
  r.set_n(3);
  r.mutable_sampling()->set_ignore_eos(true);
  r.mutable_sampling()->mutable_prompt_logprobs()->set_top(1);
  auto stream = Submit(r);
  RunUntilIdle();
  const std::vector<GenerateEvent> events = Events(*stream);
  int with_prompt_logprobs = 0;
  for (const GenerateEvent& e : events) {
    if (e.prompt_logprobs.empty()) continue;
    ++with_prompt_logprobs;
    EXPECT_EQ(e.sample_index, 0);
    ExpectRawPromptLogprobs(prompt, e.prompt_logprobs, 1);
  }
  EXPECT_EQ(with_prompt_logprobs, 1);
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(events.back().status.ok()) << events.back().status;
}

TEST_F(SchedulerPromptLogprobsTest, OutOfRangeIsRefusedAtSubmit) {
  Init(512, 4);
  v1::GenerateRequest r = Request("bad", RandomPrompt(4), 1);
  r.mutable_sampling()->mutable_prompt_logprobs()->set_top(21);
  auto stream = scheduler_->Submit(r);
  ASSERT_FALSE(stream.ok());
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(stream.status().message().find("prompt_logprobs"),
            std::string::npos);
}

}  // namespace
}  // namespace radixkv::worker
