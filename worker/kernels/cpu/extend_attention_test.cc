#include "worker/kernels/cpu/extend_attention.h"

#include <algorithm>
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
// The reference reads the pool's stored (already rounded) values, so only the
// kernel's fp32 arithmetic differs from float64: outputs are convex
// combinations of |v| < 1, lse is O(10).
constexpr double kOutTol = 5e-5;
constexpr double kLseTol = 1e-4;

struct ExtendCase {
  KvLayout layout;
  DType dtype;
  int page_size;
  int num_kv_heads;
  int group;  // GQA group size Hq / Hkv
  int head_dim;
  std::vector<int> prefix_lens;
  std::vector<int> extend_lens;
  bool use_threads;
  int window_left = -1;  // -1: full causal attention

  std::string Name() const {
    std::string s = absl::StrCat(KvLayoutName(layout), "/", DTypeName(dtype),
                                 "/ps", page_size, "/hkv", num_kv_heads, "/g",
                                 group, "/d", head_dim, "/prefix");
    for (int p : prefix_lens) absl::StrAppend(&s, "_", p);
    absl::StrAppend(&s, "/extend");
    for (int e : extend_lens) absl::StrAppend(&s, "_", e);
    absl::StrAppend(&s, "/window_left", window_left);
    return s;
  }
};

// Runs one case against the float64 reference. Layer 1 of a 2-layer pool so
// the layer offset is exercised. Returns out for determinism checks.
std::vector<float> RunExtendCase(const ExtendCase& c, uint64_t seed,
                                 CpuThreadPool* threads) {
  SCOPED_TRACE(c.Name());
  std::mt19937_64 rng(seed);
  const int B = static_cast<int>(c.prefix_lens.size());
  const int hkv = c.num_kv_heads, hq = c.num_kv_heads * c.group;
  const int D = c.head_dim;
  int64_t pages_needed = 0;
  for (int p : c.prefix_lens)
    pages_needed += (p + c.page_size - 1) / c.page_size;
  KvCacheGeometry geom{2 * pages_needed + 3, c.page_size, hkv, D, 0, c.layout};
  auto pool_or = KvPool::Create(2, geom, c.dtype);
  EXPECT_TRUE(pool_or.ok()) << pool_or.status();
  if (!pool_or.ok()) return {};
  KvPool& pool = **pool_or;
  const int layer = 1;
  testing::FillPoolRandom(pool, layer, rng);

  const std::vector<int64_t> kv_indices =
      PermutedSlots(pool, c.prefix_lens, rng);
  std::vector<int32_t> qo_indptr{0}, kv_indptr{0};
  for (int b = 0; b < B; ++b) {
    qo_indptr.push_back(qo_indptr.back() + c.extend_lens[b]);
    kv_indptr.push_back(kv_indptr.back() + c.prefix_lens[b]);
  }
  const int total_q = qo_indptr.back();
  const std::vector<float> q =
      RandomFloats(int64_t{total_q} * hq * D, 1.5f, rng);
  const std::vector<float> k_ext =
      RandomFloats(int64_t{total_q} * hkv * D, 1.0f, rng);
  const std::vector<float> v_ext =
      RandomFloats(int64_t{total_q} * hkv * D, 1.0f, rng);
  std::vector<float> out(int64_t{total_q} * hq * D, kNaN);
  std::vector<float> lse(int64_t{total_q} * hq, kNaN);

  ExtendAttentionArgs args;
  args.q = q.data();
  args.k_extend = k_ext.data();
  args.v_extend = v_ext.data();
  args.qo_indptr = qo_indptr;
  args.kv_indptr = kv_indptr;
  args.kv_indices = kv_indices;
  args.num_q_heads = hq;
  args.sm_scale = 1.0f / std::sqrt(static_cast<float>(D));
  args.window_left = c.window_left;
  args.out = out.data();
  args.lse = lse.data();
  ExtendAttention(pool, layer, args, threads);

  for (int b = 0; b < B; ++b) {
    const int lp = c.prefix_lens[b], le = c.extend_lens[b], lk = lp + le;
    std::vector<double> qd(static_cast<size_t>(le) * hq * D);
    std::vector<double> kd(static_cast<size_t>(lk) * hkv * D);
    std::vector<double> vd(static_cast<size_t>(lk) * hkv * D);
    for (size_t i = 0; i < qd.size(); ++i) {
      qd[i] = q[static_cast<size_t>(qo_indptr[b]) * hq * D + i];
    }
    for (int j = 0; j < lk; ++j) {
      for (int h = 0; h < hkv; ++h) {
        for (int e = 0; e < D; ++e) {
          const size_t idx = (static_cast<size_t>(j) * hkv + h) * D + e;
          if (j < lp) {
            const int64_t slot = kv_indices[kv_indptr[b] + j];
            kd[idx] = PoolK(pool, layer, slot, h, e);
            vd[idx] = PoolV(pool, layer, slot, h, e);
          } else {
            const size_t src =
                (static_cast<size_t>(qo_indptr[b] + j - lp) * hkv + h) * D + e;
            kd[idx] = k_ext[src];
            vd[idx] = v_ext[src];
          }
        }
      }
    }
    std::vector<double> ref_out, ref_lse;
    ReferenceAttention(qd, kd, vd, le, lk, hq, hkv, D, args.sm_scale, &ref_out,
                       &ref_lse, c.window_left);
    int bad = 0;
    for (size_t i = 0; i < ref_out.size() && bad < 5; ++i) {
      const float got = out[static_cast<size_t>(qo_indptr[b]) * hq * D + i];
      if (!(std::fabs(got - ref_out[i]) <= kOutTol)) {
        ADD_FAILURE() << "seq " << b << " out[" << i << "] = " << got
                      << ", reference " << ref_out[i];
        ++bad;
      }
    }
    for (size_t i = 0; i < ref_lse.size() && bad < 5; ++i) {
      const float got = lse[static_cast<size_t>(qo_indptr[b]) * hq + i];
      if (!(std::fabs(got - ref_lse[i]) <= kLseTol)) {
        ADD_FAILURE() << "seq " << b << " lse[" << i << "] = " << got
                      << ", reference " << ref_lse[i];
        ++bad;
      }
    }
  }
  // Every output element was written (poisoned with NaN before the run).
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i])) {
      ADD_FAILURE() << "out[" << i << "] not written";
      break;
    }
  }
  for (size_t i = 0; i < lse.size(); ++i) {
    if (std::isnan(lse[i])) {
      ADD_FAILURE() << "lse[" << i << "] not written";
      break;
    }
  }
  return out;
}

