// Requests and responses of gRPC "raw" methods (grpc::ByteBuffer bodies,
// e.g. Service::WithRawCallbackMethod_X), parsed and serialized by the
// service itself: gRPC's own parsing answers an unparseable body with
// INTERNAL and an empty message, this one with INVALID_ARGUMENT naming the
// message type and size.
#ifndef RADIXKV_PROCESS_RAW_MESSAGE_H_
#define RADIXKV_PROCESS_RAW_MESSAGE_H_

#include "absl/status/status.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/support/byte_buffer.h"

namespace radixkv::process {

// Parses the body of a request into `message` (cleared first).
// Errors: INVALID_ARGUMENT "<Type>: unparseable message (<N> bytes)", Type
// being the message's name without its package (e.g. "GenerateRequest") and
// N the body's size in bytes; `message` is then cleared.
absl::Status ParseRawMessage(const grpc::ByteBuffer& body,
                             google::protobuf::MessageLite* message);

// Serializes `message` into a response body (replacing `body`).
// Errors: INTERNAL when protobuf cannot serialize it (over 2 GiB).
absl::Status SerializeRawMessage(const google::protobuf::MessageLite& message,
                                 grpc::ByteBuffer* body);

}  // namespace radixkv::process

#endif  // RADIXKV_PROCESS_RAW_MESSAGE_H_
