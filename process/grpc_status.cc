#include "process/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace radixkv::process {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  std::string message(status.message());
  if (message.size() > kMaxStatusMessageBytes) {
    size_t cut = kMaxStatusMessageBytes;
    // Not inside a UTF-8 sequence (continuation bytes are 10xxxxxx).
    while (cut > 0 &&
           (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) {
      --cut;
    }
    message = absl::StrCat(message.substr(0, cut), "... (truncated from ",
                           status.message().size(), " bytes)");
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::move(message));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

}  // namespace radixkv::process
