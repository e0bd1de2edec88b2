// WorkloadRunner: drives a router with concurrent streaming clients over a
// Workload and measures what the main job reports (docs/perf.md): throughput
// (requests/s, output tokens/s), time to first token and time per output token
// (p50/p90/p99), prefix hit rate (reused / prompt tokens, from each
// response's Usage), prefill tokens computed, per-worker share, errors, and
// the router's routing latency (from its /metrics histogram). Runs can be
// repeated per placement policy and with the prefix cache disabled, and are
// reported side by side (FormatComparison), as CSV and as JSON.
#ifndef RADIXKV_TOOLS_WORKLOAD_WORKLOAD_RUNNER_H_
#define RADIXKV_TOOLS_WORKLOAD_WORKLOAD_RUNNER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tools/workload/workload.h"

namespace radixkv::router {

// One configuration of a comparison.
struct RunConfig {
  // Column title, e.g. "cache_aware", "cache off".
  std::string label;
  // Placement policy, sent as the radixkv-placement-policy metadata.
  std::string policy = "cache_aware";
  // false: every request sets disable_prefix_cache.
  bool prefix_cache = true;
};

// Parses "cache_aware,cache_off,round_robin,..." ("cache_off" = cache_aware
// with the prefix cache disabled). INVALID_ARGUMENT for unknown names.
absl::StatusOr<std::vector<RunConfig>> ParseRunConfigs(const std::string& csv);

struct RunnerOptions {
  std::string router_address;
  // For Flush between runs (cold start per run); empty = no flush.
  std::string cache_service_address;
  // host:port of the router's /metrics; empty = no routing latency.
  std::string router_metrics_address;
  // Concurrent client streams.
  int concurrency = 8;
  // No new session starts after this long; running ones finish.
  absl::Duration max_run_duration = absl::Seconds(120);
  // Deadline of each request.
  absl::Duration request_timeout = absl::Seconds(120);
  // Progress line on stderr (only when stderr is a terminal).
  bool progress = true;
};

// What happened to one request (one turn).
struct RequestRecord {
  std::string session;
  int turn = 0;
  // "OK" or the gRPC status code name.
  std::string status = "OK";
  std::string error_message;
  double ttft_s = 0;      // send to first chunk with tokens
  double duration_s = 0;  // send to end of stream
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t completion_tokens = 0;
  std::string worker_id;
  std::vector<int32_t> output;
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0;
};

// Linear-interpolated percentiles of `values` (0s when empty).
Percentiles ComputePercentiles(std::vector<double> values);

struct RunResult {
  std::string workload;
  std::string description;
  RunConfig config;
  double duration_s = 0;
  std::vector<RequestRecord> records;
  // Aggregates (Summarize).
  int64_t ok = 0;
  int64_t errors = 0;
  std::map<std::string, int64_t> errors_by_status;
  double requests_per_s = 0;
  double output_tokens_per_s = 0;
  Percentiles ttft_ms;
  Percentiles tpot_ms;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t prefill_tokens_computed = 0;
  int64_t output_tokens = 0;
  double hit_rate = 0;  // cached / prompt tokens
  std::map<std::string, int64_t> requests_by_worker;
  // From the router's histogram over this run (bucket-interpolated); -1
  // when unavailable.
  double routing_p50_ms = -1;
  double routing_p99_ms = -1;
  // This run's routing decisions by latency bucket: cumulative counts keyed
  // by the bucket's upper bound in seconds (Prometheus `le`), so that runs
  // can be merged (MergeRoutingLatencyBuckets); empty when unavailable.
  std::map<double, double> routing_latency_buckets;
  int64_t routing_decisions = 0;
};

// Fills the aggregates of `result` from its records and duration.
void Summarize(RunResult* result);

class WorkloadRunner {
 public:
  explicit WorkloadRunner(RunnerOptions options);
  // Runs every session of `workload` under `config` (after flushing the
  // cache service, when configured). Failed requests are recorded, not
  // returned as errors; UNAVAILABLE only if the router cannot be reached.
  absl::StatusOr<RunResult> Run(const Workload& workload,
                                const RunConfig& config);

 private:
  RunnerOptions options_;
};

// The comparison table of several runs of one workload, columns = runs.
std::string FormatComparison(const std::vector<RunResult>& runs);
// One CSV header line + one line per run.
std::string FormatCsv(const std::vector<RunResult>& runs);
// JSON array of run summaries (no per-request records).
std::string FormatJson(const std::vector<RunResult>& runs);

// GET http://<address><path> (HTTP/1.0); the body. UNAVAILABLE on errors.
absl::StatusOr<std::string> HttpGet(const std::string& address,
                                    const std::string& path);
// POST of a JSON `body` to http://<address><path> (HTTP/1.0); the response
// body whatever its status. UNAVAILABLE on errors.
absl::StatusOr<std::string> HttpPostJson(const std::string& address,
                                         const std::string& path,
                                         const std::string& body);

// Cumulative bucket counts {le seconds -> count} of
// radixkv_router_routing_latency_seconds for `policy` in a Prometheus text
// exposition (le=+Inf as infinity).
std::map<double, double> ParseRoutingLatencyBuckets(const std::string& text,
                                                    const std::string& policy);
// Quantile q of the histogram given by cumulative buckets, linear inside
// the bucket; -1 when empty.
double HistogramQuantile(const std::map<double, double>& cumulative, double q);

// Adds the cumulative bucket counts of `add` to `sum` (same bucket bounds,
// as produced by ParseRoutingLatencyBuckets for one router).
void MergeRoutingLatencyBuckets(const std::map<double, double>& add,
                                std::map<double, double>* sum);

}  // namespace radixkv::router

#endif  // RADIXKV_TOOLS_WORKLOAD_WORKLOAD_RUNNER_H_
