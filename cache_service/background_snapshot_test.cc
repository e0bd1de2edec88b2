// Background (forked) Redis snapshots of the in-process CacheService against
// a real redis-server: snapshots taken while RPC traffic continues restore
// to the same canonical Dump; a failed snapshot (child crash, staging key
// lost in Redis) leaves the journal untrimmed and the service serving, and a
// later snapshot succeeds; shutting down with a snapshot in flight drops it
// and the restart restores correctly. The kill -9 / SIGTERM variants with
// the real binary are in tests/cache_service_crash_test.cc.
#include <hiredis/hiredis.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cache_service/cache_service_impl.h"
#include "cache_service/forked_snapshot.h"
#include "cache_service/redis_journal.h"
#include "cache_service/redis_server_process.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "process/process_lifecycle.h"
#include "radixkv/v1/cache_service.grpc.pb.h"

namespace radixkv::cache_service {
namespace {

namespace pb = ::radixkv::v1;

constexpr char kPrefix[] = "bgsnap";

std::string TempDir(const std::string& name) {
  const char* base = getenv("TEST_TMPDIR");
  return absl::StrCat(base != nullptr ? base : "/tmp", "/", name, "_",
                      getpid());
}

// LLEN of the journal list, read over a plain connection (opening a second
// RedisJournal would take the owner token and fence the service).
int64_t JournalLength(int port) {
  redisContext* context = redisConnect("127.0.0.1", port);
  if (context == nullptr || context->err != 0) return -1;
  auto* reply = static_cast<redisReply*>(
      redisCommand(context, "LLEN %s:journal", kPrefix));
  int64_t length = -1;
  if (reply != nullptr && reply->type == REDIS_REPLY_INTEGER) {
    length = reply->integer;
  }
  if (reply != nullptr) freeReplyObject(reply);
  redisFree(context);
  return length;
}

// The service with a journal on `port`, behind a loopback gRPC server.
class Harness {
 public:
  Harness(int port, CacheServiceOptions options) {
    RedisJournalOptions redis;
    redis.port = port;
    redis.key_prefix = kPrefix;
    auto journal = RedisJournal::Open(redis);
    EXPECT_TRUE(journal.ok()) << journal.status();
    if (!journal.ok()) return;
    options.cache.lease_ttl_ms = 600'000;
    options.cache.heartbeat_timeout_ms = 600'000;
    auto service =
        CacheServiceImpl::Create(options, std::move(*journal), nullptr);
    EXPECT_TRUE(service.ok()) << service.status();
    if (!service.ok()) return;
    service_ = std::move(*service);
    auto server = process::GrpcServer::Start("127.0.0.1:0", {service_.get()});
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return;
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
  }
  ~Harness() {
    if (server_) server_->Shutdown(absl::Seconds(1));
  }

  bool ok() const { return channel_ != nullptr; }
  CacheServiceImpl& service() { return *service_; }
  std::unique_ptr<pb::CacheService::Stub> NewStub() {
    return pb::CacheService::NewStub(channel_);
  }

