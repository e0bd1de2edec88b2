#include "router/router_service.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/generate_request_checks.h"
#include "spdlog/spdlog.h"

namespace radixkv::router {
namespace {

using radixkv::v1::GenerateRequest;
using radixkv::v1::GenerateResponse;

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()),
                      std::string(s.message()));
}

// Errors of the request itself: retrying elsewhere cannot help.
bool IsRequestError(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::CANCELLED:
      return true;
    default:
      return false;
  }
}

std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

// A fresh request id: kAssignedRequestIdPrefix + 128 random bits in hex.
std::string AssignRequestId() {
  absl::BitGen gen;  // Seeded from the OS entropy pool; not shared.
  const uint64_t hi = absl::Uniform<uint64_t>(gen);
  const uint64_t lo = absl::Uniform<uint64_t>(gen);
  return absl::StrCat(kAssignedRequestIdPrefix, absl::Hex(hi, absl::kZeroPad16),
                      absl::Hex(lo, absl::kZeroPad16));
}

// "a; b (x2 workers)": identical messages once, with their count.
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

// How long a discovered model is used without asking the cache service
// again (workers serving another model may register meanwhile).
constexpr absl::Duration kModelDiscoveryTtl = absl::Seconds(2);
// How often the background discovery retries while nothing is discovered
// (no worker registered yet, or the cache service unreachable).
constexpr absl::Duration kModelDiscoveryRetry = absl::Milliseconds(100);

}  // namespace

// One Generate in progress, shared with Abort and the disconnect watcher.
struct RouterService::InFlight {
  absl::Mutex mu;
  // Null once the handler is returning.
  grpc::ServerContext* server_context ABSL_GUARDED_BY(mu) = nullptr;
  // The current worker attempt's context (null between attempts).
  grpc::ClientContext* worker_context ABSL_GUARDED_BY(mu) = nullptr;
  std::string worker_address ABSL_GUARDED_BY(mu);
  bool aborted ABSL_GUARDED_BY(mu) = false;
  bool client_gone ABSL_GUARDED_BY(mu) = false;
};

absl::StatusOr<std::unique_ptr<RouterService>> RouterService::Create(
    const RouterOptions& options, std::unique_ptr<PromptTokenizer> tokenizer,
    RouterMetrics* metrics) {
  if (options.max_attempts < 1) {
    return absl::InvalidArgumentError("max_attempts must be >= 1");
  }
  std::unique_ptr<RouterService> service(
      new RouterService(options, std::move(tokenizer), metrics));
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
  service->watcher_ =
      std::thread([s = service.get()] { s->WatchDisconnects(); });
  if (options.model.empty()) {
    service->model_refresher_ =
        std::thread([s = service.get()] { s->RefreshDiscoveredModel(); });
  }
  return service;
}

RouterService::RouterService(const RouterOptions& options,
                             std::unique_ptr<PromptTokenizer> tokenizer,
                             RouterMetrics* metrics)
    : options_(options),
      tokenizer_(std::move(tokenizer)),
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

RouterService::~RouterService() { Shutdown(); }

void RouterService::Shutdown() {
  if (shut_down_.exchange(true)) return;
  stop_.Notify();
  if (watcher_.joinable()) watcher_.join();
  if (model_refresher_.joinable()) model_refresher_.join();
  absl::MutexLock lock(&mu_);
  for (auto& [_, f] : in_flight_) {
    absl::MutexLock l(&f->mu);
    if (f->worker_context != nullptr) f->worker_context->TryCancel();
  }
}

void RouterService::WatchDisconnects() {
  while (!stop_.WaitForNotificationWithTimeout(absl::Milliseconds(20))) {
    std::vector<std::shared_ptr<InFlight>> snapshot;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [_, f] : in_flight_) snapshot.push_back(f);
    }
    for (auto& f : snapshot) {
      absl::MutexLock l(&f->mu);
      if (f->server_context != nullptr && !f->client_gone &&
          f->server_context->IsCancelled()) {
        f->client_gone = true;
        if (f->worker_context != nullptr) f->worker_context->TryCancel();
      }
    }
  }
}

