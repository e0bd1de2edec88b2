// RouterService: the public radixkv.v1.Router gRPC service (router.proto).
//
// One Generate request:
//   1. text prompts are tokenized (PromptTokenizer) and forwarded as ids;
//   2. one CacheService.Match(model, cache_salt, tokens) gives every live
//      worker with its epoch, exact cached prefix and heartbeat load;
//   3. the placement policy picks a worker (the router's own dispatched-token
//      counts are merged into the load, see WorkerLoadTracker);
//   4. Worker.Generate is streamed back to the client. A failure before the
//      first chunk was forwarded is retried on another worker (bounded by
//      max_attempts, with backoff) unless it is deterministic (a rejection
//      of the request itself: INVALID_ARGUMENT and the like, a prompt that
//      cannot fit the pool, no live worker for the model), which is
//      returned at once with its one message; after output was streamed the
//      client gets UNAVAILABLE naming the worker and the tokens already
//      sent.
// Abort(request_id) cancels the worker stream and calls Worker.Abort; a
// client disconnect (seen by a watcher within 20 ms) cancels the worker
// stream, which the worker notices and aborts the request, queued or
// running. Workers absent from the latest Match (removed, timed out) are
// never chosen; a restarted worker is a new epoch and starts with no
// residency.
#ifndef RADIXKV_ROUTER_ROUTER_SERVICE_H_
#define RADIXKV_ROUTER_ROUTER_SERVICE_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "radixkv/v1/cache_service.grpc.pb.h"
#include "radixkv/v1/router.grpc.pb.h"
#include "radixkv/v1/worker.grpc.pb.h"
#include "router/placement_policy.h"
#include "router/prompt_tokenizer.h"
#include "router/router_metrics.h"
#include "router/worker_failure_marks.h"
#include "router/worker_load_tracker.h"
#include "worker/prompt_text_limit.h"

namespace radixkv::router {

// gRPC metadata key a client may set to pick the placement policy of one
// request (used by the workload runner to compare policies on one cluster)
// when RouterOptions::allow_policy_override is set; an unknown name is
// INVALID_ARGUMENT.
inline constexpr char kPolicyOverrideMetadataKey[] = "radixkv-placement-policy";

// gRPC metadata key under which the router sends the request id along with
// its CacheService.Match call (the cache service logs it at debug level, so
// that a slow routing decision can be joined with the Match that served it).
inline constexpr char kRequestIdMetadataKey[] = "radixkv-request-id";

struct RouterOptions {
  // host:port of the cache service.
  std::string cache_service_address;
  // Placement policy for requests without an override.
  std::string policy = "cache_aware";
  CacheAwareOptions cache_aware;
  // Per-worker token bound of approx_tree's trees, tokens.
  int64_t approx_tree_capacity_tokens = 1 << 20;
  // Worker attempts per request before its first token (>= 1).
  int max_attempts = 3;
  // Backoff before the second attempt; doubles each further attempt.
  absl::Duration retry_backoff = absl::Milliseconds(50);
  // Deadline of each CacheService call (Match, Stats). A Match that times
  // out ends the request at once with UNAVAILABLE "cache service
  // unavailable" (the worker's Acquire would wait on the same service).
  absl::Duration cache_service_timeout = absl::Seconds(2);
  // HTTP/2 keepalive of the router's worker channels (gRPC
  // doc/keepalive.md): a ping every `worker_keepalive`, also while no call
  // is in flight; a ping not acknowledged within `worker_keepalive_timeout`
  // closes the connection, which fails its streams with UNAVAILABLE, so a
  // frozen worker (SIGSTOP, hung host: TCP up, nothing answered) releases
  // its requests: retried elsewhere before their first token, UNAVAILABLE
  // after. `worker_keepalive_timeout` also bounds a (re)connection attempt
  // (TCP + HTTP/2 handshake) to such a worker. Zero `worker_keepalive`
  // disables both. Workers accept pings every
  // process::kMinClientKeepaliveTimeMs or slower.
  absl::Duration worker_keepalive = absl::Seconds(10);
  absl::Duration worker_keepalive_timeout = absl::Seconds(5);
  // A worker process that failed a request is avoided for this long (unless
  // no other worker is live); the same worker registered again under a new
  // epoch (restarted) is not.
  absl::Duration failed_worker_cooldown = absl::Seconds(2);
  // Model name used when a request leaves `model` empty; empty = the model
  // the registered workers serve (discovered through Stats).
  std::string model;
  // Honour kPolicyOverrideMetadataKey.
  bool allow_policy_override = true;
  // Text prompts longer than this (bytes) are INVALID_ARGUMENT before they
  // are tokenized: worker::MaxPromptTextBytes of the model's
  // max_position_embeddings (router main reads it from --model_dir's
  // config.json); the default is that of a 131072-position model (4 MiB).
  int64_t max_prompt_text_bytes = worker::MaxPromptTextBytes(131072);
};

// Prefix of the request ids the router assigns itself ("rtr-" + 32 hex
// digits of a random 128-bit value): unguessable, so that no client can
// collide with or Abort another client's request, and a namespace clients
// may not use (their ids with this prefix are INVALID_ARGUMENT).
inline constexpr char kAssignedRequestIdPrefix[] = "rtr-";

// Longest model name, bytes: the cache service registers no longer name, so
// a longer GenerateRequest.model is INVALID_ARGUMENT.
inline constexpr size_t kMaxModelNameBytes = 256;

class RouterService final : public radixkv::v1::Router::Service {
 public:
  // `tokenizer` may be null: text prompts are then forwarded as text and
  // placed by load only. `metrics` must outlive the service.
  // INVALID_ARGUMENT for an unknown policy or max_attempts < 1.
  static absl::StatusOr<std::unique_ptr<RouterService>> Create(
      const RouterOptions& options, std::unique_ptr<PromptTokenizer> tokenizer,
      RouterMetrics* metrics);
  ~RouterService() override;

