#include "worker/scheduler.h"

#include <atomic>
#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "model/tokenizer/load_tokenizer.h"
#include "process/metrics_scrape.h"
#include "prometheus/registry.h"
#include "proto/prompt_text_limit.h"
#include "worker/sampler.h"
#include "worker/testing/fake_kv_cache_client.h"
#include "worker/testing/fake_model_executor.h"
#include "worker/testing/scheduler_fixture.h"
#include "worker/worker_metrics.h"

namespace radixkv::worker {
namespace {

using testing::FakeKvCacheClient;
using testing::FakeModelExecutor;

using testing::Result;

class SchedulerTest : public testing::SchedulerFixture {};

TEST_F(SchedulerTest, RegistersWithFreshEpoch) {
  const int64_t before = absl::ToUnixMillis(absl::Now());
  Init(256, 1);
  EXPECT_TRUE(cache_->registered());
  EXPECT_GE(cache_->epoch(), before);
  EXPECT_EQ(scheduler_->Stats().epoch, cache_->epoch());
}

TEST_F(SchedulerTest, GreedyGenerationMatchesOracleAndCommits) {
  Init(256, 1);
  std::vector<int32_t> prompt = RandomPrompt(20);
  auto stream = Submit(Request("r1", prompt, 12));
  RunUntilIdle();
  Result r = Collect(*stream);
  ASSERT_TRUE(r.finished);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.reason, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(r.tokens, executor_->Generate(prompt, 12));
  EXPECT_EQ(r.usage.prompt_tokens(), 20);
  EXPECT_EQ(r.usage.cached_tokens(), 0);
  EXPECT_EQ(r.usage.completion_tokens(), 12);
  // Committed before the final event was streamed: the prompt and every
  // generated token but the last (its KV was never computed).
  ASSERT_EQ(cache_->commits().size(), 1u);
  std::vector<int32_t> expected = prompt;
  expected.insert(expected.end(), r.tokens.begin(), r.tokens.end() - 1);
  EXPECT_EQ(cache_->commits()[0], expected);
  EXPECT_EQ(cache_->active_leases(), 0);
  SchedulerStats stats = scheduler_->Stats();
  EXPECT_EQ(stats.prompt_tokens, 20);
  EXPECT_EQ(stats.prefill_tokens_computed, 20);
  EXPECT_EQ(stats.prefill_tokens_reused, 0);
  EXPECT_EQ(stats.decode_tokens, 12);
  EXPECT_EQ(stats.requests_finished, 1);
  // One prefill step, then 11 decode steps.
  EXPECT_EQ(stats.steps, 12);
  ASSERT_EQ(executor_->batches().size(), 12u);
  EXPECT_FALSE(executor_->batches()[0].is_decode);
  for (size_t i = 1; i < executor_->batches().size(); ++i) {
    EXPECT_TRUE(executor_->batches()[i].is_decode);
  }
}

// Every batch is timed three ways, nested: ForwardSample alone (forward),
// building the batch to streaming its tokens (step), the whole Step()
// (iteration); host overhead per batch = iteration - forward.
TEST_F(SchedulerTest, TimesEachBatchsForwardStepAndIteration) {
  prometheus::Registry registry;
  WorkerMetrics metrics(registry);
  metrics_ = &metrics;
  Init(256, 1);
  auto stream = Submit(Request("r1", RandomPrompt(20), 12));
  RunUntilIdle();
  ASSERT_TRUE(Collect(*stream).status.ok());
  std::map<std::string, double> v = process::ScrapeRegistry(registry);
  // One prefill batch, then 11 decode batches; idle steps are not counted.
  EXPECT_EQ(v["radixkv_worker_forward_seconds_count"], 12);
  EXPECT_EQ(v["radixkv_worker_step_seconds_count"], 12);
  EXPECT_EQ(v["radixkv_worker_iteration_seconds_count"], 12);
  EXPECT_GT(v["radixkv_worker_iteration_seconds_sum"], 0);
  EXPECT_GE(v["radixkv_worker_iteration_seconds_sum"],
            v["radixkv_worker_step_seconds_sum"]);
  EXPECT_GE(v["radixkv_worker_step_seconds_sum"],
            v["radixkv_worker_forward_seconds_sum"]);
  scheduler_.reset();  // before `metrics`
}

// The serving path samples through ModelExecutor::ForwardSample. With the
// default implementation (the fake's) the tokens are those of Forward + each
// request's host Sampler, as before: greedy (above) and seeded sampling
// here, with chunked prefill (rows that need no token draw nothing) and two
// requests batched together.
TEST_F(SchedulerTest, SeededSamplingMatchesForwardPlusHostSampler) {
  SchedulerOptions options;
  options.max_prefill_tokens = 8;
  Init(512, 1, options);
  const std::vector<int32_t> p1 = RandomPrompt(20), p2 = RandomPrompt(13);
  auto request = [](const std::string& id, const std::vector<int32_t>& prompt,
                    uint64_t seed) {
    v1::GenerateRequest r = Request(id, prompt, 10);
    r.mutable_sampling()->set_temperature(5.0f);
    r.mutable_sampling()->set_seed(seed);
    r.mutable_sampling()->set_ignore_eos(true);
    return r;
  };
  auto s1 = Submit(request("r1", p1, 21));
  auto s2 = Submit(request("r2", p2, 22));
  RunUntilIdle();
  // Oracle: the fake's logits after each context, drawn by a Sampler with
  // the request's parameters (one draw per generated token).
  auto oracle = [&](std::vector<int32_t> context, uint64_t seed) {
    SamplingParams params;
    params.temperature = 5.0f;
    params.seed = seed;
    Sampler sampler(params);
    std::vector<int32_t> out;
    for (int i = 0; i < 10; ++i) {
      const std::vector<float> logits = executor_->Logits(context);
      absl::StatusOr<int32_t> t = sampler.Sample(logits);
      EXPECT_TRUE(t.ok());
      out.push_back(*t);
      context.push_back(*t);
    }
    return out;
  };
  Result r1 = Collect(*s1), r2 = Collect(*s2);
  ASSERT_TRUE(r1.status.ok()) << r1.status;
  ASSERT_TRUE(r2.status.ok()) << r2.status;
  const std::vector<int32_t> o1 = oracle(p1, 21);
  EXPECT_EQ(r1.tokens, o1);
  EXPECT_EQ(r2.tokens, oracle(p2, 22));
  EXPECT_NE(r1.tokens, executor_->Generate(p1, 10));  // really sampled
  // What the scheduler asked for: prefill chunks that leave part of the
  // prompt need no token; every sampled row carries its request's seed and
  // step = tokens generated before it.
  int chunks_without_token = 0;
  std::vector<uint64_t> steps_of_seed21;
  for (const auto& batch : executor_->batches()) {
    ASSERT_EQ(batch.sampling.size(), static_cast<size_t>(batch.num_seqs));
    for (const SequenceSampling& s : batch.sampling) {
      EXPECT_EQ(s.temperature, 5.0f);
      EXPECT_NE(s.host_sampler, nullptr);
      if (!s.needs_token) {
        ++chunks_without_token;
      } else if (s.seed == 21) {
        steps_of_seed21.push_back(s.step);
      }
    }
  }
  // 20 tokens in chunks of <= 8 (shared with r2's 13): at least 2 chunks
  // of r1 and 1 of r2 end inside the prompt.
  EXPECT_GE(chunks_without_token, 3);
  EXPECT_EQ(steps_of_seed21,
            (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

// An executor that samples itself (like the GPU backend) decides the tokens:
// the scheduler streams what ForwardSample returns.
TEST_F(SchedulerTest, TokensComeFromTheExecutorsForwardSample) {
  class ConstantSampler : public FakeModelExecutor {
   public:
    using FakeModelExecutor::FakeModelExecutor;
    absl::Status ForwardSample(const ForwardBatch& batch,
                               absl::Span<const SequenceSampling> sampling,
                               std::vector<int32_t>* token_ids) override {
      std::vector<float> logits;
      absl::Status st = Forward(batch, &logits);  // keeps the pool checks
      token_ids->clear();
      for (const SequenceSampling& s : sampling) {
        token_ids->push_back(s.needs_token ? 40 + static_cast<int32_t>(s.step)
                                           : -1);
      }
      return st;
    }
  };
  Init(256, 1, {}, true, std::make_unique<ConstantSampler>(256, 1));
  auto stream = Submit(Request("r1", RandomPrompt(9), 5));
  RunUntilIdle();
  Result r = Collect(*stream);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{40, 41, 42, 43, 44}));
}

// A sequence whose logits cannot be sampled fails alone with INTERNAL; the
// other request of the same batches finishes and no lease is left behind.
TEST_F(SchedulerTest, UnsampleableSequenceFailsAlone) {
  class FailsSeed7 : public FakeModelExecutor {
   public:
    using FakeModelExecutor::FakeModelExecutor;
    absl::Status ForwardSample(const ForwardBatch& batch,
                               absl::Span<const SequenceSampling> sampling,
                               std::vector<int32_t>* token_ids) override {
      absl::Status st =
          FakeModelExecutor::ForwardSample(batch, sampling, token_ids);
      for (size_t b = 0; st.ok() && b < sampling.size(); ++b) {
        if (sampling[b].needs_token && sampling[b].seed == 7 &&
            sampling[b].step == 2) {
          (*token_ids)[b] = kSamplingFailedToken;
        }
      }
      return st;
    }
  };
  Init(256, 1, {}, true, std::make_unique<FailsSeed7>(256, 1));
  v1::GenerateRequest bad = Request("bad", RandomPrompt(9), 6);
  bad.mutable_sampling()->set_seed(7);
  v1::GenerateRequest good = Request("good", RandomPrompt(11), 6);
  good.mutable_sampling()->set_seed(8);
  auto bad_stream = Submit(bad);
  auto good_stream = Submit(good);
  RunUntilIdle();
  Result b = Collect(*bad_stream);
  Result g = Collect(*good_stream);
  EXPECT_EQ(b.status.code(), absl::StatusCode::kInternal) << b.status;
  EXPECT_NE(b.status.message().find("not finite"), std::string::npos);
  EXPECT_EQ(b.tokens.size(), 2u);  // steps 0 and 1 were streamed
  ASSERT_TRUE(g.status.ok()) << g.status;
  EXPECT_EQ(g.tokens.size(), 6u);
  EXPECT_EQ(cache_->active_leases(), 0);
}

TEST_F(SchedulerTest, ChunkedPrefillRespectsTokenBudget) {
  SchedulerOptions options;
  options.max_prefill_tokens = 16;
  Init(512, 1, options);
  std::vector<int32_t> prompt = RandomPrompt(50);
  auto stream = Submit(Request("r1", prompt, 3));
  RunUntilIdle();
  Result r = Collect(*stream);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.tokens, executor_->Generate(prompt, 3));
  const auto& batches = executor_->batches();
  ASSERT_EQ(batches.size(), 6u);
  EXPECT_EQ(batches[0].extend_lens, std::vector<int32_t>{16});
  EXPECT_EQ(batches[1].extend_lens, std::vector<int32_t>{16});
  EXPECT_EQ(batches[2].extend_lens, std::vector<int32_t>{16});
  EXPECT_EQ(batches[3].extend_lens, std::vector<int32_t>{2});
  EXPECT_TRUE(batches[4].is_decode);
  EXPECT_EQ(scheduler_->Stats().prefill_tokens_computed, 50);
}

TEST_F(SchedulerTest, DecodesAllRunningSequencesWhilePrefilling) {
  SchedulerOptions options;
  options.max_prefill_tokens = 8;
  Init(1024, 1, options);
  std::vector<int32_t> a = RandomPrompt(4), b = RandomPrompt(20);
  auto sa = Submit(Request("a", a, 10));
  scheduler_->Step();  // a: prefill of 4 tokens.
  auto sb = Submit(Request("b", b, 5));
  scheduler_->Step();  // a decodes, b prefills 8 (budget).
  const auto& last = executor_->batches().back();
  EXPECT_FALSE(last.is_decode);
  EXPECT_EQ(last.extend_lens, (std::vector<int32_t>{1, 8}));
  RunUntilIdle();
  EXPECT_EQ(Collect(*sa).tokens, executor_->Generate(a, 10));
  EXPECT_EQ(Collect(*sb).tokens, executor_->Generate(b, 5));
  bool saw_two_decodes = false;
  for (const auto& batch : executor_->batches()) {
    saw_two_decodes |= batch.is_decode && batch.num_seqs == 2;
  }
  EXPECT_TRUE(saw_two_decodes);
}

TEST_F(SchedulerTest, SecondTurnComputesOnlyNewTokens) {
  for (int32_t page_size : {1, 16}) {
    SCOPED_TRACE(absl::StrCat("page_size ", page_size));
    Init(1024, page_size);
    std::vector<int32_t> turn1 = RandomPrompt(40);
    auto s1 = Submit(Request("t1", turn1, 10));
    RunUntilIdle();
    Result r1 = Collect(*s1);
    ASSERT_TRUE(r1.status.ok()) << r1.status;
    std::vector<int32_t> turn2 = turn1;
    turn2.insert(turn2.end(), r1.tokens.begin(), r1.tokens.end());
    std::vector<int32_t> user = RandomPrompt(8);
    turn2.insert(turn2.end(), user.begin(), user.end());
    const int64_t computed_before = scheduler_->Stats().prefill_tokens_computed;
    auto s2 = Submit(Request("t2", turn2, 6));
    RunUntilIdle();
    Result r2 = Collect(*s2);
    ASSERT_TRUE(r2.status.ok()) << r2.status;
    // Turn 1 committed 40 + 10 - 1 tokens; the fake matches whole pages.
    const int32_t cached = (49 / page_size) * page_size;
    EXPECT_EQ(r2.usage.cached_tokens(), cached);
    EXPECT_EQ(scheduler_->Stats().prefill_tokens_computed - computed_before,
              static_cast<int64_t>(turn2.size()) - cached);
    EXPECT_EQ(r2.tokens, executor_->Generate(turn2, 6));

    // The no-cache baseline gives the same tokens and computes everything.
    v1::GenerateRequest baseline = Request("t2-nocache", turn2, 6);
    baseline.set_disable_prefix_cache(true);
    auto s3 = Submit(baseline);
    RunUntilIdle();
    Result r3 = Collect(*s3);
    EXPECT_EQ(r3.usage.cached_tokens(), 0);
    EXPECT_EQ(r3.tokens, r2.tokens);
    // disable_prefix_cache inserts nothing: 2 commits, not 3.
    EXPECT_EQ(cache_->commits().size(), 2u);
    EXPECT_EQ(cache_->active_leases(), 0);
  }
}

TEST_F(SchedulerTest, GrowsAtMostOncePerStep) {
  SchedulerOptions options;
  options.grow_tokens = 4;
  options.reserve_tokens = 4;
  Init(1024, 1, options);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(RandomPrompt(5 + i));
    streams.push_back(Submit(Request(absl::StrCat("g", i), prompts[i], 30)));
  }
  int steps = 0;
  while (!scheduler_->Idle() && steps < 10000) {
    const int64_t grows = cache_->calls("Grow");
    const size_t keeps = cache_->keep_lease_commits().size();
    scheduler_->Step();
    // One lease-maintenance RPC per step: a Grow or a keep_lease Commit.
    EXPECT_LE(
        cache_->calls("Grow") - grows +
            static_cast<int64_t>(cache_->keep_lease_commits().size() - keeps),
        1)
        << "step " << steps;
    ++steps;
  }
  EXPECT_EQ(cache_->keep_lease_commits().size(), 4u);
  // Each sequence needs 5+i+29 slots, beyond its reserve: a Grow each.
  EXPECT_GE(cache_->calls("Grow"), 4);
  for (int i = 0; i < 4; ++i) {
    Result r = Collect(*streams[i]);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.tokens, executor_->Generate(prompts[i], 30));
  }
  EXPECT_EQ(scheduler_->Stats().grow_rpcs, cache_->calls("Grow"));
}

