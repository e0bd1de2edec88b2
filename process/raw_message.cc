#include "process/raw_message.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "grpcpp/support/proto_buffer_reader.h"

namespace radixkv::process {

namespace {

// "radixkv.v1.GenerateRequest" -> "GenerateRequest".
std::string ShortTypeName(const google::protobuf::MessageLite& message) {
  std::string name = message.GetTypeName();
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

}  // namespace

absl::Status ParseRawMessage(const grpc::ByteBuffer& body,
                             google::protobuf::MessageLite* message) {
  message->Clear();
  // Zero bytes are the default message (a ByteBuffer without a buffer has
  // no reader).
  if (body.Length() == 0) return absl::OkStatus();
  // The reader consumes its buffer; a copy shares the slices, not the bytes.
  grpc::ByteBuffer copy(body);
  grpc::ProtoBufferReader reader(&copy);
  if (reader.status().ok() && message->ParseFromZeroCopyStream(&reader)) {
    return absl::OkStatus();
  }
  message->Clear();
  return absl::InvalidArgumentError(absl::StrCat(ShortTypeName(*message),
                                                 ": unparseable message (",
                                                 body.Length(), " bytes)"));
}

absl::Status SerializeRawMessage(const google::protobuf::MessageLite& message,
                                 grpc::ByteBuffer* body) {
  body->Clear();  // The writer fills an empty buffer only.
  bool own_buffer = false;
  grpc::Status status =
      grpc::SerializationTraits<google::protobuf::MessageLite>::Serialize(
          message, body, &own_buffer);
  if (status.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cannot serialize ",
                                          ShortTypeName(message), ": ",
                                          status.error_message()));
}

}  // namespace radixkv::process
