#include "tools/local_cluster/local_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "radixkv/v1/cache_service.grpc.pb.h"
#include "spdlog/spdlog.h"

namespace radixkv::router {
namespace {

std::string Loopback(int port) { return absl::StrCat("127.0.0.1:", port); }

// True when redis at 127.0.0.1:port answers PING.
bool RedisAnswers(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = false;
  timeval tv{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const char ping[] = "PING\r\n";
    if (::write(fd, ping, sizeof(ping) - 1) == sizeof(ping) - 1) {
      char buf[16] = {};
      ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
      ok = n >= 5 && std::strncmp(buf, "+PONG", 5) == 0;
    }
  }
  ::close(fd);
  return ok;
}

}  // namespace

absl::StatusOr<CpuSchedulingClass> ParseCpuSchedulingClass(
    const std::string& name) {
  if (name == "normal") return CpuSchedulingClass::kNormal;
  if (name == "batch") return CpuSchedulingClass::kBatch;
  if (name == "idle") return CpuSchedulingClass::kIdle;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown CPU scheduling class '", name, "' (normal, batch, idle)"));
}

std::string CpuSchedulingClassName(CpuSchedulingClass c) {
  switch (c) {
    case CpuSchedulingClass::kNormal:
      return "normal";
    case CpuSchedulingClass::kBatch:
      return "batch";
    case CpuSchedulingClass::kIdle:
      return "idle";
  }
  return "normal";
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::string& name, const std::vector<std::string>& argv,
    const std::string& log_path, ChildCpuPriority priority) {
  if (priority.nice_increment < 0) {
    return absl::InvalidArgumentError("nice_increment must be >= 0");
  }
  const int policy =
      priority.scheduling_class == CpuSchedulingClass::kIdle    ? SCHED_IDLE
      : priority.scheduling_class == CpuSchedulingClass::kBatch ? SCHED_BATCH
                                                                : -1;
  if (argv.empty()) return absl::InvalidArgumentError("empty argv");
  if (::access(argv[0].c_str(), X_OK) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot execute ", argv[0], ": ", std::strerror(errno)));
  }
  int log_fd = log_path.empty() ? -2
                                : ::open(log_path.c_str(),
                                         O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (log_fd == -1) {
    return absl::UnavailableError(
        absl::StrCat("cannot open ", log_path, ": ", std::strerror(errno)));
  }
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    if (log_fd >= 0) ::close(log_fd);
    return absl::UnavailableError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::setpgid(0, 0);  // Ctrl-C reaches the launcher only; it stops us.
    // Best effort: an unchanged priority is still correct.
    if (policy >= 0) {
      sched_param param{};
      ::sched_setscheduler(0, policy, &param);
    }
    if (priority.nice_increment > 0 && ::nice(priority.nice_increment) == -1) {
      // Keeps the parent's nice value.
    }
    if (log_fd >= 0) {
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
    }
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  child->name_ = name;
  child->log_path_ = log_path;
  child->pid_ = pid;
  return child;
}

std::string DescribeWaitStatus(int wait_status) {
  if (wait_status == -1) return "not reaped";
  if (WIFEXITED(wait_status)) {
    return absl::StrCat("exit code ", WEXITSTATUS(wait_status));
  }
  if (WIFSIGNALED(wait_status)) {
    const char* name = ::strsignal(WTERMSIG(wait_status));
    return absl::StrCat("killed by signal ", WTERMSIG(wait_status), " (",
                        name != nullptr ? name : "?", ")");
  }
  return absl::StrCat("wait status ", wait_status);
}

ChildProcess::~ChildProcess() { Stop(absl::Seconds(10)); }

bool ChildProcess::Running() {
  if (reaped_) return false;
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    wait_status_ = status;
    return false;
  }
  return true;
}

absl::StatusOr<int> ChildProcess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (Running()) {
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          name_, " still running after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return wait_status_;
}

int ChildProcess::Stop(absl::Duration grace) {
  if (!Running()) return wait_status_;
  ::kill(pid_, SIGTERM);
  if (Wait(grace).ok()) return wait_status_;
  spdlog::warn("{} (pid {}) did not exit within {} of SIGTERM: SIGKILL", name_,
               pid_, absl::FormatDuration(grace));
  Kill(SIGKILL);
  return wait_status_;
}

void ChildProcess::Kill(int signal) {
  if (!Running()) return;
  ::kill(pid_, signal);
  int status = 0;
  if (::waitpid(pid_, &status, 0) == pid_) {
    reaped_ = true;
    wait_status_ = status;
  }
}

bool HealthServing(const std::string& address, absl::Duration timeout) {
  auto channel =
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  grpc::Status status;
  absl::Notification done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  done.WaitForNotification();
  if (!status.ok()) return false;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return false;
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  // HealthCheckResponse{status: SERVING (1)} is field 1, varint 1.
  return bytes == std::string("\x08\x01", 2);
}

std::vector<int> PickFreePorts(int n) {
  std::vector<int> fds, ports;
  for (int i = 0; i < n; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    int port = 0;
    if (fd >= 0 &&
        ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      socklen_t len = sizeof(addr);
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
      port = ntohs(addr.sin_port);
    }
    if (fd >= 0) fds.push_back(fd);
    ports.push_back(port);
  }
  for (int fd : fds) ::close(fd);
  return ports;
}

int PickFreePort() { return PickFreePorts(1)[0]; }

bool LoopbackPortFree(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok =
      ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    LocalClusterOptions options) {
  if (options.num_workers < 1) {
    return absl::InvalidArgumentError("num_workers must be >= 1");
  }
  if (options.bin_dir.empty()) {
    char buf[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0) return absl::InternalError("cannot read /proc/self/exe");
    options.bin_dir =
        std::filesystem::path(std::string(buf, n)).parent_path().parent_path();
  }
  std::error_code ec;
  std::filesystem::create_directories(options.run_dir, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", options.run_dir, ": ", ec.message()));
  }
  std::unique_ptr<LocalCluster> c(new LocalCluster(std::move(options)));
  const LocalClusterOptions& o = c->options_;
  const int num_ports =
      5 + o.num_workers + (o.process_metrics ? 1 + o.num_workers : 0);
  // Fixed offsets: redis, cache service, router, router metrics, router
  // HTTP API, then the workers, then the optional /metrics ports.
  const std::vector<int> free_ports =
      o.base_port == 0 ? PickFreePorts(num_ports) : std::vector<int>();
  auto port = [&](int offset) {
    return o.base_port == 0 ? free_ports[offset] : o.base_port + offset;
  };
  c->redis_port_ = port(0);
  c->cache_port_ = port(1);
  c->router_port_ = port(2);
  c->router_metrics_port_ = port(3);
  c->router_http_port_ = port(4);
  for (int i = 0; i < o.num_workers; ++i)
    c->worker_ports_.push_back(port(5 + i));
  if (o.process_metrics) {
    c->cache_metrics_port_ = port(5 + o.num_workers);
    for (int i = 0; i < o.num_workers; ++i)
      c->worker_metrics_ports_.push_back(port(6 + o.num_workers + i));
  }
  if (o.base_port != 0) {
    // Fixed ports: refuse to start when one is taken (typically a cluster
    // already running on this --base_port) instead of half-starting next to
    // it. Otherwise the health checks and Redis PING answer from the other
    // cluster's processes, and this cache service would open the other
    // Redis' journal, fencing that cluster's cache service for good.
    std::vector<std::pair<std::string, int>> wanted = {
        {"cache service", c->cache_port_},
        {"router", c->router_port_},
        {"router metrics", c->router_metrics_port_},
        {"router HTTP API", c->router_http_port_}};
    if (o.use_redis) wanted.insert(wanted.begin(), {"redis", c->redis_port_});
    for (int i = 0; i < o.num_workers; ++i) {
      wanted.push_back({c->worker_id(i), c->worker_ports_[i]});
    }
    if (o.process_metrics) {
      wanted.push_back({"cache service metrics", c->cache_metrics_port_});
      for (int i = 0; i < o.num_workers; ++i) {
        wanted.push_back({absl::StrCat(c->worker_id(i), " metrics"),
                          c->worker_metrics_ports_[i]});
      }
    }
    for (const auto& [name, p] : wanted) {
      if (!LoopbackPortFree(p)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "port ", p, " (", name, ", --base_port=", o.base_port,
            ") is in use on 127.0.0.1, e.g. by a cluster already running "
            "on this --base_port; stop it or pick another --base_port (0 = "
            "free ports)"));
      }
    }
  }
  c->workers_.resize(o.num_workers);
  if (o.use_redis) {
    if (absl::Status s = c->StartRedis(); !s.ok()) return s;
  }
  if (absl::Status s = c->StartCacheService(); !s.ok()) return s;
  for (int i = 0; i < o.num_workers; ++i) {
    if (absl::Status s = c->StartWorker(i); !s.ok()) return s;
  }
  for (int i = 0; i < o.num_workers; ++i) {
    if (absl::Status s =
            c->WaitHealthy(c->workers_[i].get(), c->worker_address(i));
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s =
          c->WaitForRegisteredWorkers(o.num_workers, o.start_timeout);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = c->StartRouter(); !s.ok()) return s;
  return c;
}

