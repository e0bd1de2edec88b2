// Decode graph buckets (host only; the graph cache runs in the device test).
#include "worker/gpu/decode_graphs.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::worker::gpu {
namespace {

TEST(RoundUpPow2, SmallestPowerOfTwoFromTheMinimum) {
  EXPECT_EQ(RoundUpPow2(1, 1), 1);
  EXPECT_EQ(RoundUpPow2(3, 1), 4);
  EXPECT_EQ(RoundUpPow2(8, 1), 8);
  EXPECT_EQ(RoundUpPow2(0, 256), 256);
  EXPECT_EQ(RoundUpPow2(257, 256), 512);
}

TEST(ChooseDecodeBucket, RoundsBatchAndContextUp) {
  const DecodeBucket b = ChooseDecodeBucket(3, 300, 256, 4096);
  EXPECT_EQ(b.batch, 4);
  EXPECT_EQ(b.context, 512);
  const DecodeBucket one = ChooseDecodeBucket(1, 1, 256, 4096);
  EXPECT_EQ(one.batch, 1);
  EXPECT_EQ(one.context, kMinContextBucket);
}

TEST(ChooseDecodeBucket, BatchBucketStopsAtMaxBatchSize) {
  const DecodeBucket b = ChooseDecodeBucket(5, 2049, 6, 4096);
  EXPECT_EQ(b.batch, 6);
  EXPECT_EQ(b.context, 4096);
}

TEST(ForEachDecodeBucket, EveryPowerOfTwoPairUpToTheLimitsBuckets) {
  std::vector<std::pair<int32_t, int32_t>> seen;
  ForEachDecodeBucket(3, 600,
                      [&](int32_t b, int32_t c) { seen.emplace_back(b, c); });
  const std::vector<std::pair<int32_t, int32_t>> want = {
      {1, 256},  {1, 512}, {1, 1024}, {2, 256}, {2, 512},
      {2, 1024}, {4, 256}, {4, 512},  {4, 1024}};
  EXPECT_EQ(seen, want);
}

TEST(DecodeGraphKey, OrdersByBatchThenContextThenOutput) {
  EXPECT_LT((DecodeGraphKey{1, 512, 2}), (DecodeGraphKey{2, 256, 0}));
  EXPECT_LT((DecodeGraphKey{2, 256, 2}), (DecodeGraphKey{2, 512, 0}));
  EXPECT_LT((DecodeGraphKey{2, 256, 1}), (DecodeGraphKey{2, 256, 2}));
  EXPECT_EQ((DecodeGraphKey{2, 256, 1}), (DecodeGraphKey{2, 256, 1}));
}

}  // namespace
}  // namespace radixkv::worker::gpu
