#include "cache_service/eviction_policy.h"

#include "gtest/gtest.h"

namespace radixkv::cache_service {
namespace {

TEST(EvictionPolicyTest, ParsesNames) {
  EXPECT_EQ(ParseEvictionPolicy("lru").value(), EvictionPolicyKind::kLru);
  EXPECT_EQ(ParseEvictionPolicy("lfu").value(), EvictionPolicyKind::kLfu);
  EXPECT_EQ(ParseEvictionPolicy("priority").value(),
            EvictionPolicyKind::kPriority);
  EXPECT_EQ(ParseEvictionPolicy("reuse_lru").value(),
            EvictionPolicyKind::kReuseLru);
  EXPECT_EQ(ParseEvictionPolicy("fifo").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EvictionPolicyName(EvictionPolicyKind::kLfu), "lfu");
  EXPECT_EQ(EvictionPolicyName(EvictionPolicyKind::kReuseLru), "reuse_lru");
}

TEST(EvictionPolicyTest, KeysOrderByPolicy) {
  const EvictionStats old_hot{/*last_access_ms=*/10, /*hit_count=*/9, 0};
  const EvictionStats new_cold{/*last_access_ms=*/20, /*hit_count=*/1, 0};
  const EvictionStats important{/*last_access_ms=*/5, 1, /*priority=*/7};
  const EvictionPolicy lru{EvictionPolicyKind::kLru};
  const EvictionPolicy lfu{EvictionPolicyKind::kLfu};
  const EvictionPolicy priority{EvictionPolicyKind::kPriority};
  EXPECT_LT(MakeEvictionKey(lru, old_hot, 1),
            MakeEvictionKey(lru, new_cold, 2));
  EXPECT_LT(MakeEvictionKey(lfu, new_cold, 2),
            MakeEvictionKey(lfu, old_hot, 1));
  EXPECT_LT(MakeEvictionKey(priority, new_cold, 2),
            MakeEvictionKey(priority, important, 3));
  // Ties: the node id decides, so the order is total and deterministic.
  EXPECT_LT(MakeEvictionKey(lru, old_hot, 1), MakeEvictionKey(lru, old_hot, 2));
}

TEST(EvictionPolicyTest, ReuseLruProtectsReusedLeavesForTheBonus) {
  const EvictionStats reused{/*last_access_ms=*/1'000, /*hit_count=*/1, 0};
  const EvictionStats tail{/*last_access_ms=*/4'000, /*hit_count=*/0, 0};
  const EvictionStats older_tail{/*last_access_ms=*/3'000, 0, 0};
  const EvictionPolicy bonus_5s{EvictionPolicyKind::kReuseLru, 5'000};
  // Within the bonus the unused tail goes first although it is newer.
  EXPECT_LT(MakeEvictionKey(bonus_5s, tail, 2),
            MakeEvictionKey(bonus_5s, reused, 1));
  // Unused leaves among themselves, and reused ones, in LRU order.
  EXPECT_LT(MakeEvictionKey(bonus_5s, older_tail, 3),
            MakeEvictionKey(bonus_5s, tail, 2));
  // A reused leaf idle for longer than the bonus loses its protection.
  const EvictionPolicy bonus_2s{EvictionPolicyKind::kReuseLru, 2'000};
  EXPECT_LT(MakeEvictionKey(bonus_2s, reused, 1),
            MakeEvictionKey(bonus_2s, tail, 2));
  // Bonus 0 is plain LRU.
  const EvictionPolicy bonus_0{EvictionPolicyKind::kReuseLru, 0};
  EXPECT_LT(MakeEvictionKey(bonus_0, reused, 1),
            MakeEvictionKey(bonus_0, tail, 2));
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