LocalCluster::~LocalCluster() { Stop(); }

std::vector<ChildProcess*> LocalCluster::Children() {
  // Stop order: the router first (no new requests), then the workers (they
  // release their leases), then the cache service and its Redis.
  std::vector<ChildProcess*> out;
  if (router_) out.push_back(router_.get());
  for (auto& w : workers_) {
    if (w) out.push_back(w.get());
  }
  if (cache_service_) out.push_back(cache_service_.get());
  if (redis_) out.push_back(redis_.get());
  return out;
}

std::string LocalCluster::ReportExit(ChildProcess* p, int wait_status) {
  reported_exits_.push_back(p->pid());
  return absl::StrCat(p->name(), " (pid ", p->pid(), ") ",
                      DescribeWaitStatus(wait_status));
}

std::vector<std::string> LocalCluster::Stop() {
  const absl::Duration grace = absl::Seconds(10);
  std::vector<std::string> lines;
  for (ChildProcess* p : Children()) {
    const int status = p->Stop(grace);
    if (absl::c_linear_search(reported_exits_, p->pid())) continue;
    lines.push_back(ReportExit(p, status));
  }
  return lines;
}

std::vector<std::string> LocalCluster::TakeExitedProcesses() {
  std::vector<std::string> lines;
  for (ChildProcess* p : Children()) {
    if (p->Running() || absl::c_linear_search(reported_exits_, p->pid())) {
      continue;
    }
    auto status = p->Wait(absl::ZeroDuration());
    lines.push_back(absl::StrCat(ReportExit(p, status.ok() ? *status : -1),
                                 "; log ", p->log_path()));
  }
  return lines;
}