  std::string Dump() {
    auto stub = NewStub();
    grpc::ClientContext ctx;
    pb::DumpResponse resp;
    grpc::Status s = stub->Dump(&ctx, pb::DumpRequest(), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.canonical();
  }

  bool Register() {
    auto stub = NewStub();
    grpc::ClientContext ctx;
    pb::RegisterRequest req;
    req.set_worker_id("w0");
    req.set_address("w0:1");
    req.set_capacity_slots(1 << 14);
    req.set_page_size(16);
    req.set_model("m");
    req.set_epoch(1);
    req.set_vocab_size(1000);
    pb::RegisterResponse resp;
    return stub->Register(&ctx, req, &resp).ok();
  }

  // One Acquire + Commit of a prompt (two journal entries).
  bool Pair(pb::CacheService::Stub& stub, const std::vector<int32_t>& prompt) {
    grpc::ClientContext actx;
    pb::AcquireRequest acquire;
    acquire.set_worker_id("w0");
    acquire.set_epoch(1);
    acquire.set_model("m");
    acquire.mutable_tokens()->Assign(prompt.begin(), prompt.end());
    pb::AcquireResponse lease;
    if (!stub.Acquire(&actx, acquire, &lease).ok()) return false;
    grpc::ClientContext cctx;
    pb::CommitRequest commit;
    commit.set_lease_id(lease.lease_id());
    commit.mutable_tokens()->Assign(prompt.begin(), prompt.end());
    pb::CommitResponse committed;
    return stub.Commit(&cctx, commit, &committed).ok();
  }

 private:
  std::unique_ptr<CacheServiceImpl> service_;
  std::unique_ptr<process::GrpcServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

std::vector<int32_t> Prompt(std::mt19937_64& rng) {
  std::vector<int32_t> tokens;
  const int shared = static_cast<int>(rng() % 4);
  for (int i = 0; i < 32; ++i) tokens.push_back(shared * 100 + i);
  const int tail = 1 + static_cast<int>(rng() % 40);
  for (int i = 0; i < tail; ++i) {
    tokens.push_back(static_cast<int32_t>(rng() % 1000));
  }
  return tokens;
}

uint64_t Seed() {
  uint64_t seed = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  if (const char* s = getenv("RADIXKV_TEST_SEED")) {
    EXPECT_TRUE(absl::SimpleAtoi(s, &seed));
  }
  std::printf("background snapshot test seed: %llu (RADIXKV_TEST_SEED)\n",
              static_cast<unsigned long long>(seed));
  return seed;
}

// Snapshots every 20 operations while 4 client threads run Acquire+Commit
// pairs; each child sleeps 20 ms first, so RPCs keep changing the state
// while a snapshot is in flight. The restart equals the final Dump, and
// replays only the journal tail after the last committed snapshot.
TEST(BackgroundSnapshotTest, SnapshotsDuringTrafficRestoreTheSameDump) {
  const uint64_t seed = Seed();
  auto redis = RedisServerProcess::Start(TempDir("traffic"));
  ASSERT_TRUE(redis.ok()) << redis.status();
  CacheServiceOptions options;
  // Every 20 operations, whatever the journal's size: each of the two
  // traffic phases below starts a snapshot at its 20th operation (none is
  // in flight then), however fast the machine runs the traffic.
  options.snapshot_every_ops = 20;
  options.snapshot_journal_ratio = 1e-9;
  options.forked_snapshot.child_delay_for_testing = absl::Milliseconds(20);
  constexpr int kThreads = 4;
  constexpr int kPairsPerThread = 50;  // per phase
  std::string dump;
  int64_t tail = 0;
  {
    Harness h((*redis)->port(), options);
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(h.Register());
    std::atomic<int> failures{0};
    for (int phase = 0; phase < 2; ++phase) {
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
          std::mt19937_64 rng(seed + 2 * t + phase);
          auto stub = h.NewStub();
          for (int i = 0; i < kPairsPerThread; ++i) {
            if (!h.Pair(*stub, Prompt(rng))) failures.fetch_add(1);
          }
        });
      }
      for (std::thread& t : threads) t.join();
      ASSERT_TRUE(h.service().WaitForSnapshot().ok());
    }
    EXPECT_EQ(failures.load(), 0);
    const ForkedSnapshotStats stats = h.service().snapshot_stats();
    EXPECT_GE(stats.succeeded, 2) << "snapshots during the traffic";
    EXPECT_EQ(stats.failed, 0) << stats.last_status;
    tail = JournalLength((*redis)->port());
    // Trimmed: fewer records than the 801 journaled operations.
    EXPECT_GE(tail, 0);
    EXPECT_LT(tail, 1 + 2 * 2 * kThreads * kPairsPerThread);
    dump = h.Dump();
  }
  Harness h((*redis)->port(), options);
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h.service().recovery().had_snapshot);
  EXPECT_EQ(h.service().recovery().replayed_entries, tail);
  EXPECT_EQ(h.service().recovery().replay_errors, 0);
  EXPECT_TRUE(h.Dump() == dump) << "seed " << seed;
  EXPECT_TRUE(h.service().CheckInvariantsForTest().ok());
}

// A failed snapshot changes nothing in Redis (the journal keeps every
// record), the service keeps journaling and serving, and the next snapshot
// commits and trims.
class FailedSnapshotTest : public ::testing::TestWithParam<SnapshotFault> {};

