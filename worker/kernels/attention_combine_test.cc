#include "worker/kernels/attention_combine.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::worker {
namespace {

// Splitting a row of logits into partitions and combining with
// w_p = l_p 2^(m_p - M) / L (background.md §4.3) equals the unsplit softmax; an
// empty partition (m = -inf, l = 0, O = NaN garbage) contributes nothing.
TEST(AttentionCombineTest, CombineEqualsUnsplitSoftmax) {
  std::mt19937_64 rng(1234);
  std::uniform_real_distribution<double> u(-4, 4);
  const int n = 37, D = 8;
  std::vector<double> s(n), v(n * D);
  for (double& x : s) x = u(rng);
  for (double& x : v) x = u(rng);
  // Reference in float64, natural domain.
  double m = -INFINITY;
  for (double x : s) m = std::max(m, x);
  double l = 0;
  for (double x : s) l += std::exp(x - m);
  std::vector<double> ref(D, 0);
  for (int t = 0; t < n; ++t) {
    for (int d = 0; d < D; ++d) ref[d] += std::exp(s[t] - m) / l * v[t * D + d];
  }
  const double ref_lse = m + std::log(l);
  // Partitions [0,10) [10,10) empty [10,36) [36,37): last holds one token.
  const int bounds[][2] = {{0, 10}, {10, 10}, {10, 36}, {36, 37}};
  const int P = 4;
  std::vector<float> mp(P), lp(P), op(P * D);
  for (int p = 0; p < P; ++p) {
    const int b = bounds[p][0], e = bounds[p][1];
    if (b == e) {
      mp[p] = -INFINITY;
      lp[p] = 0;
      for (int d = 0; d < D; ++d) op[p * D + d] = NAN;
      continue;
    }
    double pm = -INFINITY;
    for (int t = b; t < e; ++t) pm = std::max(pm, s[t] * 1.4426950408889634);
    double pl = 0;
    for (int t = b; t < e; ++t) pl += std::exp2(s[t] * 1.4426950408889634 - pm);
    mp[p] = static_cast<float>(pm);
    lp[p] = static_cast<float>(pl);
    for (int d = 0; d < D; ++d) {
      double o = 0;
      for (int t = b; t < e; ++t) {
        o += std::exp2(s[t] * 1.4426950408889634 - pm) / pl * v[t * D + d];
      }
      op[p * D + d] = static_cast<float>(o);
    }
  }
  std::vector<float> out(D, NAN);
  float lse = NAN;
  CombinePartitions(P, D, mp.data(), lp.data(), op.data(), out.data(), &lse);
  for (int d = 0; d < D; ++d) EXPECT_NEAR(out[d], ref[d], 1e-5) << d;
  EXPECT_NEAR(lse, ref_lse, 1e-5);
  // The weights sum to one.
  const float M = CombineMax(mp.data(), P);
  const float L = CombineExpSum(mp.data(), lp.data(), P, M);
  float wsum = 0;
  for (int p = 0; p < P; ++p) wsum += CombineWeight(mp[p], lp[p], M, L);
  EXPECT_NEAR(wsum, 1.0f, 1e-6);
  EXPECT_EQ(CombineWeight(mp[1], lp[1], M, L), 0.0f);
}

TEST(AttentionCombineTest, AllEmptyGivesZeroAndMinusInf) {
  const float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};
  const float o[4] = {NAN, NAN, NAN, NAN};
  float out[2] = {NAN, NAN}, lse = NAN;
  CombinePartitions(2, 2, m, l, o, out, &lse);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(lse, -INFINITY);
  CombinePartitions(0, 2, m, l, o, out, &lse);  // no partitions at all
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(lse, -INFINITY);
}

}  // namespace
}  // namespace radixkv::worker
