#include "cache_service/cache_metrics.h"

#include <set>
#include <utility>

#include "absl/status/status.h"

namespace radixkv::cache_service {
namespace {

// Latency buckets, seconds: 10 us .. 1 s.
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2e-3,
          5e-3,  10e-3, 25e-3, 50e-3,  0.1,    0.25,   1.0};
}

}  // namespace

const char* CacheRpcName(CacheRpc rpc) {
  switch (rpc) {
    case CacheRpc::kRegister:
      return "Register";
    case CacheRpc::kHeartbeat:
      return "Heartbeat";
    case CacheRpc::kDeregister:
      return "Deregister";
    case CacheRpc::kMatch:
      return "Match";
    case CacheRpc::kAcquire:
      return "Acquire";
    case CacheRpc::kGrow:
      return "Grow";
    case CacheRpc::kFork:
      return "Fork";
    case CacheRpc::kCommit:
      return "Commit";
    case CacheRpc::kRelease:
      return "Release";
    case CacheRpc::kEvict:
      return "Evict";
    case CacheRpc::kFlush:
      return "Flush";
    case CacheRpc::kStats:
      return "Stats";
    case CacheRpc::kDump:
      return "Dump";
    case CacheRpc::kCount:
      break;
  }
  return "Unknown";
}

CacheMetrics::CacheMetrics(prometheus::Registry& registry,
                           const std::string& persistence)
    : query_tokens_(prometheus::BuildCounter()
                        .Name("radixkv_cache_prefix_query_tokens_total")
                        .Help("Prompt tokens looked up in the prefix cache "
                              "(Acquire), per worker.")
                        .Register(registry)),
      hit_tokens_(prometheus::BuildCounter()
                      .Name("radixkv_cache_prefix_hit_tokens_total")
                      .Help("Prompt tokens found cached (reused), per worker.")
                      .Register(registry)),
      slots_(prometheus::BuildGauge()
                 .Name("radixkv_cache_slots")
                 .Help("KV slots by state (free, evictable, protected); the "
                       "three sum to the worker's capacity.")
                 .Register(registry)),
      cached_tokens_(prometheus::BuildGauge()
                         .Name("radixkv_cache_cached_tokens")
                         .Help("Tokens stored in the radix tree, per worker.")
                         .Register(registry)),
      evicted_tokens_(prometheus::BuildCounter()
                          .Name("radixkv_cache_evicted_tokens_total")
                          .Help("Tokens evicted from the tree, per worker.")
                          .Register(registry)),
      active_leases_(prometheus::BuildGauge()
                         .Name("radixkv_cache_active_leases")
                         .Help("Leases currently held, per worker.")
                         .Register(registry)),
      expired_leases_(prometheus::BuildCounter()
                          .Name("radixkv_cache_expired_leases_total")
                          .Help("Leases released by the service because their "
                                "TTL passed.")
                          .Register(registry)
                          .Add({})),
      worker_expired_leases_(
          prometheus::BuildCounter()
              .Name("radixkv_cache_worker_expired_leases_total")
              .Help("Leases of the worker released by the service because "
                    "their TTL passed.")
              .Register(registry)),
      tree_nodes_(prometheus::BuildGauge()
                      .Name("radixkv_cache_tree_nodes")
                      .Help("Radix-tree nodes over all trees.")
                      .Register(registry)
                      .Add({})),
      journal_latency_(
          prometheus::BuildHistogram()
              .Name("radixkv_cache_journal_latency_seconds")
              .Help("Round trip of one pipelined Redis journal flush (group "
                    "commit), seconds.")
              .Register(registry)
              .Add({}, LatencyBuckets())),
      journal_batch_(
          prometheus::BuildHistogram()
              .Name("radixkv_cache_journal_batch_entries")
              .Help("Journal entries written per Redis flush.")
              .Register(registry)
              .Add({},
                   prometheus::Histogram::BucketBoundaries{
                       1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096})),
      redis_up_(prometheus::BuildGauge()
                    .Name("radixkv_cache_redis_up")
                    .Help("1 while the Redis journal is writable; 0 after a "
                          "failed write until repaired, and in memory mode.")
                    .Register(registry)
                    .Add({})),
      journal_write_errors_(
          prometheus::BuildCounter()
              .Name("radixkv_cache_journal_write_errors_total")
              .Help("Redis journal writes that failed.")
              .Register(registry)
              .Add({})),
      rpc_latency_family_(prometheus::BuildHistogram()
                              .Name("radixkv_cache_rpc_latency_seconds")
                              .Help("Server-side latency of CacheService RPCs "
                                    "(including the journal write), seconds.")
                              .Register(registry)),
      rpc_total_family_(
          prometheus::BuildCounter()
              .Name("radixkv_cache_rpc_total")
              .Help("CacheService RPCs by method and status code.")
              .Register(registry)) {
  prometheus::BuildGauge()
      .Name("radixkv_cache_persistence")
      .Help("1 for the active persistence mode (redis or memory).")
      .Register(registry)
      .Add({{"mode", persistence}})
      .Set(1);
  redis_up_.Set(persistence == "redis" ? 1 : 0);
  // Build identity: the proto contract version (no Bazel stamping).
  prometheus::BuildGauge()
      .Name("radixkv_build_info")
      .Help("Always 1; labels give the component and its version.")
      .Register(registry)
      .Add({{"component", "cache_service"}, {"version", "radixkv.v1"}})
      .Set(1);
  for (int i = 0; i < static_cast<int>(CacheRpc::kCount); ++i) {
    rpc_latency_[i] = &rpc_latency_family_.Add(
        {{"rpc", CacheRpcName(static_cast<CacheRpc>(i))}}, LatencyBuckets());
  }
}