PlacementPolicy* RouterService::PolicyFor(grpc::ServerContext* context) {
  if (options_.allow_policy_override) {
    const auto& md = context->client_metadata();
    auto it = md.find(kPolicyOverrideMetadataKey);
    if (it != md.end()) {
      auto p =
          policies_.find(std::string(it->second.data(), it->second.size()));
      if (p != policies_.end()) return p->second.get();
      return nullptr;  // a typo must not silently measure the default
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

void RouterService::RefreshDiscoveredModel() {
  do {
    // Errors are the request path's to report (it discovers the model
    // itself while none is fresh).
    const absl::Status discovered =
        DiscoverModel(
            std::min(options_.cache_service_timeout, kModelDiscoveryTtl / 4))
            .status();
    if (stop_.WaitForNotificationWithTimeout(absl::IsUnavailable(discovered)
                                                 ? kModelDiscoveryRetry
                                                 : kModelDiscoveryTtl / 2)) {
      return;
    }
  } while (true);
}

absl::StatusOr<std::string> RouterService::ResolveModel(
    const std::string& requested) {
  if (!requested.empty()) return requested;
  if (!options_.model.empty()) return options_.model;
  {
    absl::MutexLock lock(&mu_);
    if (!discovered_model_.empty() &&
        absl::Now() - discovered_at_ < kModelDiscoveryTtl) {
      return discovered_model_;
    }
  }
  return DiscoverModel(options_.cache_service_timeout);
}

absl::StatusOr<std::string> RouterService::DiscoverModel(
    absl::Duration timeout) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  radixkv::v1::StatsResponse stats;
  grpc::Status st = cache_service_->Stats(&ctx, {}, &stats);
  absl::MutexLock lock(&mu_);
  if (!st.ok()) {
    if (!discovered_model_.empty()) return discovered_model_;
    return absl::UnavailableError(absl::StrCat(
        "cache service ", options_.cache_service_address,
        " unreachable while resolving the model: ", st.error_message()));
  }
  std::vector<std::string> models;
  for (const auto& w : stats.workers()) {
    if (std::find(models.begin(), models.end(), w.model()) == models.end()) {
      models.push_back(w.model());
    }
  }
  if (models.empty()) {
    return absl::UnavailableError("no live worker is registered");
  }
  if (models.size() > 1) {
    std::sort(models.begin(), models.end());
    return absl::InvalidArgumentError(
        absl::StrCat("several models are served (", absl::StrJoin(models, ", "),
                     "): set GenerateRequest.model"));
  }
  discovered_model_ = models[0];
  discovered_at_ = absl::Now();
  return discovered_model_;
}

absl::StatusOr<std::vector<WorkerCandidate>> RouterService::LiveWorkers(
    const std::string& model, const std::string& cache_salt,
    const std::vector<int32_t>& tokens, const std::string& request_id,
    bool* from_match, absl::Duration* rpc_time) {
  *from_match = false;
  std::vector<WorkerCandidate> out;
  grpc::Status st;
  grpc::ClientContext ctx;
  const absl::Time rpc_start = absl::Now();
  ctx.set_deadline(
      absl::ToChronoTime(rpc_start + options_.cache_service_timeout));
  ctx.AddMetadata(kRequestIdMetadataKey, request_id);
  if (!tokens.empty()) {
    radixkv::v1::MatchRequest req;
    req.set_model(model);
    req.set_cache_salt(cache_salt);
    req.mutable_tokens()->Add(tokens.begin(), tokens.end());
    radixkv::v1::MatchResponse resp;
    st = cache_service_->Match(&ctx, req, &resp);
    if (rpc_time != nullptr) *rpc_time = absl::Now() - rpc_start;
    if (st.ok()) {
      *from_match = true;
      for (const auto& w : resp.workers()) {
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
        out.push_back(std::move(c));
      }
    } else if (st.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cache service rejected the prompt: ", st.error_message()));
    }
  } else {
    radixkv::v1::StatsResponse stats;
    st = cache_service_->Stats(&ctx, {}, &stats);
    if (rpc_time != nullptr) *rpc_time = absl::Now() - rpc_start;
    if (st.ok()) {
      for (const auto& w : stats.workers()) {
        if (w.model() != model) continue;
        WorkerCandidate c;
        c.worker_id = w.worker_id();
        c.address = w.address();
        c.epoch = w.epoch();
        c.load_tokens = w.load().outstanding_tokens();
        c.heartbeat_age = absl::Milliseconds(w.heartbeat_age_ms());
        out.push_back(std::move(c));
      }
    }
  }
  if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    // The cache service accepted the call but did not answer in time
    // (frozen, overloaded). Placing on the last known workers would not
    // help: their Acquire waits on the same service (the worker's
    // --cache_rpc_timeout_ms) and fails, so every attempt would cost both
    // timeouts and blame a healthy worker. Generate ends the request.
    // A refused connection (a restart in progress) fails fast on both
    // sides instead: that case still falls back to the last known workers
    // and is retried below.
    return absl::DeadlineExceededError(
        absl::StrCat(options_.cache_service_address, " did not answer ",
                     tokens.empty() ? "Stats" : "Match", " within ",
                     absl::FormatDuration(options_.cache_service_timeout), ": ",
                     st.error_message()));
  }
  absl::MutexLock lock(&mu_);
  if (st.ok()) {
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

grpc::Status RouterService::Generate(
    grpc::ServerContext* context, const GenerateRequest* request,
    grpc::ServerWriter<GenerateResponse>* writer) {
  const absl::Time arrival = absl::Now();
  PlacementPolicy* policy = PolicyFor(context);
  // An unknown policy override is counted under the default policy.
  const std::string policy_name(
      (policy != nullptr ? policy : default_policy_)->name());
  std::string decision = "none";
  bool first_token_seen = false;
  auto finish = [&](const std::string& outcome, grpc::Status st) {
    metrics_->CountRequest(policy_name, decision, outcome);
    metrics_->ObserveRequestDuration(
        policy_name, outcome, absl::ToDoubleSeconds(absl::Now() - arrival));
    return st;
  };
  if (policy == nullptr) {
    const auto& md = context->client_metadata();
    const auto it = md.find(kPolicyOverrideMetadataKey);
    const std::string name(it->second.data(), it->second.size());
    return finish(
        "invalid_argument",
        grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat(
                "unknown placement policy ",
                name.size() <= 64 ? absl::StrCat("'", name, "'")
                                  : absl::StrCat("of ", name.size(), " bytes"),
                " in metadata ", kPolicyOverrideMetadataKey, " (one of ",
                absl::StrJoin(PlacementPolicyNames(), ", "), ")")));
  }

  const bool has_text = request->prompt_case() == GenerateRequest::kText;
  if (has_text && options_.max_prompt_text_bytes > 0 &&
      static_cast<int64_t>(request->text().size()) >
          options_.max_prompt_text_bytes) {
    // Before tokenizing: a huge text would cost seconds of CPU for a prompt
    // that cannot fit the model's context anyway.
    return finish(
        "invalid_argument",
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     absl::StrCat("prompt text of ", request->text().size(),
                                  " bytes exceeds the limit of ",
                                  options_.max_prompt_text_bytes, " bytes (",
                                  worker::kMaxPromptBytesPerPosition,
                                  " bytes per position of the model's "
                                  "context)")));
  }
  if (absl::StartsWith(request->request_id(), kAssignedRequestIdPrefix)) {
    return finish("invalid_argument",
                  grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               absl::StrCat("request_id must not start with '",
                                            kAssignedRequestIdPrefix,
                                            "' (reserved for ids the router "
                                            "assigns)")));
  }
  // The contract's model-independent rules, before placement: a malformed
  // request costs no Match and is not dispatched (the worker checks the
  // model-dependent ones: vocab, context, its max_new_tokens limit).
  if (absl::Status valid = radixkv::v1::CheckModelIndependentFields(*request);
      !valid.ok()) {
    return finish("invalid_argument",
                  grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               std::string(valid.message())));
  }
  if (request->model().size() > kMaxModelNameBytes) {
    // No worker can serve it (the cache service registers names of at most
    // kMaxModelNameBytes), and echoing it would overflow the status metadata.
    return finish(
        "invalid_argument",
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     absl::StrCat("model has ", request->model().size(),
                                  " bytes; at most ", kMaxModelNameBytes)));
  }
  GenerateRequest forward = *request;
  if (forward.request_id().empty()) forward.set_request_id(AssignRequestId());
  const std::string& request_id = forward.request_id();
  // The end of the drain (Shutdown) cut the request: a clear status instead
  // of the worker stream's CANCELLED or gRPC's "Cancelling all calls".
  auto shutting_down = [&](int64_t streamed_tokens) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        absl::StrCat("request ", request_id,
                                     ": the router is shutting "
                                     "down (its drain timeout passed) after ",
                                     streamed_tokens, " streamed tokens"));
  };
  std::vector<int32_t> tokens;
  if (!has_text) {
    tokens.assign(request->token_ids().ids().begin(),
                  request->token_ids().ids().end());
  } else if (tokenizer_ != nullptr) {
    auto encoded = tokenizer_->Encode(request->text());
    if (!encoded.ok()) {
      return finish("invalid_argument", ToGrpc(encoded.status()));
    }
    tokens = *std::move(encoded);
    forward.mutable_token_ids()->mutable_ids()->Assign(tokens.begin(),
                                                       tokens.end());
  }

  auto flight = std::make_shared<InFlight>();
  {
    absl::MutexLock lock(&mu_);
    if (!in_flight_.emplace(request_id, flight).second) {
      return finish("already_exists",
                    grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                                 absl::StrCat("request_id ", request_id,
                                              " is already in flight")));
    }
  }
  {
    absl::MutexLock l(&flight->mu);
    flight->server_context = context;
  }
  metrics_->AddInFlight(1);
  struct Cleanup {
    RouterService* self;
    std::shared_ptr<InFlight> flight;
    std::string id;
    ~Cleanup() {
      {
        absl::MutexLock l(&flight->mu);
        flight->server_context = nullptr;
      }
      absl::MutexLock lock(&self->mu_);
      self->in_flight_.erase(id);
      self->metrics_->AddInFlight(-1);
    }
  } cleanup{this, flight, request_id};

  const absl::Time prepared = absl::Now();  // parsed, tokenized, registered
  auto model = ResolveModel(request->model());
  const absl::Time resolved = absl::Now();
  if (!model.ok()) {
    return finish(model.status().code() == absl::StatusCode::kUnavailable
                      ? "no_worker"
                      : "invalid_argument",
                  ToGrpc(model.status()));
  }

  const int64_t decode_tokens =
      std::max(0, request->sampling().max_new_tokens());
  absl::flat_hash_set<std::string> failed;  // worker ids failed this request
  absl::flat_hash_set<std::string> rejected_for_memory;  // subset of failed
  std::vector<std::string> errors;
  bool all_resource_exhausted = true;
  bool routed_once = false;
  // Why the previous attempt failed; counted as a retry when the next one is
  // dispatched (the last failed attempt is no failover).
  std::string retry_reason;
  // The client's deadline (also that of every worker attempt) has passed:
  // an attempt that failed then did not fail through the worker's fault.
  auto deadline_passed = [&] {
    return context->deadline() !=
               std::chrono::system_clock::time_point::max() &&
           std::chrono::system_clock::now() >= context->deadline();
  };
  auto deadline_exceeded = [&](int64_t streamed_tokens) {
    return finish(
        "deadline_exceeded",
        grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                     absl::StrCat("request ", request_id,
                                  ": the client's deadline passed "
                                  "after ",
                                  streamed_tokens, " streamed tokens")));
  };
  for (int attempt = 0; attempt < options_.max_attempts; ++attempt) {
    if (attempt > 0) {
      absl::SleepFor(options_.retry_backoff * (1 << std::min(attempt - 1, 6)));
      if (deadline_passed()) return deadline_exceeded(0);
    }
    {
      absl::MutexLock l(&flight->mu);
      if (flight->aborted || flight->client_gone || shut_down_.load()) break;
    }
    bool from_match = false;
    absl::Duration rpc_time = absl::ZeroDuration();
    auto live = LiveWorkers(*model, request->cache_salt(), tokens, request_id,
                            &from_match, &rpc_time);
    if (!live.ok()) {
      if (live.status().code() == absl::StatusCode::kInvalidArgument) {
        return finish("invalid_argument", ToGrpc(live.status()));
      }
      if (live.status().code() == absl::StatusCode::kDeadlineExceeded) {
        // Not a worker failure and not worth another attempt (LiveWorkers):
        // a prompt UNAVAILABLE instead of the client's DEADLINE_EXCEEDED.
        spdlog::warn("request {}: cache service unavailable: {}", request_id,
                     std::string(live.status().message()));
        return finish(
            "cache_service_unavailable",
            grpc::Status(
                grpc::StatusCode::UNAVAILABLE,
                absl::StrCat(
                    "request ", request_id,
                    ": cache service unavailable: ", live.status().message(),
                    errors.empty() ? ""
                                   : absl::StrCat("; earlier attempts: ",
                                                  JoinDistinct(errors)))));
      }
      errors.push_back(std::string(live.status().message()));
      all_resource_exhausted = false;
      continue;
    }
    if (live->empty()) {
      // Deterministic until a worker registers: no retry.
      if (!errors.empty()) {
        errors.push_back(absl::StrCat("no live worker serves model ", *model));
        all_resource_exhausted = false;
        break;
      }
      return finish(
          "no_worker",
          grpc::Status(grpc::StatusCode::UNAVAILABLE,
                       absl::StrCat("no live worker serves model ", *model)));
    }
    // Prefer workers that have not failed (this request, or recently).
    PlacementInput input;
    input.tokens = tokens;
    input.max_new_tokens = decode_tokens;
    input.prefix_cache_disabled = request->disable_prefix_cache();
    for (const WorkerCandidate& c : *live) {
      if (!failed.contains(c.worker_id) &&
          !failure_marks_.IsAvoided(c.worker_id, c.epoch, absl::Now())) {
        input.candidates.push_back(c);
      }
    }
    if (input.candidates.empty()) {
      // A worker that rejected the request for memory (the prompt cannot
      // fit its pool, its queue is full) would only reject it again.
      for (const WorkerCandidate& c : *live) {
        if (!rejected_for_memory.contains(c.worker_id)) {
          input.candidates.push_back(c);
        }
      }
    }
    if (input.candidates.empty()) break;  // Every live worker rejected it.
    for (WorkerCandidate& c : input.candidates) {
      WorkerLoadTracker::WorkerCounts counts = load_.Get(c.worker_id);
      c.load_tokens =
          load_.EstimateLoad(c.worker_id, c.load_tokens, c.heartbeat_age);
      c.in_flight_requests = counts.in_flight_requests;
    }
    auto chosen = policy->Choose(input);
    if (!chosen.ok()) return finish("internal", ToGrpc(chosen.status()));
    const WorkerCandidate target = input.candidates[chosen->index];
    decision = std::string(PlacementDecisionName(chosen->kind));
    if (!routed_once) {
      const absl::Time decided = absl::Now();
      metrics_->ObserveRouting(
          policy_name, absl::ToDoubleSeconds(decided - arrival),
          static_cast<int64_t>(tokens.size()), chosen->predicted_hit_tokens);
      routed_once = true;
      // The phases of the routing latency, us (tracing its tail: join with
      // the cache service's "match" debug line on the request id).
      spdlog::debug(
          "routing {} at {} us: total {} = prepare {} + resolve {} + "
          "match_rpc {} + other {}",
          request_id, absl::ToUnixMicros(arrival),
          absl::ToInt64Microseconds(decided - arrival),
          absl::ToInt64Microseconds(prepared - arrival),
          absl::ToInt64Microseconds(resolved - prepared),
          absl::ToInt64Microseconds(rpc_time),
          absl::ToInt64Microseconds(decided - resolved - rpc_time));
    }
    const int64_t prefill =
        static_cast<int64_t>(tokens.size()) - chosen->predicted_hit_tokens;
    load_.Dispatch(target.worker_id, prefill, decode_tokens);
    policy->OnDispatched(target.worker_id, target.epoch, tokens);
    metrics_->CountDispatch(target.worker_id);
    if (!retry_reason.empty()) {
      metrics_->CountRetry(retry_reason);
      retry_reason.clear();
    }
    spdlog::debug("request {} -> {} ({}, {}, predicted hit {}/{})", request_id,
                  target.worker_id, policy_name, decision,
                  chosen->predicted_hit_tokens, tokens.size());

    // Stream the attempt.
    auto stub = WorkerStub(target.address);
    grpc::ClientContext worker_ctx;
    if (context->deadline() != std::chrono::system_clock::time_point::max()) {
      worker_ctx.set_deadline(context->deadline());
    }
    {
      absl::MutexLock l(&flight->mu);
      if (flight->aborted || flight->client_gone || shut_down_.load()) {
        load_.Finish(target.worker_id, prefill + decode_tokens);
        policy->OnFinished(target.worker_id, target.epoch, tokens);
        break;
      }
      flight->worker_context = &worker_ctx;
      flight->worker_address = target.address;
    }
    int64_t charged = prefill + decode_tokens;
    int64_t streamed_tokens = 0;
    bool forwarded = false;
    bool write_failed = false;
    std::unique_ptr<grpc::ClientReader<GenerateResponse>> reader =
        stub->Generate(&worker_ctx, forward);
    GenerateResponse chunk;
    while (reader->Read(&chunk)) {
      if (!forwarded) load_.Progress(target.worker_id, prefill, &charged);
      load_.Progress(target.worker_id, chunk.token_ids_size(), &charged);
      if (chunk.worker_id().empty()) chunk.set_worker_id(target.worker_id);
      if (chunk.request_id().empty()) chunk.set_request_id(request_id);
      if (!writer->Write(chunk)) {
        write_failed = true;
        worker_ctx.TryCancel();
        break;
      }
      forwarded = true;
      streamed_tokens += chunk.token_ids_size();
      if (!first_token_seen && chunk.token_ids_size() > 0) {
        first_token_seen = true;
        metrics_->ObserveTimeToFirstToken(
            policy_name, absl::ToDoubleSeconds(absl::Now() - arrival));
      }
    }
    grpc::Status st = reader->Finish();
    bool aborted, client_gone;
    {
      absl::MutexLock l(&flight->mu);
      flight->worker_context = nullptr;
      aborted = flight->aborted;
      client_gone = flight->client_gone || write_failed;
    }
    load_.Finish(target.worker_id, charged);
    policy->OnFinished(target.worker_id, target.epoch, tokens);

    if (aborted) {
      return finish("aborted", grpc::Status(grpc::StatusCode::CANCELLED,
                                            absl::StrCat("request ", request_id,
                                                         " was aborted")));
    }
    if (!st.ok() && deadline_passed()) {
      // Not the worker's failure (no MarkFailed) and no retry: the worker
      // stream's own DEADLINE_EXCEEDED may come before the router sees its
      // call cancelled.
      return deadline_exceeded(streamed_tokens);
    }
    if (client_gone || context->IsCancelled()) {
      return finish("client_cancelled",
                    grpc::Status(grpc::StatusCode::CANCELLED,
                                 "the client cancelled the request"));
    }
    if (st.ok()) return finish("ok", grpc::Status::OK);
    if (shut_down_.load()) {
      return finish("shutdown", shutting_down(streamed_tokens));
    }
    const std::string what =
        absl::StrCat("worker ", target.worker_id, " (", target.address, ") ",
                     CodeName(st.error_code()), ": ", st.error_message());
    if (forwarded) {
      if (st.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
        failure_marks_.MarkFailed(target.worker_id, target.epoch, absl::Now());
      }
      spdlog::warn("request {}: {} after {} streamed tokens", request_id, what,
                   streamed_tokens);
      return finish(
          "failed_after_tokens",
          grpc::Status(
              grpc::StatusCode::UNAVAILABLE,
              absl::StrCat("request ", request_id, " failed after ",
                           streamed_tokens, " tokens were streamed: ", what,
                           "; not retried because output was "
                           "already sent")));
    }
    // ALREADY_EXISTS from a worker this request already tried is its own
    // earlier attempt, still registered there (its stream failed on the
    // router's side first): retry rather than report a duplicate id.
    const bool own_earlier_attempt =
        st.error_code() == grpc::StatusCode::ALREADY_EXISTS &&
        failed.contains(target.worker_id);
    if (IsRequestError(st.error_code()) && !own_earlier_attempt) {
      return finish(absl::AsciiStrToLower(CodeName(st.error_code())), st);
    }
    if (st.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
      all_resource_exhausted = false;
      failure_marks_.MarkFailed(target.worker_id, target.epoch, absl::Now());
    } else {
      rejected_for_memory.insert(target.worker_id);
    }
    failed.insert(target.worker_id);
    errors.push_back(what);
    retry_reason = absl::AsciiStrToLower(CodeName(st.error_code()));
    spdlog::info("request {}: attempt {} failed before the first token: {}",
                 request_id, attempt + 1, what);
  }
  if (shut_down_.load()) return finish("shutdown", shutting_down(0));
  {
    absl::MutexLock l(&flight->mu);
    if (flight->aborted) {
      return finish("aborted", grpc::Status(grpc::StatusCode::CANCELLED,
                                            absl::StrCat("request ", request_id,
                                                         " was aborted")));
    }
    if (flight->client_gone) {
      return finish("client_cancelled",
                    grpc::Status(grpc::StatusCode::CANCELLED,
                                 "the client cancelled the request"));
    }
  }
  const std::string summary =
      errors.size() == 1
          ? absl::StrCat("request ", request_id, ": ", errors[0])
          : absl::StrCat("request ", request_id,
                         " failed on every attempt before its first token (",
                         errors.size(), " attempts): ", JoinDistinct(errors));
  if (all_resource_exhausted && !errors.empty()) {
    return finish("resource_exhausted",
                  grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, summary));
  }
  return finish("failed_before_first_token",
                grpc::Status(grpc::StatusCode::UNAVAILABLE, summary));
}

