#include "router/router_service.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "process/grpc_status.h"
#include "process/raw_message.h"
#include "proto/generate_request_checks.h"
#include "proto/prompt_text_limit.h"
#include "spdlog/spdlog.h"

namespace radixkv::router {
namespace {

using radixkv::v1::GenerateRequest;
using radixkv::v1::GenerateResponse;

// How long a discovered model is used without asking the cache service
// again (workers serving another model may register meanwhile).
constexpr absl::Duration kModelDiscoveryTtl = absl::Seconds(2);
// How often the background discovery retries while nothing is discovered
// (no worker registered yet, or the cache service unreachable).
constexpr absl::Duration kModelDiscoveryRetry = absl::Milliseconds(100);

}  // namespace

// The gRPC transport of one Generate: a GenerateSink over the server stream.
// Deletes itself in OnDone.
class RouterService::GrpcGenerateReactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
      public GenerateSink {
 public:
  GrpcGenerateReactor(RouterService* service,
                      grpc::CallbackServerContext* context,
                      const GenerateRequest& request, absl::Status parsed) {
    GenerateCallParams params;
    params.arrival = absl::Now();
    if (context->deadline() != std::chrono::system_clock::time_point::max()) {
      params.deadline = absl::FromChrono(context->deadline());
    }
    std::string unknown;
    params.policy = service->PolicyFor(context, &unknown);
    // An unknown policy override is counted under the default policy.
    params.policy_name = std::string(
        (params.policy != nullptr ? params.policy : service->default_policy_)
            ->name());
    absl::Status refused = std::move(parsed);
    if (refused.ok()) refused = service->Authenticate(context);
    if (!refused.ok()) {
      // Unparseable request bytes or no key: counted, nothing else.
    } else if (params.policy == nullptr) {
      refused = absl::InvalidArgumentError(
          absl::StrCat("unknown placement policy ", unknown, " in metadata ",
                       kPolicyOverrideMetadataKey, " (one of ",
                       absl::StrJoin(PlacementPolicyNames(), ", "), ")"));
    } else {
      absl::StatusOr<std::shared_ptr<GenerateCall>> call =
          service->Admit(request, params, this);
      if (call.ok()) {
        call_ = *std::move(call);
      } else {
        refused = call.status();
      }
    }
    if (!refused.ok()) {
      const std::string outcome = absl::IsResourceExhausted(refused)
                                      ? "overloaded"
                                      : StatusCodeLabel(refused.code());
      service->metrics_->CountRequest(params.api, params.policy_name, "none",
                                      outcome);
      service->metrics_->ObserveRequestDuration(
          params.api, params.policy_name, outcome,
          absl::ToDoubleSeconds(absl::Now() - params.arrival));
      Finish(refused);
      return;
    }
    call_->Start();
  }

  // GenerateSink
  void Write(const GenerateResponse& chunk,
             std::function<void(bool)> done) override {
    if (absl::Status s = process::SerializeRawMessage(chunk, &response_);
        !s.ok()) {
      return done(false);
    }
    write_done_ = std::move(done);
    StartWrite(&response_);
  }
  void Finish(const absl::Status& status) override {
    ServerWriteReactor::Finish(process::ToGrpcStatus(status));
  }

  // ServerWriteReactor
  void OnWriteDone(bool ok) override {
    std::function<void(bool)> done = std::move(write_done_);
    if (done) done(ok);
  }
  void OnCancel() override {
    if (call_ != nullptr) call_->ClientGone();
  }
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<GenerateCall> call_;
  grpc::ByteBuffer response_;
  std::function<void(bool)> write_done_;
};

absl::StatusOr<std::unique_ptr<RouterService>> RouterService::Create(
    const RouterOptions& options, const ModelCatalog* catalog,
    RouterMetrics* metrics) {
  if (options.max_attempts < 1) {
    return absl::InvalidArgumentError("max_attempts must be >= 1");
  }
  if (options.max_in_flight_requests < 1 ||
      options.max_in_flight_per_worker < 0) {
    return absl::InvalidArgumentError(
        "max_in_flight_requests must be >= 1 and max_in_flight_per_worker "
        ">= 0");
  }
  std::unique_ptr<RouterService> service(
      new RouterService(options, catalog, metrics));
  for (const std::string& name : PlacementPolicyNames()) {
    auto policy = CreatePlacementPolicy(name, options.cache_aware,
                                        options.approx_tree_capacity_tokens);
    if (!policy.ok()) return policy.status();
    service->policies_[name] = *std::move(policy);
  }
  auto it = service->policies_.find(options.policy);
  if (it == service->policies_.end()) {
    return CreatePlacementPolicy(options.policy, {}).status();
  }
  service->default_policy_ = it->second.get();
  service->model_refresher_ =
      std::thread([s = service.get()] { s->RefreshDiscoveredModel(); });
  return service;
}

RouterService::RouterService(const RouterOptions& options,
                             const ModelCatalog* catalog,
                             RouterMetrics* metrics)
    : options_(options),
      catalog_(catalog),
      metrics_(metrics),
      failure_marks_(options.failed_worker_cooldown) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(
      options.cache_service_address, grpc::InsecureChannelCredentials(), args);
  // Connect now rather than on the first request's Match (whose routing
  // latency would include the TCP and HTTP/2 handshakes).
  channel->GetState(/*try_to_connect=*/true);
  cache_service_ = radixkv::v1::CacheService::NewStub(std::move(channel));
}

