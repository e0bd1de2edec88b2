#include "router/worker_load_tracker.h"

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace radixkv::router
