// Worker liveness across faults of the cache service itself, with real
// processes on loopback (docs/architecture.md "Worker liveness"):
//   - kill -STOP of the cache service for less than the heartbeat timeout
//     (but long enough that, counted against the workers, the heartbeats
//     lost meanwhile would exceed it): no worker is dropped, epochs stay,
//     the cached prefix still hits. The service credits its own pause.
//   - kill -9 + restart of the cache service from Redis while a worker
//     cannot show itself (frozen, then replaced by a new process): until it
//     heartbeats its epoch, Match reports it unconfirmed with no cached
//     tokens; the restarted process registers a new epoch.
// What is asserted does not depend on machine speed: the frozen processes
// cannot answer, so the states checked hold however long each step takes.
#include <signal.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tools/local_cluster/local_cluster.h"
#include "tests/router_e2e_client.h"

namespace radixkv::tests {
namespace {

namespace pb = ::radixkv::v1;

pb::MatchResponse Match(const std::string& cache_address,
                        const std::vector<int32_t>& tokens) {
  pb::MatchRequest req;
  req.set_model("radixkv-demo-llama");
  req.mutable_tokens()->Assign(tokens.begin(), tokens.end());
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  pb::MatchResponse resp;
  const grpc::Status s =
      CacheServiceStub(cache_address)->Match(&ctx, req, &resp);
  EXPECT_TRUE(s.ok()) << s.error_message();
  return resp;
}

// The entry of `worker_id` (a copy: `match` is often a temporary).
std::optional<pb::WorkerMatch> Find(const pb::MatchResponse& match,
                                    const std::string& worker_id) {
  for (const pb::WorkerMatch& w : match.workers()) {
    if (w.worker_id() == worker_id) return w;
  }
  return std::nullopt;
}

constexpr int64_t kHeartbeatTimeoutMs = 6000;

TEST(CacheServiceLivenessTest, AStallShorterThanTheTimeoutDropsNoWorker) {
  router::LocalClusterOptions options = TestClusterOptions("stall_cache");
  options.cache_service_args = {
      absl::StrCat("--heartbeat_timeout_ms=", kHeartbeatTimeoutMs)};
  // A heartbeat sent during the stall fails before it ends (as with the
  // default 5 s deadline in a stall of 6-9 s under the 10 s timeout).
  options.worker_args.push_back("--cache_rpc_timeout_ms=1000");
  auto started = router::LocalCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  router::LocalCluster& cluster = **started;
  auto router = RouterStub(cluster.router_address());
  const std::vector<int32_t> prompt =
      Concat({1}, LicenseTokens("Apache-2.0", 0, 48));
  Completion first = Generate(router.get(), prompt, {.max_new_tokens = 4});
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  const pb::StatsResponse before = CacheStats(cluster.cache_service_address());
  ASSERT_EQ(before.workers_size(), 2);

  // 5.9 s: counted against the workers, the time since their last heartbeat
  // before it plus the stall exceed the 6 s timeout.
  const pid_t cache_pid = cluster.cache_service_pid();
  ASSERT_GT(cache_pid, 0);
  const absl::Time stopped_at = absl::Now();
  {
    ResumeOnExit resume(cache_pid);
    ASSERT_TRUE(FreezeProcess(cache_pid));
    absl::SleepFor(absl::Milliseconds(kHeartbeatTimeoutMs - 100));
  }
  const absl::Duration stalled = absl::Now() - stopped_at;

  // Every drop would happen within a timeout after the resume; watch two.
  int64_t max_age_ms = 0;
  const absl::Time watch_until =
      absl::Now() + absl::Milliseconds(2 * kHeartbeatTimeoutMs);
  while (absl::Now() < watch_until) {
    const pb::StatsResponse now = CacheStats(cluster.cache_service_address());
    ASSERT_EQ(now.workers_size(), 2) << "a worker was dropped";
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(now.workers(i).worker_id(), before.workers(i).worker_id());
      ASSERT_EQ(now.workers(i).epoch(), before.workers(i).epoch())
          << now.workers(i).worker_id() << " re-registered";
      max_age_ms = std::max(max_age_ms, now.workers(i).heartbeat_age_ms());
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  std::printf(
      "cache service stopped for %s (heartbeat timeout %lld ms); largest "
      "heartbeat age seen afterwards %lld ms; no worker dropped\n",
      absl::FormatDuration(stalled).c_str(),
      static_cast<long long>(kHeartbeatTimeoutMs),
      static_cast<long long>(max_age_ms));
  // The prefix cached before the stall still hits on the same worker.
  Completion again = Generate(router.get(), prompt, {.max_new_tokens = 4});
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.worker_id, first.worker_id);
  EXPECT_GE(again.usage.cached_tokens(), static_cast<int>(prompt.size()) - 1);
  EXPECT_EQ(again.tokens, first.tokens);
}

TEST(CacheServiceLivenessTest, RestoredResidencyWaitsForTheWorkersHeartbeat) {
  router::LocalClusterOptions options =
      TestClusterOptions("restart_unconfirmed");
  // The frozen worker stays registered however long the steps take; the
  // survivor heartbeats every 2 s (lease TTL / 4).
  options.cache_service_args = {"--heartbeat_timeout_ms=120000",
                                "--lease_ttl_ms=8000"};
  auto started = router::LocalCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  router::LocalCluster& cluster = **started;
  auto router = RouterStub(cluster.router_address());
  // One prompt cached on each worker.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> served_by;
  for (int i = 0; i < 2; ++i) {
    prompts.push_back(Concat({1}, LicenseTokens("GPL-3", 80 * i, 48)));
    Completion r = Generate(router.get(), prompts[i],
                            {.max_new_tokens = 4, .policy = "round_robin"});
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    served_by.push_back(r.worker_id);
  }
  ASSERT_NE(served_by[0], served_by[1]);
  const std::string cache = cluster.cache_service_address();
  const int victim_index = served_by[0] == cluster.worker_id(0) ? 0 : 1;
  const std::string victim = served_by[0];
  const std::string survivor = served_by[1];
  const std::optional<pb::WorkerMatch> cached =
      Find(Match(cache, prompts[0]), victim);
  ASSERT_TRUE(cached.has_value());
  ASSERT_GT(cached->matched_tokens(), 0);
  const int64_t old_epoch = cached->epoch();

  // The victim cannot show itself while the cache service restarts.
  const pid_t victim_pid = cluster.worker_pid(victim_index);
  ResumeOnExit resume(victim_pid);
  ASSERT_TRUE(FreezeProcess(victim_pid));
  ASSERT_TRUE(cluster.RestartCacheService(/*crash=*/true).ok());
  const std::optional<pb::WorkerMatch> restored =
      Find(Match(cache, prompts[0]), victim);
  ASSERT_TRUE(restored.has_value());
  EXPECT_EQ(restored->epoch(), old_epoch);
  EXPECT_TRUE(restored->unconfirmed());
  EXPECT_EQ(restored->matched_tokens(), 0);
  EXPECT_EQ(restored->page_aligned_tokens(), 0);
  // The survivor confirms itself with its next heartbeat and its residency
  // is reported again.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  pb::WorkerMatch survivor_match;
  while (absl::Now() < deadline) {
    survivor_match =
        Find(Match(cache, prompts[1]), survivor).value_or(pb::WorkerMatch());
    if (!survivor_match.unconfirmed()) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_FALSE(survivor_match.unconfirmed());
  EXPECT_GT(survivor_match.matched_tokens(), 0);
  const std::optional<pb::WorkerMatch> still =
      Find(Match(cache, prompts[0]), victim);
  ASSERT_TRUE(still.has_value());
  EXPECT_TRUE(still->unconfirmed());
  EXPECT_EQ(still->matched_tokens(), 0);

  // A new process at the victim's address registers a new epoch, empty.
  cluster.KillWorker(victim_index, SIGKILL);
  ASSERT_TRUE(cluster.RestartWorker(victim_index).ok());
  pb::WorkerMatch fresh;
  const absl::Time registered_by = absl::Now() + absl::Seconds(30);
  while (absl::Now() < registered_by) {
    const std::optional<pb::WorkerMatch> m =
        Find(Match(cache, prompts[0]), victim);
    if (m.has_value()) fresh = *m;
    if (fresh.epoch() > old_epoch) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_GT(fresh.epoch(), old_epoch);
  EXPECT_FALSE(fresh.unconfirmed());
  EXPECT_EQ(fresh.matched_tokens(), 0);
}

}  // namespace
}  // namespace radixkv::tests
