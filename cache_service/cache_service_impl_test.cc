// The gRPC CacheService in-process on a loopback port, exercised through the
// generated C++ client: every RPC, every error path documented in
// cache_service.proto (with the state unchanged, checked by Dump), lease
// expiry and dead-worker removal by the sweep, metrics, and (with a real
// redis-server) journal replay after a restart and the UNAVAILABLE path when
// Redis goes away.
#include "cache_service/cache_service_impl.h"

#include <hiredis/hiredis.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache_service/cache_metrics.h"
#include "cache_service/cache_state_testing.h"
#include "cache_service/redis_server_process.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "process/process_lifecycle.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "radixkv/v1/cache_service.grpc.pb.h"

namespace radixkv::cache_service {
namespace {

namespace pb = ::radixkv::v1;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kStartMs = 1'000'000;
constexpr int64_t kLeaseTtlMs = 5'000;
constexpr int64_t kHeartbeatTimeoutMs = 20'000;
constexpr int32_t kVocab = 1000;
constexpr int64_t kMaxPrompt = 4096;

std::vector<int32_t> Range(int32_t first, int32_t last) {  // [first, last]
  std::vector<int32_t> v(last - first + 1);
  std::iota(v.begin(), v.end(), first);
  return v;
}

template <typename T>
void SetTokens(T* msg, const std::vector<int32_t>& tokens) {
  msg->mutable_tokens()->Assign(tokens.begin(), tokens.end());
}

void InlineSnapshots(CacheServiceOptions& options) {
  options.background_snapshots = false;
}

class ServiceHarness {
 public:
  // journal null = memory mode. `configure` may change the options.
  explicit ServiceHarness(
      std::unique_ptr<RedisJournal> journal = nullptr,
      int64_t snapshot_every_ops = 10'000,
      const std::function<void(CacheServiceOptions&)>& configure = nullptr)
      : registry_(std::make_shared<prometheus::Registry>()) {
    CacheServiceOptions options;
    options.cache.lease_ttl_ms = kLeaseTtlMs;
    options.cache.heartbeat_timeout_ms = kHeartbeatTimeoutMs;
    options.max_prompt_tokens = kMaxPrompt;
    options.snapshot_every_ops = snapshot_every_ops;
    options.clock_ms = [this] { return now_ms_.load(); };
    options.availability_observer = [this](bool available) {
      (available ? available_events_ : unavailable_events_).fetch_add(1);
    };
    if (configure) configure(options);
    metrics_ = std::make_shared<CacheMetrics>(
        *registry_, journal != nullptr ? "redis" : "memory");
    auto service =
        CacheServiceImpl::Create(options, std::move(journal), metrics_);
    EXPECT_TRUE(service.ok()) << service.status();
    if (!service.ok()) return;
    service_ = std::move(*service);
    auto server = process::GrpcServer::Start("127.0.0.1:0", {service_.get()});
    EXPECT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = pb::CacheService::NewStub(channel_);
  }
  ~ServiceHarness() {
    if (server_) server_->Shutdown(absl::Seconds(1));
  }

  bool ok() const { return stub_ != nullptr; }
  int available_events() const { return available_events_.load(); }
  int unavailable_events() const { return unavailable_events_.load(); }
  pb::CacheService::Stub& stub() { return *stub_; }
  CacheServiceImpl& service() { return *service_; }
  void Advance(int64_t ms) { now_ms_ += ms; }
  // `ms` pass while the service runs: a sweep every 250 ms (the default
  // sweep_interval), as its background thread would. Returns leases expired.
  int RunFor(int64_t ms) {
    int expired = 0;
    for (int64_t t = 0; t < ms; t += 250) {
      Advance(std::min<int64_t>(250, ms - t));
      expired += service_->SweepOnce();
    }
    return expired;
  }

  std::string Dump() {
    grpc::ClientContext ctx;
    pb::DumpResponse resp;
    grpc::Status s = stub_->Dump(&ctx, pb::DumpRequest(), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.canonical();
  }

  pb::StatsResponse Stats(const std::string& worker = "") {
    grpc::ClientContext ctx;
    pb::StatsRequest req;
    req.set_worker_id(worker);
    pb::StatsResponse resp;
    grpc::Status s = stub_->Stats(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  std::string Scrape() {
    return prometheus::TextSerializer().Serialize(registry_->Collect());
  }

  grpc::Status Register(const std::string& id, int64_t capacity,
                        int32_t page_size, int64_t epoch,
                        const std::string& model = "m",
                        pb::RegisterResponse* out = nullptr,
                        int32_t vocab_size = kVocab) {
    grpc::ClientContext ctx;
    pb::RegisterRequest req;
    req.set_worker_id(id);
    req.set_address(id + ":1234");
    req.set_capacity_slots(capacity);
    req.set_page_size(page_size);
    req.set_model(model);
    req.set_epoch(epoch);
    req.set_vocab_size(vocab_size);
    pb::RegisterResponse resp;
    grpc::Status s = stub_->Register(&ctx, req, &resp);
    if (out != nullptr) *out = resp;
    return s;
  }

  grpc::Status Acquire(const std::string& worker, int64_t epoch,
                       const std::vector<int32_t>& tokens,
                       pb::AcquireResponse* out, int32_t reserve = 0,
                       const std::string& model = "m") {
    grpc::ClientContext ctx;
    pb::AcquireRequest req;
    req.set_worker_id(worker);
    req.set_epoch(epoch);
    req.set_model(model);
    SetTokens(&req, tokens);
    req.set_reserve_tokens(reserve);
    return stub_->Acquire(&ctx, req, out);
  }

  grpc::Status Commit(uint64_t lease, const std::vector<int32_t>& tokens,
                      pb::CommitResponse* out = nullptr,
                      bool keep_lease = false) {
    grpc::ClientContext ctx;
    pb::CommitRequest req;
    req.set_lease_id(lease);
    SetTokens(&req, tokens);
    req.set_keep_lease(keep_lease);
    pb::CommitResponse resp;
    grpc::Status s = stub_->Commit(&ctx, req, &resp);
    if (out != nullptr) *out = resp;
    return s;
  }

  grpc::Status Release(uint64_t lease, pb::ReleaseResponse* out = nullptr) {
    grpc::ClientContext ctx;
    pb::ReleaseRequest req;
    req.set_lease_id(lease);
    pb::ReleaseResponse resp;
    grpc::Status s = stub_->Release(&ctx, req, &resp);
    if (out != nullptr) *out = resp;
    return s;
  }

  grpc::Status Match(const std::vector<int32_t>& tokens, pb::MatchResponse* out,
                     const std::string& model = "m") {
    grpc::ClientContext ctx;
    pb::MatchRequest req;
    req.set_model(model);
    SetTokens(&req, tokens);
    return stub_->Match(&ctx, req, out);
  }

  grpc::Status Grow(uint64_t lease, int32_t n, pb::GrowResponse* out) {
    grpc::ClientContext ctx;
    pb::GrowRequest req;
    req.set_lease_id(lease);
    req.set_num_tokens(n);
    return stub_->Grow(&ctx, req, out);
  }

  grpc::Status Fork(uint64_t lease, int32_t children, int64_t n,
                    pb::ForkResponse* out) {
    grpc::ClientContext ctx;
    pb::ForkRequest req;
    req.set_lease_id(lease);
    req.set_num_children(children);
    req.set_num_tokens(n);
    return stub_->Fork(&ctx, req, out);
  }

  grpc::Status Heartbeat(const std::string& worker, int64_t epoch,
                         const std::vector<uint64_t>& leases,
                         pb::HeartbeatResponse* out = nullptr) {
    grpc::ClientContext ctx;
    pb::HeartbeatRequest req;
    req.set_worker_id(worker);
    req.set_epoch(epoch);
    req.mutable_load()->set_running_requests(3);
    req.mutable_lease_ids()->Assign(leases.begin(), leases.end());
    pb::HeartbeatResponse resp;
    grpc::Status s = stub_->Heartbeat(&ctx, req, &resp);
    if (out != nullptr) *out = resp;
    return s;
  }

 private:
  std::atomic<int64_t> now_ms_{kStartMs};
  std::atomic<int> available_events_{0};
  std::atomic<int> unavailable_events_{0};
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<CacheMetrics> metrics_;
  std::unique_ptr<CacheServiceImpl> service_;
  std::unique_ptr<process::GrpcServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::CacheService::Stub> stub_;
};

// Asserts that `call` fails with `code` and leaves the Dump unchanged.
#define EXPECT_REJECTED_UNCHANGED(h, code, call)                       \
  do {                                                                 \
    const std::string before = (h).Dump();                             \
    grpc::Status status = (call);                                      \
    EXPECT_EQ(status.error_code(), (code)) << status.error_message();  \
    EXPECT_FALSE(status.error_message().empty());                      \
    EXPECT_EQ((h).Dump(), before) << "state changed by a failed call"; \
  } while (0)

void ExpectSlotsAddUp(const pb::StatsResponse& stats) {
  for (const pb::WorkerCacheStats& w : stats.workers()) {
    EXPECT_EQ(w.free_slots() + w.evictable_slots() + w.protected_slots(),
              w.capacity_slots())
        << w.worker_id();
  }
}

class CacheServiceImplTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(h_.ok());
    ASSERT_TRUE(h_.Register("w0", 64, 1, 1).ok());
  }
  ServiceHarness h_;
};

TEST_F(CacheServiceImplTest, RegisterReturnsConfigAndRejectsBadShapes) {
  pb::RegisterResponse resp;
  ASSERT_TRUE(h_.Register("w1", 128, 16, 7, "m", &resp).ok());
  EXPECT_EQ(resp.epoch(), 7);
  EXPECT_EQ(resp.lease_ttl_ms(), kLeaseTtlMs);
  EXPECT_EQ(resp.heartbeat_timeout_ms(), kHeartbeatTimeoutMs);
  // Same epoch, same shape: idempotent.
  EXPECT_TRUE(h_.Register("w1", 128, 16, 7).ok());

  const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  const auto kPrecondition = grpc::StatusCode::FAILED_PRECONDITION;
  EXPECT_REJECTED_UNCHANGED(h_, kInvalid, h_.Register("", 64, 1, 1));
  EXPECT_REJECTED_UNCHANGED(h_, kInvalid,
                            h_.Register(std::string(129, 'x'), 64, 1, 1));
  EXPECT_REJECTED_UNCHANGED(h_, kInvalid, h_.Register("w2", 64, 1, 1, ""));
  EXPECT_REJECTED_UNCHANGED(h_, kInvalid, h_.Register("w2", 64, 3, 1));
  EXPECT_REJECTED_UNCHANGED(h_, kInvalid, h_.Register("w2", 100, 16, 1));
  EXPECT_REJECTED_UNCHANGED(h_, kInvalid, h_.Register("w2", 8, 16, 1));
  EXPECT_REJECTED_UNCHANGED(h_, kInvalid, h_.Register("w2", 0, 1, 1));
  EXPECT_REJECTED_UNCHANGED(h_, kInvalid,
                            h_.Register("w2", 64, 1, 1, std::string(257, 'm')));
  {
    grpc::ClientContext ctx;
    pb::RegisterRequest req;
    req.set_worker_id("w2");
    req.set_address(std::string(1 << 20, 'a'));  // 1 MiB address
    req.set_capacity_slots(64);
    req.set_page_size(1);
    req.set_model("m");
    req.set_epoch(1);
    pb::RegisterResponse resp;
    EXPECT_REJECTED_UNCHANGED(h_, kInvalid,
                              h_.stub().Register(&ctx, req, &resp));
  }
  // Lower epoch; same epoch with another shape.
  EXPECT_REJECTED_UNCHANGED(h_, kPrecondition, h_.Register("w1", 128, 16, 6));
  EXPECT_REJECTED_UNCHANGED(h_, kPrecondition, h_.Register("w1", 256, 16, 7));
  EXPECT_REJECTED_UNCHANGED(h_, kPrecondition, h_.Register("w1", 128, 8, 7));
  ExpectSlotsAddUp(h_.Stats());
}

// Regression (adversarial test): one worker registered for model "m" with
// vocab_size 2 made every Match of "m" fail ("token 303 ... outside [0, 2)"),
// since Match validates against the smallest vocab of the model's workers.
// Such a Register is now FAILED_PRECONDITION and changes nothing.
// The service's metadata is bounded: a Register beyond --max_total_slots
// is RESOURCE_EXHAUSTED with the numbers and changes nothing.
TEST_F(CacheServiceImplTest, RegisterBeyondTheTotalSlotBoundIsRefused) {
  const std::string before = h_.Dump();
  const grpc::Status s = h_.Register("big", kMaxCapacitySlots, 1, 1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(),
              HasSubstr(absl::StrCat("capacity_slots ", kMaxCapacitySlots,
                                     " with the 64 slots other workers have "
                                     "registered exceeds the service's limit "
                                     "of ",
                                     MetadataBounds().max_total_slots)));
  EXPECT_EQ(h_.Dump(), before);
}

// Out of memory (an address-space limit in a child process) while
// allocating a pool: RESOURCE_EXHAUSTED with a message, not the empty
// UNIMPLEMENTED gRPC gives a handler whose exception escapes.
TEST(CacheServiceOutOfMemoryTest,
     RegisterThatCannotAllocateIsResourceExhausted) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ServiceHarness h(nullptr, 10'000, [](CacheServiceOptions& o) {
          o.cache.bounds.max_total_slots = int64_t{1} << 30;
        });
        if (!h.ok() || !h.Register("w0", 64, 1, 1).ok()) _exit(10);
        const std::string before = h.Dump();
        if (!testing::LimitAddressSpace(int64_t{256} << 20)) _exit(11);
        const grpc::Status s = h.Register("w0", kMaxCapacitySlots, 1, 2);
        if (s.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
          _exit(20 + s.error_code());
        }
        if (s.error_message().find("out of memory") == std::string::npos) {
          _exit(12);
        }
        _exit(h.Dump() == before ? 0 : 13);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(CacheServiceImplTest, RegisterWithAnotherVocabThanALiveWorkerIsRefused) {
  const std::vector<int32_t> prompt = Range(300, 309);  // ids >= 2
  pb::AcquireResponse a;
  ASSERT_TRUE(h_.Acquire("w0", 1, prompt, &a).ok());
  ASSERT_TRUE(h_.Commit(a.lease_id(), prompt).ok());
  ASSERT_TRUE(h_.Register("w1", 64, 16, 1).ok());  // same vocab, other page

  const auto kPrecondition = grpc::StatusCode::FAILED_PRECONDITION;
  EXPECT_REJECTED_UNCHANGED(h_, kPrecondition,
                            h_.Register("fake", 64, 1, 1, "m", nullptr, 2));
  {
    const grpc::Status s = h_.Register("fake", 64, 1, 1, "m", nullptr, 2);
    EXPECT_EQ(s.error_message().rfind(
                  "worker fake: vocab_size 2 differs from vocab_size 1000 of "
                  "live worker w0 (epoch 1) of model m;",
                  0),
              0u)
        << s.error_message();
  }
  // A larger vocab is refused too, and so is a known worker's new epoch.
  EXPECT_REJECTED_UNCHANGED(
      h_, kPrecondition, h_.Register("fake", 64, 1, 1, "m", nullptr, 50'000));
  EXPECT_REJECTED_UNCHANGED(h_, kPrecondition,
                            h_.Register("w1", 64, 16, 2, "m", nullptr, 2));
  // A malformed request is still INVALID_ARGUMENT, not the vocab error.
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::INVALID_ARGUMENT,
                            h_.Register("fake", 64, 3, 1, "m", nullptr, 2));

  // Match of "m" keeps working with token ids above 2.
  pb::MatchResponse match;
  grpc::Status s = h_.Match(prompt, &match);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(match.workers_size(), 2);
  EXPECT_EQ(match.workers(0).worker_id(), "w0");
  EXPECT_EQ(match.workers(0).matched_tokens(), 10);
  EXPECT_EQ(match.workers(1).worker_id(), "w1");
  EXPECT_EQ(match.workers(1).matched_tokens(), 0);
  // Outside the model's real vocab is still INVALID_ARGUMENT.
  EXPECT_EQ(h_.Match({kVocab}, &match).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  // Other models and an unknown vocab (0) do not disagree with "m".
  EXPECT_TRUE(h_.Register("fake", 64, 1, 1, "tiny", nullptr, 2).ok());
  EXPECT_TRUE(h_.Register("novocab", 64, 1, 1, "m", nullptr, 0).ok());
  EXPECT_TRUE(h_.Match(prompt, &match).ok());
  EXPECT_EQ(match.workers_size(), 3);
}

TEST_F(CacheServiceImplTest, RestartedWorkerMayChangeItsVocabWhenAlone) {
  // w0 is the only worker of "m": a new epoch may bring another vocab.
  ASSERT_TRUE(h_.Register("w0", 64, 1, 2, "m", nullptr, 2 * kVocab).ok());
  pb::MatchResponse match;
  ASSERT_TRUE(h_.Match({kVocab + 5}, &match).ok());
  ASSERT_EQ(match.workers_size(), 1);
  EXPECT_EQ(match.workers(0).epoch(), 2);
  // Its same epoch with yet another vocab is the "another shape" error.
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::FAILED_PRECONDITION,
                            h_.Register("w0", 64, 1, 2, "m", nullptr, kVocab));

  // A second worker must agree with w0 while w0 is live: its last
  // heartbeat is at most heartbeat_timeout_ms old.
  ASSERT_TRUE(h_.Heartbeat("w0", 2, {}).ok());
  h_.RunFor(kHeartbeatTimeoutMs);
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::FAILED_PRECONDITION,
                            h_.Register("w1", 64, 1, 1));
  // One millisecond later w0 is dead (not yet swept): it no longer counts.
  h_.Advance(1);
  ASSERT_TRUE(h_.Register("w1", 64, 1, 1).ok());
  h_.service().SweepOnce();  // drops w0
  ASSERT_TRUE(h_.Match(Range(1, 999), &match).ok());
  ASSERT_EQ(match.workers_size(), 1);
  EXPECT_EQ(match.workers(0).worker_id(), "w1");
  // w0 restarting with its old vocab is now the one that must agree.
  EXPECT_REJECTED_UNCHANGED(
      h_, grpc::StatusCode::FAILED_PRECONDITION,
      h_.Register("w0", 64, 1, 3, "m", nullptr, 2 * kVocab));
  ASSERT_TRUE(h_.Register("w0", 64, 1, 3).ok());
  ASSERT_TRUE(h_.service().CheckInvariantsForTest().ok());
}

TEST_F(CacheServiceImplTest, AcquireCommitReusesThePrefix) {
  pb::AcquireResponse first;
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(1, 8), &first).ok());
  EXPECT_EQ(first.prefix_len(), 0);
  EXPECT_EQ(first.kv_indices_size(), 8);
  EXPECT_EQ(first.lease_ttl_ms(), kLeaseTtlMs);
  pb::StatsResponse stats = h_.Stats("w0");
  ASSERT_EQ(stats.workers_size(), 1);
  EXPECT_EQ(stats.workers(0).protected_slots(), 8);
  EXPECT_EQ(stats.workers(0).free_slots(), 56);
  EXPECT_EQ(stats.workers(0).active_leases(), 1);

