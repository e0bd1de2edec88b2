#include "worker/kernels/cpu/copy_blocks.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/kernels/cpu/attention_reference.h"
#include "worker/kv_pool.h"

namespace radixkv::worker {
namespace {

using testing::PoolK;
using testing::PoolV;

// Snapshot of every K/V element of a page, all layers, as doubles.
std::vector<double> Page(const KvPool& pool, int64_t page, int tokens) {
  const KvCacheGeometry& g = pool.geometry();
  std::vector<double> out;
  for (int l = 0; l < pool.num_layers(); ++l) {
    for (int t = 0; t < tokens; ++t) {
      const int64_t slot = page * g.page_size + t;
      for (int h = 0; h < g.num_kv_heads; ++h) {
        for (int d = 0; d < g.head_dim; ++d) {
          out.push_back(PoolK(pool, l, slot, h, d));
          out.push_back(PoolV(pool, l, slot, h, d));
        }
      }
    }
  }
  return out;
}

// Snapshot of positions [from, page_size) of a page, all layers.
std::vector<double> Tail(const KvPool& pool, int64_t page, int from) {
  const KvCacheGeometry& g = pool.geometry();
  std::vector<double> tail;
  for (int l = 0; l < pool.num_layers(); ++l) {
    for (int t = from; t < g.page_size; ++t) {
      const int64_t slot = page * g.page_size + t;
      for (int h = 0; h < g.num_kv_heads; ++h) {
        for (int d = 0; d < g.head_dim; ++d) {
          tail.push_back(PoolK(pool, l, slot, h, d));
          tail.push_back(PoolV(pool, l, slot, h, d));
        }
      }
    }
  }
  return tail;
}

// Full and partial page copies in every layout and dtype: the leading
// num_tokens positions equal the source, the rest of the destination page and
// the source page are unchanged.
TEST(CopyBlocksTest, FullAndPartialPagesEveryLayout) {
  const uint64_t seed = testing::TestSeed("CopyBlocksTest");
  std::mt19937_64 rng(seed);
  for (KvLayout layout : {KvLayout::kBSHD, KvLayout::kBHSD, KvLayout::kVllm}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(::testing::Message()
                   << KvLayoutName(layout) << " " << DTypeName(dtype));
      auto pool_or =
          KvPool::Create(3, KvCacheGeometry{6, 16, 2, 64, 0, layout}, dtype);
      ASSERT_TRUE(pool_or.ok());
      KvPool& pool = **pool_or;
      for (int l = 0; l < 3; ++l) testing::FillPoolRandom(pool, l, rng);
      const std::vector<double> src1 = Page(pool, 1, 16);
      const std::vector<double> src4_lead = Page(pool, 4, 5);
      const std::vector<double> dst2_tail = Tail(pool, 2, 5);
      const std::vector<double> page5 = Page(pool, 5, 16);
      const PageCopy ops[] = {{1, 3, 16}, {4, 2, 5}};
      ASSERT_TRUE(CopyBlocks(pool, ops).ok());
      EXPECT_EQ(Page(pool, 3, 16), src1);
      EXPECT_EQ(Page(pool, 1, 16), src1);
      EXPECT_EQ(Page(pool, 2, 5), src4_lead);
      EXPECT_EQ(Tail(pool, 2, 5), dst2_tail);
      EXPECT_EQ(Page(pool, 5, 16), page5);
    }
  }
}

TEST(CopyBlocksTest, OpsRunInOrder) {
  std::mt19937_64 rng(7);
  auto pool_or = KvPool::Create(
      1, KvCacheGeometry{4, 8, 1, 64, 0, KvLayout::kBSHD}, DType::kF32);
  ASSERT_TRUE(pool_or.ok());
  KvPool& pool = **pool_or;
  testing::FillPoolRandom(pool, 0, rng);
  const std::vector<double> page0 = Page(pool, 0, 8);
  const PageCopy ops[] = {{0, 1, 8}, {1, 2, 8}};  // 0 -> 1, then 1 -> 2
  ASSERT_TRUE(CopyBlocks(pool, ops).ok());
  EXPECT_EQ(Page(pool, 2, 8), page0);
}

TEST(CopyBlocksTest, InvalidOpsCopyNothing) {
  std::mt19937_64 rng(11);
  auto pool_or = KvPool::Create(
      2, KvCacheGeometry{4, 16, 2, 64, 0, KvLayout::kBHSD}, DType::kBF16);
  ASSERT_TRUE(pool_or.ok());
  KvPool& pool = **pool_or;
  testing::FillPoolRandom(pool, 0, rng);
  testing::FillPoolRandom(pool, 1, rng);
  const std::vector<double> page1 = Page(pool, 1, 16);
  const std::vector<std::vector<PageCopy>> bad = {
      {{0, 1, 16}, {0, 4, 1}},   // dst page out of range (after a valid op)
      {{0, 1, 16}, {-1, 2, 1}},  // negative src
      {{0, 1, 17}},              // more tokens than a page
      {{0, 1, -1}},
  };
  for (const auto& ops : bad) {
    EXPECT_EQ(CopyBlocks(pool, ops).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Page(pool, 1, 16), page1);
  }
}

}  // namespace
}  // namespace radixkv::worker
