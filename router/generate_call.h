// GenerateCall: one Router.Generate request from its admission to its final
// status, as an asynchronous state machine that holds no thread while it
// waits (for the cache service's Match, a worker's next chunk, the client
// taking a chunk, or a retry's backoff). The transport (the gRPC stream, an
// HTTP event stream) is a GenerateSink; everything else (model resolution,
// tokenization, placement, streaming, retries, metrics) is here, shared by
// every transport.
//
// One attempt: Match (or Stats for a request without prompt tokens) ->
// placement among the live workers not excluded for this request and not at
// their in-flight bound -> a Worker.Generate stream whose chunks are
// forwarded one at a time (the next worker read starts when the sink took
// the previous chunk: backpressure end to end) -> DecideAttempt on its
// status: finish, or retry on another worker after a backoff.
#ifndef RADIXKV_ROUTER_GENERATE_CALL_H_
#define RADIXKV_ROUTER_GENERATE_CALL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/alarm.h"
#include "grpcpp/grpcpp.h"
#include "radixkv/v1/router.grpc.pb.h"
#include "radixkv/v1/worker.grpc.pb.h"
#include "router/attempt_outcome.h"
#include "router/placement_policy.h"

namespace radixkv::router {

class RouterService;
class WorkerStreamReader;

// The transport side of one request. Write and Finish are called by the
// GenerateCall only, never concurrently, and never while a Write is
// outstanding; Finish exactly once, last.
class GenerateSink {
 public:
  virtual ~GenerateSink() = default;
  // Sends one chunk; `done(true)` once the transport took it,
  // `done(false)` when the client is gone. May call `done` inline.
  virtual void Write(const radixkv::v1::GenerateResponse& chunk,
                     std::function<void(bool)> done) = 0;
  // Ends the request with `status` (OK after the last chunk).
  virtual void Finish(const absl::Status& status) = 0;
};

// Immutable inputs of a call.
struct GenerateCallParams {
  // Validated (ValidateGenerateRequest), request_id set.
  radixkv::v1::GenerateRequest request;
  PlacementPolicy* policy = nullptr;
  std::string policy_name;
  // The front door, as the `api` metric label: "grpc" or "openai".
  std::string api = "grpc";
  absl::Time arrival;
  // The client's deadline (InfiniteFuture: none); also every attempt's.
  absl::Time deadline = absl::InfiniteFuture();
};

// Created and registered by RouterService; owned by shared_ptrs held by the
// service's in-flight registry and by the callbacks in flight.
class GenerateCall : public std::enable_shared_from_this<GenerateCall> {
 public:
  GenerateCall(RouterService* service, GenerateCallParams params,
               GenerateSink* sink);
  ~GenerateCall();

  // Starts the first attempt (resolving the model and tokenizing first).
  void Start();
  // Router.Abort: ends the request CANCELLED "request <id> was aborted".
  // Returns false when it was already aborted or finished.
  bool Abort();
  // The transport saw the client go (cancel, disconnect, deadline).
  void ClientGone();
  // The router's drain timeout: ends the request UNAVAILABLE "shutting
  // down" and dispatches no further attempt.
  void Shutdown();
  // The address of the worker of the current attempt ("" between attempts).
  std::string worker_address();

  const std::string& request_id() const { return params_.request.request_id(); }

  // WorkerStreamReader's callbacks.
  void OnWorkerChunk(radixkv::v1::GenerateResponse chunk);
  void OnWorkerDone(const grpc::Status& status);

 private:
  // A live worker the current attempt was placed on.
  struct Target {
    WorkerCandidate worker;
    int64_t prefill_tokens = 0;
    int64_t charged_tokens = 0;
  };

  void ResolveModel();
  void OnModel(absl::StatusOr<std::string> model);
  void StartAttempt();
  void OnLiveWorkers(absl::StatusOr<std::vector<WorkerCandidate>> live,
                     absl::Duration rpc_time);
  // Places the request among `live`; Finish()es or retries when none fits.
  void Place(std::vector<WorkerCandidate> live, absl::Duration rpc_time);
  void Dispatch(const WorkerCandidate& worker,
                const PlacementDecision& decision);
  void OnChunkWritten(bool ok, int tokens);
  void OnAttemptFailed(const AttemptDecision& decision,
                       const absl::Status& status, const std::string& what);
  void RetryAfterBackoff();
  // Ends the request with `outcome` (metric label) and `status`, once; waits
  // for an outstanding write first.
  void Finish(const std::string& outcome, absl::Status status);
  // Finish for the reason the whole request stops before an attempt
  // (shutdown, aborted, deadline, client gone); false if none applies.
  bool FinishIfStopped(int64_t streamed_tokens) ABSL_LOCKS_EXCLUDED(mu_);
  // Finish for an attempt's terminal verdict (DecideAttempt's order).
  void FinishAttempt(AttemptVerdict verdict, const absl::Status& status,
                     const std::string& what);
  // Sets the stop reason `reason` (aborted_, client_gone_,
  // shutting_down_) and cancels what the request waits on; false when the
  // request has finished or the reason was set already.
  bool Stop(bool GenerateCall::*reason);
  // True once aborted, the client is gone or the router shuts down.
  bool Stopped() ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels what the request waits on (outside mu_: cancellation may run
  // callbacks inline).
  static void CancelPending(
      const std::shared_ptr<grpc::ClientContext>& worker,
      const std::shared_ptr<grpc::Alarm>& backoff,
      const std::shared_ptr<grpc::ClientContext>& cache_rpc);
  // The final status once every attempt failed before its first token.
  void FinishAfterFailedAttempts();
  bool DeadlinePassed() const;
  absl::Status DeadlineStatus(int64_t streamed_tokens) const;
  absl::Status ShutdownStatus(int64_t streamed_tokens) const;

  RouterService* const service_;
  const GenerateCallParams params_;
  GenerateSink* const sink_;

  // Set before the first attempt, then read-only.
  std::string model_;
  std::vector<int32_t> tokens_;
  radixkv::v1::GenerateRequest forward_;  // the request with its token ids

  absl::Mutex mu_;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  // Finish called while a write was in flight: done once it completes.
  std::function<void()> pending_finish_ ABSL_GUARDED_BY(mu_);
  // The current attempt's reader (null between attempts) and RPC contexts
  // to cancel on abort.
  WorkerStreamReader* reader_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::shared_ptr<grpc::ClientContext> worker_context_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<grpc::ClientContext> cache_rpc_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<grpc::Alarm> backoff_ ABSL_GUARDED_BY(mu_);
  std::string worker_address_ ABSL_GUARDED_BY(mu_);

  // Attempt state (one attempt at a time; no lock needed beyond the
  // sequencing of the callbacks, which never overlap).
  int attempt_ = 0;
  Target target_;
  bool forwarded_ = false;
  int64_t streamed_tokens_ = 0;
  bool first_token_seen_ = false;
  bool routed_once_ = false;
  std::string decision_ = "none";
  absl::flat_hash_set<std::string> tried_;     // workers that failed it
  absl::flat_hash_set<std::string> excluded_;  // never again (subset)
  std::vector<std::string> errors_;
  bool all_resource_exhausted_ = true;
  std::string retry_reason_;
};

}  // namespace radixkv::router

#endif  // RADIXKV_ROUTER_GENERATE_CALL_H_
