#include "worker/kv_cache_layout.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::worker {
namespace {

// The offsets of docs/background.md §1.5 written out directly.
TEST(KvCacheLayoutTest, OffsetsMatchWrittenOutFormulas) {
  const int64_t B = 16, H = 4, D = 64;
  KvCacheGeometry g{10, 16, 4, 64, 2, KvLayout::kBSHD};
  const int64_t slot = 3 * B + 5, h = 2, d = 37, P = 3, off = 5;
  EXPECT_EQ(g.KOffset(slot, h, d), P * B * H * D + off * H * D + h * D + d);
  EXPECT_EQ(g.VOffset(slot, h, d), g.KOffset(slot, h, d));
  g.layout = KvLayout::kBHSD;
  EXPECT_EQ(g.KOffset(slot, h, d), P * H * B * D + h * B * D + off * D + d);
  EXPECT_EQ(g.VOffset(slot, h, d), g.KOffset(slot, h, d));
  g.layout = KvLayout::kVllm;  // x = 8 for 2-byte elements
  EXPECT_EQ(g.vllm_x(), 8);
  EXPECT_EQ(g.KOffset(slot, h, d),
            P * H * D * B + h * D * B + (d / 8) * B * 8 + off * 8 + d % 8);
  EXPECT_EQ(g.VOffset(slot, h, d), P * H * D * B + h * D * B + d * B + off);
  g.elem_bytes = 4;  // x = 4 for fp32
  EXPECT_EQ(g.vllm_x(), 4);
  EXPECT_EQ(g.KOffset(slot, h, d),
            P * H * D * B + h * D * B + (d / 4) * B * 4 + off * 4 + d % 4);
}

// Each layout is a bijection of (slot, head, dim) onto [0, ElementsPerLayer).
TEST(KvCacheLayoutTest, EveryLayoutIsABijection) {
  for (KvLayout layout : {KvLayout::kBSHD, KvLayout::kBHSD, KvLayout::kVllm}) {
    for (int eb : {2, 4}) {
      const KvCacheGeometry g{3, 8, 3, 16, eb, layout};
      ASSERT_EQ(g.ElementsPerLayer(), 3 * 8 * 3 * 16);
      ASSERT_EQ(g.capacity_slots(), 24);
      std::vector<int> k_seen(g.ElementsPerLayer()), v_seen(k_seen.size());
      for (int64_t s = 0; s < g.capacity_slots(); ++s) {
        for (int h = 0; h < 3; ++h) {
          for (int d = 0; d < 16; ++d) {
            const int64_t k = g.KOffset(s, h, d), v = g.VOffset(s, h, d);
            ASSERT_GE(k, 0);
            ASSERT_LT(k, g.ElementsPerLayer());
            ASSERT_GE(v, 0);
            ASSERT_LT(v, g.ElementsPerLayer());
            ++k_seen[k];
            ++v_seen[v];
          }
        }
      }
      for (size_t i = 0; i < k_seen.size(); ++i) {
        ASSERT_EQ(k_seen[i], 1) << KvLayoutName(layout) << " " << i;
        ASSERT_EQ(v_seen[i], 1) << KvLayoutName(layout) << " " << i;
      }
    }
  }
}

// A pool of 2^20 pages x 64 tokens x 8 heads x 128 dims has 2^36 elements per
// layer; offsets past 2^31 (and past 2^32) must come out exact. Only the
// address function is evaluated; nothing is allocated.
TEST(KvCacheLayoutTest, OffsetsBeyondTwoToThe31) {
  const int64_t P = int64_t{1} << 20, B = 64, H = 8, D = 128;
  for (KvLayout layout : {KvLayout::kBSHD, KvLayout::kBHSD, KvLayout::kVllm}) {
    const KvCacheGeometry g{P, 64, 8, 128, 2, layout};
    EXPECT_EQ(g.ElementsPerLayer(), int64_t{1} << 36);
    EXPECT_EQ(g.BytesPerLayer(), int64_t{1} << 37);
    EXPECT_EQ(g.capacity_slots(), int64_t{1} << 26);
    const int64_t last = g.capacity_slots() - 1;
    // The last element of the layer is at ElementsPerLayer() - 1 for K.
    EXPECT_EQ(g.KOffset(last, 7, 127), (int64_t{1} << 36) - 1)
        << KvLayoutName(layout);
    EXPECT_EQ(g.VOffset(last, 7, 127), (int64_t{1} << 36) - 1)
        << KvLayoutName(layout);
    const int64_t page = 600000, off = 33, slot = page * B + off;
    const int64_t h = 5, d = 100;
    int64_t expect_k, expect_v;
    switch (layout) {
      case KvLayout::kBSHD:
        expect_k = expect_v = ((page * B + off) * H + h) * D + d;
        break;
      case KvLayout::kBHSD:
        expect_k = expect_v = ((page * H + h) * B + off) * D + d;
        break;
      case KvLayout::kVllm:
        expect_k = (((page * H + h) * (D / 8) + d / 8) * B + off) * 8 + d % 8;
        expect_v = ((page * H + h) * D + d) * B + off;
        break;
    }
    EXPECT_GT(expect_k, int64_t{1} << 32);
    EXPECT_EQ(g.KOffset(slot, h, d), expect_k) << KvLayoutName(layout);
    EXPECT_EQ(g.VOffset(slot, h, d), expect_v) << KvLayoutName(layout);
  }
}

}  // namespace
}  // namespace radixkv::worker
