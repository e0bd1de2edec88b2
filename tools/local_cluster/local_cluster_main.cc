// radixkv main job launcher (README command 1 runs it through
// scripts/run_main_job.sh): starts redis-server on a private port and dir,
// the cache service journaling to it, two CPU workers with the embedded
// model and the router, all on loopback; waits for grpc.health.v1 and worker
// registration; runs the workload runner (arguments after `--` go to it);
// prints its report; stops everything it started, also on Ctrl-C.
//
// --serve keeps the cluster up without a workload until Ctrl-C/SIGTERM
// (--ready_file then receives the router address once healthy).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "process/process_lifecycle.h"
#include "spdlog/spdlog.h"
#include "tools/local_cluster/local_cluster.h"

ABSL_DECLARE_FLAG(std::string, log_level);

ABSL_FLAG(std::string, run_dir, "",
          "Logs and Redis data; empty = /tmp/radixkv-run-<time>-<pid>.");
ABSL_FLAG(std::string, bin_dir, "",
          "Directory with cache_service/, worker/, router/ binaries; empty = "
          "next to this binary (bazel-bin).");
ABSL_FLAG(std::string, model_dir, "",
          "Checkpoint directory; empty = models/radixkv-demo-llama under the "
          "working directory or this binary's runfiles.");
ABSL_FLAG(int, base_port, 0,
          "First of consecutive loopback ports: redis +0, cache service +1, "
          "router +2, router metrics +3, workers +4..+3+N; with "
          "--process_metrics also cache service metrics +4+N and worker "
          "metrics +5+N..+4+2N (N = --num_workers). 0 = free ports.");
ABSL_FLAG(bool, process_metrics, false,
          "Give the cache service and every worker a /metrics port too (laid "
          "out as in --base_port); false = only the router serves /metrics.");
ABSL_FLAG(int, num_workers, 2, "CPU workers.");
ABSL_FLAG(int, worker_threads, 1, "--threads of each worker.");
ABSL_FLAG(int64_t, kv_capacity_tokens, 3072,
          "KV pool of each worker, tokens (0 = the worker's default). With "
          "the runner's default shared-prefix (12 groups x 385 system "
          "tokens) two pools hold every group's prefix, one does not: the "
          "regime where placement matters (docs/perf.md).");
ABSL_FLAG(std::string, policy, "cache_aware", "Router default policy.");
ABSL_FLAG(std::string, worker_sched, "normal",
          "CPU scheduling class of the workers: normal (as the launcher; "
          "with the default --worker_nice=19 a waking router, cache service "
          "or Redis thread preempts model compute at once), idle "
          "(SCHED_IDLE: the kernel counts a CPU running only idle-class "
          "tasks as idle and places waking threads there, where they wait "
          "for the next tick, up to 4 ms at HZ=250; docs/perf.md) or batch "
          "(SCHED_BATCH). In a "
          "deployment the control plane runs on its own machines or CPU "
          "requests (docs/deploy.md).");
ABSL_FLAG(int, worker_nice, 19,
          "nice(2) increment of the workers (>= 0; 0 = unchanged). 19: "
          "weight 15 against the control plane's 1024, so the router, cache "
          "service and Redis win the shared cores.");
ABSL_FLAG(bool, redis, true,
          "Journal the cache service to a private redis-server.");
ABSL_FLAG(std::string, worker_args, "",
          "Extra worker flags, separated by spaces.");
ABSL_FLAG(std::string, eviction_policy, "reuse_lru",
          "The cache service's --eviction_policy: lru, lfu, priority or "
          "reuse_lru (finished requests' unique tails go before reused "
          "prefixes; docs/perf.md).");
ABSL_FLAG(std::string, cache_service_args, "",
          "Extra cache service flags, separated by spaces.");
ABSL_FLAG(std::string, router_args, "",
          "Extra router flags, separated by spaces.");
ABSL_FLAG(bool, serve, false,
          "Start the cluster and keep it up until Ctrl-C; no workload.");
ABSL_FLAG(std::string, ready_file, "",
          "With --serve: write the addresses here once healthy, one per "
          "line: router gRPC, cache service, router HTTP API, router "
          "/metrics, cache service /metrics.");
ABSL_FLAG(std::string, redis_server, "/usr/bin/redis-server",
          "redis-server binary.");

