#include "worker/kernels/cpu/decode_attention.h"

#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/kernels/cpu/attention_reference.h"
#include "worker/kernels/cpu/cpu_thread_pool.h"
#include "worker/kernels/cpu/reshape_and_cache.h"
#include "worker/kv_pool.h"

namespace radixkv::worker {
namespace {

using testing::PermutedSlots;
using testing::PoolK;
using testing::PoolV;
using testing::RandomFloats;
using testing::ReferenceAttention;
using testing::TestSeed;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr double kOutTol = 5e-5;  // vs float64 over the stored values
constexpr double kLseTol = 1e-4;

struct DecodeCase {
  KvLayout layout;
  DType dtype;
  int page_size;
  int num_kv_heads;
  int group;
  int head_dim;
  std::vector<int> seq_lens;
  int partition_size;    // 0 = v1
  int window_left = -1;  // -1: the whole context

  std::string Name() const {
    std::string s =
        absl::StrCat(KvLayoutName(layout), "/", DTypeName(dtype), "/ps",
                     page_size, "/hkv", num_kv_heads, "/g", group, "/d",
                     head_dim, "/part", partition_size, "/lens");
    for (int l : seq_lens) absl::StrAppend(&s, "_", l);
    absl::StrAppend(&s, "/window_left", window_left);
    return s;
  }
};

struct DecodeResult {
  std::vector<float> out, lse;
};

// Runs one case against the float64 reference on the pool's stored values.
DecodeResult RunDecodeCase(const DecodeCase& c, uint64_t seed,
                           CpuThreadPool* threads) {
  SCOPED_TRACE(c.Name());
  std::mt19937_64 rng(seed);
  const int B = static_cast<int>(c.seq_lens.size());
  const int hkv = c.num_kv_heads, hq = hkv * c.group, D = c.head_dim;
  int64_t pages_needed = 0;
  for (int l : c.seq_lens) pages_needed += (l + c.page_size - 1) / c.page_size;
  auto pool_or = KvPool::Create(
      2,
      KvCacheGeometry{2 * pages_needed + 3, c.page_size, hkv, D, 0, c.layout},
      c.dtype);
  EXPECT_TRUE(pool_or.ok()) << pool_or.status();
  if (!pool_or.ok()) return {};
  KvPool& pool = **pool_or;
  const int layer = 1;
  testing::FillPoolRandom(pool, layer, rng);
  const std::vector<int64_t> kv_indices = PermutedSlots(pool, c.seq_lens, rng);
  std::vector<int32_t> kv_indptr{0};
  for (int l : c.seq_lens) kv_indptr.push_back(kv_indptr.back() + l);
  const std::vector<float> q = RandomFloats(int64_t{B} * hq * D, 1.5f, rng);
  DecodeResult r;
  r.out.assign(int64_t{B} * hq * D, kNaN);
  r.lse.assign(int64_t{B} * hq, kNaN);

  DecodeAttentionArgs args;
  args.q = q.data();
  args.kv_indptr = kv_indptr;
  args.kv_indices = kv_indices;
  args.num_q_heads = hq;
  args.sm_scale = 1.0f / std::sqrt(static_cast<float>(D));
  args.window_left = c.window_left;
  args.partition_size = c.partition_size;
  args.out = r.out.data();
  args.lse = r.lse.data();
  DecodeAttention(pool, layer, args, threads);

  for (int b = 0; b < B; ++b) {
    const int lk = c.seq_lens[b];
    std::vector<double> qd(q.begin() + int64_t{b} * hq * D,
                           q.begin() + int64_t{b + 1} * hq * D);
    std::vector<double> kd(static_cast<size_t>(lk) * hkv * D), vd(kd.size());
    for (int j = 0; j < lk; ++j) {
      const int64_t slot = kv_indices[kv_indptr[b] + j];
      for (int h = 0; h < hkv; ++h) {
        for (int e = 0; e < D; ++e) {
          kd[(static_cast<size_t>(j) * hkv + h) * D + e] =
              PoolK(pool, layer, slot, h, e);
          vd[(static_cast<size_t>(j) * hkv + h) * D + e] =
              PoolV(pool, layer, slot, h, e);
        }
      }
    }
    std::vector<double> ref_out, ref_lse;
    ReferenceAttention(qd, kd, vd, 1, lk, hq, hkv, D, args.sm_scale, &ref_out,
                       &ref_lse, c.window_left);
    int bad = 0;
    for (int i = 0; i < hq * D && bad < 5; ++i) {
      const float got = r.out[int64_t{b} * hq * D + i];
      if (!(std::fabs(got - ref_out[i]) <= kOutTol)) {
        ADD_FAILURE() << "seq " << b << " out[" << i << "] = " << got
                      << ", reference " << ref_out[i];
        ++bad;
      }
    }
    for (int h = 0; h < hq && bad < 5; ++h) {
      const float got = r.lse[int64_t{b} * hq + h];
      const bool both_empty = std::isinf(ref_lse[h]) && got == -INFINITY;
      if (!both_empty && !(std::fabs(got - ref_lse[h]) <= kLseTol)) {
        ADD_FAILURE() << "seq " << b << " lse[" << h << "] = " << got
                      << ", reference " << ref_lse[h];
        ++bad;
      }
    }
  }
  for (size_t i = 0; i < r.out.size(); ++i) {
    if (!std::isfinite(r.out[i])) {
      ADD_FAILURE() << "out[" << i << "] not written or not finite";
      break;
    }
  }
  for (size_t i = 0; i < r.lse.size(); ++i) {
    if (std::isnan(r.lse[i])) {
      ADD_FAILURE() << "lse[" << i << "] not written";
      break;
    }
  }
  return r;
}

TEST(DecodeAttentionTest, V1AndV2MatchDenseReferenceAcrossLayoutsDtypes) {
  const uint64_t seed = TestSeed("DecodeAttentionTest.Sweep");
  CpuThreadPool threads(2);
  const int groups[] = {1, 4, 8, 6};
  const int dims[] = {64, 128, 80};
  int i = 0;
  for (KvLayout layout : {KvLayout::kBSHD, KvLayout::kBHSD, KvLayout::kVllm}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int ps : {1, 16, 64}) {
        for (int partition : {0, 32}) {
          DecodeCase c{layout,
                       dtype,
                       ps,
                       2,
                       groups[i % 4],
                       dims[i % 3],
                       {5, 0, 7, 150, 33},
                       partition};
          RunDecodeCase(c, seed + i, i % 2 ? &threads : nullptr);
          ++i;
        }
      }
    }
  }
}

