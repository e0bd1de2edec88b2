// RouterService: the public radixkv.v1.Router gRPC service (router.proto)
// on the gRPC callback API. Generate admits a request (validation, the
// in-flight bound, the request-id registry) and runs it as a GenerateCall
// (generate_call.h: model, tokens, Match, placement, the worker stream,
// retries); Abort cancels it and tells the worker; a client disconnect
// cancels its worker stream. docs/architecture.md "Router and placement"
// has the rules.
#ifndef RADIXKV_ROUTER_ROUTER_SERVICE_H_
#define RADIXKV_ROUTER_ROUTER_SERVICE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/prompt_text_limit.h"
#include "radixkv/v1/cache_service.grpc.pb.h"
#include "radixkv/v1/router.grpc.pb.h"
#include "radixkv/v1/worker.grpc.pb.h"
#include "router/api_keys.h"
#include "router/generate_call.h"
#include "router/model_catalog.h"
#include "router/placement_policy.h"
#include "router/request_validation.h"
#include "router/router_metrics.h"
#include "router/worker_failure_marks.h"
#include "router/worker_load_tracker.h"

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
  // Requests in flight on this router at most (admission to the final
  // status); beyond: RESOURCE_EXHAUSTED naming the bound. Bounds the
  // router's memory under any burst.
  int64_t max_in_flight_requests = 4096;
  // Requests this router has in flight on one worker at most (0 = no
  // bound); a worker at the bound is not chosen, and when every live worker
  // of the model is at it the request ends RESOURCE_EXHAUSTED at once
  // instead of queueing on a worker. About twice the workers'
  // --max_running_requests keeps one batch running and one waiting.
  int64_t max_in_flight_per_worker = 64;
  // When set, Generate and Abort need "authorization: Bearer <key>"
  // metadata with one of these keys (UNAUTHENTICATED otherwise). Must
  // outlive the service.
  const ApiKeys* api_keys = nullptr;
  // Text prompts longer than this (bytes) are INVALID_ARGUMENT before they
  // are tokenized: v1::MaxPromptTextBytes of the model's
  // max_position_embeddings (router main reads it from --model_dir's
  // config.json); the default is that of a 131072-position model (4 MiB).
  int64_t max_prompt_text_bytes = v1::MaxPromptTextBytes(131072);
};

// Thread-safe. Holds no thread per request: Generate runs on the gRPC
// callback API (GenerateCall), so a queued or streaming request costs memory
// only; the router sheds load before the workers do (max_in_flight_requests,
// max_in_flight_per_worker).
// The Router methods on gRPC's callback API, with raw bodies: the service
// parses requests itself, so an unparseable one is INVALID_ARGUMENT naming
// the message (process/raw_message.h), not gRPC's empty INTERNAL.
using RawCallbackRouterService =
    radixkv::v1::Router::WithRawCallbackMethod_Generate<
        radixkv::v1::Router::WithRawCallbackMethod_Abort<
            radixkv::v1::Router::WithRawCallbackMethod_ListWorkers<
                radixkv::v1::Router::WithRawCallbackMethod_ListModels<
                    radixkv::v1::Router::Service>>>>;

class RouterService final : public RawCallbackRouterService {
 public:
  // `catalog` (may be null) tokenizes text prompts per model; a model it
  // has no tokenizer for is forwarded as text and placed by load only.
  // `catalog` and `metrics` must outlive the service. INVALID_ARGUMENT for
  // an unknown policy or max_attempts < 1.
  static absl::StatusOr<std::unique_ptr<RouterService>> Create(
      const RouterOptions& options, const ModelCatalog* catalog,
      RouterMetrics* metrics);
  // Shuts down and waits for every request to end.
  ~RouterService() override;

  // The Router methods (router.proto).
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListWorkers(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response) override;

  // Ends every in-flight request (UNAVAILABLE "the router is shutting down
  // (its drain timeout passed) after N streamed tokens") and dispatches no
  // new attempt. Idempotent; called by the destructor, and by main when the
  // drain timeout passes.
  void Shutdown();