TEST_F(SchedulerTest, OneGrowPerStepKeepsUpWithALargeBatch) {
  SchedulerOptions options;
  options.grow_tokens = 4;
  options.reserve_tokens = 4;
  options.max_running_requests = 48;
  Init(1 << 16, 1, options);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 48; ++i) {
    prompts.push_back(RandomPrompt(3 + i % 5));
    streams.push_back(Submit(Request(absl::StrCat("b", i), prompts[i], 150)));
  }
  RunUntilIdle();
  for (int i = 0; i < 48; ++i) {
    Result r = Collect(*streams[i]);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.tokens, executor_->Generate(prompts[i], 150));
  }
  SchedulerStats stats = scheduler_->Stats();
  // With fixed 4-slot grows the batch would need 12 Grows per step and get
  // one; reserves and grows of 2 x the batch stagger the boundaries so that
  // no sequence ever waits.
  std::cout << "48 sequences x 150 tokens: " << stats.steps << " steps, "
            << stats.grow_rpcs << " Grow RPCs, " << stats.stalled_sequence_steps
            << " stalled sequence-steps\n";
  EXPECT_EQ(stats.decode_tokens, 48 * 150);
  EXPECT_EQ(stats.stalled_sequence_steps, 0);
  EXPECT_LE(stats.grow_rpcs, stats.steps);
}

