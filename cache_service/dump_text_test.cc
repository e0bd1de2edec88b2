#include "cache_service/dump_text.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::cache_service {
namespace {

TEST(DumpTextTest, QuoteEscapes) {
  EXPECT_EQ(Quote(""), "\"\"");
  EXPECT_EQ(Quote("w0"), "\"w0\"");
  EXPECT_EQ(Quote("a\"b\n"), "\"a\\\"b\\n\"");
}

TEST(DumpTextTest, RunsUpDownAndLone) {
  EXPECT_EQ(Runs(std::vector<int32_t>{}), "");
  EXPECT_EQ(Runs(std::vector<int32_t>{5}), "5");
  EXPECT_EQ(Runs(std::vector<int32_t>{1, 2, 3, 7, 6}), "1..3,7..6");
  EXPECT_EQ(Runs(std::vector<int32_t>{1, 2, 3, 5, 4, 3, 7}), "1..3,5..3,7");
  EXPECT_EQ(Runs(std::vector<int32_t>{4, 4, 9}), "4,4,9");
  EXPECT_EQ(Runs(std::vector<int64_t>{-2, -1, 0, 10}), "-2..0,10");
}

}  // namespace
}  // namespace radixkv::cache_service