  // Waits up to `timeout` until no request is in flight; true if none is.
  bool WaitForIdle(absl::Duration timeout);

  const RouterOptions& options() const { return options_; }

  // Starts one Generate for a front end other than gRPC (the OpenAI HTTP
  // API): validation, admission and the whole GenerateCall, with the
  // default placement policy, no deadline, metrics labelled `api`. `sink`
  // must outlive the call (its Finish is the last call it gets). Errors (the
  // sink gets nothing): those of the gRPC path's admission.
  absl::StatusOr<std::shared_ptr<GenerateCall>> StartGenerate(
      const radixkv::v1::GenerateRequest& request, const std::string& api,
      GenerateSink* sink);
  // Counts a request a front end refused before it became a call (a bad
  // key, an unparseable body) under `api` and `outcome`.
  void CountRefused(const std::string& api, const std::string& outcome,
                    absl::Time arrival);
  // The models the registered workers serve (the latest Stats), sorted.
  std::vector<std::string> ServedModels();
  // When the service started (the `created` time of the models it lists).
  absl::Time start_time() const { return start_time_; }
  // The catalog entry of `model` (nullptr: none).
  std::shared_ptr<const ModelCatalog::Entry> FindModel(
      const std::string& model) const;

 private:
  friend class GenerateCall;
  class GrpcGenerateReactor;

  // One cache-service call of an attempt (Match, or Stats for a request
  // without prompt tokens); shared with the GenerateCall that may cancel it.
  struct CacheRpc {
    std::shared_ptr<grpc::ClientContext> context;  // NewClientContext()
    radixkv::v1::MatchRequest match_request;
    radixkv::v1::MatchResponse match_response;
    radixkv::v1::StatsRequest stats_request;
    radixkv::v1::StatsResponse stats_response;
    absl::Time start;
  };

  RouterService(const RouterOptions& options, const ModelCatalog* catalog,
                RouterMetrics* metrics);

  // Validates `request` and registers a GenerateCall for it with `sink`
  // (the id assigned when empty). Errors: the validation's
  // INVALID_ARGUMENT, ALREADY_EXISTS for an id in flight,
  // RESOURCE_EXHAUSTED at max_in_flight_requests, UNAVAILABLE when shut
  // down. The call is not started.
  absl::StatusOr<std::shared_ptr<GenerateCall>> Admit(
      const radixkv::v1::GenerateRequest& request, GenerateCallParams params,
      GenerateSink* sink);
  // Removes a finished call from the in-flight registry.
  void Unregister(const std::string& request_id);