TEST_F(SchedulerTest, GrowCopyOnWriteIsExecutedAndRemapped) {
  SchedulerOptions options;
  options.grow_tokens = 4;
  options.reserve_tokens = 2;
  Init(256, 4, options);
  // Lease of 5 + 2 = 7 slots: its last page is partial, so the first Grow
  // moves positions [4, 7) to a fresh page with a copy op.
  std::vector<int32_t> prompt = RandomPrompt(5);
  auto stream = Submit(Request("cow", prompt, 12));
  cache_->CopyOnWriteOnNextGrow();
  RunUntilIdle();
  Result r = Collect(*stream);
  ASSERT_TRUE(r.status.ok()) << r.status;
  // The fake executor checks every context slot it reads: a copy op not
  // executed or a remap not applied would fail the request.
  EXPECT_EQ(r.tokens, executor_->Generate(prompt, 12));
  int copy_ops = 0;
  for (const auto& batch : executor_->batches()) copy_ops += batch.num_copy_ops;
  EXPECT_EQ(copy_ops, 1);
  EXPECT_EQ(cache_->active_leases(), 0);
}

TEST_F(SchedulerTest, PreemptsInsteadOfFailingWhenMemoryRunsOut) {
  SchedulerOptions options;
  options.grow_tokens = 4;
  options.reserve_tokens = 4;
  Init(64, 1, options);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(RandomPrompt(12));
    streams.push_back(Submit(Request(absl::StrCat("p", i), prompts[i], 30)));
  }
  RunUntilIdle();
  // 3 x (12 + 29) slots > 64: someone had to give memory back.
  EXPECT_GT(scheduler_->Stats().preemptions, 0);
  for (int i = 0; i < 3; ++i) {
    Result r = Collect(*streams[i]);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.reason, v1::FINISH_REASON_LENGTH);
    EXPECT_EQ(r.tokens, executor_->Generate(prompts[i], 30));
  }
  EXPECT_EQ(cache_->active_leases(), 0);
  cache_->Flush();
  EXPECT_EQ(cache_->free_pages(), 64);
}

