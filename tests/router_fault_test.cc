// Faults through the router with real processes on loopback:
//   - kill -9 of a worker while it streams: its requests end with a clear
//     UNAVAILABLE naming the worker and the tokens already sent; requests
//     routed after the kill are retried on the other worker before their
//     first token; the dead worker leaves the registry and no lease stays
//     held after its TTL (cache service Stats); a restarted worker comes
//     back with a new epoch.
//   - kill -9 + restart of the cache service (from Redis) in the middle of a
//     multi-turn workload: the run completes and afterwards every slot is
//     accounted for exactly once (free + evictable + protected == capacity,
//     no lease left, and a Flush returns every slot to the free list).
//   - kill -STOP of a worker (TCP up, nothing answered): once the router's
//     keepalive ping times out, the requests placed on it before their
//     first token are retried on the other worker (also those placed while
//     it reconnects), and the one it was streaming ends with UNAVAILABLE.
//   - kill -STOP of the cache service: Generate ends with UNAVAILABLE "cache
//     service unavailable" before the client's deadline.
#include <signal.h>

#include <atomic>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tools/local_cluster/local_cluster.h"
#include "tools/workload/workload.h"
#include "tools/workload/workload_runner.h"
#include "tests/router_e2e_client.h"

namespace radixkv::tests {
namespace {

// Waits until `pred(stats)` holds; returns the last stats.
template <typename Pred>
radixkv::v1::StatsResponse WaitForStats(const std::string& cache_address,
                                        Pred pred, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  radixkv::v1::StatsResponse stats;
  while (absl::Now() < deadline) {
    stats = CacheStats(cache_address);
    if (pred(stats)) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return stats;
}

void ExpectEverySlotAccountedFor(const radixkv::v1::StatsResponse& stats) {
  for (const auto& w : stats.workers()) {
    EXPECT_EQ(w.free_slots() + w.evictable_slots() + w.protected_slots(),
              w.capacity_slots())
        << w.worker_id();
    EXPECT_EQ(w.protected_slots(), 0) << w.worker_id();
    EXPECT_EQ(w.active_leases(), 0) << w.worker_id();
  }
}

TEST(RouterFaultTest, WorkerKilledMidStream) {
  router::LocalClusterOptions options = TestClusterOptions("kill_worker");
  options.cache_service_args = {"--lease_ttl_ms=2000",
                                "--heartbeat_timeout_ms=1500"};
  auto started = router::LocalCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  router::LocalCluster& cluster = **started;
  auto router = RouterStub(cluster.router_address());

  // Six long generations, spread over both workers by load.
  constexpr int kLong = 6;
  struct Stream {
    std::atomic<int> chunks{0};
    std::string worker_id;
    grpc::Status status;
    int tokens = 0;
  };
  std::vector<Stream> streams(kLong);
  std::vector<std::thread> threads;
  for (int i = 0; i < kLong; ++i) {
    threads.emplace_back([&, i] {
      radixkv::v1::GenerateRequest req;
      std::vector<int32_t> prompt =
          Concat({1}, LicenseTokens("GPL-3", 100 * i, 40));
      req.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(),
                                                     prompt.end());
      req.mutable_sampling()->set_max_new_tokens(1500);
      req.mutable_sampling()->set_ignore_eos(true);
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(120)));
      auto reader = router->Generate(&ctx, req);
      radixkv::v1::GenerateResponse chunk;
      while (reader->Read(&chunk)) {
        // worker_id is published once, before `chunks` (read by main).
        if (streams[i].chunks.load() == 0) {
          streams[i].worker_id = chunk.worker_id();
        }
        streams[i].tokens += chunk.token_ids_size();
        ++streams[i].chunks;
      }
      streams[i].status = reader->Finish();
    });
    absl::SleepFor(absl::Milliseconds(30));
  }
  for (int i = 0; i < kLong; ++i) {
    for (int k = 0; k < 3000 && streams[i].chunks == 0; ++k) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_GT(streams[i].chunks.load(), 0)
        << "stream " << i << " never started";
  }
  std::map<std::string, int> on;
  for (auto& s : streams) ++on[s.worker_id];
  ASSERT_EQ(on.size(), 2u) << "the long streams did not use both workers";
  const std::string victim = streams[0].worker_id;
  const int victim_index = victim == cluster.worker_id(0) ? 0 : 1;
  int64_t victim_epoch = 0;
  const radixkv::v1::StatsResponse before =
      CacheStats(cluster.cache_service_address());
  for (const auto& w : before.workers()) {
    if (w.worker_id() == victim) victim_epoch = w.epoch();
  }
  ASSERT_GT(victim_epoch, 0);