  pb::CommitResponse commit;
  ASSERT_TRUE(h_.Commit(first.lease_id(), Range(1, 8), &commit).ok());
  EXPECT_EQ(commit.inserted_tokens(), 8);
  EXPECT_EQ(commit.freed_slots(), 0);
  stats = h_.Stats("w0");
  EXPECT_EQ(stats.workers(0).evictable_slots(), 8);
  EXPECT_EQ(stats.workers(0).protected_slots(), 0);
  EXPECT_EQ(stats.workers(0).cached_tokens(), 8);
  EXPECT_EQ(stats.workers(0).active_leases(), 0);

  // Second turn: everything but the new token is reused, same slots.
  pb::AcquireResponse second;
  std::vector<int32_t> turn2 = Range(1, 9);
  ASSERT_TRUE(h_.Acquire("w0", 1, turn2, &second).ok());
  EXPECT_EQ(second.prefix_len(), 8);
  ASSERT_EQ(second.kv_indices_size(), 9);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(second.kv_indices(i), first.kv_indices(i)) << i;
  }
  // The same prompt again: one token is always left to compute.
  pb::AcquireResponse third;
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(1, 8), &third).ok());
  EXPECT_EQ(third.prefix_len(), 7);

  // Match: read-only; reports the longest cached prefix per worker.
  ASSERT_TRUE(h_.Register("w1", 128, 16, 1).ok());
  const std::string before = h_.Dump();
  pb::MatchResponse match;
  ASSERT_TRUE(h_.Match(Range(1, 12), &match).ok());
  ASSERT_EQ(match.workers_size(), 2);
  EXPECT_EQ(match.workers(0).worker_id(), "w0");
  EXPECT_EQ(match.workers(0).matched_tokens(), 8);
  EXPECT_EQ(match.workers(0).address(), "w0:1234");
  EXPECT_EQ(match.workers(1).worker_id(), "w1");
  EXPECT_EQ(match.workers(1).matched_tokens(), 0);
  EXPECT_EQ(h_.Dump(), before);
  // Match carries each worker's memory state, the same as Stats: on w0 the
  // 8 cached tokens are locked by the second and third leases, which hold
  // one new slot each (page_size 1).
  EXPECT_EQ(match.workers(0).capacity_slots(), 64);
  EXPECT_EQ(match.workers(0).protected_slots(), 10);
  EXPECT_EQ(match.workers(0).evictable_slots(), 0);
  EXPECT_EQ(match.workers(0).free_slots(), 54);
  EXPECT_EQ(match.workers(0).cached_tokens(), 8);
  EXPECT_EQ(match.workers(0).page_size(), 1);
  EXPECT_EQ(match.workers(1).capacity_slots(), 128);
  EXPECT_EQ(match.workers(1).free_slots(), 128);
  EXPECT_EQ(match.workers(1).protected_slots(), 0);
  EXPECT_EQ(match.workers(1).page_size(), 16);
  // An Acquire of 20 tokens on w1 (page 16) protects 2 pages = 32 slots.
  pb::AcquireResponse on_w1;
  ASSERT_TRUE(h_.Acquire("w1", 1, Range(100, 119), &on_w1).ok());
  ASSERT_TRUE(h_.Match(Range(1, 12), &match).ok());
  EXPECT_EQ(match.workers(1).protected_slots(), 32);
  EXPECT_EQ(match.workers(1).free_slots(), 96);
  EXPECT_EQ(match.workers(1).evictable_slots(), 0);
  // Committed (which ends the lease), the 20 tokens stay cached and become
  // evictable.
  pb::CommitResponse w1_commit;
  ASSERT_TRUE(h_.Commit(on_w1.lease_id(), Range(100, 119), &w1_commit).ok());
  ASSERT_TRUE(h_.Match(Range(1, 12), &match).ok());
  EXPECT_EQ(match.workers(1).protected_slots(), 0);
  EXPECT_EQ(match.workers(1).evictable_slots(), 32);
  EXPECT_EQ(match.workers(1).free_slots(), 96);
  EXPECT_EQ(match.workers(1).cached_tokens(), 20);

  ASSERT_TRUE(h_.Release(second.lease_id()).ok());
  ASSERT_TRUE(h_.Release(third.lease_id()).ok());
  stats = h_.Stats();
  EXPECT_EQ(stats.persistence(), "memory");
  EXPECT_EQ(stats.active_leases(), 0);
  ExpectSlotsAddUp(stats);
  ASSERT_TRUE(h_.service().CheckInvariantsForTest().ok());
}