namespace {

namespace router = radixkv::router;
namespace process = radixkv::process;

std::vector<std::string> SplitArgs(const std::string& s) {
  return absl::StrSplit(s, ' ', absl::SkipEmpty());
}

std::string SelfDir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  return std::filesystem::path(std::string(buf, n)).parent_path();
}

std::string FindModelDir() {
  std::string flag = absl::GetFlag(FLAGS_model_dir);
  if (!flag.empty()) return std::filesystem::absolute(flag);
  const std::string rel = "models/radixkv-demo-llama";
  std::vector<std::string> candidates = {std::filesystem::current_path() / rel};
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) {
    // bazel-bin/tools/local_cluster/local_cluster.runfiles/radixkv/models/...
    candidates.push_back(
        absl::StrCat(std::string(buf, n), ".runfiles/radixkv/", rel));
  }
  if (const char* dir = std::getenv("RUNFILES_DIR")) {
    candidates.push_back(absl::StrCat(dir, "/radixkv/", rel));
  }
  for (const std::string& c : candidates) {
    if (std::filesystem::exists(c + "/config.json")) return c;
  }
  return candidates.front();
}

// What worker/scheduler.cc logs (info) when it preempts a running request.
constexpr char kPreemptionLogLine[] = "preempting request";

// Lines of the file at `path` containing `needle`; 0 when it cannot be read.
int64_t CountLogLines(const std::string& path, const std::string& needle) {
  std::ifstream in(path);
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos) ++n;
  }
  return n;
}

std::atomic<bool> g_interrupted{false};
std::atomic<pid_t> g_runner_pid{-1};

// Ctrl-C / SIGTERM: stop the workload runner; main then stops the cluster.
// A second one while stopping exits at once; every child dies with us
// (PR_SET_PDEATHSIG = SIGKILL, set when it was started). Returns when
// process::RequestShutdown() is called.
void WatchSignals() {
  int sig = process::WaitForShutdownSignal();
  if (sig == 0) return;  // normal end
  g_interrupted = true;
  std::fprintf(stderr,
               "\nradixkv: signal %d, stopping everything... (again to "
               "kill everything at once)\n",
               sig);
  if (pid_t p = g_runner_pid.load(); p > 0) ::kill(p, SIGTERM);
  sig = process::WaitForShutdownSignal();
  if (sig == 0) return;  // the stop finished first
  std::fprintf(stderr, "radixkv: signal %d again: killing everything now\n",
               sig);
  std::fflush(stderr);
  ::_exit(128 + sig);
}

// Children (router, workers, runner) find their runfiles (the sentencepiece
// plug-in) through this binary's merged runfiles tree.
void ExportRunfilesDir() {
  if (std::getenv("RUNFILES_DIR") != nullptr) return;
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return;
  const std::string runfiles = std::string(buf, n) + ".runfiles";
  if (std::filesystem::exists(runfiles)) {
    ::setenv("RUNFILES_DIR", runfiles.c_str(), 1);
  }
}

router::LocalClusterOptions ClusterOptionsFromFlags(
    router::CpuSchedulingClass worker_sched) {
  router::LocalClusterOptions options;
  options.bin_dir = absl::GetFlag(FLAGS_bin_dir);
  if (options.bin_dir.empty()) {
    // bazel-bin/tools/local_cluster/local_cluster -> bazel-bin
    options.bin_dir =
        std::filesystem::path(SelfDir()).parent_path().parent_path();
  }
  options.model_dir = FindModelDir();
  options.run_dir = absl::GetFlag(FLAGS_run_dir);
  if (options.run_dir.empty()) {
    options.run_dir = absl::StrCat(
        "/tmp/radixkv-run-",
        absl::FormatTime("%Y%m%d-%H%M%S", absl::Now(), absl::UTCTimeZone()),
        "-", getpid());
  }
  options.redis_server = absl::GetFlag(FLAGS_redis_server);
  options.use_redis = absl::GetFlag(FLAGS_redis);
  options.num_workers = absl::GetFlag(FLAGS_num_workers);
  options.base_port = absl::GetFlag(FLAGS_base_port);
  options.process_metrics = absl::GetFlag(FLAGS_process_metrics);
  options.policy = absl::GetFlag(FLAGS_policy);
  options.worker_priority.nice_increment = absl::GetFlag(FLAGS_worker_nice);
  options.worker_priority.scheduling_class = worker_sched;
  options.worker_args = SplitArgs(absl::GetFlag(FLAGS_worker_args));
  options.worker_args.insert(
      options.worker_args.begin(),
      absl::StrCat("--threads=", absl::GetFlag(FLAGS_worker_threads)));
  if (absl::GetFlag(FLAGS_kv_capacity_tokens) > 0) {
    options.worker_args.insert(
        options.worker_args.begin(),
        absl::StrCat("--kv_capacity_tokens=",
                     absl::GetFlag(FLAGS_kv_capacity_tokens)));
  }
  options.eviction_policy = absl::GetFlag(FLAGS_eviction_policy);
  options.cache_service_args =
      SplitArgs(absl::GetFlag(FLAGS_cache_service_args));
  options.router_args = SplitArgs(absl::GetFlag(FLAGS_router_args));
  options.cancelled = &g_interrupted;
  return options;
}

