#include "cache_service/snapshot_codec.h"

#include <climits>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::cache_service {
namespace {

TEST(SnapshotCodecTest, VarintBytesMatchLeb128) {
  SnapshotWriter w;
  w.U64(0);
  w.U64(127);
  w.U64(128);
  w.U64(300);
  EXPECT_EQ(w.Take(), std::string("\x00\x7f\x80\x01\xac\x02", 6));
}

TEST(SnapshotCodecTest, ZigzagKeepsSmallMagnitudesShort) {
  SnapshotWriter w;
  w.I64(0);
  w.I64(-1);
  w.I64(1);
  w.I64(-64);
  EXPECT_EQ(w.Take(), std::string("\x00\x01\x02\x7f", 4));
}

TEST(SnapshotCodecTest, RoundTripsEveryKind) {
  const std::vector<int32_t> run = {7, 8, 9,         10,        3,
                                    2, 1, INT32_MAX, INT32_MIN, 0};
  SnapshotWriter w;
  w.U64(UINT64_MAX);
  w.I64(INT64_MIN);
  w.I64(INT64_MAX);
  w.I64(-42);
  w.Str("");
  w.Str(std::string("a\0b", 3));
  w.I32s(run);
  w.I32s({});
  const std::string bytes = w.Take();

  SnapshotReader r(bytes);
  EXPECT_EQ(r.U64(), UINT64_MAX);
  EXPECT_EQ(r.I64(), INT64_MIN);
  EXPECT_EQ(r.I64(), INT64_MAX);
  EXPECT_EQ(r.I32(), -42);
  EXPECT_EQ(r.Str(), "");
  EXPECT_EQ(r.Str(), std::string("a\0b", 3));
  EXPECT_EQ(r.I32s(), run);
  EXPECT_EQ(r.I32s(), std::vector<int32_t>{});
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.done());
}

TEST(SnapshotCodecTest, RandomRoundTrip) {
  const uint32_t seed = std::random_device{}();
  std::cout << "RADIXKV_TEST_SEED=" << seed << "\n";
  std::mt19937 rng(seed);
  std::vector<int64_t> i64s;
  std::vector<std::vector<int32_t>> runs;
  SnapshotWriter w;
  for (int i = 0; i < 200; ++i) {
    const int64_t v =
        static_cast<int64_t>((static_cast<uint64_t>(rng()) << 32) | rng());
    i64s.push_back(v >> (rng() % 64));
    w.I64(i64s.back());
    std::vector<int32_t> run(rng() % 20);
    for (int32_t& x : run) x = static_cast<int32_t>(rng());
    runs.push_back(run);
    w.I32s(run);
  }
  const std::string bytes = w.Take();
  SnapshotReader r(bytes);
  for (int i = 0; i < 200; ++i) {
    ASSERT_EQ(r.I64(), i64s[i]) << "value " << i << " seed " << seed;
    ASSERT_EQ(r.I32s(), runs[i]) << "run " << i << " seed " << seed;
  }
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(r.done());
}

TEST(SnapshotCodecTest, TruncationFailsForGood) {
  SnapshotWriter w;
  w.Str("hello");
  w.U64(5);
  std::string bytes = w.Take();
  bytes.resize(3);  // length 5, then only "he"
  SnapshotReader r(bytes);
  EXPECT_EQ(r.Str(), "");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.U64(), 0u);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.done());
}

TEST(SnapshotCodecTest, OverlongVarintFails) {
  const std::string bytes(11, '\x80');
  SnapshotReader r(bytes);
  EXPECT_EQ(r.U64(), 0u);
  EXPECT_FALSE(r.ok());
}

TEST(SnapshotCodecTest, CountBeyondInputFailsWithoutAllocating) {
  SnapshotWriter w;
  w.U64(uint64_t{1} << 60);  // claims 2^60 elements
  const std::string bytes = w.Take();
  SnapshotReader r(bytes);
  EXPECT_TRUE(r.I32s().empty());
  EXPECT_FALSE(r.ok());
}

TEST(SnapshotCodecTest, I32OutOfRangeFails) {
  SnapshotWriter w;
  w.I64(int64_t{INT32_MAX} + 1);
  w.I32s({});
  const std::string bytes = w.Take();
  SnapshotReader r(bytes);
  EXPECT_EQ(r.I32(), 0);
  EXPECT_FALSE(r.ok());
}

TEST(SnapshotCodecTest, I32sElementOutOfRangeFails) {
  SnapshotWriter w;
  w.U64(2);
  w.I64(INT32_MAX);
  w.I64(1);  // INT32_MAX + 1
  const std::string bytes = w.Take();
  SnapshotReader r(bytes);
  r.I32s();
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace radixkv::cache_service