TEST_F(CacheServiceImplTest, BadTokensAreInvalidArgumentEverywhere) {
  const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  pb::AcquireResponse acquire;
  pb::MatchResponse match;
  std::vector<int32_t> oversized(kMaxPrompt + 1, 5);
  for (const std::vector<int32_t>& bad :
       {std::vector<int32_t>{}, oversized, std::vector<int32_t>{1, 2, kVocab},
        std::vector<int32_t>{1, -1, 2}}) {
    EXPECT_REJECTED_UNCHANGED(h_, kInvalid, h_.Acquire("w0", 1, bad, &acquire));
    EXPECT_REJECTED_UNCHANGED(h_, kInvalid, h_.Match(bad, &match));
  }
  {
    grpc::ClientContext ctx;
    pb::AcquireRequest req;
    req.set_worker_id("w0");
    req.set_epoch(1);
    req.set_model("m");
    req.add_tokens(1);
    req.add_tokens(2);
    req.set_request_id(std::string(129, 'r'));
    pb::AcquireResponse resp;
    EXPECT_REJECTED_UNCHANGED(h_, kInvalid,
                              h_.stub().Acquire(&ctx, req, &resp));
  }
  // Reserve out of range.
  EXPECT_REJECTED_UNCHANGED(h_, kInvalid,
                            h_.Acquire("w0", 1, {1, 2}, &acquire, 65537));
  EXPECT_REJECTED_UNCHANGED(h_, kInvalid,
                            h_.Acquire("w0", 1, {1, 2}, &acquire, -1));
}

TEST_F(CacheServiceImplTest, AcquireErrorPaths) {
  pb::AcquireResponse resp;
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::NOT_FOUND,
                            h_.Acquire("nobody", 1, {1, 2}, &resp));
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::FAILED_PRECONDITION,
                            h_.Acquire("w0", 2, {1, 2}, &resp));
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::FAILED_PRECONDITION,
                            h_.Acquire("w0", 1, {1, 2}, &resp, 0, "other"));
  // Capacity is 64 slots: 65 tokens can never fit.
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::RESOURCE_EXHAUSTED,
                            h_.Acquire("w0", 1, Range(1, 65), &resp));
  // 40 locked slots leave 24: a 30-token prompt does not fit even after
  // eviction (nothing is unlocked), and nothing changes.
  pb::AcquireResponse held;
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(100, 139), &held).ok());
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::RESOURCE_EXHAUSTED,
                            h_.Acquire("w0", 1, Range(200, 229), &resp));
  // After commit the 40 tokens are evictable: the same call now evicts.
  ASSERT_TRUE(h_.Commit(held.lease_id(), Range(100, 139)).ok());
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(200, 229), &resp).ok());
  pb::StatsResponse stats = h_.Stats("w0");
  EXPECT_GE(stats.workers(0).evicted_tokens(), 6);
  ExpectSlotsAddUp(stats);
}

TEST_F(CacheServiceImplTest, GrowForkErrorPathsAndValues) {
  pb::AcquireResponse lease;
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(1, 10), &lease).ok());
  pb::GrowResponse grow;
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::NOT_FOUND,
                            h_.Grow(999999, 4, &grow));
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::INVALID_ARGUMENT,
                            h_.Grow(lease.lease_id(), 0, &grow));
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::INVALID_ARGUMENT,
                            h_.Grow(lease.lease_id(), 65537, &grow));
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::RESOURCE_EXHAUSTED,
                            h_.Grow(lease.lease_id(), 60, &grow));
  ASSERT_TRUE(h_.Grow(lease.lease_id(), 4, &grow).ok());
  // page_size 1: rounded up to the 16-slot chunk.
  EXPECT_EQ(grow.kv_indices_size(), 16);
  EXPECT_EQ(grow.first_remapped_position(), -1);

  pb::ForkResponse fork;
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::NOT_FOUND,
                            h_.Fork(999999, 2, 5, &fork));
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::INVALID_ARGUMENT,
                            h_.Fork(lease.lease_id(), 0, 5, &fork));
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::INVALID_ARGUMENT,
                            h_.Fork(lease.lease_id(), 65, 5, &fork));
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::INVALID_ARGUMENT,
                            h_.Fork(lease.lease_id(), 2, 0, &fork));
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::INVALID_ARGUMENT,
                            h_.Fork(lease.lease_id(), 2, 27, &fork));
  ASSERT_TRUE(h_.Fork(lease.lease_id(), 2, 10, &fork).ok());
  ASSERT_EQ(fork.children_size(), 2);
  EXPECT_NE(fork.children(0).lease_id(), fork.children(1).lease_id());
  for (const auto& child : fork.children()) {
    ASSERT_EQ(child.kv_indices_size(), 10);
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(child.kv_indices(i), lease.kv_indices(i));
    }
  }
  EXPECT_EQ(h_.Stats().active_leases(), 3);
  ExpectSlotsAddUp(h_.Stats());
  ASSERT_TRUE(h_.service().CheckInvariantsForTest().ok());
}

// Through the public API: a forked child shares its parent's KV of
// positions 0..7, of which 5..7 the parent generated. Once the parent has
// committed them, a child commit with other tokens there is refused (it
// would put the parent's KV in the tree under tokens it never computed).
TEST(CacheServiceForkTest, ChildCommitMustAgreeWithTheSharedPositions) {
  for (int32_t page_size : {1, 16}) {
    SCOPED_TRACE(absl::StrCat("page_size ", page_size));
    ServiceHarness h;
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(h.Register("w", 64, page_size, 1, "m", nullptr, 100).ok());
    pb::AcquireResponse a;
    ASSERT_TRUE(h.Acquire("w", 1, {1, 2, 3, 4, 5}, &a, 5).ok());
    pb::ForkResponse c;
    ASSERT_TRUE(h.Fork(a.lease_id(), 1, 8, &c).ok());
    ASSERT_TRUE(h.Commit(a.lease_id(), {1, 2, 3, 4, 5, 6, 7, 8}).ok());
    const std::string before = h.Dump();
    const grpc::Status refused =
        h.Commit(c.children(0).lease_id(), {1, 2, 3, 4, 5, 9, 9, 9});
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(refused.error_message(),
                HasSubstr("disagree at position 5 with the KV it shares "
                          "through Fork"));
    EXPECT_EQ(h.Dump(), before);
    pb::AcquireResponse later;
    ASSERT_TRUE(h.Acquire("w", 1, {1, 2, 3, 4, 5, 9, 9, 9, 0}, &later).ok());
    EXPECT_EQ(later.prefix_len(), 5);
    ASSERT_TRUE(h.service().CheckInvariantsForTest().ok());
  }
}

TEST_F(CacheServiceImplTest, CommitAndReleaseErrorPaths) {
  pb::AcquireResponse lease;
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(1, 10), &lease, 4).ok());
  ASSERT_EQ(lease.kv_indices_size(), 14);
  const auto kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  // Does not extend the prompt (shorter, different token).
  EXPECT_REJECTED_UNCHANGED(h_, kInvalid,
                            h_.Commit(lease.lease_id(), Range(1, 9)));
  std::vector<int32_t> different = Range(1, 10);
  different[3] = 77;
  EXPECT_REJECTED_UNCHANGED(h_, kInvalid,
                            h_.Commit(lease.lease_id(), different));
  // Longer than the lease's slots (14).
  EXPECT_REJECTED_UNCHANGED(h_, kInvalid,
                            h_.Commit(lease.lease_id(), Range(1, 15)));
  EXPECT_REJECTED_UNCHANGED(h_, kInvalid, h_.Commit(lease.lease_id(), {}));
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::NOT_FOUND,
                            h_.Commit(424242, Range(1, 10)));

  pb::CommitResponse commit;
  ASSERT_TRUE(h_.Commit(lease.lease_id(), Range(1, 12), &commit).ok());
  EXPECT_EQ(commit.inserted_tokens(), 12);
  EXPECT_EQ(commit.freed_slots(), 2);  // unused reserve
  // Double Commit / Release after Commit.
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::NOT_FOUND,
                            h_.Commit(lease.lease_id(), Range(1, 12)));
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::NOT_FOUND,
                            h_.Release(lease.lease_id()));

  pb::AcquireResponse other;
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(500, 505), &other).ok());
  pb::ReleaseResponse release;
  ASSERT_TRUE(h_.Release(other.lease_id(), &release).ok());
  EXPECT_EQ(release.freed_slots(), 6);
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::NOT_FOUND,
                            h_.Release(other.lease_id()));
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::NOT_FOUND,
                            h_.Commit(other.lease_id(), Range(500, 505)));
  ExpectSlotsAddUp(h_.Stats());
}

TEST_F(CacheServiceImplTest, KeepLeaseCommitReturnsTheRemappedTable) {
  pb::AcquireResponse lease;
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(1, 6), &lease, 2).ok());
  pb::CommitResponse commit;
  ASSERT_TRUE(h_.Commit(lease.lease_id(), Range(1, 7), &commit, true).ok());
  EXPECT_EQ(commit.inserted_tokens(), 7);
  ASSERT_EQ(commit.kv_indices_size(), 8);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(commit.kv_indices(i), lease.kv_indices(i));
  EXPECT_EQ(h_.Stats().active_leases(), 1);
  // The lease continues: its prompt is now [1..7].
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::INVALID_ARGUMENT,
                            h_.Commit(lease.lease_id(), Range(1, 6)));
  ASSERT_TRUE(h_.Commit(lease.lease_id(), Range(1, 8)).ok());
  EXPECT_EQ(h_.Stats().active_leases(), 0);
}

