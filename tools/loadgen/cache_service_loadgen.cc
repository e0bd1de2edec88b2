// Bounded loopback load generator for the cache service: Acquire+Commit pairs
// (the per-request cost a worker pays the cache service) from many
// concurrent client sessions over real gRPC on 127.0.0.1, measured for
//   memory: the service without persistence, and
//   redis:  the service journaling every change to a redis-server
//           (--redis, or one started by this binary in a temp dir).
// By default the service runs in this process (CacheServiceImpl behind a
// loopback gRPC server) so client and server share the machine's cores, as
// on the 2-core CI machine; --target drives an external cache_service.
//
// Workload: --num_prefixes shared "system prompts" of --shared_prefix_tokens
// followed by a unique tail (prompt length --prompt_tokens); each pair is
// Acquire(prompt) then Commit(prompt) (the tail is inserted, the prefix
// deduplicated). Runs --warmup_s, then measures for --duration_s (or until
// --max_pairs). Prints one table row per mode: pairs/s and p50/p99 latency
// of the pair and of each RPC (client-observed, ms).
//
// --transport=unary sends each operation as its own RPC; --transport=stream
// sends them over CacheService.LeaseStream, one stream per channel, the
// sessions of a channel pipelined on its stream (depth = concurrency /
// channels operations in flight per stream).
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cache_service/cache_service_impl.h"
#include "cache_service/cache_state.h"
#include "cache_service/redis_journal.h"
#include "cache_service/redis_server_process.h"
#include "grpcpp/grpcpp.h"
#include "process/process_lifecycle.h"
#include "radixkv/v1/cache_service.grpc.pb.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, modes, "core,memory,redis",
          "Comma-separated: core (CacheState alone), memory, redis "
          "(in-process service modes).");
ABSL_FLAG(std::string, target, "",
          "host:port of a running cache_service to drive instead of the "
          "in-process one (one row, mode 'external').");
ABSL_FLAG(std::string, redis, "",
          "redis host:port for mode redis; empty = start redis-server in a "
          "temp dir (--save '' --appendonly yes).");
ABSL_FLAG(std::string, redis_server_binary, "/usr/bin/redis-server",
          "redis-server started for mode redis when --redis is empty.");
ABSL_FLAG(std::string, transport, "unary",
          "unary: one RPC per Acquire/Commit; stream: CacheService.LeaseStream "
          "(one stream per channel, sessions pipelined on it).");
ABSL_FLAG(bool, stream_buffer_hint, true,
          "--transport=stream: write with gRPC's buffer hint while more "
          "operations are queued on the stream (coalesced flushes).");
ABSL_FLAG(int, concurrency, 32, "Concurrent client sessions (in flight).");
ABSL_FLAG(int, channels, 4,
          "Client channels (TCP connections) the sessions are spread over.");
ABSL_FLAG(double, duration_s, 5.0, "Measured seconds per mode.");
ABSL_FLAG(double, warmup_s, 1.0, "Unmeasured seconds before each mode.");
ABSL_FLAG(int64_t, max_pairs, 2'000'000, "Upper bound of measured pairs.");
ABSL_FLAG(int, prompt_tokens, 256, "Prompt length, tokens.");
ABSL_FLAG(int, shared_prefix_tokens, 192, "Shared prefix length, tokens.");
ABSL_FLAG(int, num_prefixes, 16, "Number of distinct shared prefixes.");
ABSL_FLAG(int, page_size, 16, "Worker page size, tokens.");
ABSL_FLAG(int64_t, capacity_slots, 1 << 20, "Worker capacity, slots.");
ABSL_FLAG(int64_t, snapshot_every_ops, 100'000,
          "Redis mode: least journaled operations between two snapshots.");
ABSL_FLAG(double, snapshot_journal_ratio, 4,
          "Redis mode: a snapshot also waits until the journal since the last "
          "one holds this many times its bytes (lower = more snapshots in "
          "the measured window).");
ABSL_FLAG(bool, background_snapshots, true,
          "Redis mode: snapshots in a forked child (true) or Serialize() "
          "under the service mutex (false, the old behaviour).");

