#include "cache_service/cache_metrics.h"

#include <string>

#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace radixkv::cache_service {
namespace {

std::string Scrape(const prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

radixkv::v1::WorkerCacheStats* AddWorker(radixkv::v1::StatsResponse* stats,
                                         const std::string& id, int64_t epoch) {
  auto* w = stats->add_workers();
  w->set_worker_id(id);
  w->set_epoch(epoch);
  return w;
}

TEST(CacheMetricsTest, ExposesPerWorkerStateAndMonotonicCounters) {
  prometheus::Registry registry;
  CacheMetrics metrics(registry, "redis");

  radixkv::v1::StatsResponse stats;
  stats.set_tree_nodes(7);
  stats.set_expired_leases_total(3);
  auto* w = AddWorker(&stats, "w0", 1);
  w->set_free_slots(100);
  w->set_evictable_slots(20);
  w->set_protected_slots(8);
  w->set_cached_tokens(28);
  w->set_active_leases(2);
  w->set_prefix_query_tokens(50);
  w->set_prefix_hit_tokens(30);
  w->set_evicted_tokens(4);
  w->set_expired_leases(2);
  metrics.UpdateFromStats(stats);
  std::string text = Scrape(registry);
  EXPECT_NE(text.find("radixkv_cache_slots{state=\"free\",worker=\"w0\"} 100"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("radixkv_cache_slots{state=\"evictable\",worker=\"w0\"} 20"),
      std::string::npos);
  EXPECT_NE(
      text.find("radixkv_cache_slots{state=\"protected\",worker=\"w0\"} 8"),
      std::string::npos);
  EXPECT_NE(
      text.find("radixkv_cache_prefix_hit_tokens_total{worker=\"w0\"} 30"),
      std::string::npos);
  EXPECT_NE(text.find("radixkv_cache_active_leases{worker=\"w0\"} 2"),
            std::string::npos);
  EXPECT_NE(text.find("radixkv_cache_expired_leases_total 3"),
            std::string::npos);
  EXPECT_NE(text.find("radixkv_cache_tree_nodes 7"), std::string::npos);
  EXPECT_NE(
      text.find("radixkv_cache_worker_expired_leases_total{worker=\"w0\"} 2"),
      std::string::npos);
  EXPECT_NE(text.find("radixkv_cache_persistence{mode=\"redis\"} 1"),
            std::string::npos);

  // Same epoch: counters advance by the increase.
  w->set_prefix_hit_tokens(45);
  metrics.UpdateFromStats(stats);
  text = Scrape(registry);
  EXPECT_NE(
      text.find("radixkv_cache_prefix_hit_tokens_total{worker=\"w0\"} 45"),
      std::string::npos)
      << text;
  // New epoch: the worker's own counters restart at 5; ours stay monotonic.
  w->set_epoch(2);
  w->set_prefix_hit_tokens(5);
  metrics.UpdateFromStats(stats);
  text = Scrape(registry);
  EXPECT_NE(
      text.find("radixkv_cache_prefix_hit_tokens_total{worker=\"w0\"} 50"),
      std::string::npos)
      << text;

  // A worker that disappears loses its series.
  stats.clear_workers();
  metrics.UpdateFromStats(stats);
  text = Scrape(registry);
  EXPECT_EQ(text.find("worker=\"w0\""), std::string::npos) << text;
}

TEST(CacheMetricsTest, RpcAndJournalHistogramsCount) {
  prometheus::Registry registry;
  CacheMetrics metrics(registry, "memory");
  metrics.ObserveRpc(CacheRpc::kAcquire, absl::StatusCode::kOk, 0.0002);
  metrics.ObserveRpc(CacheRpc::kAcquire, absl::StatusCode::kOk, 0.0004);
  metrics.ObserveRpc(CacheRpc::kAcquire, absl::StatusCode::kNotFound, 0.0001);
  metrics.ObserveJournalFlush(0.0003, 12);
  std::string text = Scrape(registry);
  EXPECT_NE(
      text.find("radixkv_cache_rpc_latency_seconds_count{rpc=\"Acquire\"} 3"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("radixkv_cache_rpc_total{code=\"OK\",rpc=\"Acquire\"} 2"),
            std::string::npos);
  EXPECT_NE(
      text.find(
          "radixkv_cache_rpc_total{code=\"NOT_FOUND\",rpc=\"Acquire\"} 1"),
      std::string::npos);
  EXPECT_NE(text.find("radixkv_cache_journal_latency_seconds_count 1"),
            std::string::npos);
  EXPECT_NE(text.find("radixkv_cache_journal_batch_entries_sum 12"),
            std::string::npos);
  EXPECT_NE(text.find("radixkv_cache_persistence{mode=\"memory\"} 1"),
            std::string::npos);
}

TEST(CacheMetricsTest, RedisUpFollowsJournalWritesAndErrorsCount) {
  prometheus::Registry registry;
  CacheMetrics metrics(registry, "redis");
  std::string text = Scrape(registry);
  EXPECT_NE(text.find("\nradixkv_cache_redis_up 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\nradixkv_cache_journal_write_errors_total 0\n"),
            std::string::npos);

  metrics.AddJournalWriteError();
  metrics.AddJournalWriteError();
  metrics.SetRedisUp(false);
  text = Scrape(registry);
  EXPECT_NE(text.find("\nradixkv_cache_redis_up 0\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("\nradixkv_cache_journal_write_errors_total 2\n"),
            std::string::npos)
      << text;

  metrics.SetRedisUp(true);
  text = Scrape(registry);
  EXPECT_NE(text.find("\nradixkv_cache_redis_up 1\n"), std::string::npos);
  EXPECT_NE(text.find("\nradixkv_cache_journal_write_errors_total 2\n"),
            std::string::npos);
}

TEST(CacheMetricsTest, RedisUpIsZeroInMemoryModeAndBuildInfoIsOne) {
  prometheus::Registry registry;
  CacheMetrics metrics(registry, "memory");
  std::string text = Scrape(registry);
  EXPECT_NE(text.find("\nradixkv_cache_redis_up 0\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("radixkv_build_info{component=\"cache_service\","
                      "version=\"radixkv.v1\"} 1\n"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace radixkv::cache_service