  cluster.KillWorker(victim_index, SIGKILL);
  // Requests sent right after the kill (the dead worker is still registered
  // until its heartbeat times out) must all succeed: a refused connection is
  // retried on the other worker before the first token.
  for (int i = 0; i < 6; ++i) {
    Completion r = Generate(
        router.get(), Concat({1}, LicenseTokens("Apache-2.0", 50 * i, 30)),
        {.max_new_tokens = 4});
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_NE(r.worker_id, victim);
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kLong; ++i) {
    if (streams[i].worker_id == victim) {
      EXPECT_EQ(streams[i].status.error_code(), grpc::StatusCode::UNAVAILABLE)
          << "stream " << i;
      const std::string& msg = streams[i].status.error_message();
      EXPECT_TRUE(absl::StrContains(msg, "tokens were streamed")) << msg;
      EXPECT_TRUE(absl::StrContains(msg, victim)) << msg;
      EXPECT_TRUE(absl::StrContains(
          msg, absl::StrCat("after ", streams[i].tokens, " tokens")))
          << msg;
    } else {
      EXPECT_TRUE(streams[i].status.ok())
          << "stream " << i << ": " << streams[i].status.error_message();
      EXPECT_EQ(streams[i].tokens, 1500);
    }
  }
  // The dead worker is dropped after its heartbeat timeout, its leases with
  // it; the survivor holds no lease once its requests are done.
  radixkv::v1::StatsResponse stats = WaitForStats(
      cluster.cache_service_address(),
      [&](const radixkv::v1::StatsResponse& s) {
        return s.workers_size() == 1 && s.active_leases() == 0;
      },
      absl::Seconds(10));
  ASSERT_EQ(stats.workers_size(), 1);
  EXPECT_NE(stats.workers(0).worker_id(), victim);
  EXPECT_EQ(stats.active_leases(), 0);
  ExpectEverySlotAccountedFor(stats);

  // Restarted, it registers a new epoch and serves again.
  ASSERT_TRUE(cluster.RestartWorker(victim_index).ok());
  ASSERT_TRUE(cluster.WaitForRegisteredWorkers(2, absl::Seconds(20)).ok());
  const radixkv::v1::StatsResponse restarted =
      CacheStats(cluster.cache_service_address());
  for (const auto& w : restarted.workers()) {
    if (w.worker_id() == victim) {
      EXPECT_GT(w.epoch(), victim_epoch);
    }
  }
  std::set<std::string> used;
  for (int i = 0; i < 8; ++i) {
    Completion r = Generate(router.get(),
                            Concat({1}, LicenseTokens("MPL-2.0", 40 * i, 30)),
                            {.max_new_tokens = 4, .policy = "round_robin"});
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    used.insert(r.worker_id);
  }
  EXPECT_EQ(used.size(), 2u);
}