namespace {

namespace pb = ::radixkv::v1;
namespace cs = ::radixkv::cache_service;

constexpr int32_t kVocab = 32000;

// User + system CPU seconds of this process so far.
double CpuSeconds() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  size_t k = static_cast<size_t>(q * (v.size() - 1));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

// One LeaseStream (callback client API): operations of many sessions are
// queued and written one at a time; responses arrive in request order, so
// the callbacks of the operations in flight are kept in a FIFO.
class ClientLeaseStream final
    : public grpc::ClientBidiReactor<pb::LeaseStreamRequest,
                                     pb::LeaseStreamResponse> {
 public:
  using Callback = std::function<void(pb::LeaseStreamResponse&)>;

  explicit ClientLeaseStream(pb::CacheService::Stub* stub) {
    stub->async()->LeaseStream(&ctx_, this);
    StartRead(&response_);
    StartCall();
  }

  // Queues `request` (must stay valid until its response arrives; it is
  // serialized when its write starts). `done` runs on a gRPC thread.
  void Send(pb::LeaseStreamRequest* request, Callback done) {
    bool start = false;
    bool ended = false;
    {
      absl::MutexLock lock(&mu_);
      ended = broken_;
      if (!ended) {
        request->set_request_id(next_id_++);
        callbacks_.push_back(std::move(done));
        queue_.push_back(request);
        if (!writing_) {
          writing_ = true;
          start = true;
          request = queue_.front();
          queue_.pop_front();
        }
      }
    }
    if (ended) {  // the stream ended: fail at once
      pb::LeaseStreamResponse failed = Failed();
      done(failed);
      return;
    }
    if (start) StartWrite(request);
  }

  // True once the stream ended (server gone, cancelled): sessions stop.
  bool broken() {
    absl::MutexLock lock(&mu_);
    return broken_;
  }

  // Half-closes once nothing is queued, then waits for the stream's end.
  grpc::Status Close() {
    bool now = false;
    {
      absl::MutexLock lock(&mu_);
      closing_ = true;
      if (!writing_ && !broken_) now = true;
    }
    if (now) StartWritesDone();
    done_.WaitForNotification();
    return status_;
  }

  void OnWriteDone(bool ok) override {
    pb::LeaseStreamRequest* next = nullptr;
    grpc::WriteOptions options;
    bool writes_done = false;
    {
      absl::MutexLock lock(&mu_);
      if (ok && !queue_.empty()) {
        next = queue_.front();
        queue_.pop_front();
        // More queued behind it: coalesce (see --stream_buffer_hint).
        if (!queue_.empty() && absl::GetFlag(FLAGS_stream_buffer_hint)) {
          options.set_buffer_hint();
        }
      } else {
        writing_ = false;
        writes_done = ok && closing_ && !broken_;
      }
    }
    if (next != nullptr) StartWrite(next, options);
    if (writes_done) StartWritesDone();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the stream ended: fail what is outstanding
      std::deque<Callback> outstanding;
      {
        absl::MutexLock lock(&mu_);
        broken_ = true;
        outstanding.swap(callbacks_);
        queue_.clear();
      }
      for (Callback& done : outstanding) {
        pb::LeaseStreamResponse failed = Failed();
        done(failed);
      }
      return;
    }
    Callback done;
    {
      absl::MutexLock lock(&mu_);
      done = std::move(callbacks_.front());
      callbacks_.pop_front();
    }
    done(response_);
    StartRead(&response_);
  }

  static pb::LeaseStreamResponse Failed() {
    pb::LeaseStreamResponse r;
    r.set_status_code(static_cast<int32_t>(grpc::StatusCode::UNAVAILABLE));
    r.set_status_message("lease stream ended");
    return r;
  }

  void OnDone(const grpc::Status& status) override {
    status_ = status;
    done_.Notify();
  }

 private:
  grpc::ClientContext ctx_;
  pb::LeaseStreamResponse response_;
  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<Callback> callbacks_ ABSL_GUARDED_BY(mu_);
  std::deque<pb::LeaseStreamRequest*> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_;
  absl::Notification done_;
};

grpc::Status StatusOf(const pb::LeaseStreamResponse& r) {
  return r.status_code() == 0
             ? grpc::Status::OK
             : grpc::Status(static_cast<grpc::StatusCode>(r.status_code()),
                            r.status_message());
}