TEST_F(SchedulerTest, SequenceLargerThanPoolIsRejectedUpFront) {
  SchedulerOptions options;
  options.grow_tokens = 4;
  options.reserve_tokens = 0;
  Init(32, 8, options);
  // 20 + 30 - 1 slots can never fit 32: rejected by Submit, before any
  // memory is taken or token streamed (not "outgrew the pool" later).
  auto big = scheduler_->Submit(Request("big", RandomPrompt(20), 30));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(big.status().message().find("cannot fit the KV pool"),
            std::string::npos)
      << big.status();
  // Whole pages: 10 + 24 - 1 = 33 slots = 5 pages of 8 > 4 pages.
  EXPECT_EQ(scheduler_->Submit(Request("pages", RandomPrompt(10), 24))
                .status()
                .code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache_->calls("Acquire"), 0);
  // 10 + 23 - 1 = 32 slots = exactly the pool: accepted and served.
  std::vector<int32_t> prompt = RandomPrompt(10);
  auto fits = Submit(Request("fits", prompt, 23));
  RunUntilIdle();
  Result r = Collect(*fits);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.tokens, executor_->Generate(prompt, 23));
  EXPECT_EQ(cache_->active_leases(), 0);
}

TEST_F(SchedulerTest, LoneSequenceWithoutMemoryIsPreemptedNotFailed) {
  SchedulerOptions options;
  options.grow_tokens = 4;
  options.reserve_tokens = 2;
  Init(64, 1, options);
  std::vector<int32_t> prompt = RandomPrompt(10);
  auto stream = Submit(Request("lone", prompt, 20));
  // Stream a few tokens, then the next Grows find no memory (held
  // elsewhere for a while): the only running sequence must be preempted
  // and readmitted, its readmission must wait out more RESOURCE_EXHAUSTED
  // Acquires, and it must finish with the right tokens.
  for (int i = 0; i < 4; ++i) scheduler_->Step();
  Result partial = Collect(*stream);
  ASSERT_FALSE(partial.finished);
  ASSERT_GE(partial.tokens.size(), 2u);
  cache_->ExhaustNext("Grow", 1000);
  for (int i = 0; i < 200 && scheduler_->Stats().preemptions == 0; ++i) {
    scheduler_->Step();
  }
  ASSERT_EQ(scheduler_->Stats().preemptions, 1);
  cache_->ExhaustNext("Grow", 0);
  cache_->ExhaustNext("Acquire", 5);
  const int64_t grows = cache_->calls("Grow");
  RunUntilIdle();
  // Readmitted alone, it leased every slot it could still need: no Grow.
  EXPECT_EQ(cache_->calls("Grow"), grows);
  Result r = Collect(*stream, partial);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.reason, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(r.tokens, executor_->Generate(prompt, 20));
  EXPECT_GE(scheduler_->Stats().preemptions, 1);
  EXPECT_EQ(scheduler_->Stats().requests_failed, 0);
  EXPECT_EQ(cache_->active_leases(), 0);
}

TEST_F(SchedulerTest, FirstAcquireWithoutMemoryWaitsInsteadOfFailing) {
  Init(64, 1);
  std::vector<int32_t> prompt = RandomPrompt(10);
  cache_->ExhaustNext("Acquire", 3);
  auto stream = Submit(Request("waits", prompt, 5));
  RunUntilIdle();
  Result r = Collect(*stream);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.tokens, executor_->Generate(prompt, 5));
  EXPECT_EQ(cache_->calls("Acquire"), 4);
}

TEST_F(SchedulerTest, CompletedPrefillIsSharedWithLaterArrivals) {
  Init(1024, 4);
  const std::vector<int32_t> shared = RandomPrompt(40);
  std::vector<int32_t> prompt_b = shared;
  for (int32_t t : RandomPrompt(8)) prompt_b.push_back(t);
  auto a = Submit(Request("a", shared, 30));
  // A's prompt is computed in the first step and inserted (keep_lease) in
  // the next one while A keeps generating.
  for (int i = 0; i < 3; ++i) scheduler_->Step();
  const std::vector<std::vector<int32_t>> keeps = cache_->keep_lease_commits();
  ASSERT_EQ(keeps.size(), 1u);
  ASSERT_GE(keeps[0].size(), 40u);
  EXPECT_EQ(std::vector<int32_t>(keeps[0].begin(), keeps[0].begin() + 40),
            shared);
  EXPECT_TRUE(cache_->commits().empty()) << "A has not finished yet";
  auto b = Submit(Request("b", prompt_b, 10));
  RunUntilIdle();
  Result ra = Collect(*a);
  Result rb = Collect(*b);
  ASSERT_TRUE(ra.status.ok()) << ra.status;
  ASSERT_TRUE(rb.status.ok()) << rb.status;
  // B reused A's whole prompt although A was still running.
  EXPECT_EQ(rb.usage.cached_tokens(), 40);
  EXPECT_EQ(ra.tokens, executor_->Generate(shared, 30));
  EXPECT_EQ(rb.tokens, executor_->Generate(prompt_b, 10));
  EXPECT_EQ(scheduler_->Stats().prefill_commit_rpcs, 2);
  EXPECT_EQ(cache_->active_leases(), 0);
  cache_->Flush();
  EXPECT_EQ(cache_->free_pages(), cache_->num_pages());
}