TEST(RouterFaultTest, CacheServiceRestartMidWorkload) {
  router::LocalClusterOptions options = TestClusterOptions("restart_cache");
  options.router_args = {"--max_attempts=8"};
  // A lease whose holder lost track of it around the crash expires quickly.
  options.cache_service_args = {"--lease_ttl_ms=3000"};
  auto started = router::LocalCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  router::LocalCluster& cluster = **started;

  router::MultiTurnParams params;
  params.conversations = 12;
  params.rounds = 6;
  params.system_tokens = 64;
  params.user_tokens = 32;
  params.output_tokens = 32;
  std::vector<int32_t> corpus = LicenseTokens("GPL-3", 0, 4000);
  auto workload =
      router::MakeMultiTurnWorkload(params, corpus, 1, /*seed=*/7, 2048);
  ASSERT_TRUE(workload.ok()) << workload.status();
  router::RunnerOptions runner_options;
  runner_options.router_address = cluster.router_address();
  runner_options.concurrency = 6;
  runner_options.progress = false;
  router::WorkloadRunner runner(runner_options);
  router::RunConfig config;
  config.label = "cache_aware";
  absl::StatusOr<router::RunResult> result;
  absl::Time run_end;
  std::thread run([&] {
    result = runner.Run(*workload, config);
    run_end = absl::Now();
  });

  absl::SleepFor(absl::Milliseconds(500));
  const absl::Time crash_at = absl::Now();
  ASSERT_TRUE(cluster.RestartCacheService(/*crash=*/true).ok());
  const absl::Time restarted_at = absl::Now();
  run.join();
  // The crash really happened mid-workload.
  ASSERT_GT(run_end, restarted_at)
      << "the workload ended before the cache service was back; make it "
         "longer";
  std::printf("cache service down and back in %s\n",
              absl::FormatDuration(restarted_at - crash_at).c_str());

  ASSERT_TRUE(result.ok()) << result.status();
  std::map<std::string, int> errors;
  for (const auto& rec : result->records) {
    if (rec.status != "OK") {
      ++errors[rec.status];
      // Failures must be explained, never silent.
      EXPECT_FALSE(rec.error_message.empty());
    }
  }
  const int64_t total = workload->num_requests();
  std::printf("%lld/%lld requests ok across the restart;",
              static_cast<long long>(result->ok),
              static_cast<long long>(total));
  for (const auto& [code, n] : errors) std::printf(" %s: %d", code.c_str(), n);
  std::printf("\n");
  EXPECT_GE(result->ok, total * 3 / 4)
      << "too many failures around the restart: " << result->errors;
  // Every conversation that got through reused its history.
  EXPECT_GT(result->cached_tokens, 0);

  // After the run: no lease left (the service restored them from Redis and
  // the workers committed or released them), every slot owned once.
  radixkv::v1::StatsResponse stats = WaitForStats(
      cluster.cache_service_address(),
      [](const radixkv::v1::StatsResponse& s) {
        return s.active_leases() == 0;
      },
      absl::Seconds(40));
  ASSERT_EQ(stats.workers_size(), 2);
  EXPECT_EQ(stats.persistence(), "redis");
  ExpectEverySlotAccountedFor(stats);
  {
    grpc::ClientContext ctx;
    radixkv::v1::FlushResponse flushed;
    ASSERT_TRUE(CacheServiceStub(cluster.cache_service_address())
                    ->Flush(&ctx, {}, &flushed)
                    .ok());
  }
  const radixkv::v1::StatsResponse flushed_stats =
      CacheStats(cluster.cache_service_address());
  for (const auto& w : flushed_stats.workers()) {
    EXPECT_EQ(w.free_slots(), w.capacity_slots()) << w.worker_id();
    EXPECT_EQ(w.cached_tokens(), 0) << w.worker_id();
  }
}