TEST_F(CacheServiceImplTest, HeartbeatDeregisterEvictFlushStats) {
  pb::AcquireResponse lease;
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(1, 10), &lease).ok());
  pb::HeartbeatResponse hb;
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::NOT_FOUND,
                            h_.Heartbeat("nobody", 1, {}));
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::FAILED_PRECONDITION,
                            h_.Heartbeat("w0", 0, {}));
  ASSERT_TRUE(h_.Heartbeat("w0", 1, {lease.lease_id(), 777}, &hb).ok());
  EXPECT_THAT(hb.lost_lease_ids(), ElementsAre(777));
  EXPECT_EQ(h_.Stats("w0").workers(0).load().running_requests(), 3);

  ASSERT_TRUE(h_.Commit(lease.lease_id(), Range(1, 10)).ok());
  pb::AcquireResponse other;
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(20, 29), &other).ok());
  ASSERT_TRUE(h_.Commit(other.lease_id(), Range(20, 29)).ok());

  {
    grpc::ClientContext ctx;
    pb::EvictRequest req;
    req.set_worker_id("nobody");
    req.set_num_tokens(4);
    pb::EvictResponse resp;
    EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::NOT_FOUND,
                              h_.stub().Evict(&ctx, req, &resp));
  }
  {
    grpc::ClientContext ctx;
    pb::EvictRequest req;
    req.set_worker_id("w0");
    req.set_num_tokens(0);
    pb::EvictResponse resp;
    EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::INVALID_ARGUMENT,
                              h_.stub().Evict(&ctx, req, &resp));
  }
  {
    grpc::ClientContext ctx;
    pb::EvictRequest req;
    req.set_worker_id("w0");
    req.set_num_tokens(4);
    pb::EvictResponse resp;
    ASSERT_TRUE(h_.stub().Evict(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.evicted_tokens(), 10);  // one whole leaf (LRU: [1..10])
  }
  EXPECT_EQ(h_.Stats("w0").workers(0).cached_tokens(), 10);
  {
    grpc::ClientContext ctx;
    pb::FlushRequest req;
    req.set_worker_id("nobody");
    pb::FlushResponse resp;
    EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::NOT_FOUND,
                              h_.stub().Flush(&ctx, req, &resp));
  }
  {
    grpc::ClientContext ctx;
    pb::FlushResponse resp;
    ASSERT_TRUE(h_.stub().Flush(&ctx, pb::FlushRequest(), &resp).ok());
    EXPECT_EQ(resp.evicted_tokens(), 10);
  }
  pb::StatsResponse stats = h_.Stats("w0");
  EXPECT_EQ(stats.workers(0).free_slots(), 64);
  EXPECT_EQ(stats.workers(0).evicted_tokens(), 20);
  EXPECT_EQ(stats.workers(0).prefix_query_tokens(), 20);
  {
    grpc::ClientContext ctx;
    pb::StatsRequest req;
    req.set_worker_id("nobody");
    pb::StatsResponse resp;
    EXPECT_EQ(h_.stub().Stats(&ctx, req, &resp).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }

  // Deregister: unknown, stale epoch, then the real one.
  auto deregister = [&](const std::string& id, int64_t epoch,
                        pb::DeregisterResponse* resp) {
    grpc::ClientContext ctx;
    pb::DeregisterRequest req;
    req.set_worker_id(id);
    req.set_epoch(epoch);
    return h_.stub().Deregister(&ctx, req, resp);
  };
  pb::DeregisterResponse dereg;
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::NOT_FOUND,
                            deregister("nobody", 1, &dereg));
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::FAILED_PRECONDITION,
                            deregister("w0", 5, &dereg));
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(1, 5), &lease).ok());
  ASSERT_TRUE(deregister("w0", 1, &dereg).ok());
  EXPECT_EQ(dereg.released_leases(), 1);
  EXPECT_THAT(h_.Stats().workers(), IsEmpty());
  EXPECT_EQ(h_.Release(lease.lease_id()).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// Error messages echo the worker_id; a 100 kB one overflowed the client's
// 8 KiB metadata limit and arrived as RESOURCE_EXHAUSTED instead of
// NOT_FOUND. Messages are now bounded (1 KiB + a truncation note).
TEST_F(CacheServiceImplTest, HugeUnknownWorkerIdIsNotFoundWithABoundedMessage) {
  const std::string huge(100000, 'x');
  grpc::Status st = h_.Heartbeat(huge, 1, {});
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::NOT_FOUND,
                            h_.Heartbeat(huge, 1, {}));
  EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_LE(st.error_message().size(), 1100u);
  EXPECT_NE(st.error_message().find("... (truncated from 1000"),
            std::string::npos)
      << st.error_message().substr(st.error_message().size() - 60);
  pb::AcquireResponse lease;
  EXPECT_REJECTED_UNCHANGED(h_, grpc::StatusCode::NOT_FOUND,
                            h_.Acquire(huge, 1, Range(1, 5), &lease));
  grpc::ClientContext ctx;
  pb::StatsRequest req;
  req.set_worker_id(huge);
  pb::StatsResponse resp;
  EXPECT_EQ(h_.stub().Stats(&ctx, req, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(CacheServiceImplTest, NewEpochWipesResidencyAndLeases) {
  pb::AcquireResponse lease;
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(1, 10), &lease).ok());
  pb::AcquireResponse held;
  ASSERT_TRUE(h_.Commit(lease.lease_id(), Range(1, 10)).ok());
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(1, 12), &held).ok());
  ASSERT_TRUE(h_.Register("w0", 64, 1, 2).ok());
  pb::StatsResponse stats = h_.Stats("w0");
  EXPECT_EQ(stats.workers(0).epoch(), 2);
  EXPECT_EQ(stats.workers(0).free_slots(), 64);
  EXPECT_EQ(stats.workers(0).cached_tokens(), 0);
  EXPECT_EQ(h_.Commit(held.lease_id(), Range(1, 12)).error_code(),
            grpc::StatusCode::NOT_FOUND);
  pb::MatchResponse match;
  ASSERT_TRUE(h_.Match(Range(1, 10), &match).ok());
  EXPECT_EQ(match.workers(0).matched_tokens(), 0);
}

TEST_F(CacheServiceImplTest, SweepExpiresLeasesAndDropsDeadWorkers) {
  pb::AcquireResponse a, b;
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(1, 10), &a).ok());
  EXPECT_EQ(h_.RunFor(kLeaseTtlMs / 2), 0);
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(11, 20), &b).ok());
  EXPECT_EQ(h_.RunFor(kLeaseTtlMs / 2), 1);  // a's TTL is over, b's is not
  EXPECT_EQ(h_.Commit(a.lease_id(), Range(1, 10)).error_code(),
            grpc::StatusCode::NOT_FOUND);
  pb::StatsResponse stats = h_.Stats();
  EXPECT_EQ(stats.expired_leases_total(), 1);
  EXPECT_EQ(stats.workers(0).expired_leases(), 1);
  EXPECT_EQ(stats.active_leases(), 1);
  ExpectSlotsAddUp(stats);
  std::string text = h_.Scrape();
  EXPECT_NE(text.find("radixkv_cache_expired_leases_total 1"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("radixkv_cache_worker_expired_leases_total{worker=\"w0\"} 1"),
      std::string::npos);
  // A heartbeat listing b renews it past its original expiry.
  EXPECT_EQ(h_.RunFor(kLeaseTtlMs / 2 - 10), 0);
  ASSERT_TRUE(h_.Heartbeat("w0", 1, {b.lease_id()}).ok());
  EXPECT_EQ(h_.RunFor(kLeaseTtlMs / 2 + 20), 0);
  ASSERT_TRUE(h_.Commit(b.lease_id(), Range(11, 20)).ok());
  // No heartbeat for longer than the timeout while the service runs: the
  // worker is dropped (its last heartbeat is 2,520 ms old here).
  h_.RunFor(kHeartbeatTimeoutMs - 3000);
  EXPECT_EQ(h_.Stats().workers_size(), 1);
  h_.RunFor(1000);
  EXPECT_THAT(h_.Stats().workers(), IsEmpty());
}

// The service itself stopped (SIGSTOP, a hung host) for longer than the
// heartbeat timeout and the lease TTL: nobody could be heard meanwhile, so
// the sweep after it credits the pause instead of dropping every worker
// and expiring every lease. Liveness then counts again from there.
TEST_F(CacheServiceImplTest, APauseOfTheServiceIsNotCountedAgainstWorkers) {
  pb::AcquireResponse a;
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(1, 10), &a).ok());
  ASSERT_TRUE(h_.Commit(a.lease_id(), Range(1, 10)).ok());
  pb::AcquireResponse held;
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(1, 12), &held).ok());
  h_.RunFor(1000);
  h_.Advance(kHeartbeatTimeoutMs + kLeaseTtlMs);  // no sweep: paused
  EXPECT_EQ(h_.service().SweepOnce(), 0);
  pb::StatsResponse stats = h_.Stats("w0");
  ASSERT_EQ(stats.workers_size(), 1);
  EXPECT_EQ(stats.workers(0).epoch(), 1);
  // 1,000 ms before the pause plus the sweep's own interval of it.
  EXPECT_EQ(stats.workers(0).heartbeat_age_ms(), 1250);
  EXPECT_EQ(stats.active_leases(), 1);
  pb::MatchResponse match;
  ASSERT_TRUE(h_.Match(Range(1, 10), &match).ok());
  EXPECT_EQ(match.workers(0).matched_tokens(), 10);
  ASSERT_TRUE(h_.Commit(held.lease_id(), Range(1, 12)).ok());
  // Without heartbeats while the service runs, the worker still goes.
  h_.RunFor(kHeartbeatTimeoutMs - 1250);
  EXPECT_EQ(h_.Stats().workers_size(), 1);
  h_.RunFor(500);
  EXPECT_THAT(h_.Stats().workers(), IsEmpty());
}

TEST_F(CacheServiceImplTest, RegisterTellsTheHeartbeatInterval) {
  pb::RegisterResponse resp;
  ASSERT_TRUE(h_.Register("w1", 64, 1, 1, "m", &resp).ok());
  // min(20,000 ms timeout, 5,000 ms lease TTL) / 4.
  EXPECT_EQ(resp.heartbeat_interval_ms(), 1250);
}

TEST_F(CacheServiceImplTest, MetricsFollowTheState) {
  pb::AcquireResponse a;
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(1, 10), &a).ok());
  ASSERT_TRUE(h_.Commit(a.lease_id(), Range(1, 10)).ok());
  ASSERT_TRUE(h_.Acquire("w0", 1, Range(1, 12), &a).ok());
  h_.service().SweepOnce();  // refreshes the per-worker series
  std::string text = h_.Scrape();
  EXPECT_NE(
      text.find("radixkv_cache_prefix_query_tokens_total{worker=\"w0\"} 22"),
      std::string::npos)
      << text;
  EXPECT_NE(
      text.find("radixkv_cache_prefix_hit_tokens_total{worker=\"w0\"} 10"),
      std::string::npos);
  EXPECT_NE(
      text.find("radixkv_cache_slots{state=\"protected\",worker=\"w0\"} 12"),
      std::string::npos);
  EXPECT_NE(text.find("radixkv_cache_slots{state=\"free\",worker=\"w0\"} 52"),
            std::string::npos);
  EXPECT_NE(text.find("radixkv_cache_active_leases{worker=\"w0\"} 1"),
            std::string::npos);
  EXPECT_NE(
      text.find("radixkv_cache_rpc_latency_seconds_count{rpc=\"Acquire\"} 2"),
      std::string::npos);
  EXPECT_NE(text.find("radixkv_cache_persistence{mode=\"memory\"} 1"),
            std::string::npos);
}

// Random, mostly hostile requests for every RPC (out-of-range numbers,
// unknown workers and leases, bad tokens), for the test below.
class HostileRequests {
 public:
  explicit HostileRequests(uint64_t seed) : rng_(seed) {}

  // Sends one random request; leases it is granted join the pool of ids
  // later requests pick from.
  grpc::Status SendOne(pb::CacheService::Stub& stub) {
    grpc::ClientContext ctx;
    grpc::Status status;
    switch (rng_() % 10) {
      case 0: {
        pb::RegisterRequest req;
        req.set_worker_id(AnyWorker());
        req.set_capacity_slots(AnyI64());
        req.set_page_size(Pick(1, 16, 3, 0, -16, 128, 256));
        req.set_model(Pick("m", "", "other"));
        req.set_epoch(rng_() % 2 ? 1 : AnyI64());
        req.set_vocab_size(Pick(0, kVocab, -1));
        pb::RegisterResponse resp;
        status = stub.Register(&ctx, req, &resp);
        break;
      }
      case 1: {
        pb::HeartbeatRequest req;
        req.set_worker_id(AnyWorker());
        req.set_epoch(rng_() % 2 ? 1 : AnyI64());
        req.mutable_load()->set_outstanding_tokens(AnyI64());
        for (int k = 0; k < 3; ++k) req.add_lease_ids(AnyLease());
        pb::HeartbeatResponse resp;
        status = stub.Heartbeat(&ctx, req, &resp);
        break;
      }
      case 2: {
        pb::MatchRequest req;
        req.set_model(Pick("m", "", "other"));
        req.set_cache_salt(rng_() % 10 == 0 ? std::string(300, 's') : "");
        AnyTokens(&req);
        pb::MatchResponse resp;
        status = stub.Match(&ctx, req, &resp);
        break;
      }
      case 3: {
        pb::AcquireRequest req;
        req.set_worker_id(AnyWorker());
        req.set_epoch(rng_() % 3 ? 1 : AnyI64());
        req.set_model(Pick("m", "", "other"));
        req.set_priority(AnyI32());
        req.set_reserve_tokens(rng_() % 2 ? 0 : AnyI32());
        req.set_disable_match(rng_() % 4 == 0);
        AnyTokens(&req);
        pb::AcquireResponse resp;
        status = stub.Acquire(&ctx, req, &resp);
        if (status.ok()) leases_.push_back(resp.lease_id());
        break;
      }
      case 4: {
        pb::GrowRequest req;
        req.set_lease_id(AnyLease());
        req.set_num_tokens(AnyI32());
        pb::GrowResponse resp;
        status = stub.Grow(&ctx, req, &resp);
        break;
      }
      case 5: {
        pb::ForkRequest req;
        req.set_lease_id(AnyLease());
        req.set_num_children(AnyI32());
        req.set_num_tokens(AnyI64());
        pb::ForkResponse resp;
        status = stub.Fork(&ctx, req, &resp);
        if (status.ok()) {
          for (const auto& c : resp.children()) leases_.push_back(c.lease_id());
        }
        break;
      }
      case 6: {
        pb::CommitRequest req;
        req.set_lease_id(AnyLease());
        req.set_keep_lease(rng_() % 2 == 0);
        AnyTokens(&req);
        pb::CommitResponse resp;
        status = stub.Commit(&ctx, req, &resp);
        break;
      }
      case 7: {
        pb::ReleaseRequest req;
        req.set_lease_id(AnyLease());
        pb::ReleaseResponse resp;
        status = stub.Release(&ctx, req, &resp);
        break;
      }
      case 8: {
        pb::EvictRequest req;
        req.set_worker_id(AnyWorker());
        req.set_num_tokens(AnyI64());
        pb::EvictResponse resp;
        status = stub.Evict(&ctx, req, &resp);
        break;
      }
      default: {
        pb::DeregisterRequest req;
        req.set_worker_id(AnyWorker());
        req.set_epoch(rng_() % 4 ? 0 : 1);  // mostly a stale epoch
        pb::DeregisterResponse resp;
        status = stub.Deregister(&ctx, req, &resp);
        break;
      }
    }
    return status;
  }