TEST_F(SchedulerTest, DuplicatePrefillIsRemappedToTheTreeCopy) {
  Init(1024, 4);
  // Admitted in the same step, both compute the same 40-token prefix; the
  // second keep_lease Commit finds it in the tree and remaps its 10 pages.
  const std::vector<int32_t> shared = RandomPrompt(40);
  std::vector<int32_t> pa = shared, pb = shared;
  pa.push_back(5);
  pb.push_back(6);
  auto a = Submit(Request("a", pa, 20));
  auto b = Submit(Request("b", pb, 20));
  scheduler_->Step();
  const int64_t free_before = cache_->free_pages();
  scheduler_->Step();  // Commit of A.
  scheduler_->Step();  // Commit of B: 10 duplicated pages freed.
  EXPECT_EQ(scheduler_->Stats().prefill_commit_rpcs, 2);
  EXPECT_EQ(scheduler_->Stats().prefill_commit_remapped_slots, 40);
  EXPECT_GE(cache_->free_pages(), free_before + 10 - 2);
  RunUntilIdle();
  Result ra = Collect(*a);
  Result rb = Collect(*b);
  ASSERT_TRUE(ra.status.ok()) << ra.status;
  ASSERT_TRUE(rb.status.ok()) << rb.status;
  // The fake executor checks every slot B reads after the remap.
  EXPECT_EQ(ra.tokens, executor_->Generate(pa, 20));
  EXPECT_EQ(rb.tokens, executor_->Generate(pb, 20));
  EXPECT_EQ(cache_->active_leases(), 0);
  cache_->Flush();
  EXPECT_EQ(cache_->free_pages(), cache_->num_pages());
}

TEST_F(SchedulerTest, BurstSharingALongPrefixWaitsForTheFirstPrefill) {
  SchedulerOptions options;
  options.max_prefill_tokens = 64;  // The shared prefill takes 2 steps.
  Init(1024, 4, options);
  const std::vector<int32_t> shared = RandomPrompt(100);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(shared);
    for (int32_t t : RandomPrompt(6)) prompts.back().push_back(t);
    streams.push_back(Submit(Request(absl::StrCat("q", i), prompts[i], 8)));
  }
  RunUntilIdle();
  std::vector<int32_t> cached;
  for (int i = 0; i < 3; ++i) {
    Result r = Collect(*streams[i]);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.tokens, executor_->Generate(prompts[i], 8));
    cached.push_back(r.usage.cached_tokens());
  }
  // Arriving together, the later two reuse the first one's prompt instead
  // of computing the shared 100 tokens again.
  EXPECT_EQ(cached, std::vector<int32_t>({0, 100, 100}));
  EXPECT_EQ(scheduler_->Stats().prefill_tokens_computed, 106 + 2 * 6);
}

TEST_F(SchedulerTest, NoPrefillCommitWhenThePrefixCacheIsDisabled) {
  Init(256, 1);
  v1::GenerateRequest request = Request("nocache", RandomPrompt(12), 8);
  request.set_disable_prefix_cache(true);
  auto stream = Submit(request);
  RunUntilIdle();
  EXPECT_TRUE(Collect(*stream).status.ok());
  EXPECT_TRUE(cache_->keep_lease_commits().empty());
  EXPECT_EQ(cache_->calls("Commit"), 0);
}

