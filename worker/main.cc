// radixkv worker: paged KV pool, model executor and continuous batching on one
// device. Serves the Worker gRPC service (Generate, Abort, GetStats) plus
// grpc.health.v1, registers with the cache service (--cache_service) under a
// fresh epoch, and on SIGTERM drains (stops admitting, finishes or aborts
// running requests, deregisters) before exiting.
//
// Without --cache_service the worker starts and answers health, but every
// Generate fails with UNAVAILABLE: KV memory is only ever allocated by the
// cache service, never by a hidden embedded substitute.
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "grpcpp/health_check_service_interface.h"
#include "model/tokenizer/load_tokenizer.h"
#include "process/process_lifecycle.h"
#include "process/server_flags.h"
#include "prometheus/registry.h"
#include "spdlog/spdlog.h"
#include "worker/cache_client.h"
#include "worker/cpu/cpu_model_executor.h"
#include "worker/kv_flag_parsing.h"
#include "worker/scheduler.h"
#include "worker/worker_metrics.h"
#include "worker/worker_service.h"
#if defined(RADIXKV_WITH_GPU_BACKEND)
#include "worker/gpu/gpu_model_executor.h"
#endif

RADIXKV_DEFINE_SERVER_FLAGS(
    50061, 9102, 30,
    "On SIGTERM: seconds running requests may take to finish before they are "
    "aborted; in [0, 3600].");
ABSL_FLAG(std::string, worker_id, "",
          "Worker id registered with the cache service (1..128 bytes, e.g. "
          "the pod name); empty = <hostname>-<grpc port>.");
ABSL_FLAG(std::string, advertise_address, "",
          "host:port routers dial to reach this worker (in Kubernetes the pod "
          "IP); empty = 127.0.0.1:<bound gRPC port>.");
ABSL_FLAG(std::string, cache_service, "",
          "host:port of the cache service. Empty: the worker serves health "
          "but every Generate fails with UNAVAILABLE.");
ABSL_FLAG(std::string, model_dir, "models/radixkv-demo-llama",
          "Hugging Face checkpoint directory (config.json, *.safetensors, "
          "tokenizer.json or tokenizer.model, tokenizer_config.json, "
          "generation_config.json); absolute, or relative to the working "
          "directory or the Bazel runfiles.");
ABSL_FLAG(std::string, model_name, "",
          "Model name clients and the cache service use; empty = the "
          "basename of --model_dir.");
ABSL_FLAG(std::string, device, "cpu",
          "Compute device: cpu (gpu in //worker/gpu:worker_gpu).");
#if defined(RADIXKV_WITH_GPU_BACKEND)
ABSL_FLAG(double, gpu_memory_fraction, 0.85,
          "--device=gpu: KV pool = this fraction of the device memory free "
          "after weights and workspace (unless --kv_capacity_tokens or "
          "--kv_memory_bytes). --kv_dtype is the GPU compute dtype too.");
ABSL_FLAG(bool, gpu_graphs, true, "--device=gpu: decode steps as CUDA graphs.");
#endif
ABSL_FLAG(int, page_size, 16,
          "KV tokens per page: one of 1, 8, 16, 32, 64, 128.");
ABSL_FLAG(int64_t, kv_capacity_tokens, 0,
          "KV pool size in tokens (slots); 0 = size from --kv_memory_bytes.");
ABSL_FLAG(int64_t, kv_memory_bytes, 0,
          "KV pool budget in bytes (K and V, all layers); 0 with "
          "--kv_capacity_tokens 0 = 256 MiB.");
ABSL_FLAG(std::string, kv_layout, "bshd", "KV layout: bshd, bhsd or vllm.");
ABSL_FLAG(std::string, kv_dtype, "f32", "KV storage dtype: f32, bf16, f16.");
ABSL_FLAG(int, max_running_requests, 32, "Sequences in the running batch.");
ABSL_FLAG(int, max_waiting_requests, 1024,
          "Requests accepted and not yet running (queued for admission) at "
          "most; beyond: RESOURCE_EXHAUSTED.");
ABSL_FLAG(int, max_prefill_tokens, 512,
          "Per-step budget of prefill tokens (chunked prefill).");
ABSL_FLAG(int, grow_tokens, 0, "Slots per lease Grow; 0 = max(page_size, 32).");
ABSL_FLAG(int, decode_partition_size, 0,
          "Paged decode: 0 = v1 (one pass), > 0 = v2 split-KV partition "
          "size in tokens.");
ABSL_FLAG(int, threads, 2, "CPU threads for GEMMs and attention.");
ABSL_FLAG(int, cache_rpc_timeout_ms, 5000,
          "Deadline of each cache service RPC, ms.");

