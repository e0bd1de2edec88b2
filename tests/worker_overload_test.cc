// A burst over a CPU worker's waiting bound, straight at the worker (real
// processes on loopback): 1,500 concurrent requests against
// --max_waiting_requests=1024 while none can be admitted (the test holds
// the worker's pool with a lease of its own), so that the bound alone
// decides. Every request ends OK or RESOURCE_EXHAUSTED (none runs into its
// deadline or UNAVAILABLE), exactly the 476 over the bound are refused, the
// worker keeps stepping (higher-priority probes that fit the free pages are
// served while the burst waits, in the place of one aborted request) and its
// heartbeats keep it registered under the same epoch; once the pool is released
// every accepted request completes.
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tools/local_cluster/local_cluster.h"
#include "tests/generate_burst.h"
#include "tests/router_e2e_client.h"

namespace radixkv::tests {
namespace {

constexpr int kBound = 1024;
constexpr int kBurst = 1500;
constexpr int kCapacity = 1024;  // Slots of the worker's pool.
constexpr int kPageSize = 16;
// A burst request needs 3 pages (40 + 1 slots); the test leaves 2 free.
constexpr int kBurstPromptTokens = 40;
constexpr int kFreePages = 2;

v1::GenerateRequest BurstRequest(int i) {
  v1::GenerateRequest request;
  request.set_request_id(absl::StrCat("burst-", i));
  auto* ids = request.mutable_token_ids()->mutable_ids();
  ids->Add(1);
  for (int k = 1; k < kBurstPromptTokens; ++k) ids->Add(3 + (i * 7 + k) % 500);
  request.mutable_sampling()->set_max_new_tokens(2);
  request.mutable_sampling()->set_ignore_eos(true);
  return request;
}

// 4 tokens + 4 new: one page; admitted ahead of the burst by its priority.
Completion Probe(v1::Worker::Stub* worker, int i) {
  v1::GenerateRequest request;
  request.set_request_id(absl::StrCat("probe-", i));
  for (int32_t t : {1, 9, 9 + i, 9}) request.mutable_token_ids()->add_ids(t);
  request.mutable_sampling()->set_max_new_tokens(4);
  request.mutable_sampling()->set_ignore_eos(true);
  request.set_priority(1);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  auto reader = worker->Generate(&context, request);
  Completion out;
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    out.tokens.insert(out.tokens.end(), response.token_ids().begin(),
                      response.token_ids().end());
  }
  out.status = reader->Finish();
  return out;
}

int64_t EpochOf(const v1::StatsResponse& stats, const std::string& id) {
  for (const auto& w : stats.workers()) {
    if (w.worker_id() == id) return w.epoch();
  }
  return -1;
}

// Acquires every page of `worker`'s pool but kFreePages under its id and
// epoch (the test's own lease, not renewed by the worker's heartbeats);
// returns the lease id (0 after a failed assertion).
uint64_t HoldPool(v1::CacheService::Stub* cache,
                  const v1::WorkerCacheStats& worker) {
  v1::AcquireRequest hold;
  hold.set_worker_id(worker.worker_id());
  hold.set_epoch(worker.epoch());
  hold.set_model(worker.model());
  for (int i = 0; i < 2 * kPageSize; ++i) hold.add_tokens(7);
  hold.set_reserve_tokens(kCapacity - (2 + kFreePages) * kPageSize);
  hold.set_request_id("overload-test-hold");
  v1::AcquireResponse held;
  grpc::ClientContext context;
  grpc::Status status = cache->Acquire(&context, hold, &held);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return held.lease_id();
}

TEST(WorkerOverloadTest, BurstOverTheWaitingBoundIsRefusedExactly) {
  router::LocalClusterOptions options = TestClusterOptions("worker_overload");
  options.num_workers = 1;
  options.use_redis = false;
  // The test's own lease outlives the test without heartbeats.
  options.cache_service_args = {"--lease_ttl_ms=600000"};
  options.worker_args.push_back(
      absl::StrCat("--max_waiting_requests=", kBound));
  options.worker_args.push_back(
      absl::StrCat("--kv_capacity_tokens=", kCapacity));
  options.worker_args.push_back(absl::StrCat("--page_size=", kPageSize));
  auto started = router::LocalCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  router::LocalCluster& cluster = **started;
  const std::string worker_id = cluster.worker_id(0);
  auto worker = WorkerStub(cluster.worker_address(0));
  auto cache = CacheServiceStub(cluster.cache_service_address());
  const v1::StatsResponse before = CacheStats(cluster.cache_service_address());
  ASSERT_EQ(before.workers_size(), 1);
  const int64_t epoch = before.workers(0).epoch();
  ASSERT_EQ(before.workers(0).free_slots(), kCapacity);

  // Hold every page but kFreePages: no burst request can be admitted.
  const uint64_t held = HoldPool(cache.get(), before.workers(0));
  ASSERT_NE(held, 0u);
  const int64_t steps_before = WorkerStats(cluster.worker_address(0)).steps();
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < kBurst; ++i) requests.push_back(BurstRequest(i));
  GenerateBurst burst({ToWorker(worker.get())}, std::move(requests),
                      absl::Seconds(300));
  // Every request is either refused or waiting.
  ASSERT_TRUE(burst.WaitUntil(
      [](const std::map<grpc::StatusCode, int>& ended) {
        auto it = ended.find(grpc::StatusCode::RESOURCE_EXHAUSTED);
        return it != ended.end() && it->second >= kBurst - kBound;
      },
      absl::Seconds(120)))
      << burst.ended() << " calls ended";
  v1::WorkerStatsResponse waiting = WorkerStats(cluster.worker_address(0));
  for (int k = 0; k < 600 && waiting.load().waiting_requests() < kBound; ++k) {
    absl::SleepFor(absl::Milliseconds(100));
    waiting = WorkerStats(cluster.worker_address(0));
  }
  EXPECT_EQ(waiting.load().waiting_requests(), kBound);
  EXPECT_EQ(waiting.load().running_requests(), 0);
  std::map<grpc::StatusCode, int> ended = burst.EndedByCode();
  EXPECT_EQ(ended[grpc::StatusCode::RESOURCE_EXHAUSTED], kBurst - kBound);
  EXPECT_EQ(burst.ended(), kBurst - kBound);