RouterService::~RouterService() {
  Shutdown();
  // Every call ends soon once cancelled; wait so that no callback of one
  // runs on a destroyed service.
  if (!WaitForIdle(absl::Seconds(30))) {
    spdlog::error("router: requests still in flight at destruction");
  }
  absl::MutexLock lock(&contexts_mu_);
  auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(contexts_mu_) {
    return live_client_contexts_ == 0;
  };
  if (!contexts_mu_.AwaitWithTimeout(absl::Condition(&released),
                                     absl::Seconds(5))) {
    spdlog::error("router: {} outgoing calls still held at destruction",
                  live_client_contexts_);
  }
}

std::shared_ptr<grpc::ClientContext> RouterService::NewClientContext() {
  {
    absl::MutexLock lock(&contexts_mu_);
    ++live_client_contexts_;
  }
  return std::shared_ptr<grpc::ClientContext>(
      new grpc::ClientContext, [this](grpc::ClientContext* context) {
        delete context;
        absl::MutexLock lock(&contexts_mu_);
        --live_client_contexts_;
      });
}

bool RouterService::WaitForIdle(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return in_flight_.empty();
  };
  return mu_.AwaitWithTimeout(absl::Condition(&idle),
                              std::max(timeout, absl::ZeroDuration()));
}

void RouterService::Shutdown() {
  std::vector<std::shared_ptr<GenerateCall>> calls;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    for (auto& [_, call] : in_flight_) calls.push_back(call);
  }
  stop_.Notify();
  if (model_refresher_.joinable()) model_refresher_.join();
  for (auto& call : calls) call->Shutdown();
}

absl::StatusOr<std::shared_ptr<GenerateCall>> RouterService::Admit(
    const GenerateRequest& request, GenerateCallParams params,
    GenerateSink* sink) {
  if (absl::Status valid =
          ValidateGenerateRequest(request, options_.max_prompt_text_bytes);
      !valid.ok()) {
    return valid;
  }
  params.request = request;
  if (params.request.request_id().empty()) {
    params.request.set_request_id(AssignRequestId());
  }
  const std::string id = params.request.request_id();
  auto call = std::make_shared<GenerateCall>(this, std::move(params), sink);
  absl::MutexLock lock(&mu_);
  if (shut_down_) {
    return absl::UnavailableError(
        absl::StrCat("request ", id, ": the router is shutting down"));
  }
  if (static_cast<int64_t>(in_flight_.size()) >=
      options_.max_in_flight_requests) {
    return absl::ResourceExhaustedError(
        absl::StrCat("request ", id, ": the router has ", in_flight_.size(),
                     " requests in flight, the limit --max_in_flight_requests=",
                     options_.max_in_flight_requests));
  }
  if (!in_flight_.emplace(id, call).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("request_id ", id, " is already in flight"));
  }
  metrics_->AddInFlight(1);
  return call;
}

