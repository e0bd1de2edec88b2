// radixkv cache service: the global radix tree, allocator, leases and eviction
// for every worker's KV memory, served as radixkv.v1.CacheService over gRPC
// (plus grpc.health.v1), with Prometheus /metrics and, with --redis, a
// write-ahead journal in Redis from which a restarted process rebuilds its
// state.
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cache_service/cache_metrics.h"
#include "cache_service/cache_service_impl.h"
#include "cache_service/cache_state.h"
#include "cache_service/eviction_policy.h"
#include "cache_service/forked_snapshot.h"
#include "cache_service/redis_journal.h"
#include "grpcpp/health_check_service_interface.h"
#include "process/process_lifecycle.h"
#include "process/server_flags.h"
#include "spdlog/spdlog.h"

ABSL_DECLARE_FLAG(std::string, bind_address);  // process/process_lifecycle.cc

RADIXKV_DEFINE_SERVER_FLAGS(
    50051, 9101, 5,
    "Seconds SIGTERM/SIGINT waits for in-flight RPCs to finish after "
    "readiness drops to NOT_SERVING, before cancelling them; in [0, 3600].");
ABSL_FLAG(std::string, redis, "",
          "Redis host:port holding the journal and snapshots. Empty = "
          "in-memory mode (state is lost when the process exits).");
ABSL_FLAG(std::string, redis_key_prefix, "radixkv:cache",
          "Prefix of the Redis keys (<prefix>:snapshot, <prefix>:journal).");
ABSL_FLAG(int64_t, redis_connect_timeout_ms, 10000,
          "How long start-up retries connecting to --redis, ms.");
ABSL_FLAG(int64_t, lease_ttl_ms, 30000,
          "Lease time-to-live, ms; renewed by any call on the lease and by "
          "heartbeats listing it. Range [100, 86400000].");
ABSL_FLAG(int64_t, heartbeat_timeout_ms, 10000,
          "A worker without heartbeat for this long is dropped, ms. Range "
          "[100, 86400000].");
ABSL_FLAG(int64_t, snapshot_every_ops, 10000,
          "Journaled operations between two Redis snapshots. Range [1, 1e9].");
ABSL_FLAG(double, snapshot_journal_ratio, 4,
          "A snapshot also waits until the journal since the last one holds "
          "this many times the snapshot's bytes (bounds the snapshot cost per "
          "journaled byte). Range (0, 1000].");
ABSL_FLAG(bool, background_snapshots, true,
          "Take Redis snapshots in a forked child (the RPC stall is the "
          "fork, ~1 ms at 1M cached tokens) instead of serializing under the "
          "service mutex (tens of ms at 1M cached tokens).");
ABSL_FLAG(int64_t, snapshot_test_child_delay_ms, 0,
          "Testing only: a background snapshot's child sleeps this long "
          "before serializing. Range [0, 600000].");
ABSL_FLAG(std::string, eviction_policy, "lru",
          "Eviction order of unlocked leaves: lru, lfu, priority or "
          "reuse_lru (LRU where a prefix some request has matched counts as "
          "--eviction_reuse_bonus_ms more recent, so finished requests' "
          "unique tails go before shared prefixes). Must not change across "
          "a restart on the same Redis state.");
ABSL_FLAG(int64_t, eviction_reuse_bonus_ms, 5'000,
          "reuse_lru only: how much more recent a reused leaf counts, ms. "
          "Range [0, 86400000].");
ABSL_FLAG(int64_t, max_prompt_tokens, 1 << 20,
          "Longest prompt accepted by Match/Acquire, tokens. Range "
          "[1, 1048576].");
ABSL_FLAG(int, grow_chunk_tokens, 16,
          "Grow() rounds up to this many slots when page_size is 1. Range "
          "[1, 65536].");
ABSL_FLAG(int64_t, max_total_slots, int64_t{1} << 24,
          "Most KV slots all registered workers may declare together "
          "(capacity_slots summed); a Register beyond it is "
          "RESOURCE_EXHAUSTED. Bounds the metadata: 12 bytes per page of "
          "allocator, about 8-20 bytes per cached token of tree records (up "
          "to ~360 when every token is its own tree node); "
          "docs/architecture.md. Range [1, 2^40].");
ABSL_FLAG(int32_t, max_workers, 1024,
          "Most registered workers over all models (a model exists only "
          "while a worker serves it). Range [1, 1000000].");
ABSL_FLAG(int32_t, max_trees, 65536,
          "Most (model, cache_salt) radix trees; a Commit that would add one "
          "beyond it is RESOURCE_EXHAUSTED (its tokens are not cached). "
          "Range [1, 100000000].");
ABSL_FLAG(int64_t, sweep_interval_ms, 250,
          "Period of the lease-expiry / dead-worker sweep and metrics "
          "refresh, ms. Range [10, 60000].");

