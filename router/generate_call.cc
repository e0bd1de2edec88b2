#include "router/generate_call.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/generate_request_checks.h"
#include "router/router_service.h"
#include "spdlog/spdlog.h"

namespace radixkv::router {

using radixkv::v1::GenerateRequest;
using radixkv::v1::GenerateResponse;

namespace {

absl::Status ToAbsl(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      s.error_message());
}

// "a; b (x2)": identical messages once, with their count.
std::string JoinDistinct(const std::vector<std::string>& errors) {
  std::vector<std::pair<std::string, int>> distinct;
  for (const std::string& e : errors) {
    auto it = std::find_if(distinct.begin(), distinct.end(),
                           [&](const auto& d) { return d.first == e; });
    if (it == distinct.end()) {
      distinct.emplace_back(e, 1);
    } else {
      ++it->second;
    }
  }
  std::vector<std::string> parts;
  for (const auto& [e, n] : distinct) {
    parts.push_back(n > 1 ? absl::StrCat(e, " (x", n, ")") : e);
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace

// One Worker.Generate stream of an attempt. Reads one chunk at a time: the
// next read starts when the call says the client took the previous chunk
// (ReadNext) or stops (StopReading). A hold keeps OnDone from running while
// the call still owns a chunk, so OnWorkerDone comes after every
// OnWorkerChunk has been answered. Deletes itself in OnDone.
class WorkerStreamReader final
    : public grpc::ClientReadReactor<GenerateResponse> {
 public:
  WorkerStreamReader(std::shared_ptr<GenerateCall> call,
                     std::shared_ptr<grpc::ClientContext> context)
      : call_(std::move(call)), context_(std::move(context)) {}

  void Start(radixkv::v1::Worker::Stub* stub, const GenerateRequest* request) {
    stub->async()->Generate(context_.get(), request, this);
    AddHold();
    StartRead(&chunk_);
    StartCall();
  }
  void ReadNext() { StartRead(&chunk_); }
  void StopReading() {
    context_->TryCancel();
    RemoveHold();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      RemoveHold();
      return;
    }
    GenerateResponse chunk = std::move(chunk_);
    chunk_.Clear();
    call_->OnWorkerChunk(std::move(chunk));
  }
  void OnDone(const grpc::Status& status) override {
    call_->OnWorkerDone(status);
    delete this;
  }

 private:
  const std::shared_ptr<GenerateCall> call_;
  const std::shared_ptr<grpc::ClientContext> context_;
  GenerateResponse chunk_;
};

GenerateCall::GenerateCall(RouterService* service, GenerateCallParams params,
                           GenerateSink* sink)
    : service_(service), params_(std::move(params)), sink_(sink) {}

GenerateCall::~GenerateCall() = default;

void GenerateCall::Start() { ResolveModel(); }

void GenerateCall::ResolveModel() {
  service_->ResolveModelAsync(
      params_.request.model(),
      [self = shared_from_this()](absl::StatusOr<std::string> model) {
        self->OnModel(std::move(model));
      });
}

void GenerateCall::OnModel(absl::StatusOr<std::string> model) {
  if (!model.ok()) {
    const bool unavailable = absl::IsUnavailable(model.status());
    return Finish(unavailable ? "no_worker" : "invalid_argument",
                  model.status());
  }
  model_ = *std::move(model);
  forward_ = params_.request;
  if (params_.request.prompt_case() != GenerateRequest::kText) {
    tokens_.assign(params_.request.token_ids().ids().begin(),
                   params_.request.token_ids().ids().end());
  } else if (absl::StatusOr<std::optional<std::vector<int32_t>>> encoded =
                 service_->Tokenize(model_, params_.request.text());
             !encoded.ok()) {
    return Finish("invalid_argument", encoded.status());
  } else if (encoded->has_value()) {
    tokens_ = **std::move(encoded);
    forward_.mutable_token_ids()->mutable_ids()->Assign(tokens_.begin(),
                                                        tokens_.end());
  }
  StartAttempt();
}

bool GenerateCall::DeadlinePassed() const {
  return params_.deadline != absl::InfiniteFuture() &&
         absl::Now() >= params_.deadline;
}

absl::Status GenerateCall::DeadlineStatus(int64_t streamed_tokens) const {
  return absl::DeadlineExceededError(absl::StrCat(
      "request ", request_id(), ": the client's deadline passed after ",
      streamed_tokens, " streamed tokens"));
}

absl::Status GenerateCall::ShutdownStatus(int64_t streamed_tokens) const {
  // The end of the drain (RouterService::Shutdown) cut the request: a clear
  // status instead of the worker stream's CANCELLED.
  return absl::UnavailableError(
      absl::StrCat("request ", request_id(),
                   ": the router is shutting down (its drain timeout "
                   "passed) after ",
                   streamed_tokens, " streamed tokens"));
}

bool GenerateCall::FinishIfStopped(int64_t streamed_tokens) {
  bool aborted, client_gone, shutting_down;
  {
    absl::MutexLock lock(&mu_);
    aborted = aborted_;
    client_gone = client_gone_;
    shutting_down = shutting_down_;
  }
  if (shutting_down) {
    Finish("shutdown", ShutdownStatus(streamed_tokens));
  } else if (aborted) {
    Finish("aborted", absl::CancelledError(absl::StrCat(
                          "request ", request_id(), " was aborted")));
  } else if (DeadlinePassed()) {
    Finish("deadline_exceeded", DeadlineStatus(streamed_tokens));
  } else if (client_gone) {
    Finish("client_cancelled",
           absl::CancelledError("the client cancelled the request"));
  } else {
    return false;
  }
  return true;
}

void GenerateCall::StartAttempt() {
  if (attempt_ >= service_->options().max_attempts) {
    return FinishAfterFailedAttempts();
  }
  if (FinishIfStopped(0)) return;
  auto rpc = std::make_shared<RouterService::CacheRpc>();
  rpc->context = service_->NewClientContext();
  {
    absl::MutexLock lock(&mu_);
    cache_rpc_ = rpc->context;
  }
  service_->StartLiveWorkers(
      rpc, model_, params_.request.cache_salt(), tokens_, request_id(),
      [self = shared_from_this()](
          absl::StatusOr<std::vector<WorkerCandidate>> live,
          absl::Duration rpc_time) {
        {
          absl::MutexLock lock(&self->mu_);
          self->cache_rpc_ = nullptr;
        }
        self->OnLiveWorkers(std::move(live), rpc_time);
      });
}

void GenerateCall::OnLiveWorkers(
    absl::StatusOr<std::vector<WorkerCandidate>> live,
    absl::Duration rpc_time) {
  if (FinishIfStopped(0)) return;
  if (!live.ok()) {
    if (absl::IsInvalidArgument(live.status())) {
      return Finish("invalid_argument", live.status());
    }
    if (absl::IsDeadlineExceeded(live.status())) {
      // Not a worker failure and not worth another attempt (the chosen
      // worker's Acquire would wait on the same service): a prompt
      // UNAVAILABLE instead of the client's DEADLINE_EXCEEDED.
      spdlog::warn("request {}: cache service unavailable: {}", request_id(),
                   std::string(live.status().message()));
      return Finish(
          "cache_service_unavailable",
          absl::UnavailableError(absl::StrCat(
              "request ", request_id(),
              ": cache service unavailable: ", live.status().message(),
              errors_.empty() ? ""
                              : absl::StrCat("; earlier attempts: ",
                                             JoinDistinct(errors_)))));
    }
    errors_.push_back(std::string(live.status().message()));
    all_resource_exhausted_ = false;
    ++attempt_;
    return RetryAfterBackoff();
  }
  if (live->empty()) {
    // Deterministic until a worker registers: no retry.
    if (!errors_.empty()) {
      errors_.push_back(absl::StrCat("no live worker serves model ", model_));
      all_resource_exhausted_ = false;
      return FinishAfterFailedAttempts();
    }
    absl::Status none = service_->NoLiveWorkerStatus(model_);
    return Finish(absl::IsNotFound(none) ? "not_found" : "no_worker", none);
  }
  Place(*std::move(live), rpc_time);
}

void GenerateCall::Place(std::vector<WorkerCandidate> live,
                         absl::Duration rpc_time) {
  const absl::Time now = absl::Now();
  PlacementInput input;
  input.tokens = tokens_;
  // n samples decode n sequences on the one worker that holds the prompt
  // (the fork needs its pages there): the load is n times the tokens.
  input.max_new_tokens =
      std::max(0, params_.request.sampling().max_new_tokens()) *
      radixkv::v1::NumSamples(params_.request);
  input.prefix_cache_disabled = params_.request.disable_prefix_cache();
  // Prefer workers that have not failed (this request, or recently) and
  // that the cache service has heard from since its restart.
  for (const WorkerCandidate& c : live) {
    if (!tried_.contains(c.worker_id) && !c.unconfirmed &&
        !service_->failure_marks_.IsAvoided(c.worker_id, c.epoch, now)) {
      input.candidates.push_back(c);
    }
  }
  if (input.candidates.empty()) {
    for (const WorkerCandidate& c : live) {
      if (!excluded_.contains(c.worker_id)) input.candidates.push_back(c);
    }
  }
  if (input.candidates.empty()) return FinishAfterFailedAttempts();
  const int64_t bound = service_->options().max_in_flight_per_worker;
  while (!input.candidates.empty()) {
    for (WorkerCandidate& c : input.candidates) {
      c.load_tokens = service_->load_.EstimateLoad(c.worker_id, c.load_tokens,
                                                   c.heartbeat_age);
      c.in_flight_requests =
          service_->load_.Get(c.worker_id).in_flight_requests;
    }
    std::erase_if(input.candidates, [&](const WorkerCandidate& c) {
      return bound > 0 && c.in_flight_requests >= bound;
    });
    if (input.candidates.empty()) break;
    absl::StatusOr<PlacementDecision> chosen = params_.policy->Choose(input);
    if (!chosen.ok()) return Finish("internal", chosen.status());
    const WorkerCandidate& worker = input.candidates[chosen->index];
    const int64_t prefill =
        static_cast<int64_t>(tokens_.size()) - chosen->predicted_hit_tokens;
    if (service_->load_.TryDispatch(worker.worker_id, prefill,
                                    input.max_new_tokens, bound)) {
      if (!routed_once_) {
        service_->metrics_->ObserveRouting(
            params_.policy_name,
            absl::ToDoubleSeconds(absl::Now() - params_.arrival),
            static_cast<int64_t>(tokens_.size()), chosen->predicted_hit_tokens);
        routed_once_ = true;
        spdlog::debug("routing {}: {} us, match_rpc {} us", request_id(),
                      absl::ToInt64Microseconds(absl::Now() - params_.arrival),
                      absl::ToInt64Microseconds(rpc_time));
      }
      target_ = Target{worker, prefill, prefill + input.max_new_tokens};
      return Dispatch(worker, *chosen);
    }
    // Another request took its last in-flight place since we looked.
    const std::string taken = worker.worker_id;
    std::erase_if(input.candidates, [&](const WorkerCandidate& c) {
      return c.worker_id == taken;
    });
  }
  Finish("overloaded",
         absl::ResourceExhaustedError(absl::StrCat(
             "request ", request_id(), ": every live worker of model ", model_,
             " has ", bound,
             " requests of this router in flight, the limit "
             "--max_in_flight_per_worker=",
             bound)));
}

void GenerateCall::Dispatch(const WorkerCandidate& worker,
                            const PlacementDecision& decision) {
  decision_ = std::string(PlacementDecisionName(decision.kind));
  params_.policy->OnDispatched(worker.worker_id, worker.epoch, tokens_);
  service_->metrics_->CountDispatch(worker.worker_id);
  if (!retry_reason_.empty()) {
    service_->metrics_->CountRetry(retry_reason_);
    retry_reason_.clear();
  }
  spdlog::debug("request {} -> {} ({}, {}, predicted hit {}/{})", request_id(),
                worker.worker_id, params_.policy_name, decision_,
                decision.predicted_hit_tokens, tokens_.size());
  forwarded_ = false;
  streamed_tokens_ = 0;
  std::shared_ptr<grpc::ClientContext> context = service_->NewClientContext();
  if (params_.deadline != absl::InfiniteFuture()) {
    context->set_deadline(absl::ToChronoTime(params_.deadline));
  }
  auto* reader = new WorkerStreamReader(shared_from_this(), context);
  {
    absl::MutexLock lock(&mu_);
    worker_context_ = context;
    worker_address_ = worker.address;
    reader_ = reader;
  }
  // Stopped since the last check (Abort, disconnect, shutdown): the stream
  // ends CANCELLED at once and OnWorkerDone decides.
  if (Stopped()) context->TryCancel();
  reader->Start(service_->WorkerStub(worker.address).get(), &forward_);
}

void GenerateCall::OnWorkerChunk(GenerateResponse chunk) {
  if (!forwarded_) {
    service_->load_.Progress(target_.worker.worker_id, target_.prefill_tokens,
                             &target_.charged_tokens);
  }
  service_->load_.Progress(target_.worker.worker_id, chunk.token_ids_size(),
                           &target_.charged_tokens);
  if (chunk.worker_id().empty()) chunk.set_worker_id(target_.worker.worker_id);
  if (chunk.request_id().empty()) chunk.set_request_id(request_id());
  const int tokens = chunk.token_ids_size();
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = true;
  }
  sink_->Write(chunk, [self = shared_from_this(), tokens](bool ok) {
    self->OnChunkWritten(ok, tokens);
  });
}

void GenerateCall::OnChunkWritten(bool ok, int tokens) {
  WorkerStreamReader* reader;
  std::function<void()> pending;
  {
    absl::MutexLock lock(&mu_);
    write_in_flight_ = false;
    if (!ok) client_gone_ = true;
    reader = reader_;
    pending = std::move(pending_finish_);
  }
  if (ok) {
    forwarded_ = true;
    streamed_tokens_ += tokens;
    if (!first_token_seen_ && tokens > 0) {
      first_token_seen_ = true;
      service_->metrics_->ObserveTimeToFirstToken(
          params_.api, params_.policy_name,
          absl::ToDoubleSeconds(absl::Now() - params_.arrival));
    }
  }
  if (pending) return pending();
  if (reader == nullptr) return;
  if (ok) {
    reader->ReadNext();
  } else {
    reader->StopReading();
  }
}

void GenerateCall::OnWorkerDone(const grpc::Status& status) {
  AttemptResult result;
  {
    absl::MutexLock lock(&mu_);
    reader_ = nullptr;
    worker_context_ = nullptr;
    worker_address_.clear();
    result.aborted = aborted_;
    result.client_gone = client_gone_;
    result.shutting_down = shutting_down_;
  }
  const WorkerCandidate& worker = target_.worker;
  service_->load_.Finish(worker.worker_id, target_.charged_tokens);
  params_.policy->OnFinished(worker.worker_id, worker.epoch, tokens_);
  result.status = ToAbsl(status);
  result.forwarded = forwarded_;
  result.worker_tried_before = tried_.contains(worker.worker_id);
  result.deadline_passed = DeadlinePassed();
  const AttemptDecision d = DecideAttempt(result);
  if (d.mark_worker_failed) {
    service_->failure_marks_.MarkFailed(worker.worker_id, worker.epoch,
                                        absl::Now());
  }
  const std::string what =
      absl::StrCat("worker ", worker.worker_id, " (", worker.address, ") ",
                   absl::StatusCodeToString(result.status.code()), ": ",
                   status.error_message());
  if (d.verdict == AttemptVerdict::kRetry) {
    return OnAttemptFailed(d, result.status, what);
  }
  FinishAttempt(d.verdict, result.status, what);
}

void GenerateCall::FinishAttempt(AttemptVerdict verdict,
                                 const absl::Status& status,
                                 const std::string& what) {
  switch (verdict) {
    case AttemptVerdict::kAborted:
      return Finish("aborted", absl::CancelledError(absl::StrCat(
                                   "request ", request_id(), " was aborted")));
    case AttemptVerdict::kDeadlineExceeded:
      return Finish("deadline_exceeded", DeadlineStatus(streamed_tokens_));
    case AttemptVerdict::kClientCancelled:
      return Finish("client_cancelled",
                    absl::CancelledError("the client cancelled the request"));
    case AttemptVerdict::kShutdown:
      return Finish("shutdown", ShutdownStatus(streamed_tokens_));
    case AttemptVerdict::kSucceeded:
      return Finish("ok", absl::OkStatus());
    case AttemptVerdict::kFailedAfterTokens:
      spdlog::warn("request {}: {} after {} streamed tokens", request_id(),
                   what, streamed_tokens_);
      return Finish("failed_after_tokens",
                    absl::UnavailableError(absl::StrCat(
                        "request ", request_id(), " failed after ",
                        streamed_tokens_, " tokens were streamed: ", what,
                        "; not retried because output was already sent")));
    case AttemptVerdict::kRequestError:
      return Finish(StatusCodeLabel(status.code()), status);
    case AttemptVerdict::kRetry:
      return;  // not terminal
  }
}

void GenerateCall::OnAttemptFailed(const AttemptDecision& d,
                                   const absl::Status& status,
                                   const std::string& what) {
  const std::string& id = target_.worker.worker_id;
  tried_.insert(id);
  if (d.exclude_worker) excluded_.insert(id);
  if (!d.resource_exhausted) all_resource_exhausted_ = false;
  errors_.push_back(what);
  retry_reason_ = StatusCodeLabel(status.code());
  spdlog::info("request {}: attempt {} failed before the first token: {}",
               request_id(), attempt_ + 1, what);
  ++attempt_;
  RetryAfterBackoff();
}

void GenerateCall::RetryAfterBackoff() {
  if (attempt_ >= service_->options().max_attempts) {
    return FinishAfterFailedAttempts();
  }
  if (FinishIfStopped(0)) return;
  const absl::Duration backoff =
      service_->options().retry_backoff * (1 << std::min(attempt_ - 1, 6));
  auto alarm = std::make_shared<grpc::Alarm>();
  {
    absl::MutexLock lock(&mu_);
    backoff_ = alarm;
  }
  alarm->Set(absl::ToChronoTime(absl::Now() + backoff),
             [self = shared_from_this()](bool /*fired*/) {
               {
                 absl::MutexLock lock(&self->mu_);
                 self->backoff_ = nullptr;
               }
               // Cancelled (not fired) only by Abort, ClientGone or
               // Shutdown, which FinishIfStopped sees.
               if (self->FinishIfStopped(0)) return;
               self->StartAttempt();
             });
}

void GenerateCall::FinishAfterFailedAttempts() {
  if (FinishIfStopped(0)) return;
  const std::string summary =
      errors_.size() == 1
          ? absl::StrCat("request ", request_id(), ": ", errors_[0])
          : absl::StrCat("request ", request_id(),
                         " failed on every attempt before its first token (",
                         errors_.size(), " attempts): ", JoinDistinct(errors_));
  if (all_resource_exhausted_ && !errors_.empty()) {
    return Finish("resource_exhausted", absl::ResourceExhaustedError(summary));
  }
  Finish("failed_before_first_token", absl::UnavailableError(summary));
}

void GenerateCall::Finish(const std::string& outcome, absl::Status status) {
  std::shared_ptr<GenerateCall> self = shared_from_this();
  {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    if (write_in_flight_) {
      pending_finish_ = [self, outcome, status] {
        self->Finish(outcome, status);
      };
      return;
    }
    finished_ = true;
  }
  service_->metrics_->CountRequest(params_.api, params_.policy_name, decision_,
                                   outcome);
  service_->metrics_->ObserveRequestDuration(
      params_.api, params_.policy_name, outcome,
      absl::ToDoubleSeconds(absl::Now() - params_.arrival));
  service_->Unregister(request_id());
  sink_->Finish(status);
}

void GenerateCall::CancelPending(
    const std::shared_ptr<grpc::ClientContext>& worker,
    const std::shared_ptr<grpc::Alarm>& backoff,
    const std::shared_ptr<grpc::ClientContext>& cache_rpc) {
  if (worker != nullptr) worker->TryCancel();
  if (backoff != nullptr) backoff->Cancel();
  if (cache_rpc != nullptr) cache_rpc->TryCancel();
}

bool GenerateCall::Stopped() {
  absl::MutexLock lock(&mu_);
  return aborted_ || client_gone_ || shutting_down_;
}

bool GenerateCall::Stop(bool GenerateCall::*reason) {
  std::shared_ptr<grpc::ClientContext> worker, cache_rpc;
  std::shared_ptr<grpc::Alarm> backoff;
  {
    absl::MutexLock lock(&mu_);
    if (finished_ || this->*reason) return false;
    this->*reason = true;
    worker = worker_context_;
    backoff = backoff_;
    cache_rpc = cache_rpc_;
  }
  CancelPending(worker, backoff, cache_rpc);
  return true;
}

bool GenerateCall::Abort() { return Stop(&GenerateCall::aborted_); }

void GenerateCall::ClientGone() { Stop(&GenerateCall::client_gone_); }

void GenerateCall::Shutdown() { Stop(&GenerateCall::shutting_down_); }

std::string GenerateCall::worker_address() {
  absl::MutexLock lock(&mu_);
  return worker_address_;
}

}  // namespace radixkv::router