TEST(RouterFaultTest, WorkerFrozen) {
  router::LocalClusterOptions options = TestClusterOptions("freeze_worker");
  // A frozen worker is noticed within about 3 s (the defaults: 15 s); the
  // ack timeout leaves a busy live worker on a loaded machine time to ack.
  options.router_args = {"--worker_keepalive_ms=1000",
                         "--worker_keepalive_timeout_ms=2000"};
  // The frozen worker stays registered for the whole test.
  options.cache_service_args = {"--heartbeat_timeout_ms=120000"};
  auto started = router::LocalCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  router::LocalCluster& cluster = **started;
  auto router = RouterStub(cluster.router_address());

  // Greedy references, before the freeze; round robin also opens the
  // router's connection to both workers.
  constexpr int kRequests = 6;
  constexpr int kNewTokens = 8;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> expected;
  std::set<std::string> used;
  for (int i = 0; i < kRequests; ++i) {
    prompts.push_back(Concat({1}, LicenseTokens("Apache-2.0", 60 * i, 24)));
    Completion r =
        Generate(router.get(), prompts[i],
                 {.max_new_tokens = kNewTokens, .policy = "round_robin"});
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    ASSERT_EQ(r.tokens.size(), static_cast<size_t>(kNewTokens));
    used.insert(r.worker_id);
    expected.push_back(r.tokens);
  }
  ASSERT_EQ(used.size(), 2u);

  // A long generation is streaming when its worker (the victim) freezes.
  std::atomic<int> long_chunks{0};
  std::string long_worker;  // written before the first long_chunks++
  int long_tokens = 0;
  grpc::Status long_status;
  grpc::ClientContext long_ctx;
  long_ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  std::thread long_stream([&] {
    radixkv::v1::GenerateRequest req;
    const std::vector<int32_t> prompt =
        Concat({1}, LicenseTokens("GPL-3", 0, 40));
    req.mutable_token_ids()->mutable_ids()->Assign(prompt.begin(),
                                                   prompt.end());
    req.mutable_sampling()->set_max_new_tokens(1500);
    req.mutable_sampling()->set_ignore_eos(true);
    auto reader = router->Generate(&long_ctx, req);
    radixkv::v1::GenerateResponse chunk;
    while (reader->Read(&chunk)) {
      if (long_chunks.load() == 0) long_worker = chunk.worker_id();
      long_tokens += chunk.token_ids_size();
      ++long_chunks;
    }
    long_status = reader->Finish();
  });
  absl::Cleanup join_long_stream = [&] {
    long_ctx.TryCancel();
    if (long_stream.joinable()) long_stream.join();
  };
  for (int k = 0; k < 3000 && long_chunks.load() == 0; ++k) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_GT(long_chunks.load(), 0) << "the long stream never started";
  const int victim_index = long_worker == cluster.worker_id(0) ? 0 : 1;
  const std::string victim = cluster.worker_id(victim_index);
  const std::string survivor = cluster.worker_id(1 - victim_index);
  const pid_t victim_pid = cluster.worker_pid(victim_index);
  ASSERT_GT(victim_pid, 0);
  ResumeOnExit resume(victim_pid);
  ASSERT_TRUE(FreezeProcess(victim_pid));
  // 1. The victim stays registered and its connection open: round robin
  // places every other request on it, where it waits without a token until
  // the keepalive ping times out, and is then retried on the other worker.
  // Without keepalive these requests would end with DEADLINE_EXCEEDED.
  // 2. Later (the connection closed, the failed-worker cooldown of 2 s
  // over) round robin places requests on it again: the reconnection's
  // HTTP/2 handshake, which the frozen process never answers, is bounded by
  // the keepalive timeout too, and they are retried the same way.
  for (int phase = 1; phase <= 2; ++phase) {
    if (phase == 2) absl::SleepFor(absl::Seconds(3));
    std::vector<Completion> got(kRequests);
    std::vector<std::thread> threads;
    for (int i = 0; i < kRequests; ++i) {
      threads.emplace_back([&, i] {
        got[i] = Generate(router.get(), prompts[i],
                          {.max_new_tokens = kNewTokens,
                           .policy = "round_robin",
                           .deadline = absl::Seconds(25)});
      });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < kRequests; ++i) {
      EXPECT_TRUE(got[i].status.ok())
          << "phase " << phase << " request " << i << ": "
          << got[i].status.error_code() << " " << got[i].status.error_message();
      EXPECT_EQ(got[i].worker_id, survivor)
          << "phase " << phase << " request " << i;
      EXPECT_EQ(got[i].tokens, expected[i])
          << "phase " << phase << " request " << i;
    }
  }
  // The long stream had sent tokens: the router's clear UNAVAILABLE.
  long_stream.join();
  EXPECT_EQ(long_status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << long_status.error_message();
  const std::string& msg = long_status.error_message();
  EXPECT_TRUE(absl::StrContains(msg, "tokens were streamed")) << msg;
  EXPECT_TRUE(absl::StrContains(msg, victim)) << msg;
  EXPECT_TRUE(absl::StrContains(msg, "keepalive")) << msg;
  EXPECT_TRUE(
      absl::StrContains(msg, absl::StrCat("after ", long_tokens, " tokens")))
      << msg;
  EXPECT_LT(long_tokens, 1500);
}

TEST(RouterFaultTest, CacheServiceFrozen) {
  router::LocalClusterOptions options = TestClusterOptions("freeze_cache");
  auto started = router::LocalCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  router::LocalCluster& cluster = **started;
  auto router = RouterStub(cluster.router_address());
  const std::vector<int32_t> prompt =
      Concat({1}, LicenseTokens("Apache-2.0", 0, 24));
  // The router knows the workers and the model before the freeze.
  Completion before = Generate(router.get(), prompt, {.max_new_tokens = 4});
  ASSERT_TRUE(before.status.ok()) << before.status.error_message();

  const pid_t cache_pid = cluster.cache_service_pid();
  ASSERT_GT(cache_pid, 0);
  ResumeOnExit resume(cache_pid);
  ASSERT_TRUE(FreezeProcess(cache_pid));
  // The Match times out; the worker's Acquire would wait on the same frozen
  // service, so the router answers UNAVAILABLE at once rather than trying
  // worker after worker until the client's deadline.
  Completion r = Generate(router.get(), prompt,
                          {.max_new_tokens = 4, .deadline = absl::Seconds(20)});
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << r.status.error_code() << " " << r.status.error_message();
  const std::string& msg = r.status.error_message();
  EXPECT_TRUE(absl::StrContains(msg, "cache service unavailable")) << msg;
  EXPECT_TRUE(absl::StrContains(
      msg, absl::StrCat(cluster.cache_service_address(), " did not answer")))
      << msg;
  EXPECT_TRUE(r.tokens.empty());
}

}  // namespace
}  // namespace radixkv::tests