void RouterService::Unregister(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  if (in_flight_.erase(request_id) > 0) metrics_->AddInFlight(-1);
}

absl::Status RouterService::Authenticate(
    const grpc::CallbackServerContext* context) const {
  if (options_.api_keys == nullptr) return absl::OkStatus();
  const auto& md = context->client_metadata();
  auto it = md.find("authorization");
  return options_.api_keys->Check(
      it == md.end() ? absl::string_view()
                     : absl::string_view(it->second.data(), it->second.size()));
}

PlacementPolicy* RouterService::PolicyFor(
    const grpc::CallbackServerContext* context, std::string* unknown) {
  if (options_.allow_policy_override) {
    const auto& md = context->client_metadata();
    auto it = md.find(kPolicyOverrideMetadataKey);
    if (it != md.end()) {
      const std::string name(it->second.data(), it->second.size());
      auto p = policies_.find(name);
      if (p != policies_.end()) return p->second.get();
      // A typo must not silently measure the default.
      *unknown = name.size() <= 64 ? absl::StrCat("'", name, "'")
                                   : absl::StrCat("of ", name.size(), " bytes");
      return nullptr;
    }
  }
  return default_policy_;
}

std::shared_ptr<radixkv::v1::Worker::Stub> RouterService::WorkerStub(
    const std::string& address) {
  absl::MutexLock lock(&mu_);
  auto& stub = worker_stubs_[address];
  if (stub == nullptr) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    // Reconnect quickly after a worker restart on the same address.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    if (options_.worker_keepalive > absl::ZeroDuration()) {
      // A frozen worker keeps its TCP connection up and answers nothing:
      // without pings its streams would wait for the client's deadline.
      // MAX_PINGS_WITHOUT_DATA = 0: keep pinging while no data is sent (a
      // request queued on the worker, or no request at all).
      const int timeout_ms = static_cast<int>(
          absl::ToInt64Milliseconds(options_.worker_keepalive_timeout));
      args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
                  static_cast<int>(
                      absl::ToInt64Milliseconds(options_.worker_keepalive)));
      args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, timeout_ms);
      args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
      args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
      // gRPC core uses the minimum reconnect backoff as the timeout of one
      // connection attempt (default 20 s), which includes waiting for the
      // server's HTTP/2 SETTINGS: the kernel of a frozen worker still
      // accepts the TCP connection. Bounded like a ping, a request placed on
      // it fails UNAVAILABLE (and is retried elsewhere) instead of waiting.
      args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, timeout_ms);
    }
    stub = radixkv::v1::Worker::NewStub(grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args));
  }
  return stub;
}

std::shared_ptr<const ModelCatalog::Entry> RouterService::FindModel(
    const std::string& model) const {
  return catalog_ != nullptr ? catalog_->Find(model) : nullptr;
}

absl::StatusOr<std::optional<std::vector<int32_t>>> RouterService::Tokenize(
    const std::string& model, const std::string& text) const {
  std::shared_ptr<const ModelCatalog::Entry> entry = FindModel(model);
  if (entry == nullptr || entry->tokenizer == nullptr) return std::nullopt;
  if (static_cast<int64_t>(text.size()) > entry->max_prompt_text_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt text of ", text.size(), " bytes exceeds the limit of ",
        entry->max_prompt_text_bytes, " bytes (",
        v1::kMaxPromptBytesPerPosition, " bytes per position of model ", model,
        "'s context)"));
  }
  absl::StatusOr<std::vector<int32_t>> ids =
      entry->tokenizer->Encode(text, /*add_special_tokens=*/true);
  if (!ids.ok()) return ids.status();
  return std::optional<std::vector<int32_t>>(*std::move(ids));
}