TEST_P(FailedSnapshotTest, JournalIsNotTrimmedAndALaterSnapshotSucceeds) {
  const uint64_t seed = Seed();
  std::mt19937_64 rng(seed);
  auto redis = RedisServerProcess::Start(
      TempDir(absl::StrCat("fault", static_cast<int>(GetParam()))));
  ASSERT_TRUE(redis.ok()) << redis.status();
  const int port = (*redis)->port();
  CacheServiceOptions options;
  options.snapshot_every_ops = 11;
  options.snapshot_journal_ratio = 1;
  options.forked_snapshot.fault_for_testing = GetParam();
  options.forked_snapshot.fault_count_for_testing = 1;
  std::string dump;
  {
    Harness h(port, options);
    ASSERT_TRUE(h.ok());
    auto stub = h.NewStub();
    // Register + 5 pairs = 11 journaled operations: the 11th starts the
    // first background snapshot, which fails.
    ASSERT_TRUE(h.Register());
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(h.Pair(*stub, Prompt(rng)));
    const absl::Status failed = h.service().WaitForSnapshot();
    EXPECT_FALSE(failed.ok());
    ForkedSnapshotStats stats = h.service().snapshot_stats();
    EXPECT_EQ(stats.started, 1);
    EXPECT_EQ(stats.failed, 1);
    EXPECT_EQ(stats.succeeded, 0);
    EXPECT_EQ(JournalLength(port), 11) << "a failed snapshot trimmed";
    // Still serving and journaling; 5 more pairs = 10 more operations reach
    // the next snapshot (11 operations since the failed one started: the
    // 6th pair's Acquire), which succeeds and covers them.
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(h.Pair(*stub, Prompt(rng)));
    EXPECT_EQ(JournalLength(port), 21);
    grpc::ClientContext ctx;
    pb::AcquireRequest acquire;
    acquire.set_worker_id("w0");
    acquire.set_epoch(1);
    acquire.set_model("m");
    const std::vector<int32_t> prompt = Prompt(rng);
    acquire.mutable_tokens()->Assign(prompt.begin(), prompt.end());
    pb::AcquireResponse held;  // an acknowledged lease, kept open
    ASSERT_TRUE(stub->Acquire(&ctx, acquire, &held).ok());
    ASSERT_TRUE(h.service().WaitForSnapshot().ok());
    stats = h.service().snapshot_stats();
    EXPECT_EQ(stats.started, 2);
    EXPECT_EQ(stats.succeeded, 1);
    EXPECT_EQ(stats.last_covered_sequence, 22);
    EXPECT_EQ(JournalLength(port), 0);
    ASSERT_TRUE(h.Pair(*stub, Prompt(rng)));
    EXPECT_EQ(JournalLength(port), 2);
    dump = h.Dump();
  }
  Harness h(port, options);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h.service().recovery().replayed_entries, 2);
  EXPECT_TRUE(h.Dump() == dump) << "seed " << seed;
}

INSTANTIATE_TEST_SUITE_P(Faults, FailedSnapshotTest,
                         ::testing::Values(SnapshotFault::kChildCrashes,
                                           SnapshotFault::kStagingKeyExpires));

// The service is destroyed (main's SIGTERM path) while a snapshot child is
// still sleeping: the child is killed, nothing is trimmed, and the restart
// restores the state from the previous snapshot + the full journal.
TEST(BackgroundSnapshotTest, ShutdownDuringASnapshotDropsItAndRestores) {
  const uint64_t seed = Seed();
  std::mt19937_64 rng(seed);
  auto redis = RedisServerProcess::Start(TempDir("shutdown"));
  ASSERT_TRUE(redis.ok()) << redis.status();
  const int port = (*redis)->port();
  CacheServiceOptions options;
  options.snapshot_every_ops = 11;
  options.snapshot_journal_ratio = 1;
  options.forked_snapshot.child_delay_for_testing = absl::Seconds(600);
  std::string dump;
  {
    Harness h(port, options);
    ASSERT_TRUE(h.ok());
    auto stub = h.NewStub();
    ASSERT_TRUE(h.Register());
    for (int i = 0; i < 7; ++i) ASSERT_TRUE(h.Pair(*stub, Prompt(rng)));
    ForkedSnapshotStats stats = h.service().snapshot_stats();
    EXPECT_EQ(stats.started, 1);
    EXPECT_EQ(stats.succeeded + stats.failed, 0) << "should be in flight";
    EXPECT_EQ(JournalLength(port), 15);
    dump = h.Dump();
  }
  EXPECT_EQ(JournalLength(port), 15);
  Harness h(port, options);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h.service().recovery().replayed_entries, 15);
  EXPECT_TRUE(h.Dump() == dump) << "seed " << seed;
}

}  // namespace
}  // namespace radixkv::cache_service