// Drives Acquire+Commit pairs from `concurrency` sessions with the gRPC
// callback client API (no thread per session).
class PairLoad {
 public:
  PairLoad(std::vector<pb::CacheService::Stub*> stubs, std::string worker,
           int64_t epoch)
      : stubs_(std::move(stubs)), worker_(std::move(worker)), epoch_(epoch) {
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> id(0, kVocab - 1);
    prefixes_.resize(absl::GetFlag(FLAGS_num_prefixes));
    for (auto& p : prefixes_) {
      for (int i = 0; i < absl::GetFlag(FLAGS_shared_prefix_tokens); ++i) {
        p.push_back(id(rng));
      }
    }
  }

  struct Result {
    int64_t pairs = 0;
    double seconds = 0;
    int64_t errors = 0;
    // Every completed pair, warm-up included, and the process CPU seconds
    // (user + system, getrusage) they took: a contention-proof cost figure.
    int64_t all_pairs = 0;
    double cpu_seconds = 0;
    std::vector<double> pair_ms, acquire_ms, commit_ms;
  };

  Result Run(absl::Duration warmup, absl::Duration measure, int64_t max_pairs) {
    const int n = absl::GetFlag(FLAGS_concurrency);
    sessions_.resize(n);
    measure_start_ = absl::Now() + warmup;
    end_ = measure_start_ + measure;
    max_pairs_ = max_pairs;
    running_.store(n);
    const double cpu_start = CpuSeconds();
    const bool stream = absl::GetFlag(FLAGS_transport) == "stream";
    if (stream) {
      for (pb::CacheService::Stub* stub : stubs_) {
        streams_.push_back(std::make_unique<ClientLeaseStream>(stub));
      }
    }
    for (int i = 0; i < n; ++i) {
      sessions_[i].id = i;
      sessions_[i].stub = stubs_[i % stubs_.size()];
      if (stream) sessions_[i].stream = streams_[i % streams_.size()].get();
      sessions_[i].rng.seed(1000 + i);
      StartPair(&sessions_[i]);
    }
    all_done_.WaitForNotification();
    const double cpu = CpuSeconds() - cpu_start;
    for (auto& stream : streams_) {
      grpc::Status closed = stream->Close();
      if (!closed.ok()) spdlog::warn("stream: {}", closed.error_message());
    }
    absl::MutexLock lock(&mu_);
    result_.all_pairs = all_pairs_.load();
    result_.cpu_seconds = cpu;
    result_.seconds =
        absl::ToDoubleSeconds(std::min(last_finish_, end_) - measure_start_);
    return std::move(result_);
  }

 private:
  struct Session {
    int id = 0;
    pb::CacheService::Stub* stub = nullptr;
    ClientLeaseStream* stream = nullptr;  // --transport=stream
    pb::LeaseStreamRequest op;            // its request buffer
    std::mt19937_64 rng;
    uint64_t iteration = 0;
    std::unique_ptr<grpc::ClientContext> ctx;
    pb::AcquireRequest acquire;
    pb::AcquireResponse acquire_resp;
    pb::CommitRequest commit;
    pb::CommitResponse commit_resp;
    absl::Time pair_start, rpc_start;
    double acquire_ms = 0;
  };

  void StartPair(Session* s) {
    const absl::Time now = absl::Now();
    bool stop = now >= end_;
    {
      absl::MutexLock lock(&mu_);
      stop = stop || result_.pairs >= max_pairs_;
    }
    if (s->stream != nullptr && s->stream->broken()) stop = true;
    if (stop) {
      if (running_.fetch_sub(1) == 1) all_done_.Notify();
      return;
    }
    s->pair_start = now;
    s->acquire.Clear();
    s->acquire.set_worker_id(worker_);
    s->acquire.set_epoch(epoch_);
    s->acquire.set_model("loadgen");
    const auto& prefix = prefixes_[(s->id + s->iteration++) % prefixes_.size()];
    auto* tokens = s->acquire.mutable_tokens();
    tokens->Reserve(absl::GetFlag(FLAGS_prompt_tokens));
    tokens->Add(prefix.begin(), prefix.end());
    while (tokens->size() < absl::GetFlag(FLAGS_prompt_tokens)) {
      tokens->Add(static_cast<int32_t>(s->rng() % kVocab));
    }
    s->rpc_start = absl::Now();
    if (s->stream != nullptr) {
      *s->op.mutable_acquire() = s->acquire;
      s->stream->Send(&s->op, [this, s](pb::LeaseStreamResponse& r) {
        if (r.has_acquire()) s->acquire_resp.Swap(r.mutable_acquire());
        OnAcquired(s, StatusOf(r));
      });
      return;
    }
    s->ctx = std::make_unique<grpc::ClientContext>();
    s->stub->async()->Acquire(
        s->ctx.get(), &s->acquire, &s->acquire_resp,
        [this, s](grpc::Status status) { OnAcquired(s, status); });
  }