absl::StatusOr<std::shared_ptr<GenerateCall>> RouterService::StartGenerate(
    const GenerateRequest& request, const std::string& api,
    GenerateSink* sink) {
  GenerateCallParams params;
  params.arrival = absl::Now();
  params.policy = default_policy_;
  params.policy_name = std::string(default_policy_->name());
  params.api = api;
  absl::StatusOr<std::shared_ptr<GenerateCall>> call =
      Admit(request, params, sink);
  if (!call.ok()) {
    CountRefused(api,
                 absl::IsResourceExhausted(call.status())
                     ? "overloaded"
                     : StatusCodeLabel(call.status().code()),
                 params.arrival);
    return call.status();
  }
  (*call)->Start();
  return call;
}

void RouterService::CountRefused(const std::string& api,
                                 const std::string& outcome,
                                 absl::Time arrival) {
  const std::string policy(default_policy_->name());
  metrics_->CountRequest(api, policy, "none", outcome);
  metrics_->ObserveRequestDuration(
      api, policy, outcome, absl::ToDoubleSeconds(absl::Now() - arrival));
}

std::vector<std::string> RouterService::ServedModels() {
  absl::MutexLock lock(&mu_);
  return models_served_;
}

void RouterService::RecordServedModels(
    const radixkv::v1::StatsResponse& stats) {
  std::vector<std::string> models;
  for (const auto& w : stats.workers()) {
    if (std::find(models.begin(), models.end(), w.model()) == models.end()) {
      models.push_back(w.model());
    }
  }
  std::sort(models.begin(), models.end());
  absl::MutexLock lock(&mu_);
  for (const std::string& m : models) models_seen_.insert(m);
  models_served_ = std::move(models);
  served_known_ = true;
}

absl::Status RouterService::NoLiveWorkerStatus(const std::string& model) {
  absl::MutexLock lock(&mu_);
  // Before the first Stats answer nothing tells "not served" from "down".
  if (!served_known_ || models_seen_.contains(model)) {
    return absl::UnavailableError(
        absl::StrCat("no live worker serves model ", model));
  }
  return absl::NotFoundError(absl::StrCat(
      "model '", model, "' is not served here (served: ",
      models_served_.empty() ? "none" : absl::StrJoin(models_served_, ", "),
      ")"));
}

absl::StatusOr<std::string> RouterService::DiscoveredModelFrom(
    const grpc::Status& st, const radixkv::v1::StatsResponse& stats) {
  if (st.ok()) RecordServedModels(stats);
  absl::MutexLock lock(&mu_);
  if (!st.ok()) {
    if (!discovered_model_.empty()) return discovered_model_;
    return absl::UnavailableError(absl::StrCat(
        "cache service ", options_.cache_service_address,
        " unreachable while resolving the model: ", st.error_message()));
  }
  if (models_served_.empty()) {
    return absl::UnavailableError("no live worker is registered");
  }
  if (models_served_.size() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "several models are served (", absl::StrJoin(models_served_, ", "),
        "): set GenerateRequest.model"));
  }
  discovered_model_ = models_served_[0];
  discovered_at_ = absl::Now();
  return discovered_model_;
}

void RouterService::RefreshDiscoveredModel() {
  do {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(
        absl::Now() +
        std::min(options_.cache_service_timeout, kModelDiscoveryTtl / 4)));
    radixkv::v1::StatsResponse stats;
    const grpc::Status st = cache_service_->Stats(&ctx, {}, &stats);
    // Errors are the request path's to report.
    const absl::Status discovered = DiscoveredModelFrom(st, stats).status();
    if (stop_.WaitForNotificationWithTimeout(absl::IsUnavailable(discovered)
                                                 ? kModelDiscoveryRetry
                                                 : kModelDiscoveryTtl / 2)) {
      return;
    }
  } while (true);
}

