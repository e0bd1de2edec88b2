#include "process/grpc_status.h"

#include <string>

#include "gtest/gtest.h"

namespace radixkv::process {
namespace {

TEST(GrpcStatusTest, KeepsCodeAndMessage) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  const grpc::Status s = ToGrpcStatus(absl::NotFoundError("unknown worker w"));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "unknown worker w");
  const absl::Status back = FromGrpcStatus(s);
  EXPECT_EQ(back, absl::NotFoundError("unknown worker w"));
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
}

TEST(GrpcStatusTest, LongMessagesAreCutAtACharacterBoundary) {
  // 1,023 ASCII bytes, then a 3-byte character across the limit.
  const std::string message = std::string(1023, 'x') + "\xe2\x82\xac" + "tail";
  const grpc::Status s = ToGrpcStatus(absl::InvalidArgumentError(message));
  EXPECT_EQ(s.error_message(),
            std::string(1023, 'x') + "... (truncated from 1030 bytes)");
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError(std::string(1024, 'y')))
                .error_message(),
            std::string(1024, 'y'));
}

}  // namespace
}  // namespace radixkv::process
