// LocalCluster: a whole radixkv deployment as child processes on loopback,
// for the main job (local_cluster_main.cc) and the end-to-end tests:
// redis-server (private port and data dir), the cache service journaling to
// it, N CPU workers with the embedded model, and the router. Start() waits
// until every process answers grpc.health.v1 and every worker is registered
// with the cache service; Stop() (and the destructor) SIGTERMs everything in
// reverse order, SIGKILLing what does not exit within the grace period.
//
// Children get PR_SET_PDEATHSIG(SIGKILL): call Start() and the Restart*/Kill*
// methods from a thread that outlives the cluster (e.g. main), since the
// signal fires when the spawning thread exits.
#ifndef RADIXKV_TOOLS_LOCAL_CLUSTER_LOCAL_CLUSTER_H_
#define RADIXKV_TOOLS_LOCAL_CLUSTER_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace radixkv::router {

// CPU scheduling class of a child process (sched(7)).
enum class CpuSchedulingClass {
  // SCHED_OTHER: the parent's class.
  kNormal,
  // SCHED_BATCH: like SCHED_OTHER, but the task does not preempt others on
  // wake-up (it is assumed CPU-bound).
  kBatch,
  // SCHED_IDLE: runs only when no SCHED_OTHER task of its group wants the
  // CPU. Not what latency-critical threads sharing the cores want, though:
  // wake-up placement counts a CPU that runs only idle-class tasks as idle,
  // so a waking thread is queued there, and on the 2-core VM (kernel 6.18,
  // HZ=250) it waited for the next tick, up to 4 ms
  // (docs/perf/2026-11-29-routing-tail-latency.md); kNormal with nice 19 did
  // not.
  kIdle,
};

// "normal", "batch", "idle"; INVALID_ARGUMENT otherwise.
absl::StatusOr<CpuSchedulingClass> ParseCpuSchedulingClass(
    const std::string& name);
std::string CpuSchedulingClassName(CpuSchedulingClass c);

// How a child is scheduled; unprivileged processes may only lower their
// priority, which is all this does.
struct ChildCpuPriority {
  // nice(2) increment, >= 0 (0 = unchanged).
  int nice_increment = 0;
  CpuSchedulingClass scheduling_class = CpuSchedulingClass::kNormal;
};

// "exit code N" or "killed by signal N (NAME)" for a waitpid status; "not
// reaped" for -1.
std::string DescribeWaitStatus(int wait_status);

// One child process with its output in a log file.
class ChildProcess {
 public:
  // fork + exec of argv[0] (an absolute or relative path), stdout and
  // stderr appended to `log_path` (empty: inherited), signal mask and
  // dispositions reset, in its own process group (the launcher forwards
  // Ctrl-C itself).
  // UNAVAILABLE when the binary cannot be started.
  // `priority` lowers the child's CPU priority (best effort: a class or
  // nice value the kernel refuses leaves the child at the parent's).
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(
      const std::string& name, const std::vector<std::string>& argv,
      const std::string& log_path, ChildCpuPriority priority = {});
  // Stop(absl::Seconds(10)) unless already stopped.
  ~ChildProcess();

  // SIGTERM, wait up to `grace`, then SIGKILL. Returns the exit status as
  // waitpid gives it (or -1 when it had already been reaped).
  int Stop(absl::Duration grace);
  // Sends `signal` and reaps the process (kill -9 for fault tests).
  void Kill(int signal);
  // True while the process has not exited.
  bool Running();
  // Waits up to `timeout` for the process to exit; its wait status, or
  // DEADLINE_EXCEEDED.
  absl::StatusOr<int> Wait(absl::Duration timeout);

  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }
  const std::string& log_path() const { return log_path_; }

 private:
  ChildProcess() = default;
  std::string name_;
  std::string log_path_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  int wait_status_ = -1;
};

// True when `address` answers grpc.health.v1 Check("") with SERVING.
bool HealthServing(const std::string& address, absl::Duration timeout);

// `n` distinct TCP ports on 127.0.0.1 that were free a moment ago: all n
// sockets stay bound until every port is known, so the kernel cannot hand
// out one port twice (picking them one socket at a time once gave the
// cache service the port just chosen for redis-server). 0 for a port that
// could not be bound.
std::vector<int> PickFreePorts(int n);

// PickFreePorts(1)[0].
int PickFreePort();

// True when a TCP socket can bind 127.0.0.1:`port` now (SO_REUSEADDR, so a
// port whose last connection is in TIME_WAIT counts as free); false when
// something listens there.
bool LoopbackPortFree(int port);