  void OnAcquired(Session* s, const grpc::Status& status) {
    if (!status.ok()) {
      Error(status);
      StartPair(s);
      return;
    }
    s->acquire_ms = absl::ToDoubleMilliseconds(absl::Now() - s->rpc_start);
    s->commit.Clear();
    s->commit.set_lease_id(s->acquire_resp.lease_id());
    *s->commit.mutable_tokens() = s->acquire.tokens();
    s->rpc_start = absl::Now();
    if (s->stream != nullptr) {
      *s->op.mutable_commit() = s->commit;
      s->stream->Send(&s->op, [this, s](pb::LeaseStreamResponse& r) {
        OnCommitted(s, StatusOf(r));
      });
      return;
    }
    s->ctx = std::make_unique<grpc::ClientContext>();
    s->stub->async()->Commit(
        s->ctx.get(), &s->commit, &s->commit_resp,
        [this, s](grpc::Status status) { OnCommitted(s, status); });
  }

  void OnCommitted(Session* s, const grpc::Status& status) {
    if (!status.ok()) {
      Error(status);
    } else {
      const absl::Time now = absl::Now();
      all_pairs_.fetch_add(1, std::memory_order_relaxed);
      if (s->pair_start >= measure_start_ && now <= end_) {
        absl::MutexLock lock(&mu_);
        ++result_.pairs;
        last_finish_ = std::max(last_finish_, now);
        result_.pair_ms.push_back(
            absl::ToDoubleMilliseconds(now - s->pair_start));
        result_.acquire_ms.push_back(s->acquire_ms);
        result_.commit_ms.push_back(
            absl::ToDoubleMilliseconds(now - s->rpc_start));
      }
    }
    StartPair(s);
  }

  void Error(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    if (result_.errors++ < 3) {
      spdlog::warn("rpc error: {} {}", static_cast<int>(status.error_code()),
                   status.error_message());
    }
  }

  std::vector<pb::CacheService::Stub*> stubs_;
  const std::string worker_;
  const int64_t epoch_;
  std::vector<std::vector<int32_t>> prefixes_;
  std::vector<Session> sessions_;
  std::vector<std::unique_ptr<ClientLeaseStream>> streams_;
  absl::Time measure_start_, end_;
  int64_t max_pairs_ = 0;
  std::atomic<int> running_{0};
  std::atomic<int64_t> all_pairs_{0};
  absl::Notification all_done_;
  absl::Mutex mu_;
  Result result_ ABSL_GUARDED_BY(mu_);
  absl::Time last_finish_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

struct JournalCounters {
  std::atomic<int64_t> flushes{0};
  std::atomic<int64_t> entries{0};
};

void PrintHeader() {
  std::printf(
      "| mode | sessions | pairs | pairs/s | pair p50 ms | pair p99 ms | "
      "Acquire p50/p99 ms | Commit p50/p99 ms | errors | journal entries/"
      "flush |\n|---|---|---|---|---|---|---|---|---|---|\n");
}

void PrintRow(const std::string& mode, PairLoad::Result& r,
              const JournalCounters* journal) {
  std::string batch = "-";
  if (journal != nullptr && journal->flushes.load() > 0) {
    batch = absl::StrFormat(
        "%.1f", static_cast<double>(journal->entries) / journal->flushes);
  }
  std::printf(
      "| %s | %d | %lld | %.0f | %.3f | %.3f | %.3f / %.3f | %.3f / %.3f | "
      "%lld | %s |\n",
      mode.c_str(), absl::GetFlag(FLAGS_concurrency),
      static_cast<long long>(r.pairs), r.pairs / std::max(r.seconds, 1e-9),
      Percentile(r.pair_ms, 0.5), Percentile(r.pair_ms, 0.99),
      Percentile(r.acquire_ms, 0.5), Percentile(r.acquire_ms, 0.99),
      Percentile(r.commit_ms, 0.5), Percentile(r.commit_ms, 0.99),
      static_cast<long long>(r.errors), batch.c_str());
  if (r.all_pairs > 0) {
    std::fprintf(stderr, "%s: process CPU %.1f us per pair (%lld pairs)\n",
                 mode.c_str(), 1e6 * r.cpu_seconds / r.all_pairs,
                 static_cast<long long>(r.all_pairs));
  }
  std::fflush(stdout);
}

bool RegisterWorker(pb::CacheService::Stub* stub, int64_t epoch) {
  grpc::ClientContext ctx;
  pb::RegisterRequest req;
  req.set_worker_id("loadgen-worker");
  req.set_address("127.0.0.1:1");
  req.set_capacity_slots(absl::GetFlag(FLAGS_capacity_slots));
  req.set_page_size(absl::GetFlag(FLAGS_page_size));
  req.set_model("loadgen");
  req.set_epoch(epoch);
  req.set_vocab_size(kVocab);
  pb::RegisterResponse resp;
  grpc::Status s = stub->Register(&ctx, req, &resp);
  if (!s.ok()) spdlog::error("Register: {}", s.error_message());
  return s.ok();
}

// Heartbeats the load generator's worker once a second while it lives, so
// that runs longer than the service's --heartbeat_timeout_ms (10 s by
// default) keep their worker, residency and leases.
class HeartbeatLoop {
 public:
  HeartbeatLoop(pb::CacheService::Stub* stub, int64_t epoch)
      : thread_([this, stub, epoch] {
          while (!stop_.WaitForNotificationWithTimeout(absl::Seconds(1))) {
            grpc::ClientContext ctx;
            ctx.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(1));
            pb::HeartbeatRequest req;
            req.set_worker_id("loadgen-worker");
            req.set_epoch(epoch);
            pb::HeartbeatResponse resp;
            grpc::Status s = stub->Heartbeat(&ctx, req, &resp);
            if (!s.ok()) spdlog::warn("Heartbeat: {}", s.error_message());
          }
        }) {}
  ~HeartbeatLoop() {
    stop_.Notify();
    thread_.join();
  }