 private:
  template <typename... T>
  std::common_type_t<T...> Pick(T... values) {
    using V = std::common_type_t<T...>;
    const V pool[] = {static_cast<V>(values)...};
    return pool[rng_() % sizeof...(values)];
  }
  int64_t AnyI64() {
    return Pick(int64_t{0}, int64_t{-1}, int64_t{1}, int64_t{16}, int64_t{64},
                int64_t{1} << 40, std::numeric_limits<int64_t>::max(),
                std::numeric_limits<int64_t>::min(),
                static_cast<int64_t>(rng_() % 100));
  }
  int32_t AnyI32() {
    return Pick(0, -1, 1, 3, 16, 64, 65536, 65537,
                std::numeric_limits<int32_t>::max(),
                std::numeric_limits<int32_t>::min(),
                static_cast<int32_t>(rng_() % 100));
  }
  std::string AnyWorker() {
    return std::string(Pick("w0", "w0", "", "nobody", "w1"));
  }
  uint64_t AnyLease() { return leases_[rng_() % leases_.size()]; }
  template <typename Message>
  void AnyTokens(Message* msg) {
    const int n = Pick(0, 1, 2, 5, 20, 60, static_cast<int>(kMaxPrompt + 1));
    for (int i = 0; i < n; ++i) {
      msg->add_tokens(rng_() % 8 == 0 ? AnyI32()
                                      : static_cast<int32_t>(rng_() % 50));
    }
  }

  std::mt19937_64 rng_;
  std::vector<uint64_t> leases_ = {0, 1, 2, 999999,
                                   std::numeric_limits<uint64_t>::max()};
};

// Random, mostly hostile requests for every RPC: the process never crashes,
// every failure is one of the documented codes and leaves the Dump
// unchanged, and the invariants hold after every call.
TEST_F(CacheServiceImplTest,
       RandomGarbageNeverCrashesAndFailuresChangeNothing) {
  const uint64_t seed = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  std::printf("garbage seed: %llu\n", static_cast<unsigned long long>(seed));
  HostileRequests requests(seed);
  const std::set<grpc::StatusCode> documented = {
      grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::NOT_FOUND,
      grpc::StatusCode::FAILED_PRECONDITION,
      grpc::StatusCode::RESOURCE_EXHAUSTED};
  int ok_calls = 0;
  for (int i = 0; i < 1500; ++i) {
    const std::string before = h_.Dump();
    const grpc::Status status = requests.SendOne(h_.stub());
    if (status.ok()) {
      ++ok_calls;
    } else {
      EXPECT_TRUE(documented.count(status.error_code()))
          << status.error_code() << " " << status.error_message();
      ASSERT_EQ(h_.Dump(), before)
          << "call " << i << " failed with " << status.error_message()
          << " but changed the state; seed " << seed;
    }
    ASSERT_TRUE(h_.service().CheckInvariantsForTest().ok())
        << "call " << i << " seed " << seed;
  }
  EXPECT_GT(ok_calls, 0);  // the mix also exercises successful paths
  ExpectSlotsAddUp(h_.Stats());
}

// ---- Redis mode (a real redis-server started by the test) ----

std::string TempDir(const std::string& name) {
  const char* base = getenv("TEST_TMPDIR");
  return absl::StrCat(base != nullptr ? base : "/tmp", "/", name, "_",
                      getpid());
}

std::unique_ptr<RedisJournal> OpenJournal(int port) {
  RedisJournalOptions options;
  options.port = port;
  options.key_prefix = "test:cache";
  options.io_timeout = absl::Milliseconds(500);
  auto journal = RedisJournal::Open(options);
  EXPECT_TRUE(journal.ok()) << journal.status();
  return journal.ok() ? std::move(*journal) : nullptr;
}

TEST(CacheServiceRedisTest, RestartReplaysSnapshotAndJournal) {
  auto redis = RedisServerProcess::Start(TempDir("replay"));
  ASSERT_TRUE(redis.ok()) << redis.status();
  std::string dump;
  uint64_t open_lease = 0;
  {
    // Snapshot every 5 ops, inline so that which operations the last
    // snapshot covers does not depend on how fast a forked child runs: the
    // restart sees a snapshot plus a journal tail.
    ServiceHarness h(OpenJournal((*redis)->port()), 5, InlineSnapshots);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h.Stats().persistence(), "redis");
    ASSERT_TRUE(h.Register("w0", 256, 16, 1).ok());
    ASSERT_TRUE(h.Register("w1", 128, 1, 1).ok());
    for (int i = 0; i < 6; ++i) {
      pb::AcquireResponse a;
      std::vector<int32_t> prompt = Range(1, 20 + i);
      ASSERT_TRUE(h.Acquire(i % 2 ? "w1" : "w0", 1, prompt, &a, 3).ok());
      ASSERT_TRUE(h.Commit(a.lease_id(), prompt).ok());
      h.Advance(7);
    }
    pb::AcquireResponse held;
    ASSERT_TRUE(h.Acquire("w0", 1, Range(1, 40), &held).ok());
    open_lease = held.lease_id();
    pb::GrowResponse grow;
    ASSERT_TRUE(h.Grow(open_lease, 5, &grow).ok());
    dump = h.Dump();
  }
  {
    ServiceHarness h(OpenJournal((*redis)->port()), 5, InlineSnapshots);
    ASSERT_TRUE(h.ok());
    EXPECT_TRUE(h.service().recovery().had_snapshot);
    // 16 journaled operations; periodic snapshots truncated the journal.
    EXPECT_GT(h.service().recovery().replayed_entries, 0);
    EXPECT_LT(h.service().recovery().replayed_entries, 16);
    EXPECT_EQ(h.service().recovery().replay_errors, 0);
    EXPECT_EQ(h.Dump(), dump);
    ASSERT_TRUE(h.service().CheckInvariantsForTest().ok());
    // The acknowledged lease is still valid and can be committed.
    pb::HeartbeatResponse hb;
    ASSERT_TRUE(h.Heartbeat("w0", 1, {open_lease}, &hb).ok());
    EXPECT_THAT(hb.lost_lease_ids(), IsEmpty());
    ASSERT_TRUE(h.Commit(open_lease, Range(1, 41)).ok());
  }
}

// What a fork family fixed is rebuilt by replay (and kept in snapshots).
TEST(CacheServiceRedisTest, ForkFamilyKnowledgeSurvivesARestart) {
  auto redis = RedisServerProcess::Start(TempDir("fork"));
  ASSERT_TRUE(redis.ok()) << redis.status();
  uint64_t child = 0;
  int64_t epoch = 0;
  // From the journal, then from a snapshot taken after every operation.
  for (int64_t snapshot_every_ops : {10'000, 1}) {
    SCOPED_TRACE(absl::StrCat("snapshot_every_ops ", snapshot_every_ops));
    ++epoch;
    {
      ServiceHarness h(OpenJournal((*redis)->port()), snapshot_every_ops);
      ASSERT_TRUE(h.ok());
      ASSERT_TRUE(h.Register("w", 64, 1, epoch).ok());
      pb::AcquireResponse a;
      ASSERT_TRUE(h.Acquire("w", epoch, {1, 2, 3}, &a, 4).ok());
      pb::ForkResponse c;
      ASSERT_TRUE(h.Fork(a.lease_id(), 1, 6, &c).ok());
      child = c.children(0).lease_id();
      ASSERT_TRUE(h.Commit(a.lease_id(), {1, 2, 3, 4, 5, 6}).ok());
    }
    ServiceHarness h(OpenJournal((*redis)->port()));
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h.service().recovery().replay_errors, 0);
    EXPECT_EQ(h.Commit(child, {1, 2, 3, 4, 0, 6}).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    ASSERT_TRUE(h.Commit(child, {1, 2, 3, 4, 5, 6}).ok());
  }
}

// A restart rebuilds the state, then: (1) every worker is unconfirmed - its
// process may have restarted meanwhile with an empty pool - so Match
// reports no residency for it until it heartbeats; (2) the downtime, when
// nobody could be heard, is credited by the first sweep, so workers are not
// dropped for the service's own absence; (3) a credited pause is journaled
// and replays exactly.
TEST(CacheServiceRedisTest, RestartUnconfirmsWorkersAndCreditsTheDowntime) {
  auto redis = RedisServerProcess::Start(TempDir("unconfirmed"));
  ASSERT_TRUE(redis.ok()) << redis.status();
  const std::vector<int32_t> prompt = Range(1, 30);
  std::string dump;
  {
    ServiceHarness h(OpenJournal((*redis)->port()));
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(h.Register("w0", 64, 1, 1).ok());
    ASSERT_TRUE(h.Register("w1", 64, 1, 1).ok());
    pb::AcquireResponse a;
    ASSERT_TRUE(h.Acquire("w0", 1, prompt, &a).ok());
    ASSERT_TRUE(h.Commit(a.lease_id(), prompt).ok());
    h.RunFor(1000);
    h.Advance(2 * kHeartbeatTimeoutMs);  // a pause of the running service
    h.service().SweepOnce();
    ASSERT_EQ(h.Stats().workers_size(), 2);
    dump = h.Dump();
    pb::MatchResponse match;
    ASSERT_TRUE(h.Match(prompt, &match).ok());
    EXPECT_EQ(match.workers(0).matched_tokens(), 30);
    EXPECT_FALSE(match.workers(0).unconfirmed());
  }
  ServiceHarness h(OpenJournal((*redis)->port()));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h.Dump(), dump);  // the credited pause replayed
  pb::MatchResponse match;
  ASSERT_TRUE(h.Match(prompt, &match).ok());
  ASSERT_EQ(match.workers_size(), 2);
  for (const pb::WorkerMatch& w : match.workers()) {
    EXPECT_TRUE(w.unconfirmed()) << w.worker_id();
    EXPECT_EQ(w.matched_tokens(), 0) << w.worker_id();
    EXPECT_EQ(w.page_aligned_tokens(), 0) << w.worker_id();
    EXPECT_EQ(w.epoch(), 1);
  }
  EXPECT_TRUE(h.Stats("w0").workers(0).unconfirmed());
  // Down for twice the heartbeat timeout: not held against the workers.
  h.Advance(3 * kHeartbeatTimeoutMs);
  h.service().SweepOnce();
  ASSERT_EQ(h.Stats().workers_size(), 2);
  // w0's heartbeat with its epoch shows it is the same process.
  ASSERT_TRUE(h.Heartbeat("w0", 1, {}).ok());
  ASSERT_TRUE(h.Match(prompt, &match).ok());
  EXPECT_FALSE(match.workers(0).unconfirmed());
  EXPECT_EQ(match.workers(0).matched_tokens(), 30);
  EXPECT_TRUE(match.workers(1).unconfirmed());
  // w1 never comes back: dropped once the service has run a timeout long.
  h.RunFor(kHeartbeatTimeoutMs + 500);
  const pb::StatsResponse after = h.Stats();
  for (const pb::WorkerCacheStats& w : after.workers()) {
    EXPECT_NE(w.worker_id(), "w1");
  }
}

