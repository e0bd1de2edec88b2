// radixkv cache service: the global radix tree, allocator, leases and eviction
// for every worker's KV memory.
#include <cstdio>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "process/process_lifecycle.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(int, grpc_port, 50051, "gRPC port (also serves grpc.health.v1).");
ABSL_FLAG(int, metrics_port, 9101, "Prometheus /metrics port; 0 = disabled.");

namespace {

absl::Status ValidateFlags() {
  int port = absl::GetFlag(FLAGS_grpc_port);
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError("--grpc_port must be in [0, 65535]");
  }
  int metrics = absl::GetFlag(FLAGS_metrics_port);
  if (metrics < 0 || metrics > 65535) {
    return absl::InvalidArgumentError("--metrics_port must be in [0, 65535]");
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  namespace process = radixkv::process;
  process::InitProcess(
      argc, argv,
      "radixkv cache service: the global radix tree, allocator, leases and "
      "eviction for every worker's KV memory.");
  absl::Status valid = ValidateFlags();
  if (process::CheckFlagsOnly() || !valid.ok()) {
    return process::FinishCheckFlags(valid);
  }
  auto metrics = process::MetricsEndpoint::Start(
      absl::GetFlag(FLAGS_metrics_port) == 0
          ? ""
          : process::ListenAddress(absl::GetFlag(FLAGS_metrics_port)));
  if (!metrics.ok()) {
    spdlog::critical("{}", metrics.status().ToString());
    return 1;
  }
  auto server = process::GrpcServer::Start(
      process::ListenAddress(absl::GetFlag(FLAGS_grpc_port)), {});
  if (!server.ok()) {
    spdlog::critical("{}", server.status().ToString());
    return 1;
  }
  spdlog::info("cache_service serving gRPC on port {} (health: grpc.health.v1)",
               (*server)->port());
  int sig = process::WaitForShutdownSignal();
  spdlog::info("signal {}: shutting down", sig);
  (*server)->Shutdown(absl::Seconds(5));
  spdlog::info("cache_service stopped cleanly");
  return 0;
}
