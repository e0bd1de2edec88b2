// KV pool sizing from the options (host only).
#include "worker/gpu/gpu_kv_pool.h"

#include "gtest/gtest.h"

namespace radixkv::worker::gpu {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

TEST(KvPoolPages, CapacitySlotsRoundUpToPages) {
  GpuModelExecutorOptions o;
  o.page_size = 16;
  o.kv_capacity_slots = 100;
  o.kv_budget_bytes = 1 << 30;  // ignored: slots win
  EXPECT_FALSE(SizesPoolFromFreeMemory(o));
  EXPECT_EQ(KvPoolPages(o, 4096, 0), 7);
}

TEST(KvPoolPages, BudgetRoundsDownToPages) {
  GpuModelExecutorOptions o;
  o.kv_budget_bytes = 1000;
  EXPECT_FALSE(SizesPoolFromFreeMemory(o));
  EXPECT_EQ(KvPoolPages(o, 300, 0), 3);
  EXPECT_EQ(KvPoolPages(o, 1001, 0), 0);
}

TEST(KvPoolPages, FractionOfFreeMemoryAfterHeadroom) {
  GpuModelExecutorOptions o;
  o.memory_fraction = 0.5;
  EXPECT_TRUE(SizesPoolFromFreeMemory(o));
  EXPECT_EQ(KvPoolPages(o, kMiB, (512 + 100) * kMiB), 50);
  EXPECT_EQ(KvPoolPages(o, kMiB, 100 * kMiB), 0);  // all headroom
}

}  // namespace
}  // namespace radixkv::worker::gpu
