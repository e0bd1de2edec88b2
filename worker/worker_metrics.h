// WorkerMetrics: the worker's Prometheus families (prometheus-cpp), exposed
// on /metrics by process::MetricsEndpoint. Names follow Prometheus
// conventions (base units: seconds, tokens; _total for counters).
//
// Also, constant 1 with identifying labels:
//   radixkv_worker_info{model,device,kv_dtype,page_size,capacity_slots}
//   radixkv_build_info{component="worker",version}
#ifndef RADIXKV_WORKER_WORKER_METRICS_H_
#define RADIXKV_WORKER_WORKER_METRICS_H_

#include <cstdint>
#include <mutex>
#include <string>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace radixkv::worker {

// Thread-safe (prometheus-cpp metrics are atomic).
class WorkerMetrics {
 public:
  // Registers every family in `registry`, which must outlive this object.
  explicit WorkerMetrics(prometheus::Registry& registry);

  // One scheduler step: wall time of the forward step in seconds, number of
  // sequences in the batch, prompt tokens computed and decode tokens sampled.
  void ObserveStep(double step_seconds, int32_t batch_size,
                   int64_t prefill_tokens_computed, int64_t decode_tokens);
  // The executor's ForwardSample call alone (device work, sampling, the
  // copy of the sampled ids to the host), seconds; once per batch.
  void ObserveForward(double seconds);
  // One whole scheduler iteration that ran a batch (inbox, aborts,
  // admission with its Acquire RPCs, the lease-maintenance RPC, forks, the
  // batch, outputs, load publishing), seconds; once per batch. Host
  // overhead per batch = iteration - forward.
  void ObserveIteration(double seconds);
  // Prompt tokens taken from the prefix cache at admission.
  void AddPrefillTokensReused(int64_t tokens);
  // Time to first token (arrival -> first token), seconds.
  void ObserveTimeToFirstToken(double seconds);
  // Time per output token after the first, seconds.
  void ObserveTimePerOutputToken(double seconds);
  // Current queue depths, requests.
  void SetQueueDepth(int32_t waiting, int32_t running);
  void AddPreemption();
  // A request ended; `outcome` is eos, stop, length, abort or error.
  void AddRequestFinished(const std::string& outcome);
  // Sets radixkv_worker_info{model, device ("cpu"|"gpu"), kv_dtype ("f32"|
  // "bf16"|"f16"), page_size (tokens per page), capacity_slots (KV pool
  // size, slots = tokens)} to 1; a later call replaces the series.
  void SetInfo(const std::string& model, const std::string& device,
               const std::string& kv_dtype, int32_t page_size,
               int64_t capacity_slots);

 private:
  prometheus::Histogram& step_seconds_;
  prometheus::Histogram& forward_seconds_;
  prometheus::Histogram& iteration_seconds_;
  prometheus::Histogram& batch_size_;
  prometheus::Counter& prefill_computed_;
  prometheus::Counter& prefill_reused_;
  prometheus::Counter& decode_tokens_;
  prometheus::Gauge& decode_tokens_per_second_;
  prometheus::Gauge& waiting_;
  prometheus::Gauge& running_;
  prometheus::Counter& preemptions_;
  prometheus::Histogram& ttft_;
  prometheus::Histogram& tpot_;
  prometheus::Family<prometheus::Counter>& finished_;
  prometheus::Family<prometheus::Gauge>& info_;
  std::mutex info_mu_;
  prometheus::Gauge* info_series_ = nullptr;  // guarded by info_mu_
};

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_WORKER_METRICS_H_
