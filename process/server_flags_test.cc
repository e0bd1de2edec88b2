#include "process/server_flags.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

RADIXKV_DEFINE_SERVER_FLAGS(50070, 9170, 7, "Test drain.");

namespace radixkv::process {
namespace {

TEST(ServerFlags, ReadsTheDefinedDefaults) {
  const ServerFlags flags = GetServerFlags();
  EXPECT_EQ(flags.grpc_port, 50070);
  EXPECT_EQ(flags.metrics_port, 9170);
  EXPECT_EQ(flags.drain_timeout_s, 7);
  EXPECT_TRUE(ValidateServerFlags(flags).ok());
}

TEST(ServerFlags, RejectsEachOutOfRangeValueByName) {
  EXPECT_EQ(ValidateServerFlags({.grpc_port = 65536}).message(),
            "--grpc_port must be in [0, 65535], got 65536");
  EXPECT_EQ(ValidateServerFlags({.metrics_port = -1}).message(),
            "--metrics_port must be in [0, 65535], got -1");
  EXPECT_EQ(ValidateServerFlags({.drain_timeout_s = 3601}).message(),
            "--drain_timeout_s must be in [0, 3600], got 3601");
  EXPECT_TRUE(ValidateServerFlags(
                  {.grpc_port = 65535, .metrics_port = 0, .drain_timeout_s = 0})
                  .ok());
}

TEST(CheckFlagRanges, ReportsTheFirstViolationInOrder) {
  const absl::Status s =
      CheckFlagRanges({{"a", 5, 0, 10}, {"b", 11, 0, 10}, {"c", -1, 0, 10}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--b must be in [0, 10], got 11");
  EXPECT_TRUE(CheckFlagRanges({{"a", 0, 0, 0}, {"b", 10, 0, 10}}).ok());
}

TEST(CheckHostPortFlag, AcceptsEmptyAndHostPortOnly) {
  EXPECT_TRUE(CheckHostPortFlag("x", "").ok());
  EXPECT_TRUE(CheckHostPortFlag("x", "10.0.0.1:50051").ok());
  EXPECT_TRUE(CheckHostPortFlag("x", "[::1]:1").ok());
  for (const char* bad :
       {"host", ":50051", "host:", "host:0", "host:65536", "host:port"}) {
    const absl::Status s = CheckHostPortFlag("cache_service", bad);
    EXPECT_EQ(s.message(), absl::StrCat("--cache_service must be host:port, "
                                        "got '",
                                        bad, "'"))
        << bad;
  }
}

}  // namespace
}  // namespace radixkv::process
