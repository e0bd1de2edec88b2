// Lifecycle shared by every radixkv process (cache_service, worker, router):
// flag parsing with a --check_flags dry-run mode, logging set-up, a gRPC
// server with the standard grpc.health.v1 service, a Prometheus /metrics
// endpoint, and clean shutdown on SIGTERM/SIGINT.
#ifndef RADIXKV_PROCESS_PROCESS_LIFECYCLE_H_
#define RADIXKV_PROCESS_PROCESS_LIFECYCLE_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace radixkv::process {

// Parses argv with Abseil flags, sets up logging (--log_level) and blocks
// SIGTERM/SIGINT in the calling thread (so that every thread started later
// inherits the mask and only WaitForShutdownSignal() receives them).
// Also turns off Abseil's debug deadlock detector
// (DisableMutexDeadlockDetection). Call first thing in main(). Returns the
// positional arguments.
std::vector<char*> InitProcess(int argc, char** argv, const char* usage);

// Whether `--help` of the binary `program` (argv[0]'s basename) lists the
// flags defined in `file` (the source path Abseil records for a flag, e.g.
// "router/main.cc"). Abseil's default lists only <program>.cc,
// <program>-main.cc and <program>_main.cc, so `router --help` would print "No
// flags matched" (its flags live in router/main.cc). Also true: any
// "main.cc" (a binary links one) and process/process_lifecycle.cc (the
// flags every process shares: --bind_address, --log_level, --check_flags).
// InitProcess installs it for --help and --helpshort; --helpfull lists all.
bool IsHelpFlagsFile(absl::string_view program, absl::string_view file);

// The signal part of InitProcess: blocks SIGTERM/SIGINT/SIGUSR1 in the
// calling thread and installs a handler that records them for
// WaitForShutdownSignal() when they land on a thread that does not block
// them (one a library started before main, e.g. OpenBLAS's pool), instead of
// the default action killing the process.
void BlockShutdownSignals();

// Debian's Abseil is built without NDEBUG, so every absl::Mutex lock (gRPC's
// included) runs the debug deadlock detector's graph-cycle bookkeeping; it
// cost the cache service ~35% of its CPU per Acquire+Commit pair (94 -> 59 us,
// docs/perf.md). Release builds of Abseil skip it. Binaries call this (tests
// keep the detector on).
void DisableMutexDeadlockDetection();

// Runs `on_reload` on its own thread each time the process gets SIGHUP
// (which BlockShutdownSignals blocks in every thread, so it never kills a
// process that does not watch it). Stops with the object.
class ReloadSignalWatcher {
 public:
  explicit ReloadSignalWatcher(std::function<void()> on_reload);
  ~ReloadSignalWatcher();

 private:
  absl::Notification stop_;
  std::thread thread_;
};

// True when --check_flags was given: the binary must validate its flags,
// print "flags ok" (or the error) and exit without starting anything.
bool CheckFlagsOnly();

// Ends a --check_flags run: prints the outcome of `validation` and returns the
// process exit code (0 when ok, 2 otherwise).
int FinishCheckFlags(const absl::Status& validation);

// The --bind_address flag (the address every listening port binds).
std::string BindAddress();

// host:port built from --bind_address and the given port.
std::string ListenAddress(int port);

// Blocks until SIGTERM or SIGINT arrives (or RequestShutdown() is called);
// returns the signal number (0 for RequestShutdown). A signal that arrived
// since InitProcess while nobody waited (e.g. during start-up) is returned
// at once; signals arriving while nobody waits again later (a second SIGTERM
// during the drain) do not kill the process.
int WaitForShutdownSignal();

// Logs `status` (a start-up step that failed: a port, a file, a connection)
// at critical level and returns the exit code main() returns for it (1).
int StartupFailure(const absl::Status& status);

// Makes WaitForShutdownSignal() return, from any thread (used by tests and
// by fatal background errors).
void RequestShutdown();

// Shortest HTTP/2 keepalive ping period, ms, that a client of a radixkv gRPC
// server (GrpcServer) may use: the server answers pings up to twice as
// frequent without a ping strike, also while no call is in flight
// (GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS = half of this, the
// slack absorbing timer jitter; GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS), so a
// client pinging at least this far apart is never sent GOAWAY
// "too_many_pings" (gRPC's default server minimum is 5 minutes). The router's
// --worker_keepalive_ms must be 0 or at least this. Semantics: gRPC's
// keepalive guide (doc/keepalive.md).
inline constexpr int kMinClientKeepaliveTimeMs = 1000;

// A running gRPC server with grpc.health.v1 enabled. The overall health
// ("" service) and every registered service name start SERVING.
class GrpcServer {
 public:
  // Builds and starts a server on `address` (host:port; port 0 picks a free
  // port, see port()). It accepts keepalive pings every
  // kMinClientKeepaliveTimeMs, with or without calls in flight. Errors:
  // UNAVAILABLE when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(
      const std::string& address, const std::vector<grpc::Service*>& services,
      int max_message_bytes = 64 << 20);

  ~GrpcServer();

  // The bound TCP port.
  int port() const { return port_; }
  grpc::Server* server() { return server_.get(); }

  // Marks the process NOT_SERVING on the health service (readiness drops
  // while draining), waits up to `grace` for the RPCs in flight to finish,
  // then stops the server, cancelling what is still running. Idle client
  // connections do not hold the shutdown (gRPC core otherwise waits for
  // every connection to close until the deadline).
  void Shutdown(absl::Duration grace);

  // RPCs currently being handled (all services, health included).
  int64_t in_flight_rpcs() const;

 private:
  class InFlightCounter;
  GrpcServer();
  std::shared_ptr<InFlightCounter> in_flight_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

// A Prometheus text-exposition endpoint (prometheus-cpp Exposer) serving
// GET /metrics on `address` (host:port; empty = disabled).
class MetricsEndpoint {
 public:
  // Errors: UNAVAILABLE when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& address);
  ~MetricsEndpoint();

  // The registry every component of the process registers its families in.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  // Bound port (0 when disabled).
  int port() const;

  // The endpoint of a process's --metrics_port flag: port 0 = disabled (no
  // listener, registry still usable), otherwise ListenAddress(port). On error
  // (UNAVAILABLE: the port cannot be bound) it also logs the status at
  // critical level, so that main() only has to return 1.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> StartOnPort(int port);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<prometheus::Registry> registry_;
};

}  // namespace radixkv::process

#endif  // RADIXKV_PROCESS_PROCESS_LIFECYCLE_H_