namespace {

namespace process = radixkv::process;
namespace worker = radixkv::worker;
namespace model = radixkv::model;

absl::Status ValidateDevice() {
  const std::string device = absl::GetFlag(FLAGS_device);
#if defined(RADIXKV_WITH_GPU_BACKEND)
  if (device != "cpu" && device != "gpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be cpu or gpu, got '", device, "'"));
  }
#else
  if (device != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("--device must be cpu (this build has no GPU backend), "
                     "got '",
                     device, "'"));
  }
#endif
  return absl::OkStatus();
}

// The KV pool size: --kv_capacity_tokens or --kv_memory_bytes, --page_size.
absl::Status ValidateKvPoolFlags() {
  const int page_size = absl::GetFlag(FLAGS_page_size);
  if (page_size != 1 && page_size != 8 && page_size != 16 && page_size != 32 &&
      page_size != 64 && page_size != 128) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--page_size must be one of 1, 8, 16, 32, 64, 128, got ", page_size));
  }
  const int64_t capacity = absl::GetFlag(FLAGS_kv_capacity_tokens);
  const int64_t memory = absl::GetFlag(FLAGS_kv_memory_bytes);
  if (capacity < 0 || memory < 0) {
    return absl::InvalidArgumentError(
        "--kv_capacity_tokens and --kv_memory_bytes must be >= 0");
  }
  if (capacity > 0 && memory > 0) {
    return absl::InvalidArgumentError(
        "give --kv_capacity_tokens or --kv_memory_bytes, not both");
  }
  if (capacity > 0 && capacity < page_size) {
    return absl::InvalidArgumentError(
        "--kv_capacity_tokens must be >= --page_size");
  }
  if (auto s = worker::ParseKvLayout(absl::GetFlag(FLAGS_kv_layout)); !s.ok()) {
    return s.status();
  }
  return worker::ParseKvDType(absl::GetFlag(FLAGS_kv_dtype)).status();
}

absl::Status ValidateFlags() {
  for (absl::Status s : {
           process::ValidateServerFlags(process::GetServerFlags()),
           absl::GetFlag(FLAGS_worker_id).size() > 128
               ? absl::InvalidArgumentError("--worker_id must be <= 128 bytes")
               : absl::OkStatus(),
           process::CheckHostPortFlag("advertise_address",
                                      absl::GetFlag(FLAGS_advertise_address)),
           process::CheckHostPortFlag("cache_service",
                                      absl::GetFlag(FLAGS_cache_service)),
           absl::GetFlag(FLAGS_model_dir).empty()
               ? absl::InvalidArgumentError("--model_dir must not be empty")
               : absl::OkStatus(),
           ValidateDevice(),
           ValidateKvPoolFlags(),
       }) {
    if (!s.ok()) return s;
  }
  return process::CheckFlagRanges({
      {"max_running_requests", absl::GetFlag(FLAGS_max_running_requests), 1,
       4096},
      {"max_waiting_requests", absl::GetFlag(FLAGS_max_waiting_requests), 0,
       1 << 20},
      {"max_prefill_tokens", absl::GetFlag(FLAGS_max_prefill_tokens), 1,
       1 << 20},
      {"grow_tokens", absl::GetFlag(FLAGS_grow_tokens), 0, 65536},
      {"decode_partition_size", absl::GetFlag(FLAGS_decode_partition_size), 0,
       1 << 20},
      {"threads", absl::GetFlag(FLAGS_threads), 1, 1024},
      {"cache_rpc_timeout_ms", absl::GetFlag(FLAGS_cache_rpc_timeout_ms), 1,
       600000},
  });
}

// Resolves --model_dir: absolute, relative to the working directory, or in
// the Bazel runfiles of this binary (workspace "radixkv").
std::string ResolveModelDir(const std::string& flag) {
  auto has_config = [](const std::string& dir) {
    return ::access((dir + "/config.json").c_str(), R_OK) == 0;
  };
  if (flag.empty() || flag[0] == '/' || has_config(flag)) return flag;
  std::vector<std::string> roots;
  for (const char* var : {"RUNFILES_DIR", "TEST_SRCDIR"}) {
    if (const char* dir = std::getenv(var); dir != nullptr) {
      roots.push_back(absl::StrCat(dir, "/radixkv"));
    }
  }
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) roots.push_back(std::string(buf, n) + ".runfiles/radixkv");
  for (const std::string& root : roots) {
    std::string candidate = absl::StrCat(root, "/", flag);
    if (has_config(candidate)) return candidate;
  }
  return flag;
}

