// Test support for the end-to-end tests of the router against a LocalCluster
// of real processes (redis-server, cache service, two CPU workers, router):
// locating the embedded model and binaries in the test's runfiles, a
// tokenizer for text prompts, and blocking helpers around the gRPC stubs.
#ifndef RADIXKV_TESTS_ROUTER_E2E_CLIENT_H_
#define RADIXKV_TESTS_ROUTER_E2E_CLIENT_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "radixkv/v1/cache_service.grpc.pb.h"
#include "radixkv/v1/router.grpc.pb.h"
#include "radixkv/v1/worker.grpc.pb.h"
#include "tools/local_cluster/local_cluster.h"

namespace radixkv::tests {

// Cluster options for a test: runfiles model, a fresh run dir under
// TEST_TMPDIR named `name`, workers with one thread each.
router::LocalClusterOptions TestClusterOptions(const std::string& name);

// The path of `path` (a workspace path) in the test's runfiles tree.
std::string Runfile(const std::string& path);

// Token ids of `text` with BOS (the embedded model's tokenizer).
std::vector<int32_t> Encode(const std::string& text);
// The first `n` tokens of a Debian license text (no BOS), from `offset`.
std::vector<int32_t> LicenseTokens(const std::string& license, int offset,
                                   int n);

struct Completion {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string worker_id;
  radixkv::v1::Usage usage;
  // The text delta of each streamed response (GenerateOptions.return_text).
  std::vector<std::string> text_deltas;
};

struct GenerateOptions {
  int32_t max_new_tokens = 16;
  bool disable_prefix_cache = false;
  std::string request_id;
  // Sent as radixkv-placement-policy metadata when not empty.
  std::string policy;
  // The client's deadline, from the call.
  absl::Duration deadline = absl::Seconds(120);
  // GenerateRequest.model ("" = the one served).
  std::string model;
  // GenerateRequest.return_text: stream text deltas too.
  bool return_text = false;
};

// a followed by b.
std::vector<int32_t> Concat(std::vector<int32_t> a,
                            const std::vector<int32_t>& b);

// kill -STOP of `pid`, then waits (up to 10 s) until every thread of it is
// stopped (/proc/PID/task/*/stat state 'T'): a stop signal takes effect
// only when a thread of the process next runs its signal handling, so on a
// loaded machine the other threads may serve requests for a while after
// kill() returned. False if it did not stop in time.
bool FreezeProcess(pid_t pid);

// kill -CONT of a process frozen by the test when it goes out of scope
// (declared after the cluster: the processes are resumed before it stops
// them, also when an assertion returned early).
class ResumeOnExit {
 public:
  explicit ResumeOnExit(pid_t pid) : pid_(pid) {}
  ~ResumeOnExit();
  ResumeOnExit(const ResumeOnExit&) = delete;
  ResumeOnExit& operator=(const ResumeOnExit&) = delete;

 private:
  pid_t pid_;
};

// One streamed Router.Generate with greedy sampling and ignore_eos; blocks
// until the stream ends (or options.deadline passes).
Completion Generate(radixkv::v1::Router::Stub* router,
                    const std::vector<int32_t>& prompt,
                    const GenerateOptions& options = {});

// As Generate, with a text prompt (tokenized by the router).
Completion GenerateText(radixkv::v1::Router::Stub* router,
                        const std::string& text,
                        const GenerateOptions& options = {});

std::unique_ptr<radixkv::v1::Router::Stub> RouterStub(
    const std::string& address);
std::unique_ptr<radixkv::v1::CacheService::Stub> CacheServiceStub(
    const std::string& address);
std::unique_ptr<radixkv::v1::Worker::Stub> WorkerStub(
    const std::string& address);

// CacheService.Stats (all workers); aborts the test on failure.
radixkv::v1::StatsResponse CacheStats(const std::string& cache_address);
radixkv::v1::WorkerStatsResponse WorkerStats(const std::string& worker_address);

// The value of the Prometheus sample whose line starts with `prefix` in the
// text exposition at http://<metrics_address>/metrics; 0 when absent.
double MetricValue(const std::string& metrics_address,
                   const std::string& prefix);

}  // namespace radixkv::tests

#endif  // RADIXKV_TESTS_ROUTER_E2E_CLIENT_H_