namespace {

namespace cs = radixkv::cache_service;

// Validates every flag; fills `options` and `redis` from them.
absl::Status ValidateFlags(cs::CacheServiceOptions* options,
                           cs::RedisJournalOptions* redis) {
  namespace process = radixkv::process;
  absl::Status s = process::ValidateServerFlags(process::GetServerFlags());
  if (s.ok()) {
    const double ratio = absl::GetFlag(FLAGS_snapshot_journal_ratio);
    if (!(ratio > 0 && ratio <= 1000)) {
      s = absl::InvalidArgumentError(absl::StrCat(
          "--snapshot_journal_ratio must be in (0, 1000], got ", ratio));
    }
  }
  if (s.ok()) {
    s = process::CheckFlagRanges({
        {"lease_ttl_ms", absl::GetFlag(FLAGS_lease_ttl_ms), 100, 86'400'000},
        {"heartbeat_timeout_ms", absl::GetFlag(FLAGS_heartbeat_timeout_ms), 100,
         86'400'000},
        {"snapshot_every_ops", absl::GetFlag(FLAGS_snapshot_every_ops), 1,
         1'000'000'000},
        {"snapshot_test_child_delay_ms",
         absl::GetFlag(FLAGS_snapshot_test_child_delay_ms), 0, 600'000},
        {"max_prompt_tokens", absl::GetFlag(FLAGS_max_prompt_tokens), 1,
         cs::kMaxPromptTokens},
        {"grow_chunk_tokens", absl::GetFlag(FLAGS_grow_chunk_tokens), 1,
         cs::kMaxGrowTokens},
        {"sweep_interval_ms", absl::GetFlag(FLAGS_sweep_interval_ms), 10,
         60'000},
        {"max_total_slots", absl::GetFlag(FLAGS_max_total_slots), 1,
         int64_t{1} << 40},
        {"max_workers", absl::GetFlag(FLAGS_max_workers), 1, 1'000'000},
        {"max_trees", absl::GetFlag(FLAGS_max_trees), 1, 100'000'000},
        {"redis_connect_timeout_ms",
         absl::GetFlag(FLAGS_redis_connect_timeout_ms), 0, 600'000},
        {"eviction_reuse_bonus_ms",
         absl::GetFlag(FLAGS_eviction_reuse_bonus_ms), 0, 86'400'000},
    });
  }
  if (!s.ok()) return s;
  absl::StatusOr<cs::EvictionPolicyKind> policy =
      cs::ParseEvictionPolicy(absl::GetFlag(FLAGS_eviction_policy));
  if (!policy.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--eviction_policy: ", policy.status().message()));
  }
  const std::string redis_address = absl::GetFlag(FLAGS_redis);
  if (!redis_address.empty()) {
    s = cs::ParseRedisAddress(redis_address, redis);
    if (!s.ok()) return s;
  }
  const std::string prefix = absl::GetFlag(FLAGS_redis_key_prefix);
  if (prefix.empty() || prefix.size() > 200 ||
      prefix.find_first_of(" \t\r\n") != std::string::npos) {
    return absl::InvalidArgumentError(
        "--redis_key_prefix must be 1..200 bytes without whitespace");
  }
  redis->key_prefix = prefix;
  options->cache.lease_ttl_ms = absl::GetFlag(FLAGS_lease_ttl_ms);
  options->cache.heartbeat_timeout_ms =
      absl::GetFlag(FLAGS_heartbeat_timeout_ms);
  options->cache.eviction_policy = {
      .kind = *policy,
      .reuse_bonus_ms = absl::GetFlag(FLAGS_eviction_reuse_bonus_ms)};
  options->cache.grow_chunk_tokens = absl::GetFlag(FLAGS_grow_chunk_tokens);
  options->cache.bounds = {
      .max_total_slots = absl::GetFlag(FLAGS_max_total_slots),
      .max_workers = absl::GetFlag(FLAGS_max_workers),
      .max_trees = absl::GetFlag(FLAGS_max_trees)};
  options->max_prompt_tokens = absl::GetFlag(FLAGS_max_prompt_tokens);
  options->snapshot_every_ops = absl::GetFlag(FLAGS_snapshot_every_ops);
  options->background_snapshots = absl::GetFlag(FLAGS_background_snapshots);
  options->snapshot_journal_ratio = absl::GetFlag(FLAGS_snapshot_journal_ratio);
  options->forked_snapshot.child_delay_for_testing =
      absl::Milliseconds(absl::GetFlag(FLAGS_snapshot_test_child_delay_ms));
  options->sweep_interval =
      absl::Milliseconds(absl::GetFlag(FLAGS_sweep_interval_ms));
  return absl::OkStatus();
}

// UNAVAILABLE when something already listens on --bind_address:`port`.
// Opening the Redis journal takes it over from any other cache service
// using it (that one is fenced: NOT_SERVING until restarted), and the gRPC
// port is only bound after recovery; so a second instance started by
// mistake on a taken port must fail here, before the journal, instead of
// fencing the running one and then failing to bind. Other bind errors are
// left to the gRPC server, which reports them.
absl::Status CheckGrpcPortFree(int port) {
  if (port == 0) return absl::OkStatus();
  const std::string host = absl::GetFlag(FLAGS_bind_address);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints,
                    &found) != 0) {
    return absl::OkStatus();
  }
  bool in_use = false;
  if (found != nullptr) {
    const int fd =
        ::socket(found->ai_family, found->ai_socktype, found->ai_protocol);
    if (fd >= 0) {
      const int one = 1;  // a port in TIME_WAIT is free
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      in_use = ::bind(fd, found->ai_addr, found->ai_addrlen) != 0 &&
               errno == EADDRINUSE;
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (!in_use) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "gRPC port ", host, ":", port,
      " is in use (another cache service?); not opening the Redis journal, "
      "which would fence the cache service that uses it"));
}

// Connects to Redis, retrying until --redis_connect_timeout_ms.
absl::StatusOr<std::unique_ptr<cs::RedisJournal>> OpenJournal(
    const cs::RedisJournalOptions& redis,
    std::shared_ptr<cs::CacheMetrics> metrics) {
  const absl::Time deadline =
      absl::Now() +
      absl::Milliseconds(absl::GetFlag(FLAGS_redis_connect_timeout_ms));
  while (true) {
    auto journal =
        cs::RedisJournal::Open(redis, [metrics](double seconds, int entries) {
          metrics->ObserveJournalFlush(seconds, entries);
        });
    if (journal.ok() || absl::Now() >= deadline) return journal;
    spdlog::warn("{}; retrying", journal.status().ToString());
    absl::SleepFor(absl::Milliseconds(250));
  }
}

}  // namespace

int main(int argc, char** argv) {
  namespace process = radixkv::process;
  process::InitProcess(
      argc, argv,
      "radixkv cache service: the global radix tree, allocator, leases and "
      "eviction for every worker's KV memory.");
  cs::CacheServiceOptions options;
  cs::RedisJournalOptions redis;
  absl::Status valid = ValidateFlags(&options, &redis);
  if (process::CheckFlagsOnly() || !valid.ok()) {
    return process::FinishCheckFlags(valid);
  }
  auto metrics_endpoint =
      process::MetricsEndpoint::StartOnPort(absl::GetFlag(FLAGS_metrics_port));
  if (!metrics_endpoint.ok()) return 1;
  const bool use_redis = !absl::GetFlag(FLAGS_redis).empty();
  auto metrics = std::make_shared<cs::CacheMetrics>(
      *(*metrics_endpoint)->registry(), use_redis ? "redis" : "memory");

  std::unique_ptr<cs::RedisJournal> journal;
  if (use_redis) {
    if (absl::Status free = CheckGrpcPortFree(absl::GetFlag(FLAGS_grpc_port));
        !free.ok()) {
      spdlog::critical("{}", free.ToString());
      return 1;
    }
    auto opened = OpenJournal(redis, metrics);
    if (!opened.ok()) {
      spdlog::critical("{}", opened.status().ToString());
      return 1;
    }
    journal = std::move(*opened);
    spdlog::info("persistence: redis at {} (keys {}:snapshot, {}:journal)",
                 absl::GetFlag(FLAGS_redis), redis.key_prefix,
                 redis.key_prefix);
  } else {
    spdlog::warn(
        "persistence: memory (no --redis): the cache state is lost when this "
        "process exits");
  }
  // Readiness follows the journal: NOT_SERVING while Redis cannot be written.
  std::atomic<grpc::Server*> grpc_server{nullptr};
  options.availability_observer = [&grpc_server](bool available) {
    spdlog::log(available ? spdlog::level::info : spdlog::level::err,
                "redis journal {}: health {}",
                available ? "repaired" : "failed",
                available ? "SERVING" : "NOT_SERVING");
    if (grpc::Server* server = grpc_server.load()) {
      server->GetHealthCheckService()->SetServingStatus(available);
    }
  };
  auto service =
      cs::CacheServiceImpl::Create(options, std::move(journal), metrics);
  if (!service.ok()) {
    spdlog::critical("cannot start the cache service: {}",
                     service.status().ToString());
    return 1;
  }
  (*service)->StartBackgroundSweep();

  auto server = process::GrpcServer::Start(
      process::ListenAddress(absl::GetFlag(FLAGS_grpc_port)), {service->get()});
  if (!server.ok()) {
    spdlog::critical("{}", server.status().ToString());
    return 1;
  }
  grpc_server.store((*server)->server());
  spdlog::info(
      "cache_service serving gRPC on port {} (radixkv.v1.CacheService, "
      "grpc.health.v1), /metrics on port {}, persistence={}, "
      "eviction_policy={}, lease_ttl_ms={}, heartbeat_timeout_ms={}",
      (*server)->port(), (*metrics_endpoint)->port(), (*service)->persistence(),
      absl::GetFlag(FLAGS_eviction_policy), options.cache.lease_ttl_ms,
      options.cache.heartbeat_timeout_ms);
  int sig = process::WaitForShutdownSignal();
  spdlog::info("signal {}: shutting down", sig);
  // Open LeaseStreams send what they applied and end (UNAVAILABLE) instead
  // of holding the drain until its timeout.
  (*service)->DrainLeaseStreams();
  (*server)->Shutdown(absl::Seconds(absl::GetFlag(FLAGS_drain_timeout_s)));
  grpc_server.store(nullptr);
  service->reset();  // stops the sweep, flushes the journal
  spdlog::info("cache_service stopped cleanly");
  return 0;
}
