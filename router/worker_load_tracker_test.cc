#include "router/worker_load_tracker.h"

#include <map>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"
#include "router/placement_policy.h"

namespace radixkv::router {
namespace {

TEST(WorkerLoadTrackerTest, ChargesAtDispatchAndSettlesAsTokensStream) {
  WorkerLoadTracker load;
  EXPECT_EQ(load.Get("w").outstanding_tokens, 0);
  load.Dispatch("w", /*prefill_tokens=*/100, /*decode_tokens=*/10);
  load.Dispatch("w", 50, 5);
  WorkerLoadTracker::WorkerCounts c = load.Get("w");
  EXPECT_EQ(c.outstanding_tokens, 165);
  EXPECT_EQ(c.in_flight_requests, 2);
  EXPECT_EQ(c.dispatched_requests, 2);
  // First request: its first chunk settles the prefill, then 3 tokens.
  int64_t left = 110;
  load.Progress("w", 100, &left);
  load.Progress("w", 3, &left);
  EXPECT_EQ(left, 7);
  EXPECT_EQ(load.Get("w").outstanding_tokens, 62);
  // More tokens than charged (e.g. a retry) never goes negative.
  load.Progress("w", 1000, &left);
  EXPECT_EQ(left, 0);
  load.Finish("w", left);
  c = load.Get("w");
  EXPECT_EQ(c.outstanding_tokens, 55);
  EXPECT_EQ(c.in_flight_requests, 1);
  // The second request fails early: its whole charge is dropped.
  load.Finish("w", 55);
  c = load.Get("w");
  EXPECT_EQ(c.outstanding_tokens, 0);
  EXPECT_EQ(c.in_flight_requests, 0);
  EXPECT_EQ(c.dispatched_requests, 2);
  EXPECT_EQ(load.Get("other").dispatched_requests, 0);
}

// A clock the test moves by hand.
struct FakeClock {
  absl::Time now = absl::FromUnixSeconds(1'000'000);
  std::function<absl::Time()> fn() {
    return [this] { return now; };
  }
};

TEST(WorkerLoadTrackerTest, EstimateFollowsTheHeartbeatWithOwnChangesSince) {
  FakeClock clock;
  WorkerLoadTracker load(clock.fn());
  // Never dispatched to: the heartbeat is all there is.
  EXPECT_EQ(load.EstimateLoad("w", 500, absl::Seconds(1)), 500);
  load.Dispatch("w", 1000, 0);
  clock.now += absl::Seconds(1);
  // Heartbeat 0.5 s ago saw our 1000 plus 300 from elsewhere.
  EXPECT_EQ(load.EstimateLoad("w", 1300, absl::Milliseconds(500)), 1300);
  // A heartbeat older than our dispatch does not include it yet.
  EXPECT_EQ(load.EstimateLoad("w", 300, absl::Seconds(2)), 1300);
  int64_t left = 1000;
  load.Finish("w", left);
  clock.now += absl::Seconds(1);
  // The request finished after the heartbeat: it no longer counts.
  EXPECT_EQ(load.EstimateLoad("w", 1300, absl::Milliseconds(1500)), 300);
  // Never below our own outstanding count, never negative.
  load.Dispatch("w", 50, 0);
  EXPECT_EQ(load.EstimateLoad("w", 0, absl::Seconds(3)), 50);
  EXPECT_EQ(load.EstimateLoad("w", -7, absl::Milliseconds(1)), 50);
  // Unknown age, or older than the history: the larger of the two.
  EXPECT_EQ(load.EstimateLoad("w", 900, -absl::InfiniteDuration()), 900);
  EXPECT_EQ(load.EstimateLoad("w", 900, absl::Minutes(5)), 900);
}

TEST(WorkerLoadTrackerTest, HistoryIsBoundedAndForgetsBeyondTheWindow) {
  FakeClock clock;
  WorkerLoadTracker load(clock.fn());
  load.Dispatch("w", 100, 0);
  for (int i = 0; i < 20'000; ++i) {
    clock.now += absl::Milliseconds(10);
    load.Dispatch("w", 1, 0);
  }
  // 200 s of changes, far beyond the window: a heartbeat from 40 s ago
  // cannot be brought up to date, so the larger value wins.
  EXPECT_EQ(load.EstimateLoad("w", 0, absl::Seconds(40)), 20'100);
  // Within the window it can: 10 s ago our count was 19,100.
  EXPECT_EQ(load.EstimateLoad("w", 19'100, absl::Seconds(10)), 20'100);
  EXPECT_EQ(load.EstimateLoad("w", 19'150, absl::Seconds(10)), 20'150);
}

// A shared-prefix burst placed with cache_aware, 4 workers: the stale
// heartbeats (taken during the previous burst, which has finished since)
// must place it exactly as the fresh "idle" heartbeats do. Taking
// max(stale heartbeat, own count) instead sent most of such bursts to
// fewer workers, in the worst case all 48 to one.
std::map<std::string, int> PlaceBurst(
    WorkerLoadTracker& load, const std::map<std::string, int64_t>& heartbeat,
    absl::Duration heartbeat_age) {
  auto policy = CreatePlacementPolicy("cache_aware", {});
  EXPECT_TRUE(policy.ok());
  std::vector<int32_t> shared(1024);
  std::iota(shared.begin(), shared.end(), 7);
  std::map<std::string, int> placed;
  for (int r = 0; r < 48; ++r) {
    std::vector<int32_t> tokens = shared;
    for (int i = 0; i < 64; ++i) tokens.push_back(5000 + 64 * r + i);
    PlacementInput in;
    in.tokens = tokens;
    in.max_new_tokens = 16;
    for (const auto& [id, hb] : heartbeat) {
      WorkerCandidate c;
      c.worker_id = id;
      c.epoch = 1;
      c.load_tokens = load.EstimateLoad(id, hb, heartbeat_age);
      c.heartbeat_age = heartbeat_age;
      in.candidates.push_back(c);
    }
    auto d = (*policy)->Choose(in);
    EXPECT_TRUE(d.ok());
    const WorkerCandidate& target = in.candidates[d->index];
    load.Dispatch(target.worker_id, tokens.size() - d->predicted_hit_tokens,
                  16);
    (*policy)->OnDispatched(target.worker_id, 1, tokens);
    ++placed[target.worker_id];
  }
  return placed;
}

TEST(WorkerLoadTrackerTest, StaleHeartbeatsPlaceABurstAsFreshOnes) {
  const std::vector<std::string> ids = {"w0", "w1", "w2", "w3"};
  // The previous burst, dispatched 3.3 s ago and finished 3 s ago; the
  // heartbeats were sent while it ran.
  auto previous_burst = [&](WorkerLoadTracker& load, FakeClock& clock) {
    std::vector<int64_t> charge(4, 0);
    for (int i = 0; i < 4; ++i) {
      load.Dispatch(ids[i], 12'000 - 4'000 * i, 44);
      charge[i] = 12'044 - 4'000 * i;
    }
    clock.now += absl::Milliseconds(300);
    for (int i = 0; i < 4; ++i) load.Finish(ids[i], charge[i]);
    clock.now += absl::Seconds(3);
  };
  FakeClock stale_clock;
  WorkerLoadTracker stale_load(stale_clock.fn());
  previous_burst(stale_load, stale_clock);
  const std::map<std::string, int> stale = PlaceBurst(
      stale_load, {{"w0", 12'044}, {"w1", 8'044}, {"w2", 4'044}, {"w3", 44}},
      absl::Milliseconds(3300) - absl::Milliseconds(100));

  FakeClock fresh_clock;
  WorkerLoadTracker fresh_load(fresh_clock.fn());
  previous_burst(fresh_load, fresh_clock);
  const std::map<std::string, int> fresh =
      PlaceBurst(fresh_load, {{"w0", 0}, {"w1", 0}, {"w2", 0}, {"w3", 0}},
                 absl::Milliseconds(100));

  EXPECT_EQ(stale, fresh);
  ASSERT_EQ(stale.size(), 4u) << "a worker got nothing";
  for (const auto& [id, n] : stale) EXPECT_EQ(n, 12) << id;
}

}  // namespace
}  // namespace radixkv::router
