// radixkv router: cache-aware placement and the public Generate API
// (router_service.h). Stateless: any number of replicas may run against one
// cache service.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "model/model_config.h"
#include "process/http_server.h"
#include "process/process_lifecycle.h"
#include "process/server_flags.h"
#include "proto/prompt_text_limit.h"
#include "router/api_keys.h"
#include "router/model_catalog.h"
#include "router/openai/openai_frontend.h"
#include "router/placement_policy.h"
#include "router/router_metrics.h"
#include "router/router_service.h"
#include "spdlog/spdlog.h"

RADIXKV_DEFINE_SERVER_FLAGS(
    50050, 9100, 5,
    "Seconds SIGTERM/SIGINT waits for in-flight RPCs (Generate streams) to "
    "finish after readiness drops to NOT_SERVING, before ending what is left "
    "with UNAVAILABLE (\"the router is shutting down\"); in [0, 3600]. Keep "
    "it below the pod's terminationGracePeriodSeconds (the exit takes up to "
    "1 s more).");
ABSL_FLAG(std::string, cache_service, "127.0.0.1:50051",
          "host:port of the cache service (Match, Stats).");
ABSL_FLAG(std::string, policy, "cache_aware",
          "Placement policy: cache_aware, round_robin, least_load, "
          "approx_tree.");
ABSL_FLAG(double, prefill_weight, 1.0,
          "cache_aware/approx_tree: score weight per uncached prompt token.");
ABSL_FLAG(double, load_weight, 0.25,
          "cache_aware/approx_tree: score weight per outstanding token "
          "(per uncached prompt token: --prefill_weight).");
ABSL_FLAG(int64_t, balance_abs_tokens, 1024,
          "Load-imbalance guard: minimum load difference (tokens) between "
          "the best-scored and the least loaded worker before the guard "
          "sends the request to the least loaded one.");
ABSL_FLAG(double, balance_rel_ratio, 2.0,
          "Load-imbalance guard: ... and minimum load ratio between them.");
ABSL_FLAG(int32_t, miss_affinity_tokens, 32,
          "cache_aware: on a miss everywhere, send the prompt to the worker "
          "chosen by rendezvous hashing of this many leading tokens; 0 = "
          "least loaded.");
ABSL_FLAG(int64_t, miss_affinity_slack_tokens, 64,
          "cache_aware: ... unless that worker's load exceeds the least "
          "loaded one's by more than this many tokens.");
ABSL_FLAG(int64_t, finished_affinity_grace_ms, 2000,
          "cache_aware: a finished request's prompt keeps attracting "
          "requests sharing it on its worker for this long, ms.");
ABSL_FLAG(double, memory_weight, 1.0,
          "cache_aware: on a miss, score weight per token of room on a "
          "worker (free + evictable KV slots minus the KV this router made "
          "it write within --memory_hot_window_ms); the miss goes to the "
          "lowest load_weight * load - memory_weight * room. 0 = the "
          "rendezvous home of --miss_affinity_tokens.");
ABSL_FLAG(int64_t, memory_hot_window_ms, 10000,
          "cache_aware: KV written within this long counts as hot (not "
          "room), ms.");
ABSL_FLAG(int64_t, approx_tree_capacity_tokens, 1 << 20,
          "approx_tree: tokens remembered per worker.");
ABSL_FLAG(int, max_attempts, 3,
          "Worker attempts per request before its first token (failover).");
ABSL_FLAG(std::string, model, "",
          "Model matched when a request leaves `model` empty; empty = the "
          "model the registered workers serve.");
ABSL_FLAG(std::string, models, "",
          "Models the router tokenizes for, as name=folder[,name=folder...] "
          "(the checkpoint folder: config.json, tokenizer.json or "
          "tokenizer.model, tokenizer_config.json / chat_template.jinja). "
          "A request for a model found neither here nor in --models_dir is "
          "forwarded as text (its workers tokenize; no chat).");
ABSL_FLAG(std::string, models_dir, "",
          "Folder whose subfolder <model name> is the checkpoint of a model "
          "not in --models (loaded on its first request).");
ABSL_FLAG(int, http_port, 0,
          "Port of the OpenAI-compatible HTTP API (/v1/completions, "
          "/v1/chat/completions, /v1/models, /tokenize, /detokenize, "
          "/health); 0 = off.");
