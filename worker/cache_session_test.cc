#include "worker/cache_session.h"

#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "worker/testing/fake_kv_cache_client.h"

namespace radixkv::worker {
namespace {

// The fake cache service, recording every heartbeat.
class RecordingCache : public testing::FakeKvCacheClient {
 public:
  RecordingCache() : FakeKvCacheClient(256, 16) {}
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request, absl::Duration timeout) override {
    {
      absl::MutexLock lock(&mu_);
      heartbeats_.push_back(request);
      timeouts_.push_back(timeout);
    }
    return FakeKvCacheClient::Heartbeat(request, timeout);
  }
  std::vector<absl::Duration> timeouts() {
    absl::MutexLock lock(&mu_);
    return timeouts_;
  }
  std::vector<v1::HeartbeatRequest> heartbeats() {
    absl::MutexLock lock(&mu_);
    return heartbeats_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::HeartbeatRequest> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::vector<absl::Duration> timeouts_ ABSL_GUARDED_BY(mu_);
};

CacheSessionOptions Options() {
  CacheSessionOptions options;
  options.worker_id = "w";
  options.advertise_address = "127.0.0.1:1";
  options.model_name = "m";
  options.epoch = 5;
  options.capacity_slots = 256;
  options.page_size = 16;
  options.vocab_size = 64;
  return options;
}

TEST(CacheSessionTest, RegistersUnderItsEpochAndDerivesTheInterval) {
  RecordingCache cache;
  CacheSession session(Options(), &cache);
  EXPECT_FALSE(session.registered());
  EXPECT_EQ(session.epoch(), 5);
  EXPECT_EQ(session.registered_epoch(), 0);
  ASSERT_TRUE(session.RegisterWithService(false).ok());
  EXPECT_TRUE(session.registered());
  EXPECT_TRUE(cache.registered());
  EXPECT_EQ(cache.epoch(), 5);
  EXPECT_EQ(session.registered_epoch(), 5);
  // The fake service names no cadence: a quarter of its heartbeat timeout
  // (9 s), under a third of its lease TTL (30 s).
  EXPECT_EQ(session.heartbeat_interval(), absl::Milliseconds(2250));

  CacheSessionOptions fixed = Options();
  fixed.heartbeat_interval = absl::Milliseconds(250);
  CacheSession fixed_session(fixed, &cache);
  ASSERT_TRUE(fixed_session.RegisterWithService(false).ok());
  EXPECT_EQ(fixed_session.heartbeat_interval(), absl::Milliseconds(250));
}

TEST(CacheSessionTest, FailedRegistrationLeavesItUnregistered) {
  RecordingCache cache;
  cache.SetUnavailable(true);
  CacheSession session(Options(), &cache);
  EXPECT_EQ(session.RegisterWithService(false).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(session.registered());
  EXPECT_EQ(session.registered_epoch(), 0);
}

TEST(CacheSessionTest, HeartbeatReportsLoadAndLeasesAndBringsLostOnes) {
  RecordingCache cache;
  CacheSession session(Options(), &cache);
  ASSERT_TRUE(session.RegisterWithService(false).ok());
  v1::WorkerLoad load;
  load.set_running_requests(2);
  load.set_waiting_requests(7);
  session.SetLoad(load, {3, 4});
  cache.LoseLeaseOnNextHeartbeat(4);
  session.SendHeartbeat();
  std::vector<v1::HeartbeatRequest> sent = cache.heartbeats();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(cache.timeouts(),
            std::vector<absl::Duration>{absl::Milliseconds(2250)});
  EXPECT_EQ(sent[0].worker_id(), "w");
  EXPECT_EQ(sent[0].epoch(), 5);
  EXPECT_EQ(sent[0].load().running_requests(), 2);
  EXPECT_EQ(sent[0].load().waiting_requests(), 7);
  EXPECT_EQ(std::vector<uint64_t>(sent[0].lease_ids().begin(),
                                  sent[0].lease_ids().end()),
            (std::vector<uint64_t>{3, 4}));
  CacheSession::LostLeases lost = session.TakeLostLeases();
  EXPECT_EQ(lost.lease_ids, std::vector<uint64_t>{4});
  EXPECT_EQ(lost.invalid_before_epoch, 0);
  EXPECT_TRUE(session.TakeLostLeases().lease_ids.empty());
}

TEST(CacheSessionTest, ForgottenWorkerRegistersAFreshEpoch) {
  RecordingCache cache;
  CacheSession session(Options(), &cache);
  ASSERT_TRUE(session.RegisterWithService(false).ok());
  cache.ForgetWorker();
  session.SendHeartbeat();  // NOT_FOUND: re-registers.
  EXPECT_TRUE(session.registered());
  const int64_t fresh = session.epoch();
  EXPECT_GT(fresh, 5);
  EXPECT_EQ(cache.epoch(), fresh);
  EXPECT_EQ(session.registered_epoch(), fresh);
  // Every lease of an older epoch is gone.
  EXPECT_EQ(session.TakeLostLeases().invalid_before_epoch, fresh);
  // And heartbeats carry the new epoch.
  session.SendHeartbeat();
  EXPECT_EQ(cache.heartbeats().back().epoch(), fresh);
}

// An Acquire answered "unknown worker": the heartbeat thread registers
// again under a fresh epoch, and every lease of the old one is gone.
TEST(CacheSessionTest, HeartbeatThreadRegistersAFreshEpochWhenForgotten) {
  RecordingCache cache;
  CacheSession session(Options(), &cache);
  ASSERT_TRUE(session.RegisterWithService(false).ok());
  session.MarkForgotten();
  EXPECT_FALSE(session.registered());
  const int64_t registrations = cache.calls("Register");
  session.StartHeartbeats();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!session.registered() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  session.StopHeartbeats();
  EXPECT_TRUE(session.registered());
  EXPECT_EQ(cache.calls("Register"), registrations + 1);
  const int64_t fresh = session.epoch();
  EXPECT_GT(fresh, 5);
  EXPECT_EQ(cache.epoch(), fresh);
  EXPECT_EQ(session.TakeLostLeases().invalid_before_epoch, fresh);
}

TEST(CacheSessionTest, DeregistersOnce) {
  RecordingCache cache;
  CacheSession session(Options(), &cache);
  ASSERT_TRUE(session.RegisterWithService(false).ok());
  session.Deregister();
  EXPECT_FALSE(session.registered());
  EXPECT_FALSE(cache.registered());
  session.Deregister();  // Not registered: no call.
  EXPECT_EQ(cache.calls("Deregister"), 1);
}

}  // namespace
}  // namespace radixkv::worker
