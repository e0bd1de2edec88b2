#include "process/process_lifecycle.h"

#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpc/grpc.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/support/server_interceptor.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(bool, check_flags, false,
          "Parse and validate flags, print the result and exit without "
          "starting anything (used by deploy checks).");
ABSL_FLAG(std::string, bind_address, "0.0.0.0",
          "Address the gRPC and /metrics servers listen on (0.0.0.0 in pods, "
          "127.0.0.1 for local runs).");
ABSL_FLAG(std::string, log_level, "info",
          "Log level: trace, debug, info, warn, error, critical, off.");

namespace radixkv::process {
namespace {

std::atomic<bool> g_shutdown_requested{false};
// A shutdown signal caught by RecordShutdownSignal (0 = none).
std::atomic<int> g_caught_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);

// Runs only on threads that do not block the shutdown signals: threads that
// libraries started before InitProcess (OpenBLAS starts its pool from a
// shared-library constructor). Without it the default action of SIGTERM on
// such a thread killed the whole process (exit by signal 15, no drain)
// whenever WaitForShutdownSignal was not waiting: during start-up (model
// load) and on a second SIGTERM during the drain. Async-signal-safe.
extern "C" void RecordShutdownSignal(int sig) { g_caught_signal.store(sig); }

// SIGHUP (reload) that landed on a thread not blocking it.
std::atomic<bool> g_caught_reload{false};
extern "C" void RecordReloadSignal(int) { g_caught_reload.store(true); }

sigset_t ShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);  // RequestShutdown()
  return set;
}

}  // namespace

void DisableMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

bool IsHelpFlagsFile(absl::string_view program, absl::string_view file) {
  absl::string_view base = file;
  const size_t slash = base.find_last_of('/');
  if (slash != absl::string_view::npos) base.remove_prefix(slash + 1);
  if (base == "main.cc") return true;
  if (absl::EndsWith(file, "process/process_lifecycle.cc")) return true;
  if (program.empty() || !absl::ConsumePrefix(&base, program)) return false;
  return absl::StartsWith(base, ".") || absl::StartsWith(base, "-main.") ||
         absl::StartsWith(base, "_main.");
}

std::vector<char*> InitProcess(int argc, char** argv, const char* usage) {
  DisableMutexDeadlockDetection();
  std::string program = argc > 0 && argv[0] != nullptr ? argv[0] : "";
  program = program.substr(program.find_last_of('/') + 1);
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [program](absl::string_view file) {
    return IsHelpFlagsFile(program, file);
  };
  usage_config.contains_helpshort_flags = usage_config.contains_help_flags;
  absl::SetFlagsUsageConfig(usage_config);
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  spdlog::set_level(spdlog::level::from_str(absl::GetFlag(FLAGS_log_level)));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ [%n] %v");
  BlockShutdownSignals();
  signal(SIGPIPE, SIG_IGN);
  return positional;
}

void BlockShutdownSignals() {
  sigset_t set = ShutdownSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  struct sigaction action = {};
  action.sa_handler = RecordShutdownSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaction(sig, &action, nullptr);
  // SIGHUP asks a process to re-read its files (WatchReloadSignal); blocked
  // everywhere so that its default action never kills a process.
  sigset_t hup;
  sigemptyset(&hup);
  sigaddset(&hup, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &hup, nullptr);
  struct sigaction reload = {};
  reload.sa_handler = RecordReloadSignal;
  sigemptyset(&reload.sa_mask);
  reload.sa_flags = SA_RESTART;
  sigaction(SIGHUP, &reload, nullptr);
}

ReloadSignalWatcher::ReloadSignalWatcher(std::function<void()> on_reload)
    : thread_([this, on_reload = std::move(on_reload)] {
        sigset_t hup;
        sigemptyset(&hup);
        sigaddset(&hup, SIGHUP);
        while (!stop_.HasBeenNotified()) {
          const timespec poll = {0, 100 * 1000 * 1000};  // 100 ms
          const bool caught = g_caught_reload.exchange(false) ||
                              sigtimedwait(&hup, nullptr, &poll) == SIGHUP;
          if (caught && !stop_.HasBeenNotified()) on_reload();
        }
      }) {}

ReloadSignalWatcher::~ReloadSignalWatcher() {
  stop_.Notify();
  thread_.join();
}

bool CheckFlagsOnly() { return absl::GetFlag(FLAGS_check_flags); }

int FinishCheckFlags(const absl::Status& validation) {
  if (validation.ok()) {
    std::printf("flags ok\n");
    return 0;
  }
  std::fprintf(stderr, "invalid flags: %s\n",
               std::string(validation.message()).c_str());
  return 2;
}

std::string BindAddress() { return absl::GetFlag(FLAGS_bind_address); }

std::string ListenAddress(int port) {
  return absl::StrCat(absl::GetFlag(FLAGS_bind_address), ":", port);
}