ABSL_FLAG(std::string, api_keys_file, "",
          "File of API keys, one per line (re-read on SIGHUP): the HTTP API "
          "(except /health) and gRPC Generate/Abort then need "
          "\"Authorization: Bearer <key>\". Empty = no key needed.");
ABSL_FLAG(std::string, model_dir, "models/radixkv-demo-llama",
          "Checkpoint folder of one model, named after its last path "
          "component (as workers register it with --model_name): the same "
          "as --models=<name>=<folder>. Empty = none.");
ABSL_FLAG(bool, allow_policy_override, true,
          "Honour the radixkv-placement-policy request metadata (policy "
          "comparisons on one cluster).");
ABSL_FLAG(int, worker_keepalive_ms, 10000,
          "HTTP/2 keepalive ping period of the router's worker connections, "
          "ms, also while idle; 0 = disabled, else at least 1000 (what the "
          "servers accept). With --worker_keepalive_timeout_ms it bounds how "
          "long a frozen worker (TCP up, process not answering: SIGSTOP, "
          "hung host) holds its requests: about the sum of the two, after "
          "which requests without a token yet are retried on another worker "
          "and streaming ones end with UNAVAILABLE.");
ABSL_FLAG(int, worker_keepalive_timeout_ms, 5000,
          "How long a keepalive ping (and a connection attempt to a worker) "
          "may wait for the worker's answer before the connection is "
          "closed, ms; in [100, 600000].");
ABSL_FLAG(int64_t, max_in_flight_requests, 4096,
          "Requests in flight on this router at most; beyond, a request is "
          "refused at once with RESOURCE_EXHAUSTED naming this bound.");
ABSL_FLAG(int64_t, max_in_flight_per_worker, 64,
          "Requests this router keeps in flight on one worker at most (0 = "
          "no bound); when every worker of the model is at the bound the "
          "request is refused at once with RESOURCE_EXHAUSTED instead of "
          "queueing on a worker. About twice the workers' "
          "--max_running_requests: one batch running, one waiting.");
