#include "cache_service/eviction_policy.h"

#include "gtest/gtest.h"

namespace radixkv::cache_service {
namespace {

TEST(EvictionPolicyTest, ParsesNames) {
  EXPECT_EQ(ParseEvictionPolicy("lru").value(), EvictionPolicyKind::kLru);
  EXPECT_EQ(ParseEvictionPolicy("lfu").value(), EvictionPolicyKind::kLfu);
  EXPECT_EQ(ParseEvictionPolicy("priority").value(),
            EvictionPolicyKind::kPriority);
  EXPECT_EQ(ParseEvictionPolicy("fifo").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EvictionPolicyName(EvictionPolicyKind::kLfu), "lfu");
}

TEST(EvictionPolicyTest, KeysOrderByPolicy) {
  const EvictionStats old_hot{/*last_access_ms=*/10, /*hit_count=*/9, 0};
  const EvictionStats new_cold{/*last_access_ms=*/20, /*hit_count=*/1, 0};
  const EvictionStats important{/*last_access_ms=*/5, 1, /*priority=*/7};
  using K = EvictionPolicyKind;
  EXPECT_LT(MakeEvictionKey(K::kLru, old_hot, 1),
            MakeEvictionKey(K::kLru, new_cold, 2));
  EXPECT_LT(MakeEvictionKey(K::kLfu, new_cold, 2),
            MakeEvictionKey(K::kLfu, old_hot, 1));
  EXPECT_LT(MakeEvictionKey(K::kPriority, new_cold, 2),
            MakeEvictionKey(K::kPriority, important, 3));
  // Ties: the node id decides, so the order is total and deterministic.
  EXPECT_LT(MakeEvictionKey(K::kLru, old_hot, 1),
            MakeEvictionKey(K::kLru, old_hot, 2));
}

TEST(EvictionPolicyTest, QueuePopsSmallestKey) {
  EvictionQueue q;
  auto* a = reinterpret_cast<RadixNode*>(0x10);
  auto* b = reinterpret_cast<RadixNode*>(0x20);
  q.Insert({5, 0, 1}, a);
  q.Insert({3, 0, 2}, b);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.Front().second, b);
  EXPECT_TRUE(q.Erase({3, 0, 2}));
  EXPECT_FALSE(q.Erase({3, 0, 2}));
  EXPECT_EQ(q.Front().second, a);
  EXPECT_TRUE(q.Contains({5, 0, 1}));
}

}  // namespace
}  // namespace radixkv::cache_service