  grpc::Status Generate(
      grpc::ServerContext* context, const radixkv::v1::GenerateRequest* request,
      grpc::ServerWriter<radixkv::v1::GenerateResponse>* writer) override;
  grpc::Status Abort(grpc::ServerContext* context,
                     const radixkv::v1::AbortRequest* request,
                     radixkv::v1::AbortResponse* response) override;
  grpc::Status ListWorkers(grpc::ServerContext* context,
                           const radixkv::v1::ListWorkersRequest* request,
                           radixkv::v1::ListWorkersResponse* response) override;

  // Cancels every in-flight request's worker stream and stops the
  // disconnect watcher. Idempotent; called by the destructor, and by main
  // when the drain timeout passes: the requests it cuts end with
  // UNAVAILABLE "the router is shutting down (its drain timeout passed)
  // after N streamed tokens", and no new attempt is dispatched.
  void Shutdown();

 private:
  struct InFlight;
  struct Attempt;

  RouterService(const RouterOptions& options,
                std::unique_ptr<PromptTokenizer> tokenizer,
                RouterMetrics* metrics);

  // Live workers for `model` with their exact match of `tokens` (empty
  // tokens: every live worker, matched 0). Falls back to the last known
  // worker set of `model` (matched 0) when the cache service is unreachable
  // (a failed connection). DEADLINE_EXCEEDED when it did not answer within
  // cache_service_timeout (no fallback: see the definition); INVALID_ARGUMENT
  // when it rejected the prompt; UNAVAILABLE when it is unreachable and no
  // worker is known.
  // `request_id` travels as kRequestIdMetadataKey so that the cache
  // service's debug log can be joined with the router's; `rpc_time` (may be
  // null) receives the client-side round trip of the Match/Stats call.
  absl::StatusOr<std::vector<WorkerCandidate>> LiveWorkers(
      const std::string& model, const std::string& cache_salt,
      const std::vector<int32_t>& tokens, const std::string& request_id,
      bool* from_match, absl::Duration* rpc_time);
  // The model to match against when the request leaves it empty: the
  // request's, options_.model, or the discovered one (fresh within
  // kModelDiscoveryTtl; else DiscoverModel on the request's path).
  absl::StatusOr<std::string> ResolveModel(const std::string& requested);
  // The one model the registered workers serve, through a Stats call with
  // `timeout`; records it in discovered_model_/discovered_at_. UNAVAILABLE
  // without live workers (or an unreachable cache service and nothing
  // discovered before), INVALID_ARGUMENT when several models are served.
  absl::StatusOr<std::string> DiscoverModel(absl::Duration timeout);
  // Background loop (model_refresher_): discovers the model at start-up
  // (retrying every kModelDiscoveryRetry until a worker has registered) and
  // then rediscovers it every kModelDiscoveryTtl / 2, so that requests do
  // not pay a Stats round trip on their routing path: neither the first
  // ones after start-up (which used to discover it themselves, concurrently)
  // nor one every kModelDiscoveryTtl.
  void RefreshDiscoveredModel();
  // The policy named by kPolicyOverrideMetadataKey (when overrides are
  // allowed), else the default; nullptr for an unknown name.
  PlacementPolicy* PolicyFor(grpc::ServerContext* context);
  std::shared_ptr<radixkv::v1::Worker::Stub> WorkerStub(
      const std::string& address);
  void WatchDisconnects();

  const RouterOptions options_;
  const std::unique_ptr<PromptTokenizer> tokenizer_;
  RouterMetrics* const metrics_;
  absl::flat_hash_map<std::string, std::unique_ptr<PlacementPolicy>> policies_;
  PlacementPolicy* default_policy_ = nullptr;
  std::unique_ptr<radixkv::v1::CacheService::Stub> cache_service_;
  WorkerLoadTracker load_;
  // Worker processes (id + epoch) that failed a request recently.
  WorkerFailureMarks failure_marks_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<InFlight>> in_flight_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<radixkv::v1::Worker::Stub>>
      worker_stubs_ ABSL_GUARDED_BY(mu_);
  // Model -> its workers in the latest successful Match/Stats (matched 0).
  absl::flat_hash_map<std::string, std::vector<WorkerCandidate>>
      last_known_workers_ ABSL_GUARDED_BY(mu_);
  std::string discovered_model_ ABSL_GUARDED_BY(mu_);
  absl::Time discovered_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();

  absl::Notification stop_;
  std::thread watcher_;
  std::thread model_refresher_;  // only when options_.model is empty
  std::atomic<bool> shut_down_{false};
};

}  // namespace radixkv::router

#endif  // RADIXKV_ROUTER_ROUTER_SERVICE_H_