 private:
  absl::Notification stop_;
  std::thread thread_;
};

// Opens --channels separate connections to `address` (retries off: the
// load generator counts failures itself).
std::vector<std::unique_ptr<pb::CacheService::Stub>> Connect(
    const std::string& address) {
  std::vector<std::unique_ptr<pb::CacheService::Stub>> stubs;
  for (int i = 0; i < std::max(1, absl::GetFlag(FLAGS_channels)); ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
    args.SetInt("radixkv.loadgen_channel", i);  // distinct subchannels
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    stubs.push_back(pb::CacheService::NewStub(grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args)));
  }
  return stubs;
}

PairLoad::Result Drive(
    const std::vector<std::unique_ptr<pb::CacheService::Stub>>& stubs,
    int64_t epoch) {
  std::vector<pb::CacheService::Stub*> raw;
  for (const auto& s : stubs) raw.push_back(s.get());
  PairLoad load(raw, "loadgen-worker", epoch);
  return load.Run(absl::Seconds(absl::GetFlag(FLAGS_warmup_s)),
                  absl::Seconds(absl::GetFlag(FLAGS_duration_s)),
                  absl::GetFlag(FLAGS_max_pairs));
}

// The core alone (CacheState, one thread, no gRPC): the ceiling the service
// overhead is measured against.
int RunCore() {
  cs::CacheState state;
  cs::RegisterWorkerRequest reg;
  reg.worker_id = "loadgen-worker";
  reg.address = "127.0.0.1:1";
  reg.capacity_slots = absl::GetFlag(FLAGS_capacity_slots);
  reg.page_size = absl::GetFlag(FLAGS_page_size);
  reg.model = "loadgen";
  reg.epoch = 1;
  reg.vocab_size = kVocab;
  int64_t now_ms = 1;
  if (!state.RegisterWorker(reg, now_ms).ok()) return 1;
  std::mt19937_64 rng(5);
  std::vector<std::vector<int32_t>> prefixes(absl::GetFlag(FLAGS_num_prefixes));
  for (auto& p : prefixes) {
    for (int i = 0; i < absl::GetFlag(FLAGS_shared_prefix_tokens); ++i) {
      p.push_back(static_cast<int32_t>(rng() % kVocab));
    }
  }
  PairLoad::Result r;
  const absl::Time warm_end =
      absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_warmup_s));
  absl::Time start = warm_end;
  const absl::Time end =
      warm_end + absl::Seconds(absl::GetFlag(FLAGS_duration_s));
  for (uint64_t k = 0;; ++k) {
    const absl::Time t0 = absl::Now();
    if (t0 >= end || r.pairs >= absl::GetFlag(FLAGS_max_pairs)) break;
    cs::AcquireRequest acquire;
    acquire.worker_id = "loadgen-worker";
    acquire.epoch = 1;
    acquire.model = "loadgen";
    acquire.tokens = prefixes[k % prefixes.size()];
    while (static_cast<int>(acquire.tokens.size()) <
           absl::GetFlag(FLAGS_prompt_tokens)) {
      acquire.tokens.push_back(static_cast<int32_t>(rng() % kVocab));
    }
    auto lease = state.Acquire(acquire, ++now_ms);
    if (!lease.ok()) {
      ++r.errors;
      continue;
    }
    const absl::Time t1 = absl::Now();
    cs::CommitRequest commit;
    commit.lease_id = lease->lease_id;
    commit.tokens = std::move(acquire.tokens);
    if (!state.Commit(commit, ++now_ms).ok()) ++r.errors;
    const absl::Time t2 = absl::Now();
    if (t0 >= warm_end) {
      ++r.pairs;
      r.pair_ms.push_back(absl::ToDoubleMilliseconds(t2 - t0));
      r.acquire_ms.push_back(absl::ToDoubleMilliseconds(t1 - t0));
      r.commit_ms.push_back(absl::ToDoubleMilliseconds(t2 - t1));
    }
  }
  r.seconds = absl::ToDoubleSeconds(std::min(absl::Now(), end) - start);
  PrintRow("core (no gRPC, 1 thread)", r, nullptr);
  // What a Redis snapshot costs at this size (taken under the service mutex).
  const absl::Time s0 = absl::Now();
  const std::string snapshot = state.Serialize();
  const absl::Time s1 = absl::Now();
  auto stats = state.Stats("", now_ms);
  std::printf(
      "core state after the run: %lld cached tokens, %lld tree nodes; "
      "Serialize() = %zu bytes in %.2f ms\n",
      stats.ok() && !stats->workers.empty()
          ? static_cast<long long>(stats->workers[0].cached_tokens)
          : -1LL,
      stats.ok() ? static_cast<long long>(stats->tree_nodes) : -1LL,
      snapshot.size(), absl::ToDoubleMilliseconds(s1 - s0));
  return 0;
}

