#include "worker/log_format.h"

#include "gtest/gtest.h"

namespace radixkv::worker {
namespace {

TEST(FormatDurationForLogTest, RoundsToMilliseconds) {
  EXPECT_EQ(FormatDurationForLog(absl::Seconds(10) / 3), "3.333s");
  EXPECT_EQ(FormatDurationForLog(absl::Milliseconds(9000) / 3), "3s");
  EXPECT_EQ(FormatDurationForLog(absl::Microseconds(2500500)), "2.501s");
  EXPECT_EQ(FormatDurationForLog(absl::Milliseconds(250)), "250ms");
  EXPECT_EQ(FormatDurationForLog(absl::Seconds(150)), "2m30s");
  EXPECT_EQ(FormatDurationForLog(absl::Nanoseconds(12400)), "12us");
  EXPECT_EQ(FormatDurationForLog(absl::ZeroDuration()), "0");
  EXPECT_EQ(FormatDurationForLog(absl::InfiniteDuration()), "inf");
}

}  // namespace
}  // namespace radixkv::worker
