#include "worker/kv_pool.h"

#include <cstdint>
#include <cstring>

#include "gtest/gtest.h"

namespace radixkv::worker {
namespace {

TEST(KvPoolTest, CreateGivesAlignedDisjointLayers) {
  auto pool = KvPool::Create(
      3, KvCacheGeometry{5, 16, 2, 80, 0, KvLayout::kBHSD}, DType::kBF16);
  ASSERT_TRUE(pool.ok()) << pool.status();
  KvPool& p = **pool;
  EXPECT_EQ(p.num_layers(), 3);
  EXPECT_EQ(p.dtype(), DType::kBF16);
  EXPECT_EQ(p.geometry().elem_bytes, 2);  // filled from dtype
  EXPECT_EQ(p.capacity_slots(), 80);
  EXPECT_EQ(p.total_bytes(), 2 * 3 * 80 * 2 * 80 * 2);
  const int64_t layer_bytes = p.geometry().BytesPerLayer();
  std::vector<char*> bases;
  for (int l = 0; l < 3; ++l) {
    bases.push_back(static_cast<char*>(p.k_data(l)));
    bases.push_back(static_cast<char*>(p.v_data(l)));
  }
  for (size_t i = 0; i < bases.size(); ++i) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(bases[i]) % 64, 0u);
    // Fill each tensor with its own byte; no tensor overlaps another.
    std::memset(bases[i], static_cast<int>(i + 1), layer_bytes);
  }
  for (size_t i = 0; i < bases.size(); ++i) {
    EXPECT_EQ(bases[i][0], static_cast<char>(i + 1));
    EXPECT_EQ(bases[i][layer_bytes - 1], static_cast<char>(i + 1));
  }
}

TEST(KvPoolTest, FromBudgetAndFromCapacity) {
  // Per slot: 2 (K,V) * 4 layers * 8 heads * 128 dims * 2 bytes = 16 KiB.
  EXPECT_EQ(KvPool::BytesPerSlot(4, 8, 128, DType::kF16), 16384);
  auto pool = KvPool::CreateFromBudget(4, 16384 * 16 * 10 + 5, 16, 8, 128,
                                       KvLayout::kBSHD, DType::kF16);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ((*pool)->geometry().num_pages, 10);
  EXPECT_LE((*pool)->total_bytes(), 16384 * 16 * 10 + 5);

  auto by_cap = KvPool::CreateFromCapacity(2, 100, 32, 2, 64, KvLayout::kVllm,
                                           DType::kF32);
  ASSERT_TRUE(by_cap.ok()) << by_cap.status();
  EXPECT_EQ((*by_cap)->geometry().num_pages, 4);  // ceil(100 / 32)
  EXPECT_EQ((*by_cap)->capacity_slots(), 128);
}

TEST(KvPoolTest, RejectsInvalidGeometry) {
  const KvCacheGeometry ok{4, 16, 2, 64, 0, KvLayout::kBSHD};
  EXPECT_TRUE(KvPool::Create(1, ok, DType::kF32).ok());
  auto expect_invalid = [](int layers, KvCacheGeometry g, DType dt) {
    EXPECT_EQ(KvPool::Create(layers, g, dt).status().code(),
              absl::StatusCode::kInvalidArgument);
  };
  expect_invalid(0, ok, DType::kF32);
  KvCacheGeometry g = ok;
  g.num_pages = 0;
  expect_invalid(1, g, DType::kF32);
  g = ok;
  g.page_size = 24;  // not a power of two
  expect_invalid(1, g, DType::kF32);
  g.page_size = 256;  // above 128
  expect_invalid(1, g, DType::kF32);
  g = ok;
  g.elem_bytes = 2;  // does not match fp32
  expect_invalid(1, g, DType::kF32);
  g = ok;
  g.layout = KvLayout::kVllm;
  g.head_dim = 20;  // not a multiple of x = 8 for bf16
  expect_invalid(1, g, DType::kBF16);
  g.head_dim = 20;  // fine for fp32 (x = 4)
  EXPECT_TRUE(KvPool::Create(1, g, DType::kF32).ok());
  EXPECT_EQ(KvPool::CreateFromBudget(2, 1000, 16, 8, 128, KvLayout::kBSHD,
                                     DType::kF16)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace radixkv::worker