int WaitForShutdownSignal() {
  sigset_t set = ShutdownSignals();
  while (true) {
    // A signal that landed on a thread not blocking it was recorded by
    // RecordShutdownSignal instead of being queued for sigtimedwait: poll.
    int sig = g_caught_signal.exchange(0);
    if (sig == 0) {
      const timespec poll = {0, 100 * 1000 * 1000};  // 100 ms
      sig = sigtimedwait(&set, nullptr, &poll);
      if (sig < 0) continue;  // EAGAIN (timeout) or EINTR
    }
    if (sig == SIGUSR1) {
      if (g_shutdown_requested.load()) return 0;
      continue;
    }
    return sig;
  }
}

int StartupFailure(const absl::Status& status) {
  spdlog::critical("{}", status.ToString());
  return 1;
}

void RequestShutdown() {
  g_shutdown_requested.store(true);
  kill(getpid(), SIGUSR1);
}

// Counts RPCs in flight: gRPC creates one interceptor per RPC when it arrives
// and destroys it when the RPC is done.
class GrpcServer::InFlightCounter {
 public:
  class Interceptor : public grpc::experimental::Interceptor {
   public:
    explicit Interceptor(std::atomic<int64_t>* count) : count_(count) {
      count_->fetch_add(1);
    }
    ~Interceptor() override { count_->fetch_sub(1); }
    void Intercept(
        grpc::experimental::InterceptorBatchMethods* methods) override {
      methods->Proceed();
    }

   private:
    std::atomic<int64_t>* count_;
  };

  class Factory : public grpc::experimental::ServerInterceptorFactoryInterface {
   public:
    explicit Factory(std::shared_ptr<InFlightCounter> counter)
        : counter_(std::move(counter)) {}
    grpc::experimental::Interceptor* CreateServerInterceptor(
        grpc::experimental::ServerRpcInfo*) override {
      return new Interceptor(&counter_->count);
    }

   private:
    std::shared_ptr<InFlightCounter> counter_;
  };

  std::atomic<int64_t> count{0};
};

GrpcServer::GrpcServer() : in_flight_(std::make_shared<InFlightCounter>()) {}

int64_t GrpcServer::in_flight_rpcs() const { return in_flight_->count.load(); }

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(
    const std::string& address, const std::vector<grpc::Service*>& services,
    int max_message_bytes) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  std::unique_ptr<GrpcServer> out(new GrpcServer());
  // gRPC sets SO_REUSEPORT by default: a second process on the same port
  // then binds too and the kernel splits connections between the two (a
  // second local cluster on the same --base_port silently served half of
  // the first one's RPCs). Without it the second bind fails: UNAVAILABLE.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Clients (the router's worker channels) detect a frozen peer with HTTP/2
  // keepalive pings, also while no call is in flight. gRPC's server default
  // counts a ping less than 5 minutes (2 hours while no call is in flight,
  // unless PERMIT_WITHOUT_CALLS) after the previous one, without data sent
  // in between, as a strike and closes the connection with GOAWAY
  // "too_many_pings" after 2 strikes; accept pings every
  // kMinClientKeepaliveTimeMs / 2, idle or not, and keep the default of 2
  // strikes against clients that ping faster than that. (The server's own
  // keepalive pings stay at gRPC's default of one per 2 hours.)
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      kMinClientKeepaliveTimeMs / 2);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(),
                           &out->port_);
  builder.SetMaxReceiveMessageSize(max_message_bytes);
  builder.SetMaxSendMessageSize(max_message_bytes);
  for (grpc::Service* service : services) builder.RegisterService(service);
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(
      std::make_unique<InFlightCounter::Factory>(out->in_flight_));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  out->server_ = builder.BuildAndStart();
  if (out->server_ == nullptr || out->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot start gRPC server on ", address));
  }
  out->server_->GetHealthCheckService()->SetServingStatus(true);
  return out;
}

GrpcServer::~GrpcServer() { Shutdown(absl::Seconds(1)); }

void GrpcServer::Shutdown(absl::Duration grace) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  server_->GetHealthCheckService()->SetServingStatus(false);
  const absl::Time deadline = absl::Now() + grace;
  while (in_flight_rpcs() > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  // Whatever is still running now is past its grace; a short deadline also
  // closes idle client connections, which gRPC core would otherwise wait for.
  server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Milliseconds(100)));
  server_->Wait();
}

struct MetricsEndpoint::Impl {
  std::unique_ptr<prometheus::Exposer> exposer;
};

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& address) {
  std::unique_ptr<MetricsEndpoint> out(new MetricsEndpoint());
  out->impl_ = std::make_unique<Impl>();
  out->registry_ = std::make_shared<prometheus::Registry>();
  if (address.empty()) return out;
  try {  // prometheus-cpp reports bind failures by exception; contain it here.
    // CivetWeb's defaults (2 threads, no request timeout) let two idle
    // connections block every scrape.
    out->impl_->exposer = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{"listening_ports", address, "num_threads", "8",
                                 "request_timeout_ms", "5000"});
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve /metrics on ", address, ": ", e.what()));
  }
  out->impl_->exposer->RegisterCollectable(out->registry_);
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::StartOnPort(
    int port) {
  auto endpoint = Start(port == 0 ? "" : ListenAddress(port));
  if (!endpoint.ok()) spdlog::critical("{}", endpoint.status().ToString());
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() = default;

int MetricsEndpoint::port() const {
  if (impl_->exposer == nullptr) return 0;
  auto ports = impl_->exposer->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

}  // namespace radixkv::process