namespace {

namespace process = radixkv::process;
namespace router = radixkv::router;

absl::Status ValidateFlags() {
  if (absl::Status s = process::ValidateServerFlags(process::GetServerFlags());
      !s.ok()) {
    return s;
  }
  if (auto p = router::CreatePlacementPolicy(absl::GetFlag(FLAGS_policy), {});
      !p.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--policy: ", p.status().message()));
  }
  if (absl::GetFlag(FLAGS_max_attempts) < 1) {
    return absl::InvalidArgumentError("--max_attempts must be >= 1");
  }
  if (absl::GetFlag(FLAGS_prefill_weight) < 0 ||
      absl::GetFlag(FLAGS_load_weight) < 0 ||
      absl::GetFlag(FLAGS_balance_abs_tokens) < 0 ||
      absl::GetFlag(FLAGS_balance_rel_ratio) < 1.0 ||
      absl::GetFlag(FLAGS_memory_weight) < 0 ||
      absl::GetFlag(FLAGS_memory_hot_window_ms) < 0) {
    return absl::InvalidArgumentError(
        "--prefill_weight, --load_weight, --balance_abs_tokens, "
        "--memory_weight, --memory_hot_window_ms must be >= 0 and "
        "--balance_rel_ratio >= 1");
  }
  const int keepalive = absl::GetFlag(FLAGS_worker_keepalive_ms);
  if (keepalive != 0 && (keepalive < process::kMinClientKeepaliveTimeMs ||
                         keepalive > 86'400'000)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--worker_keepalive_ms must be 0 or in [",
                     process::kMinClientKeepaliveTimeMs,
                     ", 86400000] (servers answer faster pings with GOAWAY)"));
  }
  if (absl::Status s = process::CheckFlagRanges({
          {"worker_keepalive_timeout_ms",
           absl::GetFlag(FLAGS_worker_keepalive_timeout_ms), 100, 600'000},
          {"http_port", absl::GetFlag(FLAGS_http_port), 0, 65535},
          {"max_in_flight_requests",
           absl::GetFlag(FLAGS_max_in_flight_requests), 1, INT64_MAX},
          {"max_in_flight_per_worker",
           absl::GetFlag(FLAGS_max_in_flight_per_worker), 0, INT64_MAX},
      });
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          router::ModelCatalog::ParseModelsFlag(absl::GetFlag(FLAGS_models))
              .status();
      !s.ok()) {
    return s;
  }
  if (absl::GetFlag(FLAGS_cache_service).empty()) {
    return absl::InvalidArgumentError("--cache_service must be host:port");
  }
  return absl::OkStatus();
}

// The models of --models plus the one of --model_dir (named after its last
// path component). Each is loaded now, so a broken folder is reported at
// start-up.
absl::StatusOr<std::unique_ptr<router::ModelCatalog>> LoadModelCatalog() {
  auto models =
      router::ModelCatalog::ParseModelsFlag(absl::GetFlag(FLAGS_models));
  if (!models.ok()) return models.status();
  const std::string model_dir = absl::GetFlag(FLAGS_model_dir);
  if (!model_dir.empty()) {
    std::string name = model_dir;
    while (!name.empty() && name.back() == '/') name.pop_back();
    name = name.substr(name.find_last_of('/') + 1);
    models->emplace_back(name, model_dir);
  }
  auto catalog = std::make_unique<router::ModelCatalog>(
      *models, absl::GetFlag(FLAGS_models_dir));
  for (const auto& [name, dir] : *models) {
    if (catalog->Find(name) == nullptr) {
      spdlog::warn("model {} ({}): text prompts go to its workers as text",
                   name, dir);
    }
  }
  return catalog;
}

// The keys of --api_keys_file; null when the flag is empty (no key needed).
absl::StatusOr<std::unique_ptr<router::ApiKeys>> LoadApiKeys() {
  if (absl::GetFlag(FLAGS_api_keys_file).empty()) return nullptr;
  auto keys = router::ApiKeys::Load(absl::GetFlag(FLAGS_api_keys_file));
  if (!keys.ok()) return keys.status();
  spdlog::info("API keys required ({} keys)", (*keys)->size());
  return keys;
}

router::RouterOptions RouterOptionsFromFlags(const router::ApiKeys* api_keys) {
  router::RouterOptions options;
  const std::string model_dir = absl::GetFlag(FLAGS_model_dir);
  if (!model_dir.empty()) {
    // Text longer than the model's context can hold is rejected before it
    // is tokenized (proto/prompt_text_limit.h).
    auto config = radixkv::model::LoadModelConfig(model_dir);
    if (config.ok()) {
      options.max_prompt_text_bytes =
          radixkv::v1::MaxPromptTextBytes(config->max_position_embeddings);
    }
  }
  options.cache_service_address = absl::GetFlag(FLAGS_cache_service);
  options.policy = absl::GetFlag(FLAGS_policy);
  options.cache_aware.prefill_weight = absl::GetFlag(FLAGS_prefill_weight);
  options.cache_aware.load_weight = absl::GetFlag(FLAGS_load_weight);
  options.cache_aware.balance_abs_tokens =
      absl::GetFlag(FLAGS_balance_abs_tokens);
  options.cache_aware.balance_rel_ratio =
      absl::GetFlag(FLAGS_balance_rel_ratio);
  options.cache_aware.miss_affinity_tokens =
      absl::GetFlag(FLAGS_miss_affinity_tokens);
  options.cache_aware.miss_affinity_slack_tokens =
      absl::GetFlag(FLAGS_miss_affinity_slack_tokens);
  options.cache_aware.finished_affinity_grace =
      absl::Milliseconds(absl::GetFlag(FLAGS_finished_affinity_grace_ms));
  options.cache_aware.memory_weight = absl::GetFlag(FLAGS_memory_weight);
  options.cache_aware.memory_hot_window =
      absl::Milliseconds(absl::GetFlag(FLAGS_memory_hot_window_ms));
  options.approx_tree_capacity_tokens =
      absl::GetFlag(FLAGS_approx_tree_capacity_tokens);
  options.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  options.model = absl::GetFlag(FLAGS_model);
  options.allow_policy_override = absl::GetFlag(FLAGS_allow_policy_override);
  options.worker_keepalive =
      absl::Milliseconds(absl::GetFlag(FLAGS_worker_keepalive_ms));
  options.worker_keepalive_timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_worker_keepalive_timeout_ms));
  options.max_in_flight_requests = absl::GetFlag(FLAGS_max_in_flight_requests);
  options.max_in_flight_per_worker =
      absl::GetFlag(FLAGS_max_in_flight_per_worker);
  options.api_keys = api_keys;
  return options;
}

