#include "router/router_metrics.h"

#include <algorithm>
#include <vector>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace radixkv::router {

struct RouterMetrics::Families {
  prometheus::Family<prometheus::Counter>* requests;
  prometheus::Family<prometheus::Counter>* prompt_tokens;
  prometheus::Family<prometheus::Counter>* predicted_hit_tokens;
  prometheus::Family<prometheus::Histogram>* predicted_hit_ratio;
  prometheus::Family<prometheus::Counter>* dispatch;
  prometheus::Family<prometheus::Counter>* retries;
  prometheus::Family<prometheus::Histogram>* routing_latency;
  prometheus::Gauge* in_flight;
  prometheus::Family<prometheus::Histogram>* request_duration;
  prometheus::Family<prometheus::Histogram>* ttft;
};

const std::vector<double>& RouterMetrics::RequestLatencyBuckets() {
  static const std::vector<double> buckets = {0.005, 0.01, 0.025, 0.05,  0.1,
                                              0.25,  0.5,  1.0,   2.5,   5.0,
                                              10.0,  30.0, 60.0,  120.0, 300.0};
  return buckets;
}

const std::vector<double>& RouterMetrics::RoutingLatencyBuckets() {
  static const std::vector<double> buckets = {
      50e-6, 100e-6, 200e-6, 300e-6, 500e-6, 750e-6, 1e-3,   1.5e-3,
      2e-3,  3e-3,   5e-3,   10e-3,  20e-3,  50e-3,  100e-3, 1.0};
  return buckets;
}

RouterMetrics::RouterMetrics(prometheus::Registry& registry)
    : f_(std::make_unique<Families>()) {
  f_->requests = &prometheus::BuildCounter()
                      .Name("radixkv_router_requests_total")
                      .Help(
                          "Generate requests by policy, placement decision "
                          "and outcome.")
                      .Register(registry);
  f_->prompt_tokens = &prometheus::BuildCounter()
                           .Name("radixkv_router_prompt_tokens_total")
                           .Help("Prompt tokens routed, tokens.")
                           .Register(registry);
  f_->predicted_hit_tokens =
      &prometheus::BuildCounter()
           .Name("radixkv_router_predicted_hit_tokens_total")
           .Help(
               "Prompt tokens the policy expected the chosen worker to "
               "reuse at routing time, tokens.")
           .Register(registry);
  f_->predicted_hit_ratio =
      &prometheus::BuildHistogram()
           .Name("radixkv_router_predicted_hit_ratio")
           .Help("Predicted hit tokens / prompt tokens per request.")
           .Register(registry);
  f_->dispatch = &prometheus::BuildCounter()
                      .Name("radixkv_router_dispatch_total")
                      .Help("Attempts dispatched to each worker.")
                      .Register(registry);
  f_->retries = &prometheus::BuildCounter()
                     .Name("radixkv_router_retries_total")
                     .Help("Failovers before the first token, by reason.")
                     .Register(registry);
  f_->routing_latency =
      &prometheus::BuildHistogram()
           .Name("radixkv_router_routing_latency_seconds")
           .Help(
               "Request arrival to placement decision (tokenization + "
               "CacheService.Match + policy), seconds.")
           .Register(registry);
  f_->in_flight = &prometheus::BuildGauge()
                       .Name("radixkv_router_in_flight_requests")
                       .Help("Generate requests in progress.")
                       .Register(registry)
                       .Add({});
  f_->request_duration =
      &prometheus::BuildHistogram()
           .Name("radixkv_router_request_duration_seconds")
           .Help(
               "Client-visible Generate latency: arrival to the final status "
               "(whole stream), seconds.")
           .Register(registry);
  f_->ttft = &prometheus::BuildHistogram()
                  .Name("radixkv_router_time_to_first_token_seconds")
                  .Help(
                      "Arrival to the first token written to the client "
                      "(routing, failovers, worker queueing and prefill), "
                      "seconds.")
                  .Register(registry);
  // Build identity: the proto contract version (no Bazel stamping).
  prometheus::BuildGauge()
      .Name("radixkv_build_info")
      .Help("Always 1; labels give the component and its version.")
      .Register(registry)
      .Add({{"component", "router"}, {"version", "radixkv.v1"}})
      .Set(1);
}

RouterMetrics::~RouterMetrics() = default;

void RouterMetrics::ObserveRouting(absl::string_view policy, double seconds,
                                   int64_t prompt_tokens,
                                   int64_t predicted_hit_tokens) {
  const std::string p(policy);
  f_->routing_latency->Add({{"policy", p}}, RoutingLatencyBuckets())
      .Observe(seconds);
  f_->prompt_tokens->Add({{"policy", p}})
      .Increment(static_cast<double>(prompt_tokens));
  f_->predicted_hit_tokens->Add({{"policy", p}})
      .Increment(static_cast<double>(predicted_hit_tokens));
  if (prompt_tokens > 0) {
    static const std::vector<double> ratio_buckets = {0.0,  0.1, 0.25, 0.5,
                                                      0.75, 0.9, 0.99, 1.0};
    f_->predicted_hit_ratio->Add({{"policy", p}}, ratio_buckets)
        .Observe(static_cast<double>(predicted_hit_tokens) /
                 static_cast<double>(prompt_tokens));
  }
}

void RouterMetrics::CountRequest(absl::string_view api,
                                 absl::string_view policy,
                                 absl::string_view decision,
                                 absl::string_view outcome) {
  f_->requests
      ->Add({{"api", std::string(api)},
             {"policy", std::string(policy)},
             {"decision", std::string(decision)},
             {"outcome", std::string(outcome)}})
      .Increment();
}

void RouterMetrics::CountDispatch(const std::string& worker_id) {
  f_->dispatch->Add({{"worker_id", worker_id}}).Increment();
}

void RouterMetrics::CountRetry(absl::string_view reason) {
  f_->retries->Add({{"reason", std::string(reason)}}).Increment();
}

void RouterMetrics::AddInFlight(int delta) {
  f_->in_flight->Increment(static_cast<double>(delta));
}

void RouterMetrics::ObserveRequestDuration(absl::string_view api,
                                           absl::string_view policy,
                                           absl::string_view outcome,
                                           double seconds) {
  f_->request_duration
      ->Add({{"api", std::string(api)},
             {"policy", std::string(policy)},
             {"outcome", std::string(outcome)}},
            RequestLatencyBuckets())
      .Observe(seconds);
}

void RouterMetrics::ObserveTimeToFirstToken(absl::string_view api,
                                            absl::string_view policy,
                                            double seconds) {
  f_->ttft
      ->Add({{"api", std::string(api)}, {"policy", std::string(policy)}},
            RequestLatencyBuckets())
      .Observe(seconds);
}

}  // namespace radixkv::router