// Every layout x dtype x page_size in {1, 16, 64}, rotating GQA groups
// {1, 4, 8, 6} and head dims {64, 128, 80}. Batches mix prefix 0, extend 1,
// lengths that are not multiples of the page size, prefixes spanning several
// 64-token tiles and extends spanning several query blocks.
TEST(ExtendAttentionTest, MatchesDenseReferenceAcrossLayoutsDtypesPageSizes) {
  const uint64_t seed = TestSeed("ExtendAttentionTest.Sweep");
  CpuThreadPool threads(2);
  const KvLayout layouts[] = {KvLayout::kBSHD, KvLayout::kBHSD,
                              KvLayout::kVllm};
  const DType dtypes[] = {DType::kF32, DType::kBF16, DType::kF16};
  const int page_sizes[] = {1, 16, 64};
  const int groups[] = {1, 4, 8, 6};
  const int dims[] = {64, 128, 80};
  int i = 0;
  for (KvLayout layout : layouts) {
    for (DType dtype : dtypes) {
      for (int ps : page_sizes) {
        ExtendCase c{
            layout,        dtype,       ps,           /*num_kv_heads=*/2,
            groups[i % 4], dims[i % 3], {0, 37, 130}, {1, 19, 70},
            i % 2 == 0};
        RunExtendCase(c, seed + i, c.use_threads ? &threads : nullptr);
        ++i;
      }
    }
  }
}