// The OpenAI HTTP API on --http_port, answered by `frontend`.
absl::StatusOr<std::unique_ptr<process::HttpServer>> StartHttpApi(
    router::openai::OpenAiFrontend* frontend) {
  process::HttpServerOptions http_options;
  http_options.address = process::BindAddress();
  http_options.port = absl::GetFlag(FLAGS_http_port);
  return process::HttpServer::Start(http_options, [frontend](auto exchange) {
    frontend->Handle(std::move(exchange));
  });
}

// Readiness drops, in-flight requests (gRPC and HTTP) get --drain_timeout_s
// to finish; then the service ends what is left itself (UNAVAILABLE "the
// router is shutting down ..."), before the server would cut them with
// gRPC's bare "Cancelling all calls".
void Drain(process::GrpcServer& server, router::RouterService& service,
           router::openai::OpenAiFrontend* frontend) {
  if (frontend != nullptr) frontend->set_serving(false);
  const absl::Duration drain =
      absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s));
  const absl::Time drain_end = absl::Now() + drain;
  absl::Notification drained;
  std::thread end_of_drain([&] {
    if (!drained.WaitForNotificationWithTimeout(drain)) service.Shutdown();
  });
  server.Shutdown(drain + absl::Seconds(1));
  service.WaitForIdle(drain_end - absl::Now());
  drained.Notify();
  end_of_drain.join();
  service.Shutdown();
  service.WaitForIdle(absl::Seconds(5));
}

}  // namespace

int main(int argc, char** argv) {
  process::InitProcess(
      argc, argv,
      "radixkv router: cache-aware placement and the public Generate API.");
  absl::Status valid = ValidateFlags();
  if (process::CheckFlagsOnly() || !valid.ok()) {
    return process::FinishCheckFlags(valid);
  }
  auto metrics =
      process::MetricsEndpoint::StartOnPort(absl::GetFlag(FLAGS_metrics_port));
  if (!metrics.ok()) return 1;
  router::RouterMetrics router_metrics(*(*metrics)->registry());
  auto catalog = LoadModelCatalog();
  if (!catalog.ok()) return process::StartupFailure(catalog.status());
  auto api_keys = LoadApiKeys();
  if (!api_keys.ok()) return process::StartupFailure(api_keys.status());

  const router::RouterOptions options = RouterOptionsFromFlags(api_keys->get());
  auto service =
      router::RouterService::Create(options, catalog->get(), &router_metrics);
  if (!service.ok()) return process::StartupFailure(service.status());
  auto server = process::GrpcServer::Start(
      process::ListenAddress(absl::GetFlag(FLAGS_grpc_port)), {service->get()});
  if (!server.ok()) return process::StartupFailure(server.status());
  std::unique_ptr<router::openai::OpenAiFrontend> frontend;
  std::unique_ptr<process::HttpServer> http;
  if (absl::GetFlag(FLAGS_http_port) > 0) {
    frontend = std::make_unique<router::openai::OpenAiFrontend>(
        service->get(), api_keys->get());
    auto started = StartHttpApi(frontend.get());
    if (!started.ok()) return process::StartupFailure(started.status());
    http = *std::move(started);
  }
  std::unique_ptr<process::ReloadSignalWatcher> reload;
  if (*api_keys != nullptr) {
    reload = std::make_unique<process::ReloadSignalWatcher>(
        [keys = api_keys->get()] {
          const absl::Status s = keys->Reload();
          if (s.ok()) {
            spdlog::info("SIGHUP: API keys re-read ({} keys)", keys->size());
          } else {
            spdlog::error("SIGHUP: API keys kept: {}", s.ToString());
          }
        });
  }
  spdlog::info(
      "router serving gRPC on port {} (health: grpc.health.v1), OpenAI HTTP "
      "API on port {}, policy {}, cache service {}, metrics port {}",
      (*server)->port(), http != nullptr ? http->port() : 0, options.policy,
      options.cache_service_address, (*metrics)->port());
  int sig = process::WaitForShutdownSignal();
  spdlog::info("signal {}: draining for up to {} s", sig,
               absl::GetFlag(FLAGS_drain_timeout_s));
  Drain(**server, **service, frontend.get());
  http.reset();
  spdlog::info("router stopped cleanly");
  return 0;
}
