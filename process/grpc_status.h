// The one conversion between absl::Status (every module boundary) and
// grpc::Status (the wire), for every radixkv process.
#ifndef RADIXKV_PROCESS_GRPC_STATUS_H_
#define RADIXKV_PROCESS_GRPC_STATUS_H_

#include <cstddef>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace radixkv::process {

// Longest status message sent, bytes. Messages echo client input (an id, a
// model name); gRPC carries them in trailing metadata, whose default limit
// on the client is 8 KiB: a longer one reaches the client as
// RESOURCE_EXHAUSTED "received initial metadata size exceeds limit" instead
// of the real status.
inline constexpr size_t kMaxStatusMessageBytes = 1024;

// The same code and message; a message over kMaxStatusMessageBytes is cut
// at a UTF-8 character boundary and marked "... (truncated from N bytes)".
grpc::Status ToGrpcStatus(const absl::Status& status);

// The same code and message.
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace radixkv::process

#endif  // RADIXKV_PROCESS_GRPC_STATUS_H_