std::string LocalCluster::Bin(const std::string& name) const {
  return absl::StrCat(options_.bin_dir, "/", name, "/", name);
}

std::string LocalCluster::router_address() const {
  return Loopback(router_port_);
}
std::string LocalCluster::worker_model_dir(int i) const {
  return i < static_cast<int>(options_.worker_model_dirs.size()) &&
                 !options_.worker_model_dirs[i].empty()
             ? options_.worker_model_dirs[i]
             : options_.model_dir;
}

std::string LocalCluster::router_http_address() const {
  return Loopback(router_http_port_);
}

std::string LocalCluster::router_metrics_address() const {
  return Loopback(router_metrics_port_);
}
std::string LocalCluster::cache_service_metrics_address() const {
  return cache_metrics_port_ == 0 ? "" : Loopback(cache_metrics_port_);
}
std::string LocalCluster::worker_metrics_address(int i) const {
  return worker_metrics_ports_.empty() ? ""
                                       : Loopback(worker_metrics_ports_.at(i));
}
std::string LocalCluster::cache_service_address() const {
  return Loopback(cache_port_);
}
std::string LocalCluster::redis_address() const {
  return Loopback(redis_port_);
}
std::string LocalCluster::worker_address(int i) const {
  return Loopback(worker_ports_.at(i));
}
std::string LocalCluster::worker_id(int i) const {
  return absl::StrCat("worker-", i);
}

absl::Status LocalCluster::WaitHealthy(ChildProcess* process,
                                       const std::string& address) {
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  while (absl::Now() < deadline) {
    if (options_.cancelled != nullptr && options_.cancelled->load()) {
      return absl::CancelledError("interrupted");
    }
    if (!process->Running()) {
      return absl::UnavailableError(
          absl::StrCat(process->name(), " exited during start-up; see ",
                       process->log_path()));
    }
    if (HealthServing(address, absl::Milliseconds(500)))
      return absl::OkStatus();
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat(process->name(), " on ", address, " not SERVING after ",
                   absl::FormatDuration(options_.start_timeout), "; see ",
                   process->log_path()));
}

