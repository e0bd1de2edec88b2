// The flags every radixkv server process shares (--grpc_port,
// --metrics_port, --drain_timeout_s) and the one range check all of a
// process's flags use.
#ifndef RADIXKV_PROCESS_SERVER_FLAGS_H_
#define RADIXKV_PROCESS_SERVER_FLAGS_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

// Defines --grpc_port, --metrics_port and --drain_timeout_s in the main.cc
// that expands it (so that `<binary> --help` lists them beside the binary's
// own flags, process_lifecycle.h IsHelpFlagsFile). Each binary picks its
// default ports and drain time; `drain_help` says what its drain waits for.
#define RADIXKV_DEFINE_SERVER_FLAGS(grpc_port_default, metrics_port_default, \
                                    drain_timeout_s_default, drain_help)     \
  ABSL_FLAG(int, grpc_port, grpc_port_default,                               \
            "gRPC port (also serves grpc.health.v1).");                      \
  ABSL_FLAG(int, metrics_port, metrics_port_default,                         \
            "Prometheus /metrics port; 0 = disabled.");                      \
  ABSL_FLAG(int, drain_timeout_s, drain_timeout_s_default, drain_help)

ABSL_DECLARE_FLAG(int, grpc_port);
ABSL_DECLARE_FLAG(int, metrics_port);
ABSL_DECLARE_FLAG(int, drain_timeout_s);

namespace radixkv::process {

// The values of the shared server flags.
struct ServerFlags {
  int grpc_port = 0;        // [0, 65535]; 0 picks a free port
  int metrics_port = 0;     // [0, 65535]; 0 = no /metrics listener
  int drain_timeout_s = 0;  // [0, 3600], seconds
};

// Reads the flags RADIXKV_DEFINE_SERVER_FLAGS defined (the binary must
// expand it once).
ServerFlags GetServerFlags();

// One bound of one flag: `value` of --`name` must lie in [lo, hi].
struct FlagRange {
  absl::string_view name;  // without the leading "--"
  int64_t value;
  int64_t lo;
  int64_t hi;
};

// INVALID_ARGUMENT "--<name> must be in [lo, hi], got <value>" for the first
// range violated, in the order given; OK when every value is in range.
absl::Status CheckFlagRanges(std::initializer_list<FlagRange> ranges);

// The ports in [0, 65535] and the drain in [0, 3600] s (CheckFlagRanges).
absl::Status ValidateServerFlags(const ServerFlags& flags);

// INVALID_ARGUMENT "--<name> must be host:port, got '<value>'" unless
// `value` is empty or host:port with a non-empty host and a port in
// [1, 65535].
absl::Status CheckHostPortFlag(absl::string_view name, absl::string_view value);

}  // namespace radixkv::process

#endif  // RADIXKV_PROCESS_SERVER_FLAGS_H_