std::string Basename(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The model and its KV pool on --device.
absl::StatusOr<std::unique_ptr<worker::ModelExecutor>> CreateExecutor(
    const std::string& model_dir) {
  worker::CpuModelExecutorOptions executor_options;
  executor_options.model_dir = model_dir;
  executor_options.page_size = absl::GetFlag(FLAGS_page_size);
  executor_options.kv_capacity_slots = absl::GetFlag(FLAGS_kv_capacity_tokens);
  if (absl::GetFlag(FLAGS_kv_memory_bytes) > 0) {
    executor_options.kv_budget_bytes = absl::GetFlag(FLAGS_kv_memory_bytes);
  }
  executor_options.kv_layout =
      *worker::ParseKvLayout(absl::GetFlag(FLAGS_kv_layout));
  executor_options.kv_dtype =
      *worker::ParseKvDType(absl::GetFlag(FLAGS_kv_dtype));
  executor_options.num_threads = absl::GetFlag(FLAGS_threads);
  executor_options.decode_partition_size =
      absl::GetFlag(FLAGS_decode_partition_size);
#if defined(RADIXKV_WITH_GPU_BACKEND)
  if (absl::GetFlag(FLAGS_device) == "gpu") {
    worker::GpuModelExecutorOptions gpu_options;
    gpu_options.model_dir = model_dir;
    gpu_options.dtype = executor_options.kv_dtype;
    gpu_options.page_size = executor_options.page_size;
    gpu_options.kv_layout = executor_options.kv_layout;
    gpu_options.kv_capacity_slots = executor_options.kv_capacity_slots;
    gpu_options.kv_budget_bytes = absl::GetFlag(FLAGS_kv_memory_bytes);
    gpu_options.memory_fraction = absl::GetFlag(FLAGS_gpu_memory_fraction);
    gpu_options.max_batch_size = absl::GetFlag(FLAGS_max_running_requests);
    gpu_options.max_tokens_per_step =
        std::max(2048, absl::GetFlag(FLAGS_max_prefill_tokens) +
                           absl::GetFlag(FLAGS_max_running_requests));
    gpu_options.use_graphs = absl::GetFlag(FLAGS_gpu_graphs);
    if (absl::GetFlag(FLAGS_decode_partition_size) > 0) {
      gpu_options.decode_partition_size =
          absl::GetFlag(FLAGS_decode_partition_size);
    }
    return worker::GpuModelExecutor::Create(gpu_options);
  }
#endif
  return worker::CpuModelExecutor::Create(executor_options);
}

// The tokenizer as the router loads it (tokenizer.json, else
// tokenizer.model): nullopt (token-id prompts only) for a checkpoint without
// one; an error for one whose tokenizer does not load.
absl::StatusOr<std::optional<model::LoadedTokenizer>> LoadCheckpointTokenizer(
    const std::string& model_dir) {
  absl::StatusOr<model::LoadedTokenizer> loaded =
      model::LoadTokenizer(model_dir);
  if (absl::IsNotFound(loaded.status())) {
    spdlog::warn("no tokenizer ({}): only token-id prompts are accepted",
                 loaded.status().ToString());
    return std::nullopt;
  }
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(),
                        absl::StrCat("cannot load the tokenizer of ",
                                     model_dir, ": ",
                                     loaded.status().message()));
  }
  spdlog::info("tokenizer {}: vocab {}, eos ids {}", loaded->path,
               loaded->tokenizer->vocab_size(),
               absl::StrJoin(loaded->files.eos_token_ids, ","));
  return std::optional<model::LoadedTokenizer>(*std::move(loaded));
}

// The cache service client of --cache_service; null when the flag is empty
// (health only, every Generate UNAVAILABLE).
absl::StatusOr<std::unique_ptr<worker::KvCacheClient>> ConnectCacheService() {
  const std::string cache_address = absl::GetFlag(FLAGS_cache_service);
  if (cache_address.empty()) {
    spdlog::warn(
        "no --cache_service: serving health only; Generate answers "
        "UNAVAILABLE");
    return nullptr;
  }
  auto client = worker::GrpcKvCacheClient::Create(
      cache_address,
      absl::Milliseconds(absl::GetFlag(FLAGS_cache_rpc_timeout_ms)));
  if (!client.ok()) return client.status();
  return std::unique_ptr<worker::KvCacheClient>(*std::move(client));
}