TEST(CacheServiceRedisTest, LostRedisMeansUnavailableUntilRebuilt) {
  const std::string dir = TempDir("lost");
  auto redis = RedisServerProcess::Start(dir);
  ASSERT_TRUE(redis.ok()) << redis.status();
  const int port = (*redis)->port();
  ServiceHarness h(OpenJournal(port));
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h.Register("w0", 64, 1, 1).ok());
  pb::AcquireResponse a;
  ASSERT_TRUE(h.Acquire("w0", 1, Range(1, 5), &a).ok());
  const std::string acknowledged = h.Dump();
  redis->reset();  // SIGKILL redis-server
  EXPECT_EQ(h.Acquire("w0", 1, Range(1, 6), &a).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(h.Acquire("w0", 1, Range(1, 7), &a).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  {
    grpc::ClientContext ctx;
    pb::StatsResponse stats;
    EXPECT_EQ(h.stub().Stats(&ctx, pb::StatsRequest(), &stats).error_code(),
              grpc::StatusCode::UNAVAILABLE);
  }
  EXPECT_EQ(h.unavailable_events(), 1);  // main drops health readiness
  {
    const std::string text = h.Scrape();
    EXPECT_NE(text.find("\nradixkv_cache_redis_up 0\n"), std::string::npos)
        << text;
    EXPECT_NE(text.find("\nradixkv_cache_journal_write_errors_total "),
              std::string::npos);
    EXPECT_EQ(text.find("\nradixkv_cache_journal_write_errors_total 0\n"),
              std::string::npos)
        << text;
  }
  // Repair fails while Redis is down; the service stays UNAVAILABLE.
  h.service().SweepOnce();
  EXPECT_EQ(h.available_events(), 0);
  EXPECT_EQ(h.Acquire("w0", 1, Range(1, 5), &a).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // Redis comes back (same port, same appendonly file): the sweep rebuilds
  // the state from it; the unacknowledged Acquire is not applied.
  auto again = RedisServerProcess::Start(dir, port);
  ASSERT_TRUE(again.ok()) << again.status();
  h.service().SweepOnce();
  EXPECT_EQ(h.available_events(), 1);
  EXPECT_EQ(h.Dump(), acknowledged);
  EXPECT_NE(h.Scrape().find("\nradixkv_cache_redis_up 1\n"), std::string::npos);
  ASSERT_TRUE(h.Acquire("w0", 1, Range(1, 6), &a).ok());
  ExpectSlotsAddUp(h.Stats());
}

// LLEN of `key` on the redis at `port` (-1 on error).
int64_t RedisListLength(int port, const std::string& key) {
  redisContext* context = redisConnect("127.0.0.1", port);
  if (context == nullptr) return -1;
  int64_t length = -1;
  if (context->err == 0) {
    auto* reply = static_cast<redisReply*>(
        redisCommand(context, "LLEN %b", key.data(), key.size()));
    if (reply != nullptr && reply->type == REDIS_REPLY_INTEGER) {
      length = reply->integer;
    }
    if (reply != nullptr) freeReplyObject(reply);
  }
  redisFree(context);
  return length;
}

// RPUSHes `record` onto `key` on the redis at `port`; false on error.
bool RedisRightPush(int port, const std::string& key,
                    const std::string& record) {
  redisContext* context = redisConnect("127.0.0.1", port);
  if (context == nullptr) return false;
  bool ok = false;
  if (context->err == 0) {
    auto* reply = static_cast<redisReply*>(
        redisCommand(context, "RPUSH %b %b", key.data(), key.size(),
                     record.data(), record.size()));
    ok = reply != nullptr && reply->type == REDIS_REPLY_INTEGER;
    if (reply != nullptr) freeReplyObject(reply);
  }
  redisFree(context);
  return ok;
}

// A journal record without id prefix of a Register at `now_ms`: the entry
// format of journal_entry.h (op byte, little-endian int64 ms, serialized
// request), written out byte by byte.
std::string RegisterRecord(const std::string& worker_id, int32_t vocab_size,
                           int64_t now_ms) {
  pb::RegisterRequest req;
  req.set_worker_id(worker_id);
  req.set_address(worker_id + ":1234");
  req.set_capacity_slots(64);
  req.set_page_size(1);
  req.set_model("m");
  req.set_epoch(1);
  req.set_vocab_size(vocab_size);
  std::string record(1, static_cast<char>(JournalOp::kRegister));
  for (int i = 0; i < 8; ++i) {
    record.push_back(
        static_cast<char>(static_cast<uint64_t>(now_ms) >> (8 * i)));
  }
  return record + req.SerializeAsString();
}

// The vocab check of a live Register is not part of journal replay: a
// journal holding two live workers of one model with different vocabularies
// (written without the check) recovers as written (both workers, no replay
// error), and deregistering the wrong one makes Match work again.
TEST(CacheServiceRedisTest, JournalWithDisagreeingVocabsReplaysUnchanged) {
  auto redis = RedisServerProcess::Start(TempDir("vocab"));
  ASSERT_TRUE(redis.ok()) << redis.status();
  const int port = (*redis)->port();
  ASSERT_TRUE(RedisRightPush(port, "test:cache:journal",
                             RegisterRecord("w0", kVocab, kStartMs)));
  ASSERT_TRUE(RedisRightPush(port, "test:cache:journal",
                             RegisterRecord("fake", 2, kStartMs)));
  ServiceHarness h(OpenJournal(port));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h.service().recovery().replayed_entries, 2);
  EXPECT_EQ(h.service().recovery().replay_errors, 0);
  pb::StatsResponse stats = h.Stats();
  ASSERT_EQ(stats.workers_size(), 2);
  EXPECT_EQ(stats.workers(0).worker_id(), "fake");
  EXPECT_EQ(stats.workers(1).worker_id(), "w0");
  pb::MatchResponse match;
  EXPECT_EQ(h.Match(Range(300, 309), &match).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext ctx;
  pb::DeregisterRequest req;
  req.set_worker_id("fake");
  req.set_epoch(1);
  pb::DeregisterResponse resp;
  ASSERT_TRUE(h.stub().Deregister(&ctx, req, &resp).ok());
  grpc::Status s = h.Match(Range(300, 309), &match);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(match.workers_size(), 1);
  EXPECT_EQ(match.workers(0).worker_id(), "w0");
}

// Regression (adversarial test): Redis stalls (SIGSTOP) while an Acquire's
// journal write is in flight; the write times out and the client gets
// UNAVAILABLE, but the pipelined append sits in Redis's socket buffer and
// is stored once Redis resumes. The rebuild must not apply it: no lease, no
// protected slot, the dump equal to the acknowledged one, also after a
// restart of the service.
TEST(CacheServiceRedisTest,
     AcquireAnsweredUnavailableDuringARedisStallIsNotApplied) {
  auto redis = RedisServerProcess::Start(TempDir("stall"));
  ASSERT_TRUE(redis.ok()) << redis.status();
  const int port = (*redis)->port();
  const pid_t redis_pid = (*redis)->pid();
  std::string acknowledged;
  {
    ServiceHarness h(OpenJournal(port));
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(h.Register("w0", 64, 16, 1).ok());
    acknowledged = h.Dump();
    // The recovery snapshot emptied the list; Register is its one record.
    ASSERT_EQ(RedisListLength(port, "test:cache:journal"), 1);

    ASSERT_EQ(kill(redis_pid, SIGSTOP), 0);
    pb::AcquireResponse a;
    grpc::Status s = h.Acquire("w0", 1, Range(1, 16), &a);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_NE(s.error_message().find("journal write failed"), std::string::npos)
        << s.error_message();
    ASSERT_EQ(kill(redis_pid, SIGCONT), 0);
    // Redis executes the buffered append: the unacknowledged Acquire is
    // stored (this is what made the old rebuild apply it).
    int64_t length = 0;
    for (int i = 0; i < 200 && length != 2; ++i) {
      length = RedisListLength(port, "test:cache:journal");
      if (length != 2) absl::SleepFor(absl::Milliseconds(25));
    }
    ASSERT_EQ(length, 2) << "the timed-out append never reached redis";

    h.service().SweepOnce();  // reconnect, drop the entry, rebuild
    EXPECT_EQ(h.available_events(), 1);
    EXPECT_EQ(h.Dump(), acknowledged);
    ASSERT_TRUE(h.service().CheckInvariantsForTest().ok());
    pb::StatsResponse stats = h.Stats();
    EXPECT_EQ(stats.active_leases(), 0);
    ASSERT_EQ(stats.workers_size(), 1);
    EXPECT_EQ(stats.workers(0).protected_slots(), 0);
    EXPECT_EQ(stats.workers(0).free_slots(), 64);
    ExpectSlotsAddUp(stats);
    // The service works on: the same Acquire now succeeds and is durable.
    ASSERT_TRUE(h.Acquire("w0", 1, Range(1, 16), &a).ok());
    EXPECT_EQ(h.Stats().active_leases(), 1);
    ASSERT_TRUE(h.Release(a.lease_id()).ok());
    acknowledged = h.Dump();
  }
  // A restart rebuilds the same acknowledged state from Redis.
  ServiceHarness restarted(OpenJournal(port));
  ASSERT_TRUE(restarted.ok());
  EXPECT_EQ(restarted.service().recovery().replay_errors, 0);
  EXPECT_EQ(restarted.Dump(), acknowledged);
  pb::StatsResponse stats = restarted.Stats();
  EXPECT_EQ(stats.active_leases(), 0);
  ExpectSlotsAddUp(stats);
}

TEST(CacheServiceRedisTest, ANewerInstanceFencesTheOlderOne) {
  auto redis = RedisServerProcess::Start(TempDir("fence"));
  ASSERT_TRUE(redis.ok()) << redis.status();
  ServiceHarness older(OpenJournal((*redis)->port()));
  ASSERT_TRUE(older.ok());
  ASSERT_TRUE(older.Register("w0", 64, 1, 1).ok());
  // A replacement process starts while the old one still runs.
  ServiceHarness newer(OpenJournal((*redis)->port()));
  ASSERT_TRUE(newer.ok());
  EXPECT_EQ(newer.Dump(), older.Dump());
  pb::AcquireResponse a;
  EXPECT_EQ(older.Acquire("w0", 1, Range(1, 5), &a).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  older.service().SweepOnce();  // cannot take the journal back
  EXPECT_EQ(older.Acquire("w0", 1, Range(1, 5), &a).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(older.unavailable_events(), 1);
  EXPECT_EQ(older.available_events(), 0);
  ASSERT_TRUE(newer.Acquire("w0", 1, Range(1, 5), &a).ok());
  EXPECT_EQ(newer.Stats().active_leases(), 1);
}

// ---- LeaseStream: the same operations over one bidirectional stream ----

// Runs one lease operation and returns its outcome as a LeaseStreamResponse
// (status_code/status_message + the result), whichever transport is used.
class LeaseOps {
 public:
  virtual ~LeaseOps() = default;
  virtual pb::LeaseStreamResponse Do(const pb::LeaseStreamRequest& req) = 0;
};

// Through the unary RPCs.
class UnaryLeaseOps : public LeaseOps {
 public:
  explicit UnaryLeaseOps(pb::CacheService::Stub& stub) : stub_(stub) {}
  pb::LeaseStreamResponse Do(const pb::LeaseStreamRequest& req) override {
    pb::LeaseStreamResponse out;
    out.set_request_id(req.request_id());
    grpc::ClientContext ctx;
    grpc::Status s;
    switch (req.op_case()) {
      case pb::LeaseStreamRequest::kAcquire:
        s = stub_.Acquire(&ctx, req.acquire(), out.mutable_acquire());
        break;
      case pb::LeaseStreamRequest::kGrow:
        s = stub_.Grow(&ctx, req.grow(), out.mutable_grow());
        break;
      case pb::LeaseStreamRequest::kFork:
        s = stub_.Fork(&ctx, req.fork(), out.mutable_fork());
        break;
      case pb::LeaseStreamRequest::kCommit:
        s = stub_.Commit(&ctx, req.commit(), out.mutable_commit());
        break;
      case pb::LeaseStreamRequest::kRelease:
        s = stub_.Release(&ctx, req.release(), out.mutable_release());
        break;
      case pb::LeaseStreamRequest::OP_NOT_SET:
        ADD_FAILURE() << "no op";
    }
    if (!s.ok()) {
      out.clear_result();
      out.set_status_code(s.error_code());
      out.set_status_message(s.error_message());
    }
    return out;
  }

 private:
  pb::CacheService::Stub& stub_;
};

// Through one LeaseStream, one operation at a time.
class StreamLeaseOps : public LeaseOps {
 public:
  explicit StreamLeaseOps(pb::CacheService::Stub& stub)
      : stream_(stub.LeaseStream(&ctx_)) {}
  ~StreamLeaseOps() override {
    stream_->WritesDone();
    pb::LeaseStreamResponse extra;
    EXPECT_FALSE(stream_->Read(&extra)) << "unexpected response";
    grpc::Status s = stream_->Finish();
    EXPECT_TRUE(s.ok()) << s.error_message();
  }
  pb::LeaseStreamResponse Do(const pb::LeaseStreamRequest& req) override {
    pb::LeaseStreamResponse out;
    EXPECT_TRUE(stream_->Write(req));
    EXPECT_TRUE(stream_->Read(&out));
    EXPECT_EQ(out.request_id(), req.request_id());
    return out;
  }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<
      grpc::ClientReaderWriter<pb::LeaseStreamRequest, pb::LeaseStreamResponse>>
      stream_;
};

pb::LeaseStreamRequest AcquireOp(const std::string& worker, int64_t epoch,
                                 const std::vector<int32_t>& tokens,
                                 int32_t reserve = 0,
                                 const std::string& model = "m") {
  pb::LeaseStreamRequest req;
  pb::AcquireRequest* a = req.mutable_acquire();
  a->set_worker_id(worker);
  a->set_epoch(epoch);
  a->set_model(model);
  SetTokens(a, tokens);
  a->set_reserve_tokens(reserve);
  return req;
}
pb::LeaseStreamRequest GrowOp(uint64_t lease, int32_t n) {
  pb::LeaseStreamRequest req;
  req.mutable_grow()->set_lease_id(lease);
  req.mutable_grow()->set_num_tokens(n);
  return req;
}
pb::LeaseStreamRequest ForkOp(uint64_t lease, int32_t children, int64_t n) {
  pb::LeaseStreamRequest req;
  req.mutable_fork()->set_lease_id(lease);
  req.mutable_fork()->set_num_children(children);
  req.mutable_fork()->set_num_tokens(n);
  return req;
}
pb::LeaseStreamRequest CommitOp(uint64_t lease,
                                const std::vector<int32_t>& tokens,
                                bool keep_lease = false) {
  pb::LeaseStreamRequest req;
  req.mutable_commit()->set_lease_id(lease);
  SetTokens(req.mutable_commit(), tokens);
  req.mutable_commit()->set_keep_lease(keep_lease);
  return req;
}
pb::LeaseStreamRequest ReleaseOp(uint64_t lease) {
  pb::LeaseStreamRequest req;
  req.mutable_release()->set_lease_id(lease);
  return req;
}

// One step of the script: the outcome and the Dump after it.
struct Step {
  std::string outcome;  // serialized LeaseStreamResponse
  std::string dump;
};

// A script of every lease operation and every documented error path; each
// error must leave the Dump unchanged. Later operations use the lease ids
// returned by earlier ones.
std::vector<Step> RunLeaseScript(ServiceHarness& h, LeaseOps& ops) {
  std::vector<Step> steps;
  uint64_t next_id = 100;
  auto run = [&](pb::LeaseStreamRequest req,
                 grpc::StatusCode expected) -> pb::LeaseStreamResponse {
    req.set_request_id(next_id++);
    const std::string before = h.Dump();
    pb::LeaseStreamResponse out = ops.Do(req);
    const std::string after = h.Dump();
    EXPECT_EQ(out.status_code(), expected)
        << req.ShortDebugString() << " -> " << out.status_message();
    if (expected != grpc::StatusCode::OK) {
      EXPECT_FALSE(out.status_message().empty());
      EXPECT_EQ(out.result_case(), pb::LeaseStreamResponse::RESULT_NOT_SET);
      EXPECT_EQ(after, before)
          << "state changed by a failed " << req.ShortDebugString();
    }
    steps.push_back({out.SerializeAsString(), after});
    return out;
  };
  using C = grpc::StatusCode;
  // Acquire: values and every error path.
  const uint64_t a =
      run(AcquireOp("w0", 1, Range(1, 10), 4), C::OK).acquire().lease_id();
  run(AcquireOp("w0", 1, {}), C::INVALID_ARGUMENT);
  run(AcquireOp("w0", 1, Range(0, kMaxPrompt)), C::INVALID_ARGUMENT);
  run(AcquireOp("w0", 1, {1, kVocab}), C::INVALID_ARGUMENT);
  run(AcquireOp("nobody", 1, Range(1, 5)), C::NOT_FOUND);
  run(AcquireOp("w0", 0, Range(1, 5)), C::FAILED_PRECONDITION);
  run(AcquireOp("w0", 1, Range(1, 5), 0, "other-model"),
      C::FAILED_PRECONDITION);
  run(AcquireOp("w0", 1, Range(1, 60), 60), C::RESOURCE_EXHAUSTED);
  {
    pb::LeaseStreamRequest long_id = AcquireOp("w0", 1, Range(1, 5));
    long_id.mutable_acquire()->set_request_id(std::string(129, 'x'));
    run(long_id, C::INVALID_ARGUMENT);
  }
  // Grow and Fork.
  run(GrowOp(a, 3), C::OK);
  run(GrowOp(a, 0), C::INVALID_ARGUMENT);
  run(GrowOp(a, 65537), C::INVALID_ARGUMENT);
  run(GrowOp(424242, 1), C::NOT_FOUND);
  run(GrowOp(a, 1000), C::RESOURCE_EXHAUSTED);
  const pb::LeaseStreamResponse fork = run(ForkOp(a, 2, 10), C::OK);
  run(ForkOp(a, 0, 10), C::INVALID_ARGUMENT);
  run(ForkOp(a, 65, 10), C::INVALID_ARGUMENT);
  run(ForkOp(424242, 1, 1), C::NOT_FOUND);
  // Commit: values, keep_lease, and its error paths.
  run(CommitOp(a, Range(1, 9)), C::INVALID_ARGUMENT);   // shorter than prompt
  run(CommitOp(a, Range(1, 40)), C::INVALID_ARGUMENT);  // beyond its slots
  run(CommitOp(a, {}), C::INVALID_ARGUMENT);
  run(CommitOp(424242, Range(1, 10)), C::NOT_FOUND);
  run(CommitOp(a, Range(1, 12), /*keep_lease=*/true), C::OK);
  run(CommitOp(a, Range(1, 13)), C::OK);
  run(CommitOp(a, Range(1, 13)), C::NOT_FOUND);  // double Commit
  run(ReleaseOp(a), C::NOT_FOUND);               // Release after Commit
  // Release: values and double Release; a forked child is committed.
  if (fork.fork().children_size() == 2) {
    run(ReleaseOp(fork.fork().children(0).lease_id()), C::OK);
    run(ReleaseOp(fork.fork().children(0).lease_id()), C::NOT_FOUND);
    run(CommitOp(fork.fork().children(1).lease_id(), Range(1, 10)), C::OK);
  } else {
    ADD_FAILURE() << "fork failed";
  }
  const uint64_t b =
      run(AcquireOp("w0", 1, Range(1, 20)), C::OK).acquire().lease_id();
  run(ReleaseOp(b), C::OK);
  run(ReleaseOp(b), C::NOT_FOUND);
  run(CommitOp(b, Range(1, 20)), C::NOT_FOUND);
  return steps;
}

TEST(LeaseStreamTest, EveryOpAndErrorMatchesTheUnaryRpcs) {
  ServiceHarness unary;
  ServiceHarness stream;
  ASSERT_TRUE(unary.ok() && stream.ok());
  ASSERT_TRUE(unary.Register("w0", 64, 1, 1).ok());
  ASSERT_TRUE(stream.Register("w0", 64, 1, 1).ok());
  std::vector<Step> via_unary, via_stream;
  {
    UnaryLeaseOps ops(unary.stub());
    via_unary = RunLeaseScript(unary, ops);
  }
  {
    StreamLeaseOps ops(stream.stub());
    via_stream = RunLeaseScript(stream, ops);
  }
  ASSERT_EQ(via_stream.size(), via_unary.size());
  for (size_t i = 0; i < via_unary.size(); ++i) {
    pb::LeaseStreamResponse u, s;
    ASSERT_TRUE(u.ParseFromString(via_unary[i].outcome));
    ASSERT_TRUE(s.ParseFromString(via_stream[i].outcome));
    EXPECT_EQ(s.ShortDebugString(), u.ShortDebugString()) << "step " << i;
    EXPECT_EQ(via_stream[i].dump, via_unary[i].dump) << "step " << i;
  }
  EXPECT_EQ(stream.Dump(), unary.Dump());
  EXPECT_EQ(stream.Stats().active_leases(), 0);
  ExpectSlotsAddUp(stream.Stats());
  ASSERT_TRUE(stream.service().CheckInvariantsForTest().ok());
  // Stream operations count in the per-RPC metrics like unary calls.
  const std::string text = stream.Scrape();
  EXPECT_NE(text.find("radixkv_cache_rpc_total{code=\"NOT_FOUND\",rpc="
                      "\"Release\"} 3"),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find("radixkv_cache_rpc_latency_seconds_count{rpc=\"Grow\"} 5"),
      std::string::npos)
      << text;
}

TEST(LeaseStreamTest, AMessageWithoutAnOpFailsOnlyItself) {
  ServiceHarness h;
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h.Register("w0", 64, 1, 1).ok());
  const std::string before = h.Dump();
  grpc::ClientContext ctx;
  auto stream = h.stub().LeaseStream(&ctx);
  pb::LeaseStreamRequest empty;
  empty.set_request_id(7);
  ASSERT_TRUE(stream->Write(empty));
  pb::LeaseStreamRequest acquire = AcquireOp("w0", 1, Range(1, 5));
  acquire.set_request_id(8);
  ASSERT_TRUE(stream->Write(acquire));
  stream->WritesDone();
  pb::LeaseStreamResponse r;
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.request_id(), 7u);
  EXPECT_EQ(r.status_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(r.status_message().find("no operation"), std::string::npos);
  EXPECT_EQ(r.result_case(), pb::LeaseStreamResponse::RESULT_NOT_SET);
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.request_id(), 8u);
  EXPECT_EQ(r.status_code(), 0);
  EXPECT_EQ(r.acquire().kv_indices_size(), 5);
  EXPECT_FALSE(stream->Read(&r));
  grpc::Status s = stream->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(h.Stats().active_leases(), 1);
  EXPECT_NE(h.Dump(), before);
}

// Writes `requests` on one stream without waiting, reads every response on
// another thread; returns them in arrival order.
std::vector<pb::LeaseStreamResponse> Pipeline(
    pb::CacheService::Stub& stub,
    const std::vector<pb::LeaseStreamRequest>& requests) {
  grpc::ClientContext ctx;
  auto stream = stub.LeaseStream(&ctx);
  std::vector<pb::LeaseStreamResponse> responses;
  std::thread reader([&] {
    pb::LeaseStreamResponse r;
    while (stream->Read(&r)) responses.push_back(r);
  });
  for (const pb::LeaseStreamRequest& req : requests) {
    EXPECT_TRUE(stream->Write(req));
  }
  stream->WritesDone();
  reader.join();
  grpc::Status s = stream->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
  return responses;
}

void ExpectManyOutstandingOps(ServiceHarness& h) {
  // More operations than the per-stream bound on unsent responses (1024):
  // the server pauses reading and resumes.
  constexpr int kOps = 3000;
  const int64_t held = h.Stats().active_leases();
  std::vector<pb::LeaseStreamRequest> acquires;
  for (int i = 0; i < kOps; ++i) {
    acquires.push_back(AcquireOp("w0", 1, {i % 7, 100 + i % 900, i / 900}));
    acquires.back().set_request_id(10 * i + 1);
  }
  std::vector<pb::LeaseStreamResponse> acquired = Pipeline(h.stub(), acquires);
  ASSERT_EQ(acquired.size(), static_cast<size_t>(kOps));
  std::set<uint64_t> leases;
  std::vector<pb::LeaseStreamRequest> commits;
  for (int i = 0; i < kOps; ++i) {
    ASSERT_EQ(acquired[i].request_id(), 10u * i + 1) << "out of order";
    ASSERT_EQ(acquired[i].status_code(), 0) << acquired[i].status_message();
    ASSERT_EQ(acquired[i].acquire().kv_indices_size(), 3);
    leases.insert(acquired[i].acquire().lease_id());
    commits.push_back(CommitOp(acquired[i].acquire().lease_id(),
                               {i % 7, 100 + i % 900, i / 900}));
    commits.back().set_request_id(i);
  }
  EXPECT_EQ(leases.size(), static_cast<size_t>(kOps));
  EXPECT_EQ(h.Stats().active_leases(), held + kOps);
  // Every other commit is doubled: the duplicate fails alone (NOT_FOUND).
  for (int i = 0; i < kOps; i += 2) commits.push_back(commits[i]);
  std::vector<pb::LeaseStreamResponse> committed = Pipeline(h.stub(), commits);
  ASSERT_EQ(committed.size(), commits.size());
  for (size_t i = 0; i < committed.size(); ++i) {
    EXPECT_EQ(committed[i].request_id(), commits[i].request_id());
    EXPECT_EQ(committed[i].status_code(),
              i < kOps ? grpc::StatusCode::OK : grpc::StatusCode::NOT_FOUND)
        << i;
  }
  EXPECT_EQ(h.Stats().active_leases(), held);
  ExpectSlotsAddUp(h.Stats());
  ASSERT_TRUE(h.service().CheckInvariantsForTest().ok());
}

TEST(LeaseStreamTest, ManyOutstandingOpsOnOneStreamAnswerInOrder) {
  ServiceHarness h;
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h.Register("w0", 1 << 16, 1, 1).ok());
  ExpectManyOutstandingOps(h);
}

// Several streams and unary calls at once (the service mutex, the journal
// order and each stream's response order under concurrency).
TEST(LeaseStreamTest, ConcurrentStreamsAndUnaryCallsKeepTheInvariants) {
  ServiceHarness h;
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h.Register("w0", 1 << 16, 16, 1).ok());
  constexpr int kStreams = 4;
  constexpr int kOps = 400;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kStreams; ++t) {
    threads.emplace_back([&, t] {
      std::vector<pb::LeaseStreamRequest> acquires;
      for (int i = 0; i < kOps; ++i) {
        acquires.push_back(AcquireOp("w0", 1, {t, i % 3, 100 + i}, 1));
        acquires.back().set_request_id(i);
      }
      std::vector<pb::LeaseStreamResponse> acquired =
          Pipeline(h.stub(), acquires);
      std::vector<pb::LeaseStreamRequest> ends;
      for (int i = 0; i < kOps; ++i) {
        if (i >= static_cast<int>(acquired.size()) ||
            acquired[i].request_id() != static_cast<uint64_t>(i) ||
            acquired[i].status_code() != 0) {
          failures.fetch_add(1);
          continue;
        }
        const uint64_t lease = acquired[i].acquire().lease_id();
        ends.push_back(i % 2 ? ReleaseOp(lease)
                             : CommitOp(lease, {t, i % 3, 100 + i, 5}));
        ends.back().set_request_id(i);
      }
      for (const pb::LeaseStreamResponse& r : Pipeline(h.stub(), ends)) {
        if (r.status_code() != 0) failures.fetch_add(1);
      }
    });
  }
  threads.emplace_back([&] {  // unary traffic on the same worker meanwhile
    for (int i = 0; i < 100; ++i) {
      pb::AcquireResponse a;
      if (!h.Acquire("w0", 1, {9, 9, i}, &a).ok() ||
          !h.Commit(a.lease_id(), {9, 9, i}).ok()) {
        failures.fetch_add(1);
      }
    }
  });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(h.Stats().active_leases(), 0);
  ExpectSlotsAddUp(h.Stats());
  ASSERT_TRUE(h.service().CheckInvariantsForTest().ok());
  EXPECT_NE(h.Scrape().find("radixkv_cache_rpc_total{code=\"OK\",rpc="
                            "\"Acquire\"} 1700"),
            std::string::npos);
}