void RouterService::ResolveModelAsync(
    const std::string& requested,
    std::function<void(absl::StatusOr<std::string>)> done) {
  if (!requested.empty()) return done(requested);
  if (!options_.model.empty()) return done(options_.model);
  {
    absl::MutexLock lock(&mu_);
    if (!discovered_model_.empty() &&
        absl::Now() - discovered_at_ < kModelDiscoveryTtl) {
      return done(discovered_model_);
    }
  }
  struct Rpc {
    std::shared_ptr<grpc::ClientContext> context;
    radixkv::v1::StatsRequest request;
    radixkv::v1::StatsResponse response;
  };
  auto rpc = std::make_shared<Rpc>();
  rpc->context = NewClientContext();
  rpc->context->set_deadline(
      absl::ToChronoTime(absl::Now() + options_.cache_service_timeout));
  cache_service_->async()->Stats(
      rpc->context.get(), &rpc->request, &rpc->response,
      [this, rpc, done = std::move(done)](grpc::Status st) {
        done(DiscoveredModelFrom(st, rpc->response));
      });
}

void RouterService::StartLiveWorkers(
    std::shared_ptr<CacheRpc> rpc, const std::string& model,
    const std::string& cache_salt, const std::vector<int32_t>& tokens,
    const std::string& request_id,
    std::function<void(absl::StatusOr<std::vector<WorkerCandidate>>,
                       absl::Duration)>
        done) {
  rpc->start = absl::Now();
  rpc->context->set_deadline(
      absl::ToChronoTime(rpc->start + options_.cache_service_timeout));
  rpc->context->AddMetadata(kRequestIdMetadataKey, request_id);
  const bool matched = !tokens.empty();
  auto finish = [this, rpc, model, matched,
                 done = std::move(done)](grpc::Status st) {
    const absl::Duration rpc_time = absl::Now() - rpc->start;
    done(LiveWorkersFrom(model, matched, st, *rpc), rpc_time);
  };
  if (matched) {
    rpc->match_request.set_model(model);
    rpc->match_request.set_cache_salt(cache_salt);
    rpc->match_request.mutable_tokens()->Add(tokens.begin(), tokens.end());
    cache_service_->async()->Match(rpc->context.get(), &rpc->match_request,
                                   &rpc->match_response, std::move(finish));
  } else {
    cache_service_->async()->Stats(rpc->context.get(), &rpc->stats_request,
                                   &rpc->stats_response, std::move(finish));
  }
}