struct LocalClusterOptions {
  // Directory holding cache_service/cache_service, worker/worker and
  // router/router (bazel-bin). Empty: two levels above this executable's
  // real path (bazel-bin/router/x -> bazel-bin).
  std::string bin_dir;
  // The worker's checkpoint directory (also the router's tokenizer).
  std::string model_dir;
  // Per worker, another checkpoint directory (empty entries and workers
  // past the end take model_dir). Each model is named after its folder, and
  // the router gets --models=<name>=<dir> for every folder used.
  std::vector<std::string> worker_model_dirs;
  // Logs, redis data; created if missing.
  std::string run_dir;
  std::string redis_server = "/usr/bin/redis-server";
  // false: the cache service runs in memory (no --redis).
  bool use_redis = true;
  int num_workers = 2;
  // Ports: 0 = free ports picked at start. Otherwise consecutive from
  // base_port: redis (+0), cache service (+1), router (+2), router metrics
  // (+3), router OpenAI HTTP API (+4), workers (+5 .. +4+N); with
  // process_metrics also cache service metrics (+5+N) and worker metrics
  // (+6+N .. +5+2N), N = num_workers.
  int base_port = 0;
  // true: the cache service and every worker serve /metrics too (see
  // cache_service_metrics_address(), worker_metrics_address()); false: they
  // get --metrics_port=0 (disabled) and only the router serves /metrics.
  bool process_metrics = false;
  std::string policy = "cache_aware";
  // CPU priority of the workers. On a small machine where workers and the
  // control plane (router, cache service, Redis) share cores, a lower
  // worker priority keeps routing decisions and cache service RPCs from
  // waiting behind model compute for a scheduler slice (in a deployment
  // they run on separate machines or with separate CPU requests).
  ChildCpuPriority worker_priority;
  // The cache service's --eviction_policy (cache_service/eviction_policy.h).
  // reuse_lru: finished requests' unique tails go before reused prefixes
  // (docs/perf/2026-11-29-two-workers-2x-target.md).
  std::string eviction_policy = "reuse_lru";
  // Extra flags per process (after the launcher's own, so they win).
  std::vector<std::string> cache_service_args;
  std::vector<std::string> worker_args;
  std::vector<std::string> router_args;
  // How long Start() waits for health and registration.
  absl::Duration start_timeout = absl::Seconds(90);
  // When set and true, waits give up early with CANCELLED (Ctrl-C).
  const std::atomic<bool>* cancelled = nullptr;
};

class LocalCluster {
 public:
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(
      LocalClusterOptions options);
  ~LocalCluster();

  // Stops every process (router, workers, cache service, redis) and returns
  // one line per process stopped by this call: "<name> (pid P) <how it
  // exited>" (DescribeWaitStatus), e.g. "router (pid 12) exit code 0".
  // Idempotent (a second call returns nothing).
  std::vector<std::string> Stop();

  // Processes that exited on their own (crash, kill, early exit) since the
  // last call, one line each as Stop() gives them; each is reported once.
  // The --serve loop polls it (every 100 ms) to report a dead child at once.
  std::vector<std::string> TakeExitedProcesses();

  std::string router_address() const;
  // host:port of the router's OpenAI-compatible HTTP API.
  std::string router_http_address() const;
  std::string router_metrics_address() const;
  std::string cache_service_address() const;
  // host:port of the cache service's /metrics; empty unless
  // options().process_metrics.
  std::string cache_service_metrics_address() const;
  // host:port of worker i's /metrics; empty unless options().process_metrics.
  std::string worker_metrics_address(int i) const;
  std::string redis_address() const;
  std::string worker_address(int i) const;
  std::string worker_id(int i) const;
  // The checkpoint directory of worker i.
  std::string worker_model_dir(int i) const;
  int num_workers() const { return options_.num_workers; }
  const std::string& run_dir() const { return options_.run_dir; }
  const LocalClusterOptions& options() const { return options_; }

  // kill -<signal> worker i (default kill -9), reaped.
  void KillWorker(int i, int signal = 9);
  // Process ids (-1 before the first start), e.g. for kill -STOP / -CONT of a
  // frozen-peer test (KillWorker would wait for a stopped process to exit).
  pid_t worker_pid(int i) const {
    return workers_.at(i) ? workers_[i]->pid() : -1;
  }
  pid_t cache_service_pid() const {
    return cache_service_ ? cache_service_->pid() : -1;
  }
  pid_t router_pid() const { return router_ ? router_->pid() : -1; }
  // Starts worker i again (same id and port; it registers a new epoch) and
  // waits for health and registration.
  absl::Status RestartWorker(int i);
  // Kills the cache service (SIGKILL when `crash`, else SIGTERM) and starts
  // it again on the same port and Redis; waits for health and for every live
  // worker to be registered again.
  absl::Status RestartCacheService(bool crash);
  // Waits until the cache service lists exactly `n` workers.
  absl::Status WaitForRegisteredWorkers(int n, absl::Duration timeout);

 private:
  explicit LocalCluster(LocalClusterOptions options)
      : options_(std::move(options)) {}
  absl::Status StartRedis();
  absl::Status StartCacheService();
  absl::Status StartWorker(int i);
  absl::Status StartRouter();
  absl::Status WaitHealthy(ChildProcess* process, const std::string& address);
  std::string Bin(const std::string& name) const;

  LocalClusterOptions options_;
  int redis_port_ = 0, cache_port_ = 0, router_port_ = 0,
      router_metrics_port_ = 0, cache_metrics_port_ = 0, router_http_port_ = 0;
  std::vector<int> worker_ports_;
  std::vector<int> worker_metrics_ports_;  // empty unless process_metrics
  std::unique_ptr<ChildProcess> redis_, cache_service_, router_;
  std::vector<std::unique_ptr<ChildProcess>> workers_;
  int cache_service_starts_ = 0;
  // The started children in stop order (router, workers, cache service,
  // redis-server).
  std::vector<ChildProcess*> Children();
  // Records `p` as reported and returns "name (pid P) <wait status>".
  std::string ReportExit(ChildProcess* p, int wait_status);
  // pids already reported by TakeExitedProcesses() or Stop().
  std::vector<pid_t> reported_exits_;
};

}  // namespace radixkv::router

#endif  // RADIXKV_TOOLS_LOCAL_CLUSTER_LOCAL_CLUSTER_H_
