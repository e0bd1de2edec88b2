#include "worker/kernels/cpu/reshape_and_cache.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/kernels/cpu/attention_reference.h"
#include "worker/kernels/cpu/cpu_thread_pool.h"
#include "worker/kv_pool.h"
#include "worker/numeric_types.h"

namespace radixkv::worker {
namespace {

using testing::PoolK;
using testing::PoolV;
using testing::RandomFloats;

double Rounded(DType dtype, float x) {
  switch (dtype) {
    case DType::kF32:
      return x;
    case DType::kBF16:
      return Bf16ToFloat(FloatToBf16(x));
    case DType::kF16:
      return Fp16ToFloat(FloatToFp16(x));
  }
  return 0;
}

// Every written element reads back (through the address function) as the
// dtype-rounded input; untouched slots keep their previous contents; padding
// slots (-1) are skipped.
TEST(ReshapeAndCacheTest, WritesEveryLayoutAndDtype) {
  const uint64_t seed = testing::TestSeed("ReshapeAndCacheTest");
  std::mt19937_64 rng(seed);
  CpuThreadPool threads(2);
  for (KvLayout layout : {KvLayout::kBSHD, KvLayout::kBHSD, KvLayout::kVllm}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int ps : {1, 16, 64}) {
        SCOPED_TRACE(::testing::Message() << KvLayoutName(layout) << " "
                                          << DTypeName(dtype) << " ps" << ps);
        const int H = 3, D = 80;
        auto pool = KvPool::Create(
            2, KvCacheGeometry{200 / ps + 2, ps, H, D, 0, layout}, dtype);
        ASSERT_TRUE(pool.ok()) << pool.status();
        testing::FillPoolRandom(**pool, 1, rng);
        const int64_t cap = (*pool)->capacity_slots();
        // 40 distinct random slots plus one padding entry.
        std::vector<int64_t> slots;
        std::vector<int64_t> all(cap);
        for (int64_t s = 0; s < cap; ++s) all[s] = s;
        std::shuffle(all.begin(), all.end(), rng);
        slots.assign(all.begin(), all.begin() + 40);
        slots.insert(slots.begin() + 7, -1);
        const int n = static_cast<int>(slots.size());
        const std::vector<float> k = RandomFloats(int64_t{n} * H * D, 2, rng);
        const std::vector<float> v = RandomFloats(int64_t{n} * H * D, 2, rng);
        const int64_t untouched = all[100];
        const double before = PoolK(**pool, 1, untouched, 2, 79);
        ReshapeAndCache(**pool, 1, k.data(), v.data(), slots,
                        ps == 16 ? &threads : nullptr);
        for (int t = 0; t < n; ++t) {
          if (slots[t] < 0) continue;
          for (int h = 0; h < H; ++h) {
            for (int d = 0; d < D; ++d) {
              const size_t i = (static_cast<size_t>(t) * H + h) * D + d;
              ASSERT_EQ(PoolK(**pool, 1, slots[t], h, d), Rounded(dtype, k[i]));
              ASSERT_EQ(PoolV(**pool, 1, slots[t], h, d), Rounded(dtype, v[i]));
            }
          }
        }
        EXPECT_EQ(PoolK(**pool, 1, untouched, 2, 79), before);
      }
    }
  }
}

}  // namespace
}  // namespace radixkv::worker
