#include "cache_service/lease_table.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace radixkv::cache_service {
namespace {

using ::testing::ElementsAre;

Lease WithExpiry(int64_t expires_at_ms) {
  Lease l;
  l.expires_at_ms = expires_at_ms;
  return l;
}

TEST(LeaseTableTest, IdsAreSequentialAndNeverReused) {
  LeaseTable t;
  EXPECT_EQ(t.Add(WithExpiry(10))->id, 1u);
  EXPECT_EQ(t.Add(WithExpiry(10))->id, 2u);
  t.Erase(2);
  EXPECT_EQ(t.Find(2), nullptr);
  EXPECT_EQ(t.Add(WithExpiry(10))->id, 3u);
  EXPECT_EQ(t.size(), 2u);
}

TEST(LeaseTableTest, ExpiryAndRenewal) {
  LeaseTable t;
  Lease* a = t.Add(WithExpiry(300));
  t.Add(WithExpiry(100));
  t.Add(WithExpiry(200));
  EXPECT_THAT(t.ExpiredAt(99), ElementsAre());
  EXPECT_THAT(t.ExpiredAt(200), ElementsAre(2, 3));
  t.Renew(a, 50);
  EXPECT_THAT(t.ExpiredAt(100), ElementsAre(1, 2));
  t.Erase(1);
  EXPECT_THAT(t.ExpiredAt(1000), ElementsAre(2, 3));
}

TEST(LeaseTableTest, AddWithIdForRestore) {
  LeaseTable t;
  Lease l = WithExpiry(5);
  l.id = 7;
  ASSERT_NE(t.AddWithId(l), nullptr);
  EXPECT_EQ(t.AddWithId(l), nullptr);  // repeated id
  EXPECT_EQ(t.next_id(), 8u);
  EXPECT_EQ(t.Add(WithExpiry(5))->id, 8u);
}

}  // namespace
}  // namespace radixkv::cache_service