void PrintPlan(const router::LocalClusterOptions& options) {
  std::printf("radixkv %s: logs in %s\n",
              absl::GetFlag(FLAGS_serve) ? "local cluster" : "main job",
              options.run_dir.c_str());
  std::printf("  model %s\n", options.model_dir.c_str());
  std::printf(
      "  %d CPU workers, %d thread(s) each, KV pool %s tokens each, CPU "
      "scheduling %s (nice +%d)\n",
      options.num_workers, absl::GetFlag(FLAGS_worker_threads),
      absl::GetFlag(FLAGS_kv_capacity_tokens) > 0
          ? std::to_string(absl::GetFlag(FLAGS_kv_capacity_tokens)).c_str()
          : "default",
      router::CpuSchedulingClassName(options.worker_priority.scheduling_class)
          .c_str(),
      absl::GetFlag(FLAGS_worker_nice));
  std::printf("  cache service eviction policy %s\n",
              options.eviction_policy.c_str());
  std::fflush(stdout);
}

void PrintAddresses(router::LocalCluster& c,
                    const router::LocalClusterOptions& options) {
  std::printf("  redis-server   %s  (dir %s/redis)\n",
              options.use_redis ? c.redis_address().c_str() : "off",
              options.run_dir.c_str());
  // " (metrics host:port)" when the process serves /metrics.
  auto metrics_note = [](const std::string& address) {
    return address.empty() ? std::string()
                           : absl::StrCat(" (metrics ", address, ")");
  };
  std::printf("  cache_service  %s  grpc.health.v1 SERVING%s\n",
              c.cache_service_address().c_str(),
              metrics_note(c.cache_service_metrics_address()).c_str());
  for (int i = 0; i < c.num_workers(); ++i) {
    std::printf("  %-14s %s  grpc.health.v1 SERVING, registered%s\n",
                c.worker_id(i).c_str(), c.worker_address(i).c_str(),
                metrics_note(c.worker_metrics_address(i)).c_str());
  }
  std::printf("  router         %s  grpc.health.v1 SERVING (metrics %s)\n",
              c.router_address().c_str(), c.router_metrics_address().c_str());
  std::printf("  OpenAI API     http://%s/v1\n",
              c.router_http_address().c_str());
}

// --serve: writes --ready_file, then reports children that die until Ctrl-C.
void Serve(router::LocalCluster& c) {
  const std::string ready = absl::GetFlag(FLAGS_ready_file);
  if (!ready.empty()) {
    // One address per line: router gRPC, cache service, router HTTP API,
    // router /metrics, cache service /metrics ("" without
    // --process_metrics).
    std::ofstream(ready + ".tmp") << c.router_address() << "\n"
                                  << c.cache_service_address() << "\n"
                                  << c.router_http_address() << "\n"
                                  << c.router_metrics_address() << "\n"
                                  << c.cache_service_metrics_address() << "\n";
    std::filesystem::rename(ready + ".tmp", ready);
  }
  std::printf("serving until Ctrl-C / SIGTERM\n");
  std::fflush(stdout);
  while (!g_interrupted) {
    absl::SleepFor(absl::Milliseconds(100));
    // A child that dies while serving is reported at once (the cluster keeps
    // serving what it can until Ctrl-C).
    for (const std::string& line : c.TakeExitedProcesses()) {
      std::printf("radixkv: %s\n", line.c_str());
      std::fflush(stdout);
    }
  }
}