TEST(ExtendAttentionTest, GqaGroupsAndHeadDims) {
  const uint64_t seed = TestSeed("ExtendAttentionTest.Gqa");
  int i = 0;
  // 32 is the demo model's head_dim; 40 takes the generic (not
  // register-blocked) tile path.
  for (int group : {1, 4, 8, 6}) {
    for (int d : {64, 128, 80, 32, 40}) {
      ExtendCase c{
          KvLayout::kBSHD, DType::kBF16, 16,   /*num_kv_heads=*/1, group, d,
          {21, 0},         {5, 33},      false};
      RunExtendCase(c, seed + i++, nullptr);
    }
  }
}

// Prefix 0 (plain prefill) and extend 1 (one new token on a long prefix).
TEST(ExtendAttentionTest, PrefixZeroAndExtendOne) {
  const uint64_t seed = TestSeed("ExtendAttentionTest.Edges");
  RunExtendCase({KvLayout::kBHSD, DType::kF16, 16, 2, 4, 64, {0}, {50}, false},
                seed, nullptr);
  RunExtendCase({KvLayout::kVllm, DType::kF32, 64, 2, 4, 64, {200}, {1}, false},
                seed + 1, nullptr);
}

// Threads change the schedule, not the arithmetic: bitwise-equal outputs.
TEST(ExtendAttentionTest, ThreadedEqualsInline) {
  const uint64_t seed = TestSeed("ExtendAttentionTest.Threads");
  CpuThreadPool threads(3);
  const ExtendCase c{KvLayout::kBSHD, DType::kBF16, 16,  2, 4, 128,
                     {45, 3, 90},     {30, 70, 2},  true};
  const std::vector<float> a = RunExtendCase(c, seed, &threads);
  const std::vector<float> b = RunExtendCase(c, seed, nullptr);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
}

// Sliding windows W (window_left = W - 1) in {1, 15, 16, 17, 64, 4095} x
// page sizes {1, 16, 64}: windows smaller than a page, windows whose left
// edge falls exactly on a page boundary (prefix 64 + W: query 0's edge is
// position 64), prefixes longer than the window (the block's out-of-window
// pages are skipped) and extends longer than the window (its edge inside the
// new tokens), over all layouts and dtypes in turn.
TEST(ExtendAttentionTest, SlidingWindowMatchesDenseReference) {
  const uint64_t seed = TestSeed("ExtendAttentionTest.Window");
  CpuThreadPool threads(2);
  testing::ForEachWindowCase([&](const testing::WindowCase& w) {
    const int W = w.window;
    const int long_prefix = W >= 4095 ? W + 150 : 64 + W;
    ExtendCase c{w.layout,
                 w.dtype,
                 w.page_size,
                 /*num_kv_heads=*/2,
                 w.index % 2 == 0 ? 4 : 1,
                 64,
                 {0, long_prefix, 5, 3 * W + 1},
                 {70, 9, 2 * W + 3 > 200 ? 40 : 2 * W + 3, 1},
                 w.index % 2 == 1,
                 W - 1};
    RunExtendCase(c, seed + w.index, c.use_threads ? &threads : nullptr);
  });
}

// window_left 0 (W = 1): every query sees only itself, so out is its own v.
TEST(ExtendAttentionTest, WindowOneIsOwnValue) {
  const uint64_t seed = TestSeed("ExtendAttentionTest.WindowOne");
  RunExtendCase(
      {KvLayout::kBSHD, DType::kF32, 16, 1, 2, 32, {40}, {20}, false, 0}, seed,
      nullptr);
}