  // The model to serve `requested` with: itself, options_.model, or the one
  // model the registered workers serve (fresh within kModelDiscoveryTtl,
  // else one Stats call). Calls `done` exactly once, possibly inline.
  // UNAVAILABLE without live workers (or an unreachable cache service and
  // nothing discovered before), INVALID_ARGUMENT when several models are
  // served.
  void ResolveModelAsync(const std::string& requested,
                         std::function<void(absl::StatusOr<std::string>)> done);
  // The ids of `text` for `model`, with the tokenizer's special tokens
  // (BOS), as the workers encode a text prompt (nullopt: no tokenizer,
  // forward the text). INVALID_ARGUMENT when it cannot be encoded or is
  // longer than the model's max_prompt_text_bytes.
  absl::StatusOr<std::optional<std::vector<int32_t>>> Tokenize(
      const std::string& model, const std::string& text) const;
  // Issues the Match (tokens) or Stats (no tokens) of one attempt on `rpc`
  // and calls `done` with the live workers of `model` and their exact
  // match: falls back to the last known workers of `model` (matched 0)
  // when the cache service is unreachable (a failed connection);
  // DEADLINE_EXCEEDED when it did not answer within cache_service_timeout
  // (no fallback: the chosen worker's Acquire would wait on the same
  // service); INVALID_ARGUMENT when it rejected the prompt; UNAVAILABLE
  // when unreachable and no worker is known.
  void StartLiveWorkers(
      std::shared_ptr<CacheRpc> rpc, const std::string& model,
      const std::string& cache_salt, const std::vector<int32_t>& tokens,
      const std::string& request_id,
      std::function<void(absl::StatusOr<std::vector<WorkerCandidate>>,
                         absl::Duration)>
          done);
  // Turns a finished StartLiveWorkers RPC into the live worker list.
  absl::StatusOr<std::vector<WorkerCandidate>> LiveWorkersFrom(
      const std::string& model, bool matched, const grpc::Status& status,
      CacheRpc& rpc);
  // The status of a request for `model` when no live worker serves it:
  // NOT_FOUND naming the served models when no worker of `model` was ever
  // seen by this router, else UNAVAILABLE (its workers are down or
  // restarting: worth a retry).
  absl::Status NoLiveWorkerStatus(const std::string& model);
  // Records the models of a Stats answer (discovery and NoLiveWorkerStatus).
  void RecordServedModels(const radixkv::v1::StatsResponse& stats);
  // The one model of `stats`, or the errors of ResolveModelAsync.
  absl::StatusOr<std::string> DiscoveredModelFrom(
      const grpc::Status& status, const radixkv::v1::StatsResponse& stats);
  // Background loop (model_refresher_): keeps the served models and the
  // default model fresh (every kModelDiscoveryTtl / 2; every
  // kModelDiscoveryRetry while nothing is discovered), so that requests
  // do not pay a Stats round trip on their routing path.
  void RefreshDiscoveredModel();
  // OK when no keys are configured or the call carries a known key.
  absl::Status Authenticate(const grpc::CallbackServerContext* context) const;
  // The policy named by kPolicyOverrideMetadataKey (when overrides are
  // allowed), else the default; nullptr for an unknown name (its name, at
  // most 64 bytes, in `unknown`).
  PlacementPolicy* PolicyFor(const grpc::CallbackServerContext* context,
                             std::string* unknown);
  std::shared_ptr<radixkv::v1::Worker::Stub> WorkerStub(
      const std::string& address);
  // The context of every outgoing call (thread-safe). A context holds its
  // channel, and the last reference to a channel must not drop on a gRPC
  // callback thread: gRPC 1.51 then shuts down its callback queue from
  // that queue's own thread and frees the queue under it (grpc/grpc pull
  // request 32584). The destructor waits until every context is gone, so
  // the stubs here release each channel last, on the destroying thread.
  std::shared_ptr<grpc::ClientContext> NewClientContext();

  const RouterOptions options_;
  const ModelCatalog* const catalog_;
  const absl::Time start_time_ = absl::Now();
  RouterMetrics* const metrics_;
  absl::flat_hash_map<std::string, std::unique_ptr<PlacementPolicy>> policies_;
  PlacementPolicy* default_policy_ = nullptr;
  std::unique_ptr<radixkv::v1::CacheService::Stub> cache_service_;
  WorkerLoadTracker load_;
  // Worker processes (id + epoch) that failed a request recently.
  WorkerFailureMarks failure_marks_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<GenerateCall>> in_flight_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::shared_ptr<radixkv::v1::Worker::Stub>>
      worker_stubs_ ABSL_GUARDED_BY(mu_);
  // Model -> its workers in the latest successful Match/Stats (matched 0).
  absl::flat_hash_map<std::string, std::vector<WorkerCandidate>>
      last_known_workers_ ABSL_GUARDED_BY(mu_);
  // Models some registered worker served, ever (bounded by the cache
  // service's registry) and now (the latest Stats).
  absl::flat_hash_set<std::string> models_seen_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> models_served_ ABSL_GUARDED_BY(mu_);
  bool served_known_ ABSL_GUARDED_BY(mu_) = false;  // a Stats was answered
  std::string discovered_model_ ABSL_GUARDED_BY(mu_);
  absl::Time discovered_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;

  absl::Notification stop_;
  std::thread model_refresher_;

  absl::Mutex contexts_mu_;
  int64_t live_client_contexts_ ABSL_GUARDED_BY(contexts_mu_) = 0;
};

}  // namespace radixkv::router

#endif  // RADIXKV_ROUTER_ROUTER_SERVICE_H_