grpc::Status RouterService::Abort(grpc::ServerContext* context,
                                  const radixkv::v1::AbortRequest* request,
                                  radixkv::v1::AbortResponse* response) {
  if (absl::Status valid = radixkv::v1::CheckRequestId(request->request_id());
      !valid.ok()) {
    return ToGrpc(valid);  // never in flight; the id is not echoed
  }
  std::shared_ptr<InFlight> flight;
  {
    absl::MutexLock lock(&mu_);
    auto it = in_flight_.find(request->request_id());
    if (it != in_flight_.end()) flight = it->second;
  }
  if (flight == nullptr) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no request ", request->request_id(),
                                     " is in flight on this router"));
  }
  std::string address;
  {
    absl::MutexLock l(&flight->mu);
    if (flight->aborted) {
      // Another Abort got there first: exactly one caller sees true.
      response->set_aborted(false);
      return grpc::Status::OK;
    }
    flight->aborted = true;
    address = flight->worker_address;
    if (flight->worker_context != nullptr) flight->worker_context->TryCancel();
  }
  if (!address.empty()) {
    // Cancelling the stream already makes the worker release the request;
    // the explicit Abort also covers a request still queued there.
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    radixkv::v1::AbortResponse ignored;
    WorkerStub(address)->Abort(&ctx, *request, &ignored);
  }
  response->set_aborted(true);
  return grpc::Status::OK;
}