// Sliding windows W (window_left = W - 1) in {1, 15, 16, 17, 64, 4095} x
// page sizes {1, 16, 64}, v1 and v2: lengths W - 1 (shorter than the
// window), W, W + 64 and W + 128 (the window's first token is the first of a
// page for every page size), W + 5 and 3 W + 1 (edge inside a page), 1.
TEST(DecodeAttentionTest, SlidingWindowMatchesDenseReference) {
  const uint64_t seed = TestSeed("DecodeAttentionTest.Window");
  CpuThreadPool threads(2);
  testing::ForEachWindowCase([&](const testing::WindowCase& w) {
    const int W = w.window, i = w.index;
    std::vector<int> lens{W, W + 64, W + 128, W + 5, 1};
    if (W > 1) lens.push_back(W - 1);
    if (W < 4095) lens.push_back(3 * W + 1);
    for (int partition : {0, 64}) {
      DecodeCase c{w.layout, w.dtype, w.page_size, 2,    i % 2 ? 1 : 4,
                   64,       lens,    partition,   W - 1};
      RunDecodeCase(c, seed + 2 * i + partition / 64,
                    i % 2 ? &threads : nullptr);
    }
  });
}

TEST(DecodeAttentionTest, GqaGroupsAndHeadDims) {
  const uint64_t seed = TestSeed("DecodeAttentionTest.Gqa");
  int i = 0;
  // 32 is the demo model's head_dim; 40 takes the generic (not
  // register-blocked) tile path.
  for (int group : {1, 4, 8, 6}) {
    for (int d : {64, 128, 80, 32, 40}) {
      RunDecodeCase({KvLayout::kVllm,
                     DType::kF16,
                     16,
                     1,
                     group,
                     d,
                     {70, 3},
                     i % 2 ? 16 : 0},
                    seed + i, nullptr);
      ++i;
    }
  }
}

// seq_lens [5, 0, 7]: the empty sequence gets out 0 and lse -inf, in v1 and
// in v2; the others match the reference.
TEST(DecodeAttentionTest, EmptySequenceInBatch) {
  const uint64_t seed = TestSeed("DecodeAttentionTest.Empty");
  for (int partition : {0, 4}) {
    const DecodeCase c{KvLayout::kBSHD, DType::kF32, 16, 2, 4, 64,
                       {5, 0, 7},       partition};
    const DecodeResult r = RunDecodeCase(c, seed, nullptr);
    ASSERT_EQ(r.out.size(), 3u * 8 * 64);
    for (int i = 0; i < 8 * 64; ++i) EXPECT_EQ(r.out[8 * 64 + i], 0.0f) << i;
    for (int h = 0; h < 8; ++h) EXPECT_EQ(r.lse[8 + h], -INFINITY) << h;
    EXPECT_NE(r.out[0], 0.0f);
  }
}