// qo_len 2, kv_len 3 (prefix 1): the mask rows are [1,1,0] and [1,1,1]
// (background.md §3.2, j <= i + (Lk - Lq)). Checked against softmaxes written
// out by hand over exactly those keys, not through the reference's mask
// formula.
TEST(ExtendAttentionTest, ShiftedCausalMaskTwoByThree) {
  const uint64_t seed = TestSeed("ExtendAttentionTest.Mask2x3");
  std::mt19937_64 rng(seed);
  const int D = 64;
  auto pool = KvPool::Create(1, KvCacheGeometry{4, 1, 1, D, 0, KvLayout::kBSHD},
                             DType::kF32);
  ASSERT_TRUE(pool.ok());
  testing::FillPoolRandom(**pool, 0, rng);
  const std::vector<int64_t> kv_indices{2};  // prefix token 0 at slot 2
  const std::vector<int32_t> qo_indptr{0, 2}, kv_indptr{0, 1};
  const std::vector<float> q = RandomFloats(2 * D, 1.5f, rng);
  const std::vector<float> k_ext = RandomFloats(2 * D, 1.0f, rng);
  const std::vector<float> v_ext = RandomFloats(2 * D, 1.0f, rng);
  std::vector<float> out(2 * D, kNaN), lse(2, kNaN);
  ExtendAttentionArgs args;
  args.q = q.data();
  args.k_extend = k_ext.data();
  args.v_extend = v_ext.data();
  args.qo_indptr = qo_indptr;
  args.kv_indptr = kv_indptr;
  args.kv_indices = kv_indices;
  args.num_q_heads = 1;
  args.sm_scale = 0.125f;
  args.out = out.data();
  args.lse = lse.data();
  ExtendAttention(**pool, 0, args, nullptr);

  auto key = [&](int j, int e) -> double {
    return j == 0 ? PoolK(**pool, 0, 2, 0, e) : k_ext[(j - 1) * D + e];
  };
  auto value = [&](int j, int e) -> double {
    return j == 0 ? PoolV(**pool, 0, 2, 0, e) : v_ext[(j - 1) * D + e];
  };
  const int mask[2][3] = {{1, 1, 0}, {1, 1, 1}};
  for (int i = 0; i < 2; ++i) {
    double w[3], sum = 0;
    for (int j = 0; j < 3; ++j) {
      double dot = 0;
      for (int e = 0; e < D; ++e) dot += q[i * D + e] * key(j, e);
      w[j] = mask[i][j] ? std::exp(0.125 * dot) : 0.0;
      sum += w[j];
    }
    for (int e = 0; e < D; ++e) {
      double expect = 0;
      for (int j = 0; j < 3; ++j) expect += w[j] / sum * value(j, e);
      EXPECT_NEAR(out[i * D + e], expect, kOutTol) << "row " << i;
    }
    EXPECT_NEAR(lse[i], std::log(sum), kLseTol) << "row " << i;
  }
  // Row 0 must differ from what it would be without the mask.
  double w_all[3], sum_all = 0;
  for (int j = 0; j < 3; ++j) {
    double dot = 0;
    for (int e = 0; e < D; ++e) dot += q[e] * key(j, e);
    w_all[j] = std::exp(0.125 * dot);
    sum_all += w_all[j];
  }
  EXPECT_GT(std::fabs(lse[0] - std::log(sum_all)), 1e-3);
}

// Sequences with no new tokens produce no rows: nothing is written.
TEST(ExtendAttentionTest, NoNewTokensWritesNothing) {
  auto pool = KvPool::Create(
      1, KvCacheGeometry{2, 16, 1, 64, 0, KvLayout::kBSHD}, DType::kF32);
  ASSERT_TRUE(pool.ok());
  const std::vector<int32_t> qo_indptr{0, 0, 0}, kv_indptr{0, 3, 3};
  const std::vector<int64_t> kv_indices{5, 6, 7};
  float sentinel_out[64], sentinel_lse = 7.0f, q = 1.0f;
  std::fill(sentinel_out, sentinel_out + 64, 3.0f);
  ExtendAttentionArgs args;
  args.q = &q;
  args.k_extend = &q;
  args.v_extend = &q;
  args.qo_indptr = qo_indptr;
  args.kv_indptr = kv_indptr;
  args.kv_indices = kv_indices;
  args.num_q_heads = 1;
  args.sm_scale = 1.0f;
  args.out = sentinel_out;
  args.lse = &sentinel_lse;
  ExtendAttention(**pool, 0, args, nullptr);
  EXPECT_EQ(sentinel_out[0], 3.0f);
  EXPECT_EQ(sentinel_out[63], 3.0f);
  EXPECT_EQ(sentinel_lse, 7.0f);
}

}  // namespace
}  // namespace radixkv::worker