grpc::Status RouterService::ListWorkers(
    grpc::ServerContext* context,
    const radixkv::v1::ListWorkersRequest* request,
    radixkv::v1::ListWorkersResponse* response) {
  grpc::ClientContext ctx;
  ctx.set_deadline(
      absl::ToChronoTime(absl::Now() + options_.cache_service_timeout));
  radixkv::v1::StatsResponse stats;
  grpc::Status st = cache_service_->Stats(&ctx, {}, &stats);
  if (!st.ok()) {
    return grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        absl::StrCat("cache service ", options_.cache_service_address,
                     " unreachable: ", st.error_message()));
  }
  for (const auto& w : stats.workers()) {
    if (!request->model().empty() && w.model() != request->model()) continue;
    radixkv::v1::WorkerInfo* info = response->add_workers();
    info->set_worker_id(w.worker_id());
    info->set_address(w.address());
    info->set_epoch(w.epoch());
    info->set_model(w.model());
    *info->mutable_load() = w.load();
    info->set_cached_tokens(w.cached_tokens());
    info->set_capacity_slots(w.capacity_slots());
    info->set_page_size(w.page_size());
    info->set_dispatched_requests(load_.Get(w.worker_id()).dispatched_requests);
  }
  return grpc::Status::OK;
}

}  // namespace radixkv::router
