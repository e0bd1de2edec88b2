#include "process/process_lifecycle.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(std::string, bind_address);

namespace radixkv::process {
namespace {

// A loopback TCP socket bound and listening on a kernel-picked port; the
// port stays taken until the destructor.
class HeldPort {
 public:
  HeldPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
        ::listen(fd_, 1) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~HeldPort() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(IsHelpFlagsFileTest, MainFilesAndSharedFlagsAreListed) {
  // The processes' flags live in <package>/main.cc, which Abseil's default
  // filter does not match for `router --help` ("No flags matched").
  EXPECT_TRUE(IsHelpFlagsFile("router", "router/main.cc"));
  EXPECT_TRUE(IsHelpFlagsFile("worker_gpu", "worker/main.cc"));
  EXPECT_TRUE(IsHelpFlagsFile("cache_service", "process/process_lifecycle.cc"));
  // Abseil's default rule is kept: <program>.cc, -main.cc, _main.cc.
  EXPECT_TRUE(IsHelpFlagsFile("local_cluster",
                              "tools/local_cluster/local_cluster_main.cc"));
  EXPECT_TRUE(IsHelpFlagsFile("loadgen", "tools/loadgen-main.cc"));
  EXPECT_TRUE(IsHelpFlagsFile("loadgen", "loadgen.cc"));
  // Libraries' flags (and Abseil's, gRPC's) stay out of --help.
  EXPECT_FALSE(IsHelpFlagsFile("router", "router/router_service.cc"));
  EXPECT_FALSE(IsHelpFlagsFile("router", "absl/flags/parse.cc"));
  EXPECT_FALSE(IsHelpFlagsFile("local_cluster",
                               "tools/local_cluster/local_cluster_test.cc"));
  EXPECT_FALSE(IsHelpFlagsFile("", "router/router_service.cc"));
}

TEST(MetricsEndpointTest, StartOnPortZeroIsDisabledButHasARegistry) {
  auto endpoint = MetricsEndpoint::StartOnPort(0);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  EXPECT_EQ((*endpoint)->port(), 0);
  EXPECT_NE((*endpoint)->registry(), nullptr);
}

TEST(MetricsEndpointTest, StartOnPortBindsThatPort) {
  absl::SetFlag(&FLAGS_bind_address, "127.0.0.1");
  int port = 0;
  {
    HeldPort probe;  // find a free port, then release it
    port = probe.port();
  }
  ASSERT_GT(port, 0);
  auto endpoint = MetricsEndpoint::StartOnPort(port);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  EXPECT_EQ((*endpoint)->port(), port);
}

TEST(MetricsEndpointTest, StartOnPortTakenIsUnavailable) {
  absl::SetFlag(&FLAGS_bind_address, "127.0.0.1");
  HeldPort held;
  ASSERT_GT(held.port(), 0);
  auto endpoint = MetricsEndpoint::StartOnPort(held.port());
  ASSERT_FALSE(endpoint.ok());
  EXPECT_EQ(endpoint.status().code(), absl::StatusCode::kUnavailable)
      << endpoint.status();
}

TEST(GrpcServerTest, PortTakenByAnotherGrpcServerIsUnavailable) {
  // gRPC's default SO_REUSEPORT let the second server bind the same port
  // and take part of the first one's connections.
  auto first = GrpcServer::Start("127.0.0.1:0", {});
  ASSERT_TRUE(first.ok()) << first.status();
  const int port = (*first)->port();
  ASSERT_GT(port, 0);
  auto second = GrpcServer::Start(absl::StrCat("127.0.0.1:", port), {});
  ASSERT_FALSE(second.ok()) << "a second server bound port " << port;
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable)
      << second.status();
}

TEST(GrpcServerTest, KeepalivePingsAtTheMinimumPeriodKeepTheConnection) {
  // The router pings its workers while idle; gRPC's server default (pings
  // at most every 5 minutes without data, 2 strikes) answers the third
  // ping with GOAWAY too_many_pings, which drops the channel to IDLE.
  auto server = GrpcServer::Start("127.0.0.1:0", {});
  ASSERT_TRUE(server.ok()) << server.status();
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kMinClientKeepaliveTimeMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  auto channel =
      grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                                grpc::InsecureChannelCredentials(), args);
  ASSERT_TRUE(channel->WaitForConnected(
      absl::ToChronoTime(absl::Now() + absl::Seconds(10))));
  absl::SleepFor(absl::Milliseconds(5 * kMinClientKeepaliveTimeMs));
  EXPECT_EQ(channel->GetState(/*try_to_connect=*/false), GRPC_CHANNEL_READY);
}

// A thread started before the signals are blocked (as OpenBLAS starts its
// pool from a library constructor, before main) does not block SIGTERM; the
// kernel delivered SIGTERM to it while no thread was in sigwait, and the
// default action killed the whole process (the worker exited by signal 15
// during model load, and on a second SIGTERM during its drain).
TEST(ShutdownSignalsTest, SignalsOnALibraryThreadReachWaitForShutdownSignal) {
  std::atomic<bool> stop{false}, unblocked{false};
  std::thread library_thread([&] {
    // Explicitly: the test runner may have started us with them blocked.
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaddset(&set, sig);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    unblocked.store(true);
    while (!stop.load()) ::usleep(1000);
  });
  while (!unblocked.load()) ::usleep(1000);
  BlockShutdownSignals();
  ASSERT_EQ(::kill(::getpid(), SIGTERM), 0);
  EXPECT_EQ(WaitForShutdownSignal(), SIGTERM);
  ASSERT_EQ(::kill(::getpid(), SIGINT), 0);
  EXPECT_EQ(WaitForShutdownSignal(), SIGINT);
  RequestShutdown();
  EXPECT_EQ(WaitForShutdownSignal(), 0);
  stop.store(true);
  library_thread.join();
}

TEST(StartupFailure, ReturnsExitCodeOne) {
  EXPECT_EQ(StartupFailure(absl::UnavailableError("port 1 is in use")), 1);
}

}  // namespace
}  // namespace radixkv::process