TEST(LeaseStreamTest, ClientCancelLeavesAcknowledgedLeasesUntilTheirTtl) {
  ServiceHarness h;
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h.Register("w0", 4096, 1, 1).ok());
  grpc::ClientContext ctx;
  auto stream = h.stub().LeaseStream(&ctx);
  constexpr int kOps = 200;
  for (int i = 0; i < kOps; ++i) {
    pb::LeaseStreamRequest req = AcquireOp("w0", 1, {i, i + 1});
    req.set_request_id(i);
    ASSERT_TRUE(stream->Write(req));
  }
  pb::LeaseStreamResponse r;
  std::vector<uint64_t> acknowledged;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(stream->Read(&r));
    ASSERT_EQ(r.status_code(), 0);
    acknowledged.push_back(r.acquire().lease_id());
  }
  ctx.TryCancel();
  while (stream->Read(&r)) {
  }
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The server survives; acknowledged leases stay valid (the worker may
  // still use them), and no more than the ones sent exist. (Operations the
  // server read before it saw the cancellation may still be applied.)
  const int64_t active = h.Stats().active_leases();
  EXPECT_GE(active, 10);
  EXPECT_LE(active, kOps);
  pb::HeartbeatResponse hb;
  ASSERT_TRUE(h.Heartbeat("w0", 1, acknowledged, &hb).ok());
  EXPECT_THAT(hb.lost_lease_ids(), IsEmpty());
  ASSERT_TRUE(h.Commit(acknowledged[0], {0, 1}).ok());
  ExpectSlotsAddUp(h.Stats());
  // The rest expire after the lease TTL like unary leases whose owner left.
  const int expired = h.RunFor(kLeaseTtlMs + 1);
  EXPECT_GE(expired, active - 1);
  EXPECT_LE(expired, kOps - 1);
  EXPECT_EQ(h.Stats().active_leases(), 0);
  pb::WorkerCacheStats w = h.Stats("w0").workers(0);
  EXPECT_EQ(w.protected_slots(), 0);
  ExpectSlotsAddUp(h.Stats());
  // A new stream on the same channel works.
  StreamLeaseOps ops(h.stub());
  EXPECT_EQ(ops.Do(AcquireOp("w0", 1, {1, 2, 3})).status_code(), 0);
}