TEST_F(SchedulerTest, ConcurrentAbortsOfOneRequestReportOneSuccess) {
  Init(256, 1);
  auto stream = Submit(Request("target", RandomPrompt(8), 100));
  scheduler_->Step();
  std::atomic<int> successes{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 5; ++i) {
    threads.emplace_back([&] {
      if (scheduler_->Abort("target")) ++successes;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(successes.load(), 1);
  RunUntilIdle();
  Result r = Collect(*stream);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(scheduler_->Abort("target"));
  EXPECT_EQ(scheduler_->Stats().requests_aborted, 1);
  EXPECT_EQ(cache_->active_leases(), 0);
}

TEST_F(SchedulerTest, TextLongerThanTheContextBoundIsRejectedBeforeTokenizing) {
  cache_ = std::make_unique<FakeKvCacheClient>(256, 1);
  executor_ = std::make_unique<FakeModelExecutor>(256, 1);
  auto tokenizer = model::LoadTokenizer("models/radixkv-demo-llama");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  SchedulerOptions options;
  options.start_thread = false;
  options.heartbeat_interval = absl::Hours(1);
  auto scheduler = Scheduler::Create(options, executor_.get(), cache_.get(),
                                     &*tokenizer, nullptr);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  const int64_t limit =
      v1::MaxPromptTextBytes(executor_->config().max_position_embeddings);
  EXPECT_EQ(limit, 4096 * 32);
  v1::GenerateRequest request;
  request.mutable_sampling()->set_max_new_tokens(4);
  request.set_text(std::string(limit + 1, 'a'));
  absl::Status status = (*scheduler)->Submit(request).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("exceeds the limit of 131072 bytes"),
            std::string::npos)
      << status;
  // 16 MB: the same answer, without tokenizing.
  request.set_text(std::string(16 << 20, 'a'));
  EXPECT_EQ((*scheduler)->Submit(request).status().code(),
            absl::StatusCode::kInvalidArgument);
  // At the limit the text is tokenized (and then checked in tokens).
  request.set_text(std::string(limit, 'a'));
  status = (*scheduler)->Submit(request).status();
  EXPECT_EQ(status.message().find("exceeds the limit"), std::string::npos)
      << status;
  EXPECT_EQ(cache_->calls("Acquire"), 0);
}

TEST_F(SchedulerTest, AbortReleasesLease) {
  Init(256, 1);
  auto stream = Submit(Request("victim", RandomPrompt(10), 100));
  scheduler_->Step();
  scheduler_->Step();
  EXPECT_EQ(cache_->active_leases(), 1);
  EXPECT_TRUE(scheduler_->Abort("victim"));
  EXPECT_FALSE(scheduler_->Abort("no-such-request"));
  RunUntilIdle();
  Result r = Collect(*stream);
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(r.reason, v1::FINISH_REASON_ABORT);
  EXPECT_EQ(r.tokens.size(), 2u);
  EXPECT_EQ(cache_->active_leases(), 0);
  EXPECT_EQ(cache_->calls("Release"), 1);
  // Only the computed prompt went into the tree (keep_lease, after its
  // prefill); nothing generated was committed.
  ASSERT_EQ(cache_->keep_lease_commits().size(), 1u);
  EXPECT_EQ(cache_->keep_lease_commits()[0].size(), 10u);
  EXPECT_TRUE(cache_->commits().empty());
  EXPECT_EQ(cache_->free_pages(), 256 - 10);
  cache_->Flush();
  EXPECT_EQ(cache_->free_pages(), 256);
  EXPECT_EQ(scheduler_->Stats().requests_aborted, 1);
}

TEST_F(SchedulerTest, AbortWhileQueued) {
  SchedulerOptions options;
  options.max_running_requests = 1;
  Init(256, 1, options);
  auto first = Submit(Request("first", RandomPrompt(4), 5));
  auto second = Submit(Request("second", RandomPrompt(4), 5));
  scheduler_->Step();
  EXPECT_TRUE(scheduler_->Abort("second"));
  RunUntilIdle();
  EXPECT_TRUE(Collect(*first).status.ok());
  EXPECT_EQ(Collect(*second).status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(cache_->calls("Acquire"), 1);
}

TEST_F(SchedulerTest, HigherPriorityIsAdmittedFirst) {
  SchedulerOptions options;
  options.max_running_requests = 1;
  Init(256, 1, options);
  std::vector<int32_t> low = RandomPrompt(4), mid = RandomPrompt(5),
                       high = RandomPrompt(6);
  v1::GenerateRequest r_low = Request("low", low, 3);
  r_low.set_priority(-5);
  v1::GenerateRequest r_mid = Request("mid", mid, 3);
  v1::GenerateRequest r_high = Request("high", high, 3);
  r_high.set_priority(7);
  auto s_low = Submit(r_low);
  auto s_mid = Submit(r_mid);
  auto s_high = Submit(r_high);
  RunUntilIdle();
  for (auto* s : {&s_low, &s_mid, &s_high}) {
    EXPECT_TRUE(Collect(**s).status.ok());
  }
  // Commits happen in admission order (one running at a time).
  auto commits = cache_->commits();
  ASSERT_EQ(commits.size(), 3u);
  EXPECT_TRUE(std::equal(high.begin(), high.end(), commits[0].begin()));
  EXPECT_TRUE(std::equal(mid.begin(), mid.end(), commits[1].begin()));
  EXPECT_TRUE(std::equal(low.begin(), low.end(), commits[2].begin()));
}

TEST_F(SchedulerTest, StopTokenEosAndIgnoreEos) {
  Init(512, 1);
  std::vector<int32_t> prompt = RandomPrompt(10);
  std::vector<int32_t> oracle = executor_->Generate(prompt, 20);
  // Stop token: generation ends at its first occurrence (included).
  v1::GenerateRequest stop = Request("stop", prompt, 20);
  stop.mutable_sampling()->add_stop_token_ids(oracle[3]);
  auto s1 = Submit(stop);
  RunUntilIdle();
  Result r1 = Collect(*s1);
  EXPECT_EQ(r1.reason, v1::FINISH_REASON_STOP);
  size_t first =
      std::find(oracle.begin(), oracle.end(), oracle[3]) - oracle.begin();
  EXPECT_EQ(r1.tokens,
            std::vector<int32_t>(oracle.begin(), oracle.begin() + first + 1));

  // EOS once the context reaches 15 tokens: 5 normal tokens, then EOS.
  executor_->set_eos_at_length(15);
  auto s2 = Submit(Request("eos", prompt, 20));
  RunUntilIdle();
  Result r2 = Collect(*s2);
  EXPECT_EQ(r2.reason, v1::FINISH_REASON_EOS);
  ASSERT_EQ(r2.tokens.size(), 6u);
  EXPECT_EQ(r2.tokens.back(), FakeModelExecutor::kEosId);

  v1::GenerateRequest ignore = Request("ignore", prompt, 8);
  ignore.mutable_sampling()->set_ignore_eos(true);
  auto s3 = Submit(ignore);
  RunUntilIdle();
  Result r3 = Collect(*s3);
  EXPECT_EQ(r3.reason, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(r3.tokens.size(), 8u);
  EXPECT_EQ(cache_->active_leases(), 0);
}

TEST_F(SchedulerTest, BadInputIsRejectedBeforeAnyMemoryIsTaken) {
  Init(256, 1);
  std::vector<int32_t> prompt = RandomPrompt(8);
  std::vector<std::pair<std::string, v1::GenerateRequest>> cases;
  auto add = [&](const std::string& name, auto mutate) {
    v1::GenerateRequest r = Request("", prompt, 4);
    mutate(r);
    cases.emplace_back(name, r);
  };
  add("unknown model", [](auto& r) { r.set_model("gpt-17"); });
  add("no prompt", [](auto& r) { r.clear_prompt(); });
  add("empty text", [](auto& r) { r.set_text(""); });
  add("text without tokenizer", [](auto& r) { r.set_text("hello"); });
  add("empty token ids", [](auto& r) { r.mutable_token_ids()->clear_ids(); });
  add("token id = vocab",
      [](auto& r) { r.mutable_token_ids()->set_ids(0, 64); });
  add("negative token id",
      [](auto& r) { r.mutable_token_ids()->set_ids(2, -1); });
  add("max_new_tokens 0",
      [](auto& r) { r.mutable_sampling()->set_max_new_tokens(0); });
  add("max_new_tokens 65537",
      [](auto& r) { r.mutable_sampling()->set_max_new_tokens(65537); });
  add("beyond context",
      [](auto& r) { r.mutable_sampling()->set_max_new_tokens(4090); });
  add("negative temperature",
      [](auto& r) { r.mutable_sampling()->set_temperature(-0.5f); });
  add("NaN temperature",
      [](auto& r) { r.mutable_sampling()->set_temperature(std::nanf("")); });
  add("temperature 101",
      [](auto& r) { r.mutable_sampling()->set_temperature(101.0f); });
  add("top_p 1.5", [](auto& r) { r.mutable_sampling()->set_top_p(1.5f); });
  add("top_p -0.1", [](auto& r) { r.mutable_sampling()->set_top_p(-0.1f); });
  add("top_k -1", [](auto& r) { r.mutable_sampling()->set_top_k(-1); });
  add("top_k > vocab", [](auto& r) { r.mutable_sampling()->set_top_k(65); });
  add("stop id out of range",
      [](auto& r) { r.mutable_sampling()->add_stop_token_ids(64); });
  add("17 stop strings", [](auto& r) {
    for (int i = 0; i < 17; ++i) r.mutable_sampling()->add_stop("x");
  });
  add("bad request_id", [](auto& r) { r.set_request_id("has space"); });
  add("priority", [](auto& r) { r.set_priority(1001); });
  for (const auto& [name, request] : cases) {
    auto result = scheduler_->Submit(request);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument)
        << name << ": " << result.status();
  }
  EXPECT_EQ(cache_->calls("Acquire"), 0);
  EXPECT_TRUE(scheduler_->Idle());

  // Larger than the whole pool.
  EXPECT_EQ(
      scheduler_->Submit(Request("huge", RandomPrompt(300), 1)).status().code(),
      absl::StatusCode::kResourceExhausted);
  // Duplicate in-flight id.
  auto stream = Submit(Request("dup", prompt, 2));
  EXPECT_EQ(scheduler_->Submit(Request("dup", prompt, 2)).status().code(),
            absl::StatusCode::kAlreadyExists);
  RunUntilIdle();
  EXPECT_TRUE(Collect(*stream).status.ok());
  // The id is free again once finished.
  EXPECT_TRUE(scheduler_->Submit(Request("dup", prompt, 2)).ok());
  RunUntilIdle();
}

TEST_F(SchedulerTest, FullWaitingQueueIsResourceExhausted) {
  SchedulerOptions options;
  options.max_running_requests = 1;
  options.max_waiting_requests = 2;
  Init(256, 1, options);
  auto a = Submit(Request("a", RandomPrompt(4), 3));
  auto b = Submit(Request("b", RandomPrompt(4), 3));
  EXPECT_EQ(
      scheduler_->Submit(Request("c", RandomPrompt(4), 3)).status().code(),
      absl::StatusCode::kResourceExhausted);
  scheduler_->Step();  // a runs, b waits: one queue place is free again.
  auto c = Submit(Request("c", RandomPrompt(4), 3));
  EXPECT_EQ(
      scheduler_->Submit(Request("d", RandomPrompt(4), 3)).status().code(),
      absl::StatusCode::kResourceExhausted);
  RunUntilIdle();
  for (auto* s : {&a, &b, &c}) EXPECT_TRUE(Collect(**s).status.ok());
}

// --max_waiting_requests counts every request accepted and not yet running
// (inbox and waiting queue) at the moment of Submit. Here the submits race a
// step held inside its forward, after it moved its inbox into the waiting
// queue: exactly the bound is accepted, every request over it is refused.
TEST_F(SchedulerTest, WaitingBoundIsExactUnderConcurrentSubmits) {
  constexpr int kLimit = 64;
  constexpr int kOver = 24;
  constexpr int kThreads = 4;
  SchedulerOptions options;
  options.worker_id = "w-bound";
  options.max_waiting_requests = kLimit;
  Init(4096, 16, options);
  auto r0 = Submit(Request("r0", RandomPrompt(8), 1000));
  scheduler_->Step();
  ASSERT_EQ(scheduler_->Stats().load.running_requests(), 1);
  // From now on no request finds memory: every accepted one waits.
  cache_->ExhaustNext("Acquire", 1 << 30);
  std::vector<std::shared_ptr<RequestStream>> accepted;
  for (int i = 0; i < kLimit / 2; ++i) {
    accepted.push_back(
        Submit(Request(absl::StrCat("a", i), RandomPrompt(8), 4)));
  }
  absl::Notification entered;
  absl::Notification release;
  executor_->set_forward_hook([&] {
    if (entered.HasBeenNotified()) return;
    entered.Notify();
    release.WaitForNotification();
  });
  std::thread step([&] { scheduler_->Step(); });
  entered.WaitForNotification();
  absl::Mutex mu;
  std::vector<absl::Status> refused;
  std::vector<std::thread> submitters;
  constexpr int kPerThread = (kLimit / 2 + kOver) / kThreads;
  for (int t = 0; t < kThreads; ++t) {
    submitters.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::vector<int32_t> prompt(8, 3 + t);
        auto stream = scheduler_->Submit(
            Request(absl::StrCat("b", t, "-", i), prompt, 4));
        absl::MutexLock lock(&mu);
        if (stream.ok()) {
          accepted.push_back(*stream);
        } else {
          refused.push_back(stream.status());
        }
      }
    });
  }
  for (auto& t : submitters) t.join();
  release.Notify();
  step.join();
  executor_->set_forward_hook(nullptr);
  EXPECT_EQ(accepted.size(), static_cast<size_t>(kLimit));
  ASSERT_EQ(refused.size(), static_cast<size_t>(kOver));
  for (const absl::Status& status : refused) {
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(status.message(),
              "worker w-bound has 64 requests waiting, the limit "
              "--max_waiting_requests=64");
  }
  scheduler_->Step();
  EXPECT_EQ(scheduler_->Stats().load.waiting_requests(), kLimit);
  // Admission frees queue places again; everything accepted completes.
  EXPECT_TRUE(scheduler_->Abort("r0"));
  cache_->ExhaustNext("Acquire", 0);
  RunUntilIdle();
  for (auto& stream : accepted) {
    Result r = Collect(*stream);
    EXPECT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.tokens.size(), 4u);
  }
  EXPECT_EQ(cache_->active_leases(), 0);
}