// The scheduler's options for a worker bound to gRPC `port` and metrics
// `metrics_port` (0 = none): the registered id and addresses default from
// the host name and the bound ports.
worker::SchedulerOptions SchedulerOptionsFromFlags(
    int port, int metrics_port, const std::string& model_name) {
  worker::SchedulerOptions options;
  options.worker_id = absl::GetFlag(FLAGS_worker_id);
  if (options.worker_id.empty()) {
    char host[256] = {0};
    ::gethostname(host, sizeof(host) - 1);
    options.worker_id = absl::StrCat(host, "-", port);
  }
  options.advertise_address = absl::GetFlag(FLAGS_advertise_address);
  if (options.advertise_address.empty()) {
    options.advertise_address = absl::StrCat("127.0.0.1:", port);
  }
  if (metrics_port > 0) {
    const size_t colon = options.advertise_address.rfind(':');
    options.metrics_address = absl::StrCat(
        options.advertise_address.substr(0, colon), ":", metrics_port);
  }
  options.model_name = model_name;
  options.max_running_requests = absl::GetFlag(FLAGS_max_running_requests);
  options.max_waiting_requests = absl::GetFlag(FLAGS_max_waiting_requests);
  options.max_prefill_tokens = absl::GetFlag(FLAGS_max_prefill_tokens);
  options.grow_tokens = absl::GetFlag(FLAGS_grow_tokens);
  options.max_new_tokens_limit = 65536;
  return options;
}

}  // namespace

int main(int argc, char** argv) {
  process::InitProcess(argc, argv,
                       "radixkv worker: paged KV pool, model executor and "
                       "continuous batching on one device.");
  absl::Status valid = ValidateFlags();
  if (process::CheckFlagsOnly() || !valid.ok()) {
    return process::FinishCheckFlags(valid);
  }
  auto metrics =
      process::MetricsEndpoint::StartOnPort(absl::GetFlag(FLAGS_metrics_port));
  if (!metrics.ok()) return 1;
  worker::WorkerMetrics worker_metrics(*(*metrics)->registry());

  const std::string model_dir = ResolveModelDir(absl::GetFlag(FLAGS_model_dir));
  auto executor = CreateExecutor(model_dir);
  if (!executor.ok()) {
    spdlog::critical("cannot load the model from {}: {}", model_dir,
                     executor.status().ToString());
    return 1;
  }
  auto tokenizer = LoadCheckpointTokenizer(model_dir);
  if (!tokenizer.ok()) return process::StartupFailure(tokenizer.status());
  const std::string model_name = absl::GetFlag(FLAGS_model_name).empty()
                                     ? Basename(model_dir)
                                     : absl::GetFlag(FLAGS_model_name);
  spdlog::info(
      "model {} from {}: {} layers, vocab {}; KV pool {} slots, page_size {}, "
      "layout {}, dtype {}",
      model_name, model_dir, (*executor)->config().num_hidden_layers,
      (*executor)->config().vocab_size, (*executor)->capacity_slots(),
      (*executor)->page_size(), absl::GetFlag(FLAGS_kv_layout),
      absl::GetFlag(FLAGS_kv_dtype));
  worker_metrics.SetInfo(
      model_name, absl::GetFlag(FLAGS_device), absl::GetFlag(FLAGS_kv_dtype),
      (*executor)->page_size(), (*executor)->capacity_slots());

  // Bind the port first: the advertised address needs it.
  worker::WorkerServiceImpl service;
  auto server = process::GrpcServer::Start(
      process::ListenAddress(absl::GetFlag(FLAGS_grpc_port)), {&service});
  if (!server.ok()) return process::StartupFailure(server.status());
  const int port = (*server)->port();
  // Not ready until the scheduler is wired in (the Worker service answers
  // UNAVAILABLE until then).
  grpc::HealthCheckServiceInterface* health =
      (*server)->server()->GetHealthCheckService();
  if (health != nullptr) health->SetServingStatus(false);
  auto cache = ConnectCacheService();
  if (!cache.ok()) return process::StartupFailure(cache.status());

  const worker::SchedulerOptions options =
      SchedulerOptionsFromFlags(port, (*metrics)->port(), model_name);
  auto scheduler = worker::Scheduler::Create(
      options, executor->get(), cache->get(),
      tokenizer->has_value() ? &**tokenizer : nullptr, &worker_metrics);
  if (!scheduler.ok()) return process::StartupFailure(scheduler.status());
  service.set_scheduler(scheduler->get());
  if (health != nullptr) health->SetServingStatus(true);
  const std::string cache_address = absl::GetFlag(FLAGS_cache_service);
  spdlog::info(
      "worker {} serving gRPC on port {} (advertised as {}; health: "
      "grpc.health.v1), cache service: {}",
      options.worker_id, port, options.advertise_address,
      cache_address.empty() ? "none" : cache_address);

  int sig = process::WaitForShutdownSignal();
  spdlog::info("signal {}: draining", sig);
  // Readiness drops first; in-flight streams keep being served while the
  // scheduler finishes (or aborts) them and deregisters.
  if (health != nullptr) health->SetServingStatus(false);
  (*scheduler)
      ->Drain(absl::Now() +
              absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s)));
  // Drained: every stream has its final event, so a short grace suffices.
  (*server)->Shutdown(absl::Seconds(1));
  scheduler->reset();
  spdlog::info("worker stopped cleanly");
  return 0;
}