absl::StatusOr<std::vector<WorkerCandidate>> RouterService::LiveWorkersFrom(
    const std::string& model, bool matched, const grpc::Status& st,
    CacheRpc& rpc) {
  std::vector<WorkerCandidate> out;
  if (st.ok() && matched) {
    for (const auto& w : rpc.match_response.workers()) {
      WorkerCandidate c;
      c.worker_id = w.worker_id();
      c.address = w.address();
      c.epoch = w.epoch();
      c.matched_tokens = w.matched_tokens();
      c.load_tokens = w.load().outstanding_tokens();
      c.heartbeat_age = absl::Milliseconds(w.heartbeat_age_ms());
      c.capacity_slots = w.capacity_slots();
      c.free_slots = w.free_slots();
      c.evictable_slots = w.evictable_slots();
      c.protected_slots = w.protected_slots();
      c.unconfirmed = w.unconfirmed();
      out.push_back(std::move(c));
    }
  } else if (st.ok()) {
    RecordServedModels(rpc.stats_response);
    for (const auto& w : rpc.stats_response.workers()) {
      if (w.model() != model) continue;
      WorkerCandidate c;
      c.worker_id = w.worker_id();
      c.address = w.address();
      c.epoch = w.epoch();
      c.load_tokens = w.load().outstanding_tokens();
      c.heartbeat_age = absl::Milliseconds(w.heartbeat_age_ms());
      c.unconfirmed = w.unconfirmed();
      out.push_back(std::move(c));
    }
  } else if (st.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache service rejected the prompt: ", st.error_message()));
  } else if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    // The cache service accepted the call but did not answer in time
    // (frozen, overloaded). Placing on the last known workers would not
    // help: their Acquire waits on the same service (the worker's
    // --cache_rpc_timeout_ms) and fails, so every attempt would cost both
    // timeouts and blame a healthy worker. A refused connection (a restart
    // in progress) fails fast on both sides instead: that case still falls
    // back to the last known workers and is retried.
    return absl::DeadlineExceededError(
        absl::StrCat(options_.cache_service_address, " did not answer ",
                     matched ? "Match" : "Stats", " within ",
                     absl::FormatDuration(options_.cache_service_timeout), ": ",
                     st.error_message()));
  }
  absl::MutexLock lock(&mu_);
  if (st.ok()) {
    if (!out.empty()) models_seen_.insert(model);
    // Only models the cache service serves get an entry (a client's
    // arbitrary model names do not grow the map).
    if (out.empty()) {
      last_known_workers_.erase(model);
    } else {
      std::vector<WorkerCandidate>& known = last_known_workers_[model];
      known = out;
      for (WorkerCandidate& c : known) {
        c.matched_tokens = 0;
        c.heartbeat_age = -absl::InfiniteDuration();  // unknown when used
      }
    }
    return out;
  }
  auto it = last_known_workers_.find(model);
  if (it == last_known_workers_.end()) {
    return absl::UnavailableError(
        absl::StrCat("cache service ", options_.cache_service_address,
                     " unreachable and no worker known for model ", model, ": ",
                     st.error_message()));
  }
  spdlog::warn(
      "cache service unreachable ({}); placing on the last known {} "
      "workers of model {} by load only",
      st.error_message(), it->second.size(), model);
  return it->second;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* RouterService::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* body) {
  GenerateRequest request;
  absl::Status parsed = process::ParseRawMessage(*body, &request);
  return new GrpcGenerateReactor(this, context, request, std::move(parsed));
}

grpc::ServerUnaryReactor* RouterService::Abort(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* body,
    grpc::ByteBuffer* response_body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto request = std::make_shared<radixkv::v1::AbortRequest>();
  absl::Status parsed = process::ParseRawMessage(*body, request.get());
  if (parsed.ok()) parsed = Authenticate(context);
  if (!parsed.ok()) {
    reactor->Finish(process::ToGrpcStatus(parsed));
    return reactor;
  }
  // Answers with `aborted`, serialized into the response body.
  auto finish = [reactor, response_body](bool aborted) {
    radixkv::v1::AbortResponse response;
    response.set_aborted(aborted);
    reactor->Finish(process::ToGrpcStatus(
        process::SerializeRawMessage(response, response_body)));
  };
  if (absl::Status valid = radixkv::v1::CheckRequestId(request->request_id());
      !valid.ok()) {
    reactor->Finish(
        process::ToGrpcStatus(valid));  // never in flight; the id is not echoed
    return reactor;
  }
  std::shared_ptr<GenerateCall> call;
  {
    absl::MutexLock lock(&mu_);
    auto it = in_flight_.find(request->request_id());
    if (it != in_flight_.end()) call = it->second;
  }
  if (call == nullptr) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND,
                     absl::StrCat("no request ", request->request_id(),
                                  " is in flight on this router")));
    return reactor;
  }
  const std::string address = call->worker_address();
  // Of concurrent Aborts exactly one sees true.
  const bool first = call->Abort();
  if (!first || address.empty()) {
    finish(first);
    return reactor;
  }
  // Cancelling the stream already makes the worker release the request;
  // the explicit Abort also covers a request still queued there.
  struct Rpc {
    std::shared_ptr<grpc::ClientContext> context;
    radixkv::v1::AbortResponse response;
  };
  auto rpc = std::make_shared<Rpc>();
  rpc->context = NewClientContext();
  rpc->context->set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  WorkerStub(address)->async()->Abort(
      rpc->context.get(), request.get(), &rpc->response,
      [rpc, request, finish](grpc::Status) { finish(true); });
  return reactor;
}

