// Step plans and the metadata written for them (host only).
#include "worker/gpu/step_metadata.h"

#include <vector>

#include "gtest/gtest.h"
#include "worker/gpu/model_kernels.h"

namespace radixkv::worker::gpu {
namespace {

// Decode of three sequences with contexts 2, 3 and 1 (current token
// included): slots {0, 1}, {16, 17, 18}, {32}.
ForwardBatch ThreeSequenceDecode() {
  ForwardBatch b;
  b.is_decode = true;
  b.input_ids = {5, 6, 7};
  b.positions = {1, 2, 0};
  b.qo_indptr = {0, 1, 2, 3};
  b.kv_indptr = {0, 2, 5, 6};
  b.kv_indices = {0, 1, 16, 17, 18, 32};
  b.out_cache_loc = {1, 18, 32};
  return b;
}

// Prefill of two sequences of 3 and 2 new tokens, the second on a cached
// prefix of one token (slot 40).
ForwardBatch TwoSequenceExtend() {
  ForwardBatch b;
  b.input_ids = {1, 2, 3, 4, 5};
  b.positions = {0, 1, 2, 1, 2};
  b.qo_indptr = {0, 3, 5};
  b.kv_indptr = {0, 0, 1};
  b.kv_indices = {40};
  b.out_cache_loc = {0, 1, 2, 41, 42};
  return b;
}

GpuModelExecutorOptions Options() {
  GpuModelExecutorOptions o;
  o.max_batch_size = 8;
  o.max_context_len = 4096;
  return o;
}

TEST(PlanStep, DecodePadsToItsGraphBucket) {
  const StepPlan p =
      PlanStep(ThreeSequenceDecode(), StepOutput::kArgmax, Options());
  EXPECT_TRUE(p.use_graph);
  EXPECT_EQ(p.graph_key,
            (DecodeGraphKey{4, 256, static_cast<int>(StepOutput::kArgmax)}));
  EXPECT_EQ(p.shape.batch, 4);
  EXPECT_EQ(p.shape.num_tokens, 4);
  EXPECT_EQ(p.shape.max_seq_len, 256);
  EXPECT_EQ(p.shape.max_extend_len, 1);
  EXPECT_EQ(p.shape.logit_rows, 4);
  EXPECT_EQ(p.output_rows, 3);
  EXPECT_TRUE(p.shape.is_decode);
  EXPECT_EQ(p.shape.output, StepOutput::kArgmax);
}

TEST(PlanStep, DecodeRunsEagerlyWithoutGraphsOrBeyondTheContextLimit) {
  GpuModelExecutorOptions o = Options();
  o.use_graphs = false;
  StepPlan p = PlanStep(ThreeSequenceDecode(), StepOutput::kLogits, o);
  EXPECT_FALSE(p.use_graph);
  EXPECT_EQ(p.shape.batch, 3);
  EXPECT_EQ(p.shape.num_tokens, 3);
  EXPECT_EQ(p.shape.max_seq_len, 3);
  EXPECT_EQ(p.shape.logit_rows, 3);
  o = Options();
  o.max_context_len = 2;
  p = PlanStep(ThreeSequenceDecode(), StepOutput::kLogits, o);
  EXPECT_FALSE(p.use_graph);
  EXPECT_EQ(p.shape.batch, 3);
}

TEST(PlanStep, DecodeWithAllLogitsKeepsOneRowPerSequence) {
  ForwardBatch b = ThreeSequenceDecode();
  b.return_all_logits = true;
  const StepPlan p = PlanStep(b, StepOutput::kLogits, Options());
  EXPECT_TRUE(p.use_graph);
  EXPECT_EQ(p.shape.logit_rows, 4);
  EXPECT_EQ(p.output_rows, 3);
}

TEST(PlanStep, ExtendRowsAreLastTokensOrEveryToken) {
  StepPlan p = PlanStep(TwoSequenceExtend(), StepOutput::kLogits, Options());
  EXPECT_FALSE(p.use_graph);
  EXPECT_EQ(p.shape.batch, 2);
  EXPECT_EQ(p.shape.num_tokens, 5);
  EXPECT_EQ(p.shape.max_seq_len, 1);
  EXPECT_EQ(p.shape.max_extend_len, 3);
  EXPECT_EQ(p.shape.logit_rows, 2);
  EXPECT_EQ(p.output_rows, 2);
  ForwardBatch all = TwoSequenceExtend();
  all.return_all_logits = true;
  p = PlanStep(all, StepOutput::kLogits, Options());
  EXPECT_EQ(p.shape.logit_rows, 5);
  EXPECT_EQ(p.output_rows, 5);
}

// The pinned block as int64 storage (8-byte aligned regions).
struct Block {
  explicit Block(const StepMetadataLayout& l) : layout(l), words(l.bytes / 8) {}
  char* host() { return reinterpret_cast<char*>(words.data()); }
  template <typename T>
  std::vector<T> Read(size_t offset, int n) {
    const T* p = reinterpret_cast<const T*>(host() + offset);
    return std::vector<T>(p, p + n);
  }
  StepMetadataLayout layout;
  std::vector<int64_t> words;
};

TEST(FillStepMetadata, PaddedDecode) {
  const ForwardBatch b = ThreeSequenceDecode();
  const StepPlan p = PlanStep(b, StepOutput::kSample, Options());
  Block m(LayoutStepMetadata(8, 8, 8, 16));
  GpuSamplingParams s;
  s.temperature = 0.5f;
  s.top_k = 3;
  s.top_p = 0.9f;
  s.seed = 11;
  s.step = 2;
  const std::vector<GpuSamplingParams> params = {{}, s, {}};
  const size_t bytes = FillStepMetadata(b, p.shape, params, m.layout, m.host());
  EXPECT_EQ(bytes, m.layout.kv_indices + 6 * 8);
  const StepMetadataLayout& l = m.layout;
  EXPECT_EQ(m.Read<int32_t>(l.qo_indptr, 5),
            (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(m.Read<int32_t>(l.kv_indptr, 5),
            (std::vector<int32_t>{0, 2, 5, 6, 6}));
  EXPECT_EQ(m.Read<int32_t>(l.ids, 4), (std::vector<int32_t>{5, 6, 7, 0}));
  EXPECT_EQ(m.Read<int32_t>(l.positions, 4),
            (std::vector<int32_t>{1, 2, 0, 0}));
  EXPECT_EQ(m.Read<int32_t>(l.seq, 4), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(m.Read<int64_t>(l.out_cache_loc, 4),
            (std::vector<int64_t>{1, 18, 32, -1}));
  EXPECT_EQ(m.Read<int32_t>(l.rows, 4), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(m.Read<int64_t>(l.kv_indices, 6),
            (std::vector<int64_t>{0, 1, 16, 17, 18, 32}));
  const std::vector<DeviceSamplingParams> dp =
      m.Read<DeviceSamplingParams>(l.params, 4);
  EXPECT_EQ(dp[0].temperature, 0.0f);
  EXPECT_EQ(dp[1].temperature, 0.5f);
  EXPECT_EQ(dp[1].top_k, 3);
  EXPECT_EQ(dp[1].top_p, 0.9f);
  EXPECT_EQ(dp[1].seed, 11u);
  EXPECT_EQ(dp[1].step, 2u);
  EXPECT_EQ(dp[2].top_k, 0);
  EXPECT_EQ(dp[3].temperature, 0.0f);  // padding: greedy
  EXPECT_EQ(dp[3].top_p, 1.0f);
}

TEST(FillStepMetadata, ExtendLastTokenRowsAndAllTokenRows) {
  ForwardBatch b = TwoSequenceExtend();
  Block m(LayoutStepMetadata(8, 8, 8, 16));
  const StepMetadataLayout& l = m.layout;
  StepPlan p = PlanStep(b, StepOutput::kLogits, Options());
  EXPECT_EQ(FillStepMetadata(b, p.shape, {}, l, m.host()), l.kv_indices + 8);
  EXPECT_EQ(m.Read<int32_t>(l.qo_indptr, 3), (std::vector<int32_t>{0, 3, 5}));
  EXPECT_EQ(m.Read<int32_t>(l.kv_indptr, 3), (std::vector<int32_t>{0, 0, 1}));
  EXPECT_EQ(m.Read<int32_t>(l.seq, 5), (std::vector<int32_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(m.Read<int64_t>(l.out_cache_loc, 5),
            (std::vector<int64_t>{0, 1, 2, 41, 42}));
  EXPECT_EQ(m.Read<int32_t>(l.rows, 2), (std::vector<int32_t>{2, 4}));
  b.return_all_logits = true;
  p = PlanStep(b, StepOutput::kLogits, Options());
  FillStepMetadata(b, p.shape, {}, l, m.host());
  EXPECT_EQ(m.Read<int32_t>(l.rows, 5), (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace radixkv::worker::gpu