  // The scheduler keeps stepping while the burst waits: one waiting request
  // is aborted to make room, then probes are served one after the other
  // (each leaves the queue when admitted).
  {
    v1::AbortRequest abort;
    abort.set_request_id("burst-0");
    v1::AbortResponse aborted;
    grpc::ClientContext context;
    ASSERT_TRUE(worker->Abort(&context, abort, &aborted).ok());
    EXPECT_TRUE(aborted.aborted());
  }
  ASSERT_TRUE(burst.WaitUntil(
      [](const std::map<grpc::StatusCode, int>& ended) {
        return ended.contains(grpc::StatusCode::CANCELLED);
      },
      absl::Seconds(60)));
  for (int i = 0; i < 3; ++i) {
    Completion probe = Probe(worker.get(), i);
    ASSERT_TRUE(probe.status.ok()) << probe.status.error_message();
    EXPECT_EQ(probe.tokens.size(), 4u);
  }
  const v1::WorkerStatsResponse probed = WorkerStats(cluster.worker_address(0));
  EXPECT_GT(probed.steps(), steps_before);
  EXPECT_EQ(probed.load().waiting_requests(), kBound - 1);
  EXPECT_EQ(burst.ended(), kBurst - kBound + 1);

  // Released, the pool serves every accepted request.
  {
    v1::ReleaseRequest release;
    release.set_lease_id(held);
    v1::ReleaseResponse released;
    grpc::ClientContext context;
    ASSERT_TRUE(cache->Release(&context, release, &released).ok());
  }
  ASSERT_TRUE(burst.WaitAll(absl::Seconds(280)));
  ended = burst.EndedByCode();
  EXPECT_EQ(ended[grpc::StatusCode::OK], kBound - 1);
  EXPECT_EQ(ended[grpc::StatusCode::RESOURCE_EXHAUSTED], kBurst - kBound);
  EXPECT_EQ(ended[grpc::StatusCode::CANCELLED], 1);
  EXPECT_EQ(ended.size(), 3u);
  const std::string refusal = absl::StrCat(
      "worker ", worker_id, " has ", kBound,
      " requests waiting, the limit --max_waiting_requests=", kBound);
  for (const GenerateBurst::Outcome& o : burst.outcomes()) {
    if (o.code == grpc::StatusCode::OK) {
      EXPECT_EQ(o.tokens, 2);
    } else if (o.code == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      EXPECT_EQ(o.message, refusal);
      EXPECT_EQ(o.tokens, 0);
    } else if (o.code != grpc::StatusCode::CANCELLED) {
      ADD_FAILURE() << o.code << ": " << o.message;
    }
  }
  // Never dropped: the same process under the same epoch, no lease left.
  const v1::StatsResponse after = CacheStats(cluster.cache_service_address());
  EXPECT_EQ(EpochOf(after, worker_id), epoch);
  EXPECT_EQ(after.active_leases(), 0);
  EXPECT_EQ(WorkerStats(cluster.worker_address(0)).epoch(), epoch);
}

}  // namespace
}  // namespace radixkv::tests