absl::Status LocalCluster::StartRedis() {
  const std::string dir = options_.run_dir + "/redis";
  std::filesystem::create_directories(dir);
  auto p = ChildProcess::Start(
      "redis-server",
      {options_.redis_server, "--port", std::to_string(redis_port_), "--bind",
       "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "yes",
       "--daemonize", "no", "--protected-mode", "yes"},
      options_.run_dir + "/redis-server.log");
  if (!p.ok()) return p.status();
  redis_ = *std::move(p);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!RedisAnswers(redis_port_)) {
    if (!redis_->Running() || absl::Now() > deadline) {
      return absl::UnavailableError(absl::StrCat(
          "redis-server did not answer PING; see ", redis_->log_path()));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::StartCacheService() {
  std::vector<std::string> argv = {
      Bin("cache_service"), "--bind_address=127.0.0.1",
      absl::StrCat("--grpc_port=", cache_port_),
      absl::StrCat("--metrics_port=", cache_metrics_port_)};
  if (options_.use_redis) {
    argv.push_back(absl::StrCat("--redis=", redis_address()));
  }
  argv.push_back(absl::StrCat("--eviction_policy=", options_.eviction_policy));
  argv.insert(argv.end(), options_.cache_service_args.begin(),
              options_.cache_service_args.end());
  auto p = ChildProcess::Start("cache_service", argv,
                               options_.run_dir + "/cache_service.log");
  if (!p.ok()) return p.status();
  cache_service_ = *std::move(p);
  ++cache_service_starts_;
  return WaitHealthy(cache_service_.get(), cache_service_address());
}

absl::Status LocalCluster::StartWorker(int i) {
  std::vector<std::string> argv = {
      Bin("worker"),
      "--bind_address=127.0.0.1",
      absl::StrCat("--grpc_port=", worker_ports_[i]),
      absl::StrCat("--metrics_port=", worker_metrics_ports_.empty()
                                          ? 0
                                          : worker_metrics_ports_[i]),
      absl::StrCat("--worker_id=", worker_id(i)),
      absl::StrCat("--advertise_address=", worker_address(i)),
      absl::StrCat("--cache_service=", cache_service_address()),
      absl::StrCat("--model_dir=", worker_model_dir(i))};
  argv.insert(argv.end(), options_.worker_args.begin(),
              options_.worker_args.end());
  auto p = ChildProcess::Start(
      worker_id(i), argv,
      absl::StrCat(options_.run_dir, "/", worker_id(i), ".log"),
      options_.worker_priority);
  if (!p.ok()) return p.status();
  workers_[i] = *std::move(p);
  return absl::OkStatus();
}

absl::Status LocalCluster::StartRouter() {
  std::vector<std::string> argv = {
      Bin("router"),
      "--bind_address=127.0.0.1",
      absl::StrCat("--grpc_port=", router_port_),
      absl::StrCat("--metrics_port=", router_metrics_port_),
      absl::StrCat("--http_port=", router_http_port_),
      absl::StrCat("--cache_service=", cache_service_address()),
      absl::StrCat("--model_dir=", options_.model_dir),
      absl::StrCat("--policy=", options_.policy)};
  // The other models' folders (each named after its last component, as the
  // workers name themselves).
  std::vector<std::string> models;
  for (int i = 0; i < options_.num_workers; ++i) {
    const std::string dir = worker_model_dir(i);
    if (dir == options_.model_dir) continue;
    const std::string entry =
        absl::StrCat(std::filesystem::path(dir).filename().string(), "=", dir);
    if (std::find(models.begin(), models.end(), entry) == models.end()) {
      models.push_back(entry);
    }
  }
  if (!models.empty()) {
    argv.push_back(absl::StrCat("--models=", absl::StrJoin(models, ",")));
  }
  argv.insert(argv.end(), options_.router_args.begin(),
              options_.router_args.end());
  auto p =
      ChildProcess::Start("router", argv, options_.run_dir + "/router.log");
  if (!p.ok()) return p.status();
  router_ = *std::move(p);
  return WaitHealthy(router_.get(), router_address());
}

absl::Status LocalCluster::WaitForRegisteredWorkers(int n,
                                                    absl::Duration timeout) {
  auto stub = radixkv::v1::CacheService::NewStub(grpc::CreateChannel(
      cache_service_address(), grpc::InsecureChannelCredentials()));
  const absl::Time deadline = absl::Now() + timeout;
  int seen = -1;
  while (absl::Now() < deadline) {
    if (options_.cancelled != nullptr && options_.cancelled->load()) {
      return absl::CancelledError("interrupted");
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    radixkv::v1::StatsResponse stats;
    if (stub->Stats(&ctx, {}, &stats).ok()) {
      seen = stats.workers_size();
      if (seen == n) return absl::OkStatus();
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "cache service lists ", seen, " workers, expected ", n, " after ",
      absl::FormatDuration(timeout), "; logs in ", options_.run_dir));
}

void LocalCluster::KillWorker(int i, int signal) {
  if (workers_.at(i)) workers_[i]->Kill(signal);
}

absl::Status LocalCluster::RestartWorker(int i) {
  if (workers_.at(i)) workers_[i]->Stop(absl::Seconds(10));
  if (absl::Status s = StartWorker(i); !s.ok()) return s;
  return WaitHealthy(workers_[i].get(), worker_address(i));
}

absl::Status LocalCluster::RestartCacheService(bool crash) {
  if (crash) {
    cache_service_->Kill(SIGKILL);
  } else {
    cache_service_->Stop(absl::Seconds(10));
  }
  if (absl::Status s = StartCacheService(); !s.ok()) return s;
  int live = 0;
  for (auto& w : workers_) live += (w && w->Running()) ? 1 : 0;
  return WaitForRegisteredWorkers(live, options_.start_timeout);
}

}  // namespace radixkv::router
