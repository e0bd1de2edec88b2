#include "cache_service/page_allocator.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace radixkv::cache_service {
namespace {

using ::testing::ElementsAre;

TEST(PageAllocatorTest, RejectsBadShapes) {
  EXPECT_EQ(PageAllocator::Create(64, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PageAllocator::Create(60, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PageAllocator::Create(0, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(PageAllocator::Create(128, 128).ok());
  for (int ps : {1, 8, 16, 32, 64, 128}) EXPECT_TRUE(IsValidPageSize(ps));
  EXPECT_FALSE(IsValidPageSize(4));
}

TEST(PageAllocatorTest, AllocatesInOrderAndReusesLifo) {
  PageAllocator a = PageAllocator::Create(64, 16).value();
  EXPECT_EQ(a.num_pages(), 4);
  EXPECT_THAT(a.Allocate(2), ElementsAre(0, 1));
  EXPECT_EQ(a.free_slots(), 32);
  EXPECT_EQ(a.protected_slots(), 32);
  EXPECT_TRUE(a.Unref(0, /*protect=*/true));
  EXPECT_THAT(a.Allocate(2), ElementsAre(0, 2));
  EXPECT_EQ(a.num_free_pages(), 1);
}

TEST(PageAllocatorTest, RefCountsAndProtection) {
  PageAllocator a = PageAllocator::Create(32, 8).value();
  const int32_t p = a.Allocate(1)[0];  // a lease holds it (protecting)
  a.Ref(p, /*protect=*/false);         // an unlocked tree node
  EXPECT_EQ(a.ref_count(p), 2);
  EXPECT_EQ(a.protected_slots(), 8);
  EXPECT_FALSE(a.Unref(p, /*protect=*/true));  // the lease ends
  EXPECT_EQ(a.protected_slots(), 0);
  EXPECT_EQ(a.evictable_slots(), 8);
  a.Protect(p);  // the node gets locked
  EXPECT_EQ(a.protected_slots(), 8);
  a.Unprotect(p);
  EXPECT_TRUE(a.Unref(p, /*protect=*/false));  // evicted
  EXPECT_EQ(a.free_slots(), 32);
  EXPECT_EQ(a.free_slots() + a.evictable_slots() + a.protected_slots(), 32);
}

TEST(PageAllocatorTest, CopyOnWriteOnlyWhenShared) {
  PageAllocator a = PageAllocator::Create(32, 8).value();
  const int32_t p = a.Allocate(1)[0];
  int32_t page = -1;
  EXPECT_FALSE(a.CopyOnWrite(p, 5, &page).has_value());
  EXPECT_EQ(page, p);
  a.Ref(p, /*protect=*/true);  // a forked child shares it
  const std::optional<CopyOp> op = a.CopyOnWrite(p, 5, &page);
  ASSERT_TRUE(op.has_value());
  EXPECT_EQ(*op, (CopyOp{p, page, 5}));
  EXPECT_NE(page, p);
  EXPECT_EQ(a.ref_count(p), 1);
  EXPECT_EQ(a.ref_count(page), 1);
  EXPECT_EQ(a.num_free_pages(), 2);
}

TEST(PageAllocatorTest, CreateWithFreeListValidates) {
  EXPECT_FALSE(PageAllocator::CreateWithFreeList(32, 8, {0, 0}).ok());
  EXPECT_FALSE(PageAllocator::CreateWithFreeList(32, 8, {4}).ok());
  PageAllocator a = PageAllocator::CreateWithFreeList(32, 8, {3, 1}).value();
  EXPECT_THAT(a.Allocate(1), ElementsAre(1));
}

}  // namespace
}  // namespace radixkv::cache_service