// Split-KV where the last partition holds exactly one token (len = 2 * ps + 1)
// and one where partitions split pages unevenly; v2 equals v1 up to rounding.
TEST(DecodeAttentionTest, SplitKvLastPartitionOneToken) {
  const uint64_t seed = TestSeed("DecodeAttentionTest.LastPartition");
  for (int ps : {16, 24}) {
    const DecodeCase v2{KvLayout::kBHSD,
                        DType::kBF16,
                        16,
                        2,
                        4,
                        128,
                        {2 * ps + 1, ps + 1, 1},
                        ps};
    DecodeCase v1 = v2;
    v1.partition_size = 0;
    const DecodeResult a = RunDecodeCase(v2, seed, nullptr);
    const DecodeResult b = RunDecodeCase(v1, seed, nullptr);
    ASSERT_EQ(a.out.size(), b.out.size());
    for (size_t i = 0; i < a.out.size(); ++i) {
      EXPECT_NEAR(a.out[i], b.out[i], 2e-6) << i;
    }
  }
}

// End to end with dtype rounding: K/V written by ReshapeAndCache from fp32,
// compared with the reference on the ORIGINAL fp32 values; the tolerance is
// the storage dtype's (bf16 8 mantissa bits, fp16 11).
TEST(DecodeAttentionTest, ReshapeAndCacheThenDecodeWithinDtypeTolerance) {
  const uint64_t seed = TestSeed("DecodeAttentionTest.DtypeTolerance");
  std::mt19937_64 rng(seed);
  const int hkv = 2, hq = 8, D = 64, len = 90;  // GQA group 4
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const double tol =
        dtype == DType::kF32 ? 5e-5 : (dtype == DType::kBF16 ? 3e-2 : 4e-3);
    SCOPED_TRACE(DTypeName(dtype));
    auto pool = KvPool::Create(
        1, KvCacheGeometry{8, 16, hkv, D, 0, KvLayout::kVllm}, dtype);
    ASSERT_TRUE(pool.ok());
    const std::vector<int64_t> slots = PermutedSlots(**pool, {len}, rng);
    const std::vector<float> k = RandomFloats(int64_t{len} * hkv * D, 1, rng);
    const std::vector<float> v = RandomFloats(int64_t{len} * hkv * D, 1, rng);
    ReshapeAndCache(**pool, 0, k.data(), v.data(), slots);
    const std::vector<float> q = RandomFloats(hq * D, 1.5f, rng);
    std::vector<float> out(hq * D, kNaN), lse(hq, kNaN);
    const std::vector<int32_t> kv_indptr{0, len};
    DecodeAttentionArgs args;
    args.q = q.data();
    args.kv_indptr = kv_indptr;
    args.kv_indices = slots;
    args.num_q_heads = hq;
    args.sm_scale = 0.125f;
    args.partition_size = 32;
    args.out = out.data();
    args.lse = lse.data();
    DecodeAttention(**pool, 0, args, nullptr);
    std::vector<double> ref_out, ref_lse;
    ReferenceAttention(std::vector<double>(q.begin(), q.end()),
                       std::vector<double>(k.begin(), k.end()),
                       std::vector<double>(v.begin(), v.end()), 1, len, hq, hkv,
                       D, 0.125, &ref_out, &ref_lse);
    for (int i = 0; i < hq * D; ++i) {
      ASSERT_NEAR(out[i], ref_out[i], tol) << i;
    }
    for (int h = 0; h < hq; ++h) ASSERT_NEAR(lse[h], ref_lse[h], tol) << h;
  }
}

TEST(DecodeAttentionTest, ChooseDecodePartitionSize) {
  // Enough (sequence, kv head) tasks for the threads: v1.
  EXPECT_EQ(ChooseDecodePartitionSize(8, 8, 100000, 2), 0);
  // Short context: v1 even with a single task.
  EXPECT_EQ(ChooseDecodePartitionSize(1, 1, 512, 16), 0);
  // One sequence, one kv head, 4 threads: 8 partitions of 16384 / 8 tokens.
  EXPECT_EQ(ChooseDecodePartitionSize(1, 1, 16384, 4), 2048);
  // Rounded up to a multiple of 64 and at least 256.
  EXPECT_EQ(ChooseDecodePartitionSize(1, 2, 1000, 2), 512);
  EXPECT_EQ(ChooseDecodePartitionSize(1, 1, 1100, 16), 256);
}

}  // namespace
}  // namespace radixkv::worker