TEST(LeaseStreamTest, ServerShutdownWithOpenStreamsEndsThem) {
  auto h = std::make_unique<ServiceHarness>();
  ASSERT_TRUE(h->ok());
  ASSERT_TRUE(h->Register("w0", 64, 1, 1).ok());
  grpc::ClientContext ctx;
  auto stream = h->stub().LeaseStream(&ctx);
  pb::LeaseStreamRequest req = AcquireOp("w0", 1, {1, 2});
  ASSERT_TRUE(stream->Write(req));
  pb::LeaseStreamResponse r;
  ASSERT_TRUE(stream->Read(&r));
  EXPECT_EQ(r.status_code(), 0);
  h.reset();  // server Shutdown(1 s) with the stream open, then the service
  EXPECT_FALSE(stream->Read(&r));
  EXPECT_FALSE(stream->Finish().ok());
}

// DrainLeaseStreams (SIGTERM): every response sent was applied, nothing
// without a response was, the stream ends UNAVAILABLE, new streams are
// refused, unary calls still work.
TEST(LeaseStreamTest, DrainEndsStreamsAfterTheirAppliedResponses) {
  ServiceHarness h;
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(h.Register("w0", 1 << 16, 1, 1).ok());
  grpc::ClientContext ctx;
  auto stream = h.stub().LeaseStream(&ctx);
  constexpr int kOps = 2000;
  int answered = 0;
  std::thread reader([&] {
    pb::LeaseStreamResponse r;
    while (stream->Read(&r)) {
      EXPECT_EQ(r.request_id(), static_cast<uint64_t>(answered));
      EXPECT_EQ(r.status_code(), 0) << r.status_message();
      ++answered;
    }
  });
  for (int i = 0; i < kOps; ++i) {
    pb::LeaseStreamRequest req = AcquireOp("w0", 1, {i % 10, 20 + i % 900});
    req.set_request_id(i);
    if (!stream->Write(req)) break;
    if (i == kOps / 4) h.service().DrainLeaseStreams();
  }
  reader.join();
  grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(status.error_message().find("shutting down"), std::string::npos);
  EXPECT_LT(answered, kOps);
  EXPECT_EQ(h.Stats().active_leases(), answered);
  ExpectSlotsAddUp(h.Stats());
  {
    grpc::ClientContext late_ctx;
    auto late = h.stub().LeaseStream(&late_ctx);
    late->Write(AcquireOp("w0", 1, {1, 2}));
    pb::LeaseStreamResponse r;
    EXPECT_FALSE(late->Read(&r));
    EXPECT_EQ(late->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  EXPECT_EQ(h.Stats().active_leases(), answered);
  pb::AcquireResponse a;
  EXPECT_TRUE(h.Acquire("w0", 1, {3, 4}, &a).ok());
}

TEST(CacheServiceRedisTest, StreamAcknowledgedOpsSurviveARestart) {
  auto redis = RedisServerProcess::Start(TempDir("stream"));
  ASSERT_TRUE(redis.ok()) << redis.status();
  std::string dump;
  std::vector<uint64_t> held;
  {
    std::unique_ptr<RedisJournal> journal = OpenJournal((*redis)->port());
    ASSERT_NE(journal, nullptr);
    ASSERT_TRUE(journal->Wipe().ok());  // fresh also under --gtest_repeat
    ServiceHarness h(std::move(journal), 50);
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(h.Register("w0", 1 << 16, 16, 1).ok());
    // Pipelined Acquires and Commits (many journal entries in flight).
    std::vector<pb::LeaseStreamRequest> acquires;
    for (int i = 0; i < 300; ++i) {
      acquires.push_back(AcquireOp("w0", 1, {i % 5, i % 11, 200 + i}, 2));
      acquires.back().set_request_id(i);
    }
    std::vector<pb::LeaseStreamResponse> acquired =
        Pipeline(h.stub(), acquires);
    ASSERT_EQ(acquired.size(), acquires.size());
    std::vector<pb::LeaseStreamRequest> commits;
    for (int i = 0; i < 300; ++i) {
      ASSERT_EQ(acquired[i].status_code(), 0) << acquired[i].status_message();
      if (i % 3 == 0) {
        held.push_back(acquired[i].acquire().lease_id());
        continue;
      }
      commits.push_back(CommitOp(acquired[i].acquire().lease_id(),
                                 {i % 5, i % 11, 200 + i, 7}));
    }
    for (const auto& c : Pipeline(h.stub(), commits)) {
      ASSERT_EQ(c.status_code(), 0) << c.status_message();
    }
    dump = h.Dump();
  }
  ServiceHarness h(OpenJournal((*redis)->port()), 50);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h.service().recovery().replay_errors, 0);
  EXPECT_EQ(h.Dump(), dump);
  EXPECT_EQ(h.Stats().active_leases(), static_cast<int64_t>(held.size()));
  pb::HeartbeatResponse hb;
  ASSERT_TRUE(h.Heartbeat("w0", 1, held, &hb).ok());
  EXPECT_THAT(hb.lost_lease_ids(), IsEmpty());
  // And a stream works in Redis mode with many operations outstanding.
  ExpectManyOutstandingOps(h);
}

}  // namespace
}  // namespace radixkv::cache_service
