#include "worker/batch_builder.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::worker {
namespace {

// A running sequence of `len` tokens (ids 10.., positions at slots 100 *
// `tag` + p), `computed` of them with KV, `slots` lease slots.
std::unique_ptr<Sequence> Running(int tag, int len, int computed, int slots,
                                  int acquired_len) {
  auto seq = std::make_unique<Sequence>();
  for (int p = 0; p < len; ++p) seq->tokens.push_back(10 * tag + p);
  for (int p = 0; p < slots; ++p) seq->kv_indices.push_back(100 * tag + p);
  seq->num_computed = computed;
  seq->acquired_len = acquired_len;
  seq->prompt_len = acquired_len;
  seq->sampling.max_new_tokens = 100;
  seq->sampling.seed = 1000 + tag;
  seq->sampling.temperature = 0.1f * tag;
  seq->num_generated = len - acquired_len;
  return seq;
}

TEST(BatchBuilderTest, PlansDecodeTokensAndPrefillChunksUnderTheBudget) {
  std::vector<std::unique_ptr<Sequence>> running;
  running.push_back(Running(1, 5, 4, 8, 3));     // Generating.
  running.push_back(Running(2, 10, 2, 12, 10));  // Prefill, 8 left.
  running.push_back(Running(3, 6, 5, 5, 4));     // Generating, no slot.
  running.push_back(Running(4, 7, 0, 8, 7));     // Prefill, budget gone.
  const BatchPlan plan = PlanBatch(running, /*prefill_budget=*/6);
  ASSERT_EQ(plan.entries.size(), 2u);
  EXPECT_EQ(plan.entries[0].seq, running[0].get());
  EXPECT_EQ(plan.entries[0].chunk, 1);
  EXPECT_FALSE(plan.entries[0].prefill);
  EXPECT_EQ(plan.entries[1].seq, running[1].get());
  EXPECT_EQ(plan.entries[1].chunk, 6);
  EXPECT_TRUE(plan.entries[1].prefill);
  EXPECT_EQ(plan.stalled, 1);
  EXPECT_EQ(plan.prefill_tokens, 6);

  running[1]->pending_copies.push_back(PageCopy{3, 9, 16});
  const ForwardBatch batch = BuildForwardBatch(plan.entries);
  EXPECT_FALSE(batch.is_decode);
  EXPECT_EQ(batch.input_ids,
            (std::vector<int32_t>{14, 22, 23, 24, 25, 26, 27}));
  EXPECT_EQ(batch.positions, (std::vector<int32_t>{4, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(batch.out_cache_loc,
            (std::vector<int64_t>{104, 202, 203, 204, 205, 206, 207}));
  EXPECT_EQ(batch.qo_indptr, (std::vector<int32_t>{0, 1, 7}));
  // Extend: the computed prefix only.
  EXPECT_EQ(batch.kv_indptr, (std::vector<int32_t>{0, 4, 6}));
  EXPECT_EQ(batch.kv_indices,
            (std::vector<int64_t>{100, 101, 102, 103, 200, 201}));
  ASSERT_EQ(batch.copy_ops.size(), 1u);
  EXPECT_EQ(batch.copy_ops[0].src_page, 3);
  EXPECT_EQ(batch.copy_ops[0].dst_page, 9);

  const std::vector<SequenceSampling> sampling =
      BuildSequenceSampling(plan.entries);
  ASSERT_EQ(sampling.size(), 2u);
  EXPECT_TRUE(sampling[0].needs_token);
  EXPECT_EQ(sampling[0].seed, 1001u);
  EXPECT_EQ(sampling[0].step, 2u);  // 2 tokens generated so far.
  EXPECT_FLOAT_EQ(sampling[0].temperature, 0.1f);
  // The chunk leaves 2 prompt tokens: no draw.
  EXPECT_FALSE(sampling[1].needs_token);
}

TEST(BatchBuilderTest, DecodeBatchReadsTheNewTokensSlotToo) {
  std::vector<std::unique_ptr<Sequence>> running;
  running.push_back(Running(1, 4, 3, 4, 3));
  running.push_back(Running(2, 3, 2, 6, 2));
  const BatchPlan plan = PlanBatch(running, 512);
  ASSERT_EQ(plan.entries.size(), 2u);
  EXPECT_EQ(plan.prefill_tokens, 0);
  const ForwardBatch batch = BuildForwardBatch(plan.entries);
  EXPECT_TRUE(batch.is_decode);
  EXPECT_EQ(batch.input_ids, (std::vector<int32_t>{13, 22}));
  EXPECT_EQ(batch.positions, (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(batch.out_cache_loc, (std::vector<int64_t>{103, 202}));
  EXPECT_EQ(batch.qo_indptr, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(batch.kv_indptr, (std::vector<int32_t>{0, 4, 7}));
  EXPECT_EQ(batch.kv_indices,
            (std::vector<int64_t>{100, 101, 102, 103, 200, 201, 202}));
  const std::vector<SequenceSampling> sampling =
      BuildSequenceSampling(plan.entries);
  EXPECT_TRUE(sampling[0].needs_token);
  EXPECT_TRUE(sampling[1].needs_token);
}

TEST(BatchBuilderTest, NothingToComputeIsAnEmptyPlan) {
  std::vector<std::unique_ptr<Sequence>> running;
  running.push_back(Running(1, 4, 4, 4, 4));  // All computed (finished).
  running.push_back(Running(2, 6, 0, 3, 6));  // Prefill without slots.
  const BatchPlan plan = PlanBatch(running, 512);
  EXPECT_TRUE(plan.entries.empty());
  EXPECT_EQ(plan.stalled, 1);
  EXPECT_EQ(plan.prefill_tokens, 0);
}

}  // namespace
}  // namespace radixkv::worker
