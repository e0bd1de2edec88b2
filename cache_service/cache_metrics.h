// Prometheus metrics of the cache service (prometheus-cpp 1.0), registered in
// the process's /metrics registry (process::MetricsEndpoint::registry()).
//
// Families (label `worker` = worker_id):
//   radixkv_cache_prefix_query_tokens_total{worker}  prompt tokens looked up
//   radixkv_cache_prefix_hit_tokens_total{worker}    of those, found cached
//   radixkv_cache_slots{worker,state}                state = free|evictable|
//                                                    protected, slots
//   radixkv_cache_cached_tokens{worker}              tokens in the tree
//   radixkv_cache_evicted_tokens_total{worker}       tokens evicted
//   radixkv_cache_active_leases{worker}              leases held
//   radixkv_cache_expired_leases_total               leases released by TTL
//   radixkv_cache_worker_expired_leases_total{worker}  the same, per worker
//   radixkv_cache_tree_nodes                         radix-tree nodes
//   radixkv_cache_persistence{mode}                  1 for redis|memory
//   radixkv_cache_journal_latency_seconds            one pipelined Redis
//                                                    flush (group commit)
//   radixkv_cache_journal_batch_entries              entries per flush
//   radixkv_cache_rpc_latency_seconds{rpc}           server time per RPC
//   radixkv_cache_rpc_total{rpc,code}                RPCs by status code
//   radixkv_cache_redis_up                           1 while the Redis
//                                                    journal is writable, 0
//                                                    after a failed write
//                                                    until repaired (and
//                                                    always 0 in memory mode)
//   radixkv_cache_journal_write_errors_total         journal writes that
//                                                    failed (each failed
//                                                    entry's callback)
//   radixkv_build_info{component="cache_service",version}  1
//
// Per-worker values come from the service's StatsResponse (UpdateFromStats,
// called by the service's background sweep and before tests read them). The
// per-worker cumulative counters restart when a worker re-registers with a
// new epoch; the Prometheus counters here stay monotonic (they add the
// increase, or the whole new value after such a restart).
#ifndef RADIXKV_CACHE_SERVICE_CACHE_METRICS_H_
#define RADIXKV_CACHE_SERVICE_CACHE_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "radixkv/v1/cache_service.pb.h"

namespace radixkv::cache_service {

// The RPCs of radixkv.v1.CacheService, for per-RPC metrics.
enum class CacheRpc {
  kRegister,
  kHeartbeat,
  kDeregister,
  kMatch,
  kAcquire,
  kGrow,
  kFork,
  kCommit,
  kRelease,
  kEvict,
  kFlush,
  kStats,
  kDump,
  kCount,  // not an RPC
};

// "Acquire" etc.
const char* CacheRpcName(CacheRpc rpc);

class CacheMetrics {
 public:
  // Registers every family in `registry`; `persistence` is "redis" or
  // "memory".
  CacheMetrics(prometheus::Registry& registry, const std::string& persistence);

  // One finished RPC: server-side latency in seconds and its status code.
  void ObserveRpc(CacheRpc rpc, absl::StatusCode code, double seconds);

  // One pipelined journal flush: round trip in seconds, entries carried.
  void ObserveJournalFlush(double seconds, int entries);

  // The Redis journal became unwritable (false) or was repaired (true).
  void SetRedisUp(bool up);

  // One journal write failed (an entry's done callback got an error).
  void AddJournalWriteError();

  // Sets the per-worker gauges and advances the counters from a full
  // (unfiltered) Stats snapshot; workers absent from it lose their series.
  void UpdateFromStats(const radixkv::v1::StatsResponse& stats);

 private:
  struct WorkerSeries {
    int64_t epoch = 0;
    int64_t last_query = 0;
    int64_t last_hit = 0;
    int64_t last_evicted = 0;
    int64_t last_expired = 0;
    prometheus::Counter* query = nullptr;
    prometheus::Counter* hit = nullptr;
    prometheus::Counter* evicted = nullptr;
    prometheus::Counter* expired = nullptr;
    prometheus::Gauge* free = nullptr;
    prometheus::Gauge* evictable = nullptr;
    prometheus::Gauge* protected_slots = nullptr;
    prometheus::Gauge* cached = nullptr;
    prometheus::Gauge* leases = nullptr;
  };
  static void Advance(prometheus::Counter* counter, int64_t* last,
                      int64_t now_value, bool restarted);

  prometheus::Family<prometheus::Counter>& query_tokens_;
  prometheus::Family<prometheus::Counter>& hit_tokens_;
  prometheus::Family<prometheus::Gauge>& slots_;
  prometheus::Family<prometheus::Gauge>& cached_tokens_;
  prometheus::Family<prometheus::Counter>& evicted_tokens_;
  prometheus::Family<prometheus::Gauge>& active_leases_;
  prometheus::Counter& expired_leases_;
  prometheus::Family<prometheus::Counter>& worker_expired_leases_;
  prometheus::Gauge& tree_nodes_;
  prometheus::Histogram& journal_latency_;
  prometheus::Histogram& journal_batch_;
  prometheus::Gauge& redis_up_;
  prometheus::Counter& journal_write_errors_;
  prometheus::Family<prometheus::Histogram>& rpc_latency_family_;
  prometheus::Family<prometheus::Counter>& rpc_total_family_;
  std::array<prometheus::Histogram*, static_cast<int>(CacheRpc::kCount)>
      rpc_latency_{};

  // radixkv_cache_rpc_total series by [rpc][status code], created on first
  // use (under mu_), read without a lock.
  static constexpr int kNumCodes = 17;
  std::array<std::array<std::atomic<prometheus::Counter*>, kNumCodes>,
             static_cast<int>(CacheRpc::kCount)>
      rpc_total_{};

  absl::Mutex mu_;
  int64_t last_expired_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, WorkerSeries> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace radixkv::cache_service

#endif  // RADIXKV_CACHE_SERVICE_CACHE_METRICS_H_
