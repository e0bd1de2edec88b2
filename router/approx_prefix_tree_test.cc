#include "router/approx_prefix_tree.h"

#include <cstdio>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::router {
namespace {

TEST(ApproxPrefixTreeTest, MatchesLongestStoredPrefixAcrossSplits) {
  ApproxPrefixTree tree(1000);
  EXPECT_EQ(tree.Match({1, 2, 3}), 0);
  tree.Insert({1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(tree.Match({1, 2, 3, 4}), 4);
  EXPECT_EQ(tree.Match({1, 2, 3, 4, 5, 6, 7, 8, 9}), 8);
  EXPECT_EQ(tree.Match({2, 3}), 0);
  tree.Insert({1, 2, 3, 4, 9});  // splits the edge after 4
  EXPECT_EQ(tree.num_nodes(), 3);
  EXPECT_EQ(tree.size_tokens(), 9);
  EXPECT_EQ(tree.Match({1, 2, 3, 4, 9, 9}), 5);
  EXPECT_EQ(tree.Match({1, 2, 3, 4, 5, 0}), 5);
  EXPECT_EQ(tree.Match({1, 2, 7}), 2);
  tree.Insert({1, 2, 3, 4, 9});  // duplicate: nothing new
  EXPECT_EQ(tree.size_tokens(), 9);
}

TEST(ApproxPrefixTreeTest, EvictsLeastRecentlyUsedLeavesPastCapacity) {
  ApproxPrefixTree tree(20);
  tree.Insert({1, 1, 1, 1, 1, 1, 1, 1});               // 8 tokens
  tree.Insert({2, 2, 2, 2, 2, 2, 2, 2});               // 16
  EXPECT_EQ(tree.Match({1, 1, 1, 1, 1, 1, 1, 1}), 8);  // 1s are now fresher
  tree.Insert({3, 3, 3, 3, 3, 3, 3, 3});  // 24 > 20: evict to <= 18
  EXPECT_LE(tree.size_tokens(), 18);
  EXPECT_EQ(tree.Match({2, 2, 2, 2}), 0);
  EXPECT_EQ(tree.Match({1, 1, 1, 1}), 4);
  EXPECT_EQ(tree.Match({3, 3, 3}), 3);
}

// Differential check against a naive list of stored sequences (no eviction).
TEST(ApproxPrefixTreeTest, AgreesWithNaiveListOnRandomSequences) {
  const unsigned seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  ApproxPrefixTree tree(1 << 20);
  std::vector<std::vector<int32_t>> stored;
  auto random_seq = [&]() {
    std::vector<int32_t> s;
    if (!stored.empty() && rng() % 2 == 0) {
      const auto& base = stored[rng() % stored.size()];
      s.assign(base.begin(), base.begin() + rng() % (base.size() + 1));
    }
    const int extra = rng() % 6;
    for (int i = 0; i < extra; ++i)
      s.push_back(static_cast<int32_t>(rng() % 3));
    return s;
  };
  for (int step = 0; step < 2000; ++step) {
    std::vector<int32_t> q = random_seq();
    int64_t expected = 0;
    for (const auto& s : stored) {
      int64_t k = 0;
      while (k < static_cast<int64_t>(s.size()) &&
             k < static_cast<int64_t>(q.size()) && s[k] == q[k]) {
        ++k;
      }
      expected = std::max(expected, k);
    }
    ASSERT_EQ(tree.Match(q), expected) << "seed " << seed << " step " << step;
    if (rng() % 2 == 0) {
      tree.Insert(q);
      stored.push_back(q);
    }
  }
}

}  // namespace
}  // namespace radixkv::router
