// Workspace capacities and the metadata block layout (host only).
#include "worker/gpu/gpu_workspace.h"

#include "gtest/gtest.h"
#include "worker/gpu/model_kernels.h"
#include "worker/kernels/hip/gpu_attention.h"

namespace radixkv::worker::gpu {
namespace {

static_assert(sizeof(DeviceSamplingParams) == 32);

TEST(LayoutStepMetadata, SixteenByteAlignedRegionsInOrder) {
  // B = 3, T = 5, R = 4, 7 kv_indices.
  const StepMetadataLayout l = LayoutStepMetadata(3, 5, 4, 7);
  EXPECT_EQ(l.qo_indptr, 0u);   // 4 int32
  EXPECT_EQ(l.kv_indptr, 16u);  // 4 int32
  EXPECT_EQ(l.params, 32u);     // 3 x 32 bytes
  EXPECT_EQ(l.ids, 128u);       // 5 int32 -> 32
  EXPECT_EQ(l.positions, 160u);
  EXPECT_EQ(l.seq, 192u);
  EXPECT_EQ(l.rows, 224u);           // max(R, T) = 5 int32 -> 32
  EXPECT_EQ(l.out_cache_loc, 256u);  // 5 int64 -> 48
  EXPECT_EQ(l.kv_indices, 304u);     // 7 int64 -> 64
  EXPECT_EQ(l.bytes, 368u);
}

TEST(LayoutStepMetadata, RowsRegionCoversTheLargerOfRowsAndTokens) {
  const StepMetadataLayout l = LayoutStepMetadata(3, 5, 10, 7);
  EXPECT_EQ(l.out_cache_loc - l.rows, 48u);  // 10 int32
}

TEST(WithWorkspaceDefaults, LogitRowsCoverTheBatchAndContextDefaults) {
  model::ModelConfig c;
  c.max_position_embeddings = 131072;
  GpuModelExecutorOptions o;
  o.max_batch_size = 1024;
  o.max_logit_rows = 512;
  GpuModelExecutorOptions r = WithWorkspaceDefaults(o, c);
  EXPECT_EQ(r.max_logit_rows, 1024);
  EXPECT_EQ(r.max_context_len, 32768);
  c.max_position_embeddings = 2048;
  EXPECT_EQ(WithWorkspaceDefaults(o, c).max_context_len, 2048);
  o.max_context_len = 100;
  o.max_logit_rows = 2000;
  r = WithWorkspaceDefaults(o, c);
  EXPECT_EQ(r.max_context_len, 100);
  EXPECT_EQ(r.max_logit_rows, 2000);
}

TEST(ResolveMaxKvIndices, ExplicitElseCapacityOrFullBatch) {
  GpuModelExecutorOptions o;
  o.max_batch_size = 4;
  o.max_context_len = 1000;
  EXPECT_EQ(ResolveMaxKvIndices(o, 3000), 4000);
  EXPECT_EQ(ResolveMaxKvIndices(o, 5000), 5000);
  o.max_kv_indices = 10;
  EXPECT_EQ(ResolveMaxKvIndices(o, 5000), 10);
}

TEST(SplitKvWorkspaceBytes, LargestBucketOfAFixedPartition) {
  model::ModelConfig c;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 128;
  GpuModelExecutorOptions o;
  o.max_batch_size = 3;     // batch buckets 1, 2, 4
  o.max_context_len = 600;  // context buckets 256, 512, 1024
  o.decode_partition_size = 0;
  EXPECT_EQ(SplitKvWorkspaceBytes(o, c, 132), 0u);
  o.decode_partition_size = 256;
  EXPECT_EQ(SplitKvWorkspaceBytes(o, c, 132),
            DecodeWorkspaceBytes(4, 8, 128, 1024, 256));
}

}  // namespace
}  // namespace radixkv::worker::gpu
