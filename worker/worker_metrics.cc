#include "worker/worker_metrics.h"

#include <mutex>
#include <string>

namespace radixkv::worker {
namespace {

prometheus::Histogram::BucketBoundaries SecondsBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
          0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0};
}

// Finer in 0.5-50 ms, where one decode step of a batch lies, so that the
// forward and iteration quantiles can be told apart; the host overhead itself
// is best read from the means (_sum / _count).
prometheus::Histogram::BucketBoundaries StepBuckets() {
  return {0.0005, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.01,
          0.0125, 0.015, 0.02,  0.025, 0.03,  0.04,  0.05,  0.075, 0.1,
          0.25,   0.5,   1.0,   2.5,   5.0,   10.0,  30.0};
}

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& registry)
    : step_seconds_(prometheus::BuildHistogram()
                        .Name("radixkv_worker_step_seconds")
                        .Help("Wall time of one scheduler step (forward, "
                              "sampling, streaming), seconds.")
                        .Register(registry)
                        .Add({}, SecondsBuckets())),
      forward_seconds_(prometheus::BuildHistogram()
                           .Name("radixkv_worker_forward_seconds")
                           .Help("Wall time of the executor's forward and "
                                 "sampling call alone, per batch, seconds.")
                           .Register(registry)
                           .Add({}, StepBuckets())),
      iteration_seconds_(
          prometheus::BuildHistogram()
              .Name("radixkv_worker_iteration_seconds")
              .Help("Wall time of one whole scheduler iteration that ran a "
                    "batch (admission and lease RPCs, forward, streaming), "
                    "seconds.")
              .Register(registry)
              .Add({}, StepBuckets())),
      batch_size_(prometheus::BuildHistogram()
                      .Name("radixkv_worker_batch_size")
                      .Help("Sequences per forward step.")
                      .Register(registry)
                      .Add({},
                           prometheus::Histogram::BucketBoundaries{
                               1, 2, 4, 8, 16, 32, 64, 128, 256})),
      prefill_computed_(
          prometheus::BuildCounter()
              .Name("radixkv_worker_prefill_tokens_computed_total")
              .Help("Prompt tokens computed by prefill.")
              .Register(registry)
              .Add({})),
      prefill_reused_(prometheus::BuildCounter()
                          .Name("radixkv_worker_prefill_tokens_reused_total")
                          .Help("Prompt tokens reused from the prefix cache.")
                          .Register(registry)
                          .Add({})),
      decode_tokens_(prometheus::BuildCounter()
                         .Name("radixkv_worker_decode_tokens_total")
                         .Help("Tokens generated.")
                         .Register(registry)
                         .Add({})),
      decode_tokens_per_second_(
          prometheus::BuildGauge()
              .Name("radixkv_worker_decode_tokens_per_second")
              .Help("Tokens generated per second in the last step.")
              .Register(registry)
              .Add({})),
      waiting_(prometheus::BuildGauge()
                   .Name("radixkv_worker_waiting_requests")
                   .Help("Requests queued for memory (queue depth).")
                   .Register(registry)
                   .Add({})),
      running_(prometheus::BuildGauge()
                   .Name("radixkv_worker_running_requests")
                   .Help("Sequences in the running batch.")
                   .Register(registry)
                   .Add({})),
      preemptions_(prometheus::BuildCounter()
                       .Name("radixkv_worker_preemptions_total")
                       .Help("Sequences preempted (lease given back, "
                             "requeued) because memory ran out.")
                       .Register(registry)
                       .Add({})),
      ttft_(prometheus::BuildHistogram()
                .Name("radixkv_worker_time_to_first_token_seconds")
                .Help("Arrival to first generated token, seconds.")
                .Register(registry)
                .Add({}, SecondsBuckets())),
      tpot_(prometheus::BuildHistogram()
                .Name("radixkv_worker_time_per_output_token_seconds")
                .Help("Time between consecutive generated tokens, seconds.")
                .Register(registry)
                .Add({}, SecondsBuckets())),
      finished_(prometheus::BuildCounter()
                    .Name("radixkv_worker_requests_finished_total")
                    .Help("Requests ended, by outcome (eos, stop, length, "
                          "abort, error).")
                    .Register(registry)),
      info_(prometheus::BuildGauge()
                .Name("radixkv_worker_info")
                .Help("Always 1; labels give the model, device, KV dtype, "
                      "page_size (tokens) and KV pool capacity (slots).")
                .Register(registry)) {
  // Build identity: the proto contract version (no Bazel stamping).
  prometheus::BuildGauge()
      .Name("radixkv_build_info")
      .Help("Always 1; labels give the component and its version.")
      .Register(registry)
      .Add({{"component", "worker"}, {"version", "radixkv.v1"}})
      .Set(1);
}

void WorkerMetrics::SetInfo(const std::string& model, const std::string& device,
                            const std::string& kv_dtype, int32_t page_size,
                            int64_t capacity_slots) {
  std::lock_guard<std::mutex> lock(info_mu_);
  if (info_series_ != nullptr) info_.Remove(info_series_);
  info_series_ =
      &info_.Add({{"model", model},
                  {"device", device},
                  {"kv_dtype", kv_dtype},
                  {"page_size", std::to_string(page_size)},
                  {"capacity_slots", std::to_string(capacity_slots)}});
  info_series_->Set(1);
}

void WorkerMetrics::ObserveStep(double step_seconds, int32_t batch_size,
                                int64_t prefill_tokens_computed,
                                int64_t decode_tokens) {
  step_seconds_.Observe(step_seconds);
  batch_size_.Observe(batch_size);
  prefill_computed_.Increment(static_cast<double>(prefill_tokens_computed));
  decode_tokens_.Increment(static_cast<double>(decode_tokens));
  if (step_seconds > 0) {
    decode_tokens_per_second_.Set(static_cast<double>(decode_tokens) /
                                  step_seconds);
  }
}

void WorkerMetrics::ObserveForward(double seconds) {
  forward_seconds_.Observe(seconds);
}

void WorkerMetrics::ObserveIteration(double seconds) {
  iteration_seconds_.Observe(seconds);
}

void WorkerMetrics::AddPrefillTokensReused(int64_t tokens) {
  prefill_reused_.Increment(static_cast<double>(tokens));
}

void WorkerMetrics::ObserveTimeToFirstToken(double seconds) {
  ttft_.Observe(seconds);
}

void WorkerMetrics::ObserveTimePerOutputToken(double seconds) {
  tpot_.Observe(seconds);
}

void WorkerMetrics::SetQueueDepth(int32_t waiting, int32_t running) {
  waiting_.Set(waiting);
  running_.Set(running);
}

void WorkerMetrics::AddPreemption() { preemptions_.Increment(); }

void WorkerMetrics::AddRequestFinished(const std::string& outcome) {
  finished_.Add({{"outcome", outcome}}).Increment();
}

}  // namespace radixkv::worker