grpc::ServerUnaryReactor* RouterService::ListWorkers(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* body,
    grpc::ByteBuffer* response_body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto request = std::make_shared<radixkv::v1::ListWorkersRequest>();
  if (absl::Status parsed = process::ParseRawMessage(*body, request.get());
      !parsed.ok()) {
    reactor->Finish(process::ToGrpcStatus(parsed));
    return reactor;
  }
  struct Rpc {
    std::shared_ptr<grpc::ClientContext> context;
    radixkv::v1::StatsRequest request;
    radixkv::v1::StatsResponse stats;
  };
  auto rpc = std::make_shared<Rpc>();
  rpc->context = NewClientContext();
  rpc->context->set_deadline(
      absl::ToChronoTime(absl::Now() + options_.cache_service_timeout));
  cache_service_->async()->Stats(
      rpc->context.get(), &rpc->request, &rpc->stats,
      [this, rpc, reactor, request, response_body](grpc::Status st) {
        if (!st.ok()) {
          reactor->Finish(grpc::Status(
              grpc::StatusCode::UNAVAILABLE,
              absl::StrCat("cache service ", options_.cache_service_address,
                           " unreachable: ", st.error_message())));
          return;
        }
        radixkv::v1::ListWorkersResponse response;
        for (const auto& w : rpc->stats.workers()) {
          if (!request->model().empty() && w.model() != request->model()) {
            continue;
          }
          radixkv::v1::WorkerInfo* info = response.add_workers();
          info->set_worker_id(w.worker_id());
          info->set_address(w.address());
          info->set_epoch(w.epoch());
          info->set_model(w.model());
          *info->mutable_load() = w.load();
          info->set_cached_tokens(w.cached_tokens());
          info->set_capacity_slots(w.capacity_slots());
          info->set_page_size(w.page_size());
          info->set_dispatched_requests(
              load_.Get(w.worker_id()).dispatched_requests);
        }
        reactor->Finish(process::ToGrpcStatus(
            process::SerializeRawMessage(response, response_body)));
      });
  return reactor;
}

grpc::ServerUnaryReactor* RouterService::ListModels(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* body,
    grpc::ByteBuffer* response_body) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  radixkv::v1::ListModelsRequest request;
  if (absl::Status parsed = process::ParseRawMessage(*body, &request);
      !parsed.ok()) {
    reactor->Finish(process::ToGrpcStatus(parsed));
    return reactor;
  }
  struct Rpc {
    std::shared_ptr<grpc::ClientContext> context;
    radixkv::v1::StatsRequest request;
    radixkv::v1::StatsResponse stats;
  };
  auto rpc = std::make_shared<Rpc>();
  rpc->context = NewClientContext();
  rpc->context->set_deadline(
      absl::ToChronoTime(absl::Now() + options_.cache_service_timeout));
  cache_service_->async()->Stats(
      rpc->context.get(), &rpc->request, &rpc->stats,
      [this, rpc, reactor, response_body](grpc::Status st) {
        if (!st.ok()) {
          reactor->Finish(grpc::Status(
              grpc::StatusCode::UNAVAILABLE,
              absl::StrCat("cache service ", options_.cache_service_address,
                           " unreachable: ", st.error_message())));
          return;
        }
        RecordServedModels(rpc->stats);
        std::map<std::string, int> workers;
        for (const auto& w : rpc->stats.workers()) ++workers[w.model()];
        radixkv::v1::ListModelsResponse response;
        for (const auto& [name, n] : workers) {
          radixkv::v1::ModelInfo* m = response.add_models();
          m->set_name(name);
          m->set_workers(n);
          if (std::shared_ptr<const ModelCatalog::Entry> e = FindModel(name)) {
            m->set_tokenizer(e->tokenizer != nullptr);
            m->set_chat_template(e->chat_template.has_value());
            m->set_max_position_embeddings(e->max_position_embeddings);
          }
        }
        reactor->Finish(process::ToGrpcStatus(
            process::SerializeRawMessage(response, response_body)));
      });
  return reactor;
}

}  // namespace radixkv::router
