#include "cache_service/token_range.h"

#include <climits>
#include <cstdint>
#include <iostream>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::cache_service {
namespace {

bool Scalar(const std::vector<int32_t>& tokens, uint32_t limit) {
  for (int32_t t : tokens) {
    if (static_cast<uint32_t>(t) >= limit) return true;
  }
  return false;
}

TEST(TokenRangeTest, EdgesOfTheLimit) {
  EXPECT_FALSE(AnyTokenAtOrAbove({}, 1));
  EXPECT_FALSE(AnyTokenAtOrAbove({0, 1, 2}, 3));
  EXPECT_TRUE(AnyTokenAtOrAbove({0, 1, 3}, 3));
  EXPECT_TRUE(AnyTokenAtOrAbove({-1}, uint32_t{1} << 31));
  EXPECT_TRUE(AnyTokenAtOrAbove({INT32_MIN}, uint32_t{1} << 31));
  EXPECT_FALSE(AnyTokenAtOrAbove({INT32_MAX}, uint32_t{1} << 31));
}

TEST(TokenRangeTest, OffendingTokenAtEveryPosition) {
  // Positions inside the 8-wide vector body and in the scalar tail.
  for (size_t n = 1; n <= 41; ++n) {
    for (size_t bad = 0; bad < n; ++bad) {
      std::vector<int32_t> tokens(n, 99);
      ASSERT_FALSE(AnyTokenAtOrAbove(tokens, 100)) << n;
      tokens[bad] = 100;
      ASSERT_TRUE(AnyTokenAtOrAbove(tokens, 100)) << n << " " << bad;
      tokens[bad] = -5;
      ASSERT_TRUE(AnyTokenAtOrAbove(tokens, 100)) << n << " " << bad;
    }
  }
}

TEST(TokenRangeTest, AgreesWithScalarLoop) {
  const uint32_t seed = std::random_device{}();
  std::cout << "RADIXKV_TEST_SEED=" << seed << "\n";
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<int32_t> tokens(rng() % 70);
    const uint32_t limit = 1 + rng() % 1000;
    for (int32_t& t : tokens) {
      t = static_cast<int32_t>(rng() % (limit + limit / 50 + 1)) -
          (rng() % 500 == 0 ? 1000 : 0);
    }
    ASSERT_EQ(AnyTokenAtOrAbove(tokens, limit), Scalar(tokens, limit))
        << "trial " << trial << " seed " << seed;
  }
}

}  // namespace
}  // namespace radixkv::cache_service
