// End to end through the router with real processes on loopback
// (redis-server, cache service journaling to it, two CPU workers with the
// embedded model, router; see tools/local_cluster/local_cluster.h):
//   - a second conversation turn computes only its new tokens;
//   - greedy outputs are identical with the prefix cache on and off;
//   - cache_aware keeps each of two conversations on the worker holding its
//     prefix while the two conversations use both workers;
//   - 100 concurrent requests sharing one cached prefix spill to the second
//     worker once the load skew passes the imbalance guard.
#include <atomic>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/barrier.h"
#include "gtest/gtest.h"
#include "tools/local_cluster/local_cluster.h"
#include "tests/router_e2e_client.h"

namespace radixkv::tests {
namespace {

std::unique_ptr<router::LocalCluster> StartCluster(
    router::LocalClusterOptions options) {
  auto cluster = router::LocalCluster::Start(std::move(options));
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? *std::move(cluster) : nullptr;
}

int WorkerIndex(const router::LocalCluster& c, const std::string& id) {
  for (int i = 0; i < c.num_workers(); ++i) {
    if (c.worker_id(i) == id) return i;
  }
  ADD_FAILURE() << "unknown worker id " << id;
  return 0;
}

TEST(RouterEndToEndTest, SecondTurnComputesOnlyItsNewTokens) {
  auto cluster = StartCluster(TestClusterOptions("second_turn"));
  ASSERT_NE(cluster, nullptr);
  auto router = RouterStub(cluster->router_address());
  const std::vector<int32_t> turn1 =
      Concat({1}, LicenseTokens("Apache-2.0", 0, 150));
  Completion r1 = Generate(router.get(), turn1, {.max_new_tokens = 16});
  ASSERT_TRUE(r1.status.ok()) << r1.status.error_message();
  ASSERT_EQ(r1.tokens.size(), 16u);
  EXPECT_EQ(r1.usage.prompt_tokens(), 150 + 1);
  EXPECT_EQ(r1.usage.cached_tokens(), 0);
  const int w = WorkerIndex(*cluster, r1.worker_id);
  const int64_t computed_before =
      WorkerStats(cluster->worker_address(w)).prefill_tokens_computed();

  const std::vector<int32_t> user2 = LicenseTokens("GPL-3", 100, 20);
  const std::vector<int32_t> turn2 = Concat(Concat(turn1, r1.tokens), user2);
  Completion r2 = Generate(router.get(), turn2, {.max_new_tokens = 16});
  ASSERT_TRUE(r2.status.ok()) << r2.status.error_message();
  EXPECT_EQ(r2.worker_id, r1.worker_id);
  EXPECT_EQ(r2.usage.prompt_tokens(), static_cast<int>(turn2.size()));
  // Everything of turn 1 whose KV was written is reused: its prompt and its
  // answer except the last sampled token (never fed back). So the second
  // turn computes the 20 new tokens plus at most that one token.
  const int64_t computed = r2.usage.prompt_tokens() - r2.usage.cached_tokens();
  EXPECT_GE(computed, static_cast<int64_t>(user2.size()));
  EXPECT_LE(computed, static_cast<int64_t>(user2.size()) + 1);
  EXPECT_EQ(WorkerStats(cluster->worker_address(w)).prefill_tokens_computed() -
                computed_before,
            computed);
}

TEST(RouterEndToEndTest, GreedyOutputsAreIdenticalWithCacheOnAndOff) {
  auto cluster = StartCluster(TestClusterOptions("greedy_equal"));
  ASSERT_NE(cluster, nullptr);
  auto router = RouterStub(cluster->router_address());
  // One shared context (ending mid-page and on a page boundary: 16-token
  // pages) and different questions.
  for (int context_len : {37, 64}) {
    const std::vector<int32_t> context =
        Concat({1}, LicenseTokens("MPL-2.0", 200, context_len - 1));
    int64_t reused = 0;
    for (int q = 0; q < 3; ++q) {
      const std::vector<int32_t> prompt =
          Concat(context, LicenseTokens("Artistic", 40 * q, 12));
      Completion cached =
          Generate(router.get(), prompt, {.max_new_tokens = 24});
      Completion baseline =
          Generate(router.get(), prompt,
                   {.max_new_tokens = 24, .disable_prefix_cache = true});
      ASSERT_TRUE(cached.status.ok()) << cached.status.error_message();
      ASSERT_TRUE(baseline.status.ok()) << baseline.status.error_message();
      EXPECT_EQ(baseline.usage.cached_tokens(), 0);
      EXPECT_EQ(cached.tokens, baseline.tokens)
          << "context " << context_len << " question " << q;
      EXPECT_EQ(cached.tokens.size(), 24u);
      if (q > 0) reused += cached.usage.cached_tokens();
    }
    // The comparison is meaningful only if the cache was really used.
    EXPECT_GE(reused, 2 * (context_len - 1)) << "context " << context_len;
  }
}

TEST(RouterEndToEndTest, ConversationsStayOnTheirWorkerAndUseBoth) {
  auto cluster = StartCluster(TestClusterOptions("affinity"));
  ASSERT_NE(cluster, nullptr);
  auto router = RouterStub(cluster->router_address());
  struct Conversation {
    std::vector<int32_t> history;
    std::vector<std::string> workers;
    std::vector<int64_t> cached;
    std::vector<int64_t> previous_len;
  };
  Conversation a, b;
  a.history = Concat({1}, LicenseTokens("GPL-3", 0, 120));
  b.history = Concat({1}, LicenseTokens("Apache-2.0", 300, 120));
  auto turn = [&](Conversation* c, int round, int max_new) {
    std::vector<int32_t> prompt = Concat(
        c->history,
        LicenseTokens("MPL-2.0", 500 + 50 * round + (c == &a ? 0 : 1000), 24));
    Completion r = Generate(router.get(), prompt, {.max_new_tokens = max_new});
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    c->workers.push_back(r.worker_id);
    c->cached.push_back(r.usage.cached_tokens());
    c->previous_len.push_back(static_cast<int64_t>(c->history.size()));
    c->history = Concat(prompt, r.tokens);
  };
  // Round 1: A is routed first and is still in flight (its remaining decode
  // tokens count as load) when B is routed.
  std::thread first([&] { turn(&a, 0, 96); });
  for (int i = 0; i < 500 && a.workers.empty(); ++i) {
    grpc::ClientContext ctx;
    radixkv::v1::ListWorkersResponse list;
    ASSERT_TRUE(router->ListWorkers(&ctx, {}, &list).ok());
    int64_t dispatched = 0;
    for (const auto& w : list.workers()) dispatched += w.dispatched_requests();
    if (dispatched > 0) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  std::thread second([&] { turn(&b, 0, 96); });
  first.join();
  second.join();
  // Rounds 2..5 of both conversations interleave.
  std::thread ta([&] {
    for (int r = 1; r < 5; ++r) turn(&a, r, 16);
  });
  std::thread tb([&] {
    for (int r = 1; r < 5; ++r) turn(&b, r, 16);
  });
  ta.join();
  tb.join();
  ASSERT_EQ(a.workers.size(), 5u);
  ASSERT_EQ(b.workers.size(), 5u);
  EXPECT_EQ(std::set<std::string>(a.workers.begin(), a.workers.end()).size(),
            1u);
  EXPECT_EQ(std::set<std::string>(b.workers.begin(), b.workers.end()).size(),
            1u);
  EXPECT_NE(a.workers[0], b.workers[0]) << "both conversations on one worker";
  for (int r = 1; r < 5; ++r) {
    // Each round reuses the whole previous round (prompt + answer) but the
    // answer's last token.
    EXPECT_GE(a.cached[r], a.previous_len[r] - 1) << "A round " << r;
    EXPECT_GE(b.cached[r], b.previous_len[r] - 1) << "B round " << r;
  }
}

TEST(RouterEndToEndTest, HundredConcurrentSharedPrefixRequestsSpillPastGuard) {
  router::LocalClusterOptions options = TestClusterOptions("spill");
  // Score by prefix only, so that nothing but the imbalance guard can move
  // requests off the worker holding the prefix.
  options.router_args = {"--load_weight=0", "--balance_abs_tokens=128",
                         "--balance_rel_ratio=1.5"};
  auto cluster = StartCluster(options);
  ASSERT_NE(cluster, nullptr);
  auto router = RouterStub(cluster->router_address());
  const std::vector<int32_t> prefix =
      Concat({1}, LicenseTokens("GPL-3", 2000, 199));
  // Warm: the prefix becomes resident on one worker.
  Completion warm =
      Generate(router.get(), Concat(prefix, {5, 6, 7}), {.max_new_tokens = 4});
  ASSERT_TRUE(warm.status.ok()) << warm.status.error_message();
  const std::vector<int32_t> questions = LicenseTokens("Apache-2.0", 0, 800);
  constexpr int kRequests = 100;
  std::vector<Completion> results(kRequests);
  absl::Barrier* start = new absl::Barrier(kRequests);
  std::vector<std::thread> threads;
  for (int i = 0; i < kRequests; ++i) {
    threads.emplace_back([&, i] {
      std::vector<int32_t> q(questions.begin() + 8 * i,
                             questions.begin() + 8 * i + 8);
      if (start->Block()) delete start;
      results[i] =
          Generate(router.get(), Concat(prefix, q), {.max_new_tokens = 24});
    });
  }
  for (auto& t : threads) t.join();
  std::map<std::string, int> per_worker;
  int64_t cached = 0;
  for (const Completion& r : results) {
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens.size(), 24u);
    ++per_worker[r.worker_id];
    cached += r.usage.cached_tokens();
  }
  ASSERT_EQ(per_worker.size(), 2u) << "no spill to the second worker";
  EXPECT_GE(per_worker[warm.worker_id], 10);
  for (const auto& [worker, n] : per_worker) EXPECT_GE(n, 10) << worker;
  const double guard = MetricValue(cluster->router_metrics_address(),
                                   "radixkv_router_requests_total{api=\"grpc\","
                                   "decision=\"load_guard\",outcome=\"ok\","
                                   "policy=\"cache_aware\"}");
  EXPECT_GE(guard, 1) << "the spill did not come from the imbalance guard";
  // Most requests still reused the prefix (on either worker).
  EXPECT_GE(cached, int64_t{kRequests / 2} * 199);
}

}  // namespace
}  // namespace radixkv::tests