// One in-process service (memory or redis) behind a loopback gRPC server.
int RunInProcess(const std::string& mode) {
  std::unique_ptr<cs::RedisServerProcess> redis_process;
  std::unique_ptr<cs::RedisJournal> journal;
  JournalCounters counters;
  if (mode == "redis") {
    cs::RedisJournalOptions options;
    options.key_prefix = "loadgen";
    std::string address = absl::GetFlag(FLAGS_redis);
    if (address.empty()) {
      std::string dir = absl::StrCat("/tmp/radixkv_loadgen_redis_", getpid());
      auto started = cs::RedisServerProcess::Start(
          dir, 0, absl::GetFlag(FLAGS_redis_server_binary));
      if (!started.ok()) {
        spdlog::error("{}", started.status().ToString());
        return 1;
      }
      redis_process = std::move(*started);
      address = redis_process->address();
    }
    absl::Status parsed = cs::ParseRedisAddress(address, &options);
    if (!parsed.ok()) {
      spdlog::error("{}", parsed.ToString());
      return 1;
    }
    auto opened =
        cs::RedisJournal::Open(options, [&counters](double, int entries) {
          counters.flushes.fetch_add(1);
          counters.entries.fetch_add(entries);
        });
    if (!opened.ok()) {
      spdlog::error("{}", opened.status().ToString());
      return 1;
    }
    journal = std::move(*opened);
    absl::Status wiped = journal->Wipe();  // a fresh run
    if (!wiped.ok()) spdlog::warn("{}", wiped.ToString());
  } else if (mode != "memory") {
    spdlog::error("unknown mode {}", mode);
    return 1;
  }
  cs::CacheServiceOptions options;
  options.snapshot_every_ops = absl::GetFlag(FLAGS_snapshot_every_ops);
  options.snapshot_journal_ratio = absl::GetFlag(FLAGS_snapshot_journal_ratio);
  options.background_snapshots = absl::GetFlag(FLAGS_background_snapshots);
  auto service = cs::CacheServiceImpl::Create(options, std::move(journal),
                                              /*metrics=*/nullptr);
  if (!service.ok()) {
    spdlog::error("{}", service.status().ToString());
    return 1;
  }
  (*service)->StartBackgroundSweep();
  auto server =
      radixkv::process::GrpcServer::Start("127.0.0.1:0", {service->get()});
  if (!server.ok()) {
    spdlog::error("{}", server.status().ToString());
    return 1;
  }
  auto stubs = Connect(absl::StrCat("127.0.0.1:", (*server)->port()));
  if (!RegisterWorker(stubs[0].get(), 1)) return 1;
  PairLoad::Result result;
  {
    HeartbeatLoop heartbeats(stubs[0].get(), 1);
    result = Drive(stubs, 1);
  }
  PrintRow(absl::StrCat(mode, " ", absl::GetFlag(FLAGS_transport)), result,
           mode == "redis" ? &counters : nullptr);
  if (mode == "redis") {
    const cs::ForkedSnapshotStats snaps = (*service)->snapshot_stats();
    std::printf(
        "redis snapshots (%s, warm-up included): %lld started, %lld "
        "committed, %lld failed; RPC stall per snapshot (%s) mean %.2f ms, "
        "max %.2f ms (CPU in fork: mean %.2f ms, max %.2f ms); last snapshot "
        "%lld bytes\n",
        absl::GetFlag(FLAGS_background_snapshots) ? "forked" : "inline",
        static_cast<long long>(snaps.started),
        static_cast<long long>(snaps.succeeded),
        static_cast<long long>(snaps.failed),
        absl::GetFlag(FLAGS_background_snapshots) ? "fork()" : "Serialize()",
        snaps.started > 0 ? snaps.total_fork_ms / snaps.started : 0.0,
        snaps.max_fork_ms,
        snaps.started > 0 ? snaps.total_fork_cpu_ms / snaps.started : 0.0,
        snaps.max_fork_cpu_ms, static_cast<long long>(snaps.last_bytes));
  }
  (*server)->Shutdown(absl::Seconds(2));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  radixkv::process::DisableMutexDeadlockDetection();
  spdlog::set_level(spdlog::level::warn);
  if (absl::GetFlag(FLAGS_shared_prefix_tokens) >=
          absl::GetFlag(FLAGS_prompt_tokens) ||
      absl::GetFlag(FLAGS_concurrency) < 1 ||
      absl::GetFlag(FLAGS_num_prefixes) < 1 ||
      (absl::GetFlag(FLAGS_transport) != "unary" &&
       absl::GetFlag(FLAGS_transport) != "stream")) {
    std::fprintf(stderr,
                 "need shared_prefix_tokens < prompt_tokens, concurrency >= "
                 "1, num_prefixes >= 1, --transport=unary|stream\n");
    return 2;
  }
  std::printf(
      "cache_service loadgen: %d sessions, prompt %d tokens (%d shared, %d "
      "prefixes), page_size %d, %.1f s measured after %.1f s warm-up, "
      "transport %s over %d channels\n\n",
      absl::GetFlag(FLAGS_concurrency), absl::GetFlag(FLAGS_prompt_tokens),
      absl::GetFlag(FLAGS_shared_prefix_tokens),
      absl::GetFlag(FLAGS_num_prefixes), absl::GetFlag(FLAGS_page_size),
      absl::GetFlag(FLAGS_duration_s), absl::GetFlag(FLAGS_warmup_s),
      absl::GetFlag(FLAGS_transport).c_str(), absl::GetFlag(FLAGS_channels));
  PrintHeader();
  if (!absl::GetFlag(FLAGS_target).empty()) {
    auto stubs = Connect(absl::GetFlag(FLAGS_target));
    const int64_t epoch = absl::ToUnixMillis(absl::Now());
    if (!RegisterWorker(stubs[0].get(), epoch)) return 1;
    PairLoad::Result result;
    {
      HeartbeatLoop heartbeats(stubs[0].get(), epoch);
      result = Drive(stubs, epoch);
    }
    PrintRow(absl::StrCat("external ", absl::GetFlag(FLAGS_transport)), result,
             nullptr);
    return 0;
  }
  for (const std::string& mode : std::vector<std::string>(absl::StrSplit(
           absl::GetFlag(FLAGS_modes), ',', absl::SkipEmpty()))) {
    int rc = mode == "core" ? RunCore() : RunInProcess(mode);
    if (rc != 0) return rc;
  }
  return 0;
}
