#include "process/raw_message.h"

#include <string>
#include <vector>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/wrappers.pb.h"
#include "gtest/gtest.h"

namespace radixkv::process {
namespace {

grpc::ByteBuffer Body(const std::vector<std::string>& slices) {
  std::vector<grpc::Slice> parts(slices.begin(), slices.end());
  return grpc::ByteBuffer(parts.data(), parts.size());
}

TEST(RawMessageTest, RoundTripsAcrossSlices) {
  google::protobuf::StringValue sent;
  sent.set_value(std::string(10000, 'x') + "tail");
  grpc::ByteBuffer body;
  ASSERT_TRUE(SerializeRawMessage(sent, &body).ok());
  EXPECT_EQ(body.Length(), sent.ByteSizeLong());
  google::protobuf::StringValue received;
  ASSERT_TRUE(ParseRawMessage(body, &received).ok());
  EXPECT_EQ(received.value(), sent.value());
  // The body is unchanged by parsing: it parses again.
  ASSERT_TRUE(ParseRawMessage(body, &received).ok());
  EXPECT_EQ(received.value(), sent.value());

  // The same bytes split over several slices.
  const std::string bytes = sent.SerializeAsString();
  grpc::ByteBuffer split =
      Body({bytes.substr(0, 1), bytes.substr(1, 4000), bytes.substr(4001)});
  ASSERT_TRUE(ParseRawMessage(split, &received).ok());
  EXPECT_EQ(received.value(), sent.value());
}

TEST(RawMessageTest, EmptyBodyIsTheDefaultMessage) {
  google::protobuf::StringValue received;
  received.set_value("stale");
  ASSERT_TRUE(ParseRawMessage(grpc::ByteBuffer(), &received).ok());
  EXPECT_EQ(received.value(), "");
}

TEST(RawMessageTest, UnparseableBodyIsInvalidArgumentNamingTypeAndSize) {
  google::protobuf::StringValue received;
  received.set_value("stale");
  // Field 2^29-1 with wire type 7, which does not exist.
  absl::Status status =
      ParseRawMessage(Body({"\xff\xff\xff\xff\x0f"}), &received);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "StringValue: unparseable message (5 bytes)");
  EXPECT_EQ(received.value(), "");

  // A length-delimited field cut short, over two slices.
  google::protobuf::Struct message;
  status = ParseRawMessage(Body({"\x0a\x64", "abc"}), &message);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "Struct: unparseable message (5 bytes)");
}

}  // namespace
}  // namespace radixkv::process