// The main job: the workload runner against the cluster, with `extra_args`
// (the arguments after --); returns its exit code.
int RunWorkload(router::LocalCluster& c,
                const router::LocalClusterOptions& options,
                const std::vector<char*>& extra_args) {
  std::vector<std::string> argv = {
      absl::StrCat(options.bin_dir, "/tools/workload/workload_runner"),
      absl::StrCat("--router=", c.router_address()),
      absl::StrCat("--cache_service=", c.cache_service_address()),
      absl::StrCat("--router_metrics=", c.router_metrics_address()),
      absl::StrCat("--model_dir=", options.model_dir),
      absl::StrCat("--report_file=", options.run_dir, "/report.txt")};
  for (size_t i = 1; i < extra_args.size(); ++i) {
    argv.push_back(extra_args[i]);
  }
  auto runner = router::ChildProcess::Start("workload_runner", argv, "");
  if (!runner.ok()) {
    std::fprintf(stderr, "radixkv: %s\n", runner.status().ToString().c_str());
    return 1;
  }
  g_runner_pid = (*runner)->pid();
  if (g_interrupted) ::kill((*runner)->pid(), SIGTERM);
  auto status = (*runner)->Wait(absl::InfiniteDuration());
  g_runner_pid = -1;
  return status.ok() && WIFEXITED(*status) ? WEXITSTATUS(*status) : 1;
}

// Stops every process and prints how each ended, plus the workers'
// preemptions counted in their logs.
void StopCluster(router::LocalCluster& c,
                 const router::LocalClusterOptions& options, absl::Time t0) {
  std::printf("stopping the cluster...\n");
  std::fflush(stdout);
  for (const std::string& line : c.TakeExitedProcesses()) {
    std::printf("radixkv: %s\n", line.c_str());
  }
  for (const std::string& line : c.Stop()) {
    std::printf("  %s\n", line.c_str());
  }
  int64_t preemptions = 0;
  for (int i = 0; i < c.num_workers(); ++i) {
    preemptions += CountLogLines(
        absl::StrCat(options.run_dir, "/", c.worker_id(i), ".log"),
        kPreemptionLogLine);
  }
  std::printf(
      "worker preemptions (running requests whose KV was given back for "
      "memory, all runs): %lld\n",
      static_cast<long long>(preemptions));
  std::printf("all processes stopped; logs%s in %s (%.0f s total)\n",
              absl::GetFlag(FLAGS_serve) ? "" : " and report",
              options.run_dir.c_str(), absl::ToDoubleSeconds(absl::Now() - t0));
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetFlag(&FLAGS_log_level, "warn");
  std::vector<char*> positional = process::InitProcess(
      argc, argv,
      "radixkv main job: local cluster (redis, cache service, 2 CPU workers, "
      "router) + workload runner + report. Arguments after -- go to the "
      "workload runner.");
  auto worker_sched =
      router::ParseCpuSchedulingClass(absl::GetFlag(FLAGS_worker_sched));
  absl::Status valid = absl::GetFlag(FLAGS_num_workers) < 1
                           ? absl::InvalidArgumentError("--num_workers >= 1")
                       : absl::GetFlag(FLAGS_worker_nice) < 0
                           ? absl::InvalidArgumentError("--worker_nice >= 0")
                           : worker_sched.status();
  if (process::CheckFlagsOnly() || !valid.ok()) {
    return process::FinishCheckFlags(valid);
  }
  std::thread signals(WatchSignals);
  ExportRunfilesDir();
  const router::LocalClusterOptions options =
      ClusterOptionsFromFlags(*worker_sched);
  PrintPlan(options);
  const absl::Time t0 = absl::Now();
  int exit_code = 0;
  {
    auto cluster = router::LocalCluster::Start(options);
    if (!cluster.ok()) {
      std::fprintf(stderr, "radixkv: cluster did not start: %s\n",
                   cluster.status().ToString().c_str());
      exit_code = 1;
    } else {
      router::LocalCluster& c = **cluster;
      PrintAddresses(c, options);
      std::printf("cluster healthy in %.1f s\n\n",
                  absl::ToDoubleSeconds(absl::Now() - t0));
      std::fflush(stdout);
      if (absl::GetFlag(FLAGS_serve)) {
        Serve(c);
      } else {
        exit_code = RunWorkload(c, options, positional);
      }
      StopCluster(c, options, t0);
    }
  }
  if (g_interrupted) exit_code = 130;
  process::RequestShutdown();
  signals.join();
  return exit_code;
}