TEST_F(SchedulerTest, CacheServiceUnavailableFailsRequestWithoutLeaks) {
  Init(256, 1);
  cache_->SetUnavailable(true);
  auto stream = Submit(Request("r", RandomPrompt(6), 4));
  RunUntilIdle();
  Result r = Collect(*stream);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(r.tokens.empty());
  cache_->SetUnavailable(false);
  EXPECT_EQ(cache_->active_leases(), 0);
  EXPECT_EQ(cache_->free_pages(), 256);

  // The service dies mid-generation: the next Grow fails the request.
  SchedulerOptions options;
  options.grow_tokens = 2;
  options.reserve_tokens = 2;
  Init(256, 1, options);
  auto s2 = Submit(Request("r2", RandomPrompt(6), 20));
  scheduler_->Step();
  scheduler_->Step();
  cache_->SetUnavailable(true);
  RunUntilIdle();
  Result r2 = Collect(*s2);
  EXPECT_EQ(r2.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(r2.tokens.size(), 20u);
}

TEST_F(SchedulerTest, WithoutCacheServiceGenerateIsUnavailable) {
  Init(256, 1, {}, /*with_cache=*/false);
  auto result = scheduler_->Submit(Request("r", RandomPrompt(4), 2));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
}

// The process without --cache_service steps its (empty) loop too.
TEST_F(SchedulerTest, WithoutCacheServiceStepsDoNothing) {
  Init(256, 1, {}, /*with_cache=*/false);
  EXPECT_FALSE(scheduler_->Step());
  EXPECT_TRUE(scheduler_->Idle());
  EXPECT_FALSE(scheduler_->Stats().registered);
}

TEST_F(SchedulerTest, ForwardFailureFailsBatchAndReleasesLeases) {
  Init(256, 1);
  auto stream = Submit(Request("r", RandomPrompt(6), 4));
  executor_->FailNextForward();
  RunUntilIdle();
  EXPECT_EQ(Collect(*stream).status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(cache_->active_leases(), 0);
}

TEST_F(SchedulerTest, DrainFinishesRunningFailsQueuedAndDeregisters) {
  SchedulerOptions options;
  options.max_running_requests = 1;
  Init(256, 1, options);
  std::vector<int32_t> prompt = RandomPrompt(5);
  auto running = Submit(Request("running", prompt, 6));
  auto queued = Submit(Request("queued", RandomPrompt(5), 6));
  scheduler_->Step();
  scheduler_->Drain(absl::Now() + absl::Seconds(10));
  Result r1 = Collect(*running);
  EXPECT_TRUE(r1.status.ok()) << r1.status;
  EXPECT_EQ(r1.tokens, executor_->Generate(prompt, 6));
  EXPECT_EQ(Collect(*queued).status.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(cache_->registered());

  EXPECT_EQ(cache_->calls("Deregister"), 1);
  EXPECT_EQ(scheduler_->Submit(Request("late", prompt, 2)).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(SchedulerTest, DrainDeadlineEndsRunningRequestsWithUnavailable) {
  SchedulerOptions options;
  options.worker_id = "worker-7";
  Init(1024, 1, options);
  executor_->set_step_delay(absl::Milliseconds(2));
  auto stream = Submit(Request("long", RandomPrompt(5), 500));
  scheduler_->Step();
  scheduler_->Drain(absl::Now() + absl::Milliseconds(30));
  Result r = Collect(*stream);
  ASSERT_TRUE(r.finished);
  // Not CANCELLED "aborted": the router may retry a request ended by a
  // shutdown before its first token.
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
  EXPECT_EQ(r.status.message(), "worker worker-7 is shutting down");
  EXPECT_EQ(cache_->active_leases(), 0);
}

TEST_F(SchedulerTest, LostLeaseIsRecomputed) {
  // A heartbeat thread with a short period reports the lease lost.
  Init(256, 1, {}, true, nullptr, absl::Milliseconds(5));
  std::vector<int32_t> prompt = RandomPrompt(7);
  auto stream = Submit(Request("r", prompt, 8));
  scheduler_->Step();
  scheduler_->Step();
  cache_->LoseLeaseOnNextHeartbeat(1);
  const int64_t beats = cache_->calls("Heartbeat");
  while (cache_->calls("Heartbeat") < beats + 2) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  RunUntilIdle();
  Result r = Collect(*stream);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.tokens, executor_->Generate(prompt, 8));
  EXPECT_EQ(scheduler_->Stats().preemptions, 1);
  EXPECT_EQ(cache_->active_leases(), 0);
}

TEST_F(SchedulerTest, ReRegistersWithFreshEpochWhenTheServiceForgetsIt) {
  Init(256, 1, {}, true, nullptr, absl::Milliseconds(5));
  const int64_t first_epoch = cache_->epoch();
  std::vector<int32_t> prompt = RandomPrompt(9);
  auto stream = Submit(Request("r", prompt, 10));
  scheduler_->Step();
  scheduler_->Step();
  cache_->ForgetWorker();
  while (!cache_->registered()) absl::SleepFor(absl::Milliseconds(2));
  EXPECT_GT(cache_->epoch(), first_epoch);
  RunUntilIdle();
  Result r = Collect(*stream);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.tokens, executor_->Generate(prompt, 10));
  // The lease from the old epoch was dropped without Release and the
  // sequence recomputed under the new one.
  EXPECT_EQ(scheduler_->Stats().preemptions, 1);
  EXPECT_EQ(scheduler_->Stats().epoch, cache_->epoch());
  EXPECT_EQ(cache_->calls("Release"), 0);
  EXPECT_EQ(cache_->active_leases(), 0);
}

// An Acquire answered "unknown worker" (the service dropped this worker
// between two of its heartbeats) re-registers with a fresh epoch, as a
// failed heartbeat does: the service has freed the old epoch's slots, so
// nothing the worker holds under it may be used any more.
TEST_F(SchedulerTest, AcquireOfAForgottenWorkerReRegistersWithAFreshEpoch) {
  Init(256, 1, {}, true, nullptr, absl::Milliseconds(5));
  const int64_t first_epoch = cache_->epoch();
  const int64_t registers = cache_->calls("Register");
  cache_->FailNext("Acquire", absl::NotFoundError("unknown worker worker-7"));
  auto failed = Submit(Request("r1", RandomPrompt(9), 4));
  scheduler_->Step();
  EXPECT_EQ(Collect(*failed).status.code(), absl::StatusCode::kUnavailable);
  while (cache_->calls("Register") == registers) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  EXPECT_GT(cache_->epoch(), first_epoch);
  std::vector<int32_t> prompt = RandomPrompt(9);
  auto stream = Submit(Request("r2", prompt, 4));
  RunUntilIdle();
  Result r = Collect(*stream);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.tokens, executor_->Generate(prompt, 4));
  EXPECT_EQ(scheduler_->Stats().epoch, cache_->epoch());
}

}  // namespace
}  // namespace radixkv::worker