void CacheMetrics::ObserveRpc(CacheRpc rpc, absl::StatusCode code,
                              double seconds) {
  int index = static_cast<int>(rpc);
  if (index < 0 || index >= static_cast<int>(CacheRpc::kCount)) return;
  rpc_latency_[index]->Observe(seconds);
  const int code_index = static_cast<int>(code);
  if (code_index < 0 || code_index >= kNumCodes) return;
  std::atomic<prometheus::Counter*>& slot = rpc_total_[index][code_index];
  prometheus::Counter* counter = slot.load(std::memory_order_acquire);
  if (counter == nullptr) {
    absl::MutexLock lock(&mu_);
    counter = slot.load(std::memory_order_acquire);
    if (counter == nullptr) {
      counter =
          &rpc_total_family_.Add({{"rpc", CacheRpcName(rpc)},
                                  {"code", absl::StatusCodeToString(code)}});
      slot.store(counter, std::memory_order_release);
    }
  }
  counter->Increment();
}

void CacheMetrics::ObserveJournalFlush(double seconds, int entries) {
  journal_latency_.Observe(seconds);
  journal_batch_.Observe(entries);
}

void CacheMetrics::SetRedisUp(bool up) { redis_up_.Set(up ? 1 : 0); }

void CacheMetrics::AddJournalWriteError() { journal_write_errors_.Increment(); }

void CacheMetrics::Advance(prometheus::Counter* counter, int64_t* last,
                           int64_t now_value, bool restarted) {
  if (restarted || now_value < *last) {
    if (now_value > 0) counter->Increment(static_cast<double>(now_value));
  } else if (now_value > *last) {
    counter->Increment(static_cast<double>(now_value - *last));
  }
  *last = now_value;
}

void CacheMetrics::UpdateFromStats(const radixkv::v1::StatsResponse& stats) {
  absl::MutexLock lock(&mu_);
  tree_nodes_.Set(static_cast<double>(stats.tree_nodes()));
  if (stats.expired_leases_total() > last_expired_) {
    expired_leases_.Increment(
        static_cast<double>(stats.expired_leases_total() - last_expired_));
  }
  last_expired_ = std::max(last_expired_, stats.expired_leases_total());

  std::set<std::string> present;
  for (const radixkv::v1::WorkerCacheStats& w : stats.workers()) {
    present.insert(w.worker_id());
    auto [it, inserted] = workers_.try_emplace(w.worker_id());
    WorkerSeries& s = it->second;
    if (inserted) {
      const prometheus::Labels worker = {{"worker", w.worker_id()}};
      s.query = &query_tokens_.Add(worker);
      s.hit = &hit_tokens_.Add(worker);
      s.evicted = &evicted_tokens_.Add(worker);
      s.expired = &worker_expired_leases_.Add(worker);
      s.free = &slots_.Add({{"worker", w.worker_id()}, {"state", "free"}});
      s.evictable =
          &slots_.Add({{"worker", w.worker_id()}, {"state", "evictable"}});
      s.protected_slots =
          &slots_.Add({{"worker", w.worker_id()}, {"state", "protected"}});
      s.cached = &cached_tokens_.Add(worker);
      s.leases = &active_leases_.Add(worker);
      s.epoch = w.epoch();
    }
    bool restarted = !inserted && w.epoch() != s.epoch;
    s.epoch = w.epoch();
    Advance(s.query, &s.last_query, w.prefix_query_tokens(), restarted);
    Advance(s.hit, &s.last_hit, w.prefix_hit_tokens(), restarted);
    Advance(s.evicted, &s.last_evicted, w.evicted_tokens(), restarted);
    Advance(s.expired, &s.last_expired, w.expired_leases(), restarted);
    s.free->Set(static_cast<double>(w.free_slots()));
    s.evictable->Set(static_cast<double>(w.evictable_slots()));
    s.protected_slots->Set(static_cast<double>(w.protected_slots()));
    s.cached->Set(static_cast<double>(w.cached_tokens()));
    s.leases->Set(static_cast<double>(w.active_leases()));
  }
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (present.count(it->first) != 0) {
      ++it;
      continue;
    }
    WorkerSeries& s = it->second;
    query_tokens_.Remove(s.query);
    hit_tokens_.Remove(s.hit);
    evicted_tokens_.Remove(s.evicted);
    worker_expired_leases_.Remove(s.expired);
    slots_.Remove(s.free);
    slots_.Remove(s.evictable);
    slots_.Remove(s.protected_slots);
    cached_tokens_.Remove(s.cached);
    active_leases_.Remove(s.leases);
    it = workers_.erase(it);
  }
}

}  // namespace radixkv::cache_service
