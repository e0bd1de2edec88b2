#include "process/server_flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace radixkv::process {

ServerFlags GetServerFlags() {
  return ServerFlags{.grpc_port = absl::GetFlag(FLAGS_grpc_port),
                     .metrics_port = absl::GetFlag(FLAGS_metrics_port),
                     .drain_timeout_s = absl::GetFlag(FLAGS_drain_timeout_s)};
}

absl::Status CheckFlagRanges(std::initializer_list<FlagRange> ranges) {
  for (const FlagRange& r : ranges) {
    if (r.value < r.lo || r.value > r.hi) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", r.name, " must be in [", r.lo, ", ", r.hi, "], got ", r.value));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateServerFlags(const ServerFlags& flags) {
  return CheckFlagRanges({
      {"grpc_port", flags.grpc_port, 0, 65535},
      {"metrics_port", flags.metrics_port, 0, 65535},
      {"drain_timeout_s", flags.drain_timeout_s, 0, 3600},
  });
}

absl::Status CheckHostPortFlag(absl::string_view name,
                               absl::string_view value) {
  if (value.empty()) return absl::OkStatus();
  const size_t colon = value.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(value.substr(colon + 1), &port) || port < 1 ||
      port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " must be host:port, got '", value, "'"));
  }
  return absl::OkStatus();
}

}  // namespace radixkv::process
