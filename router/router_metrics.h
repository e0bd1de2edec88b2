// RouterMetrics: the router's Prometheus families (prometheus-cpp), exposed on
// its /metrics endpoint:
//   radixkv_router_requests_total{policy,decision,outcome}   counter
//   radixkv_router_prompt_tokens_total{policy}               counter, tokens
//   radixkv_router_predicted_hit_tokens_total{policy}        counter, tokens
//   radixkv_router_predicted_hit_ratio{policy}               histogram (0..1)
//   radixkv_router_dispatch_total{worker_id}                 counter
//   radixkv_router_retries_total{reason}                     counter
//   radixkv_router_routing_latency_seconds{policy}           histogram, s
//     (request arrival to the dispatch decision, incl. tokenization and
//     the CacheService.Match RPC)
//   radixkv_router_in_flight_requests                        gauge
//   radixkv_router_request_duration_seconds{policy,outcome}  histogram, s
//     (client-visible: request arrival to the final status, streaming incl.)
//   radixkv_router_time_to_first_token_seconds{policy}       histogram, s
//     (request arrival to the first token written to the client, incl.
//     routing, failovers and the worker's queueing + prefill)
//   radixkv_build_info{component="router",version}           gauge = 1
#ifndef RADIXKV_ROUTER_ROUTER_METRICS_H_
#define RADIXKV_ROUTER_ROUTER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace radixkv::router {

// Thread-safe.
class RouterMetrics {
 public:
  // Registers the families in `registry` (which must outlive this object).
  explicit RouterMetrics(prometheus::Registry& registry);
  ~RouterMetrics();

  void ObserveRouting(absl::string_view policy, double seconds,
                      int64_t prompt_tokens, int64_t predicted_hit_tokens);
  // `api`: the front door, grpc (Router.Generate) or openai (the HTTP
  // API). `outcome`: ok, aborted, client_cancelled, deadline_exceeded (the
  // client's deadline passed), failed_before_first_token,
  // failed_after_tokens, invalid_argument, resource_exhausted (every
  // worker refused it), overloaded (the router's in-flight bounds),
  // not_found (a model not served), no_worker, cache_service_unavailable,
  // unauthenticated, other error code names.
  void CountRequest(absl::string_view api, absl::string_view policy,
                    absl::string_view decision, absl::string_view outcome);
  void CountDispatch(const std::string& worker_id);
  void CountRetry(absl::string_view reason);
  void AddInFlight(int delta);
  // One finished Generate: arrival to final status, seconds; `outcome` as in
  // CountRequest.
  void ObserveRequestDuration(absl::string_view api, absl::string_view policy,
                              absl::string_view outcome, double seconds);
  // Arrival to the first token written to the client, seconds (at most once
  // per request).
  void ObserveTimeToFirstToken(absl::string_view api, absl::string_view policy,
                               double seconds);

  // Histogram bucket upper bounds of request duration and TTFT, seconds.
  static const std::vector<double>& RequestLatencyBuckets();

  // Histogram bucket upper bounds of routing latency, seconds.
  static const std::vector<double>& RoutingLatencyBuckets();

 private:
  struct Families;
  std::unique_ptr<Families> f_;
};

}  // namespace radixkv::router

#endif  // RADIXKV_ROUTER_ROUTER_METRICS_H_
