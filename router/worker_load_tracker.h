// WorkerLoadTracker: the router's own count of outstanding tokens per worker,
// charged at dispatch (not when decoding starts), so that a burst of requests
// routed within one heartbeat interval is visible to the next placement, and
// the estimate of a worker's load that combines it with the worker's last
// heartbeat.
#ifndef RADIXKV_ROUTER_WORKER_LOAD_TRACKER_H_
#define RADIXKV_ROUTER_WORKER_LOAD_TRACKER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace radixkv::router {

// Thread-safe.
class WorkerLoadTracker {
 public:
  struct WorkerCounts {
    // Tokens dispatched and not yet produced or finished, tokens.
    int64_t outstanding_tokens = 0;
    int64_t in_flight_requests = 0;
    // Requests dispatched since the router started (all epochs).
    int64_t dispatched_requests = 0;
  };

  // How long the history of each worker's outstanding count is kept: at
  // least the cache service's heartbeat timeout (an older heartbeat means a
  // dropped worker), with margin.
  static constexpr absl::Duration kHistoryWindow = absl::Seconds(30);
  // Entries of history kept per worker; changes closer together than
  // kHistoryResolution share one entry, so the bound is never reached in a
  // window unless the clock jumps.
  static constexpr size_t kMaxHistoryEntries = 8192;
  static constexpr absl::Duration kHistoryResolution = absl::Milliseconds(5);

  // `clock` gives the current time (tests inject one).
  explicit WorkerLoadTracker(std::function<absl::Time()> clock = &absl::Now);

  // Charges a new request: `prefill_tokens` (uncached prompt tokens the
  // worker is expected to compute) + `decode_tokens` (max_new_tokens).
  void Dispatch(const std::string& worker_id, int64_t prefill_tokens,
                int64_t decode_tokens);
  // Dispatch when the worker has fewer than `max_in_flight_requests`
  // requests in flight (0 = no bound); false (nothing charged) otherwise.
  // The check and the charge are one step, so concurrent requests never
  // exceed the bound.
  bool TryDispatch(const std::string& worker_id, int64_t prefill_tokens,
                   int64_t decode_tokens, int64_t max_in_flight_requests);
  // Reduces the charge as output streams back: the first chunk settles the
  // prefill, each output token one decode token. `charged_left` is the
  // caller's per-request remainder (updated in place; never goes below 0).
  void Progress(const std::string& worker_id, int64_t tokens,
                int64_t* charged_left);
  // Ends a request: drops whatever remains of its charge.
  void Finish(const std::string& worker_id, int64_t charged_left);

  WorkerCounts Get(const std::string& worker_id) const;

  // The worker's load now, tokens, from its last heartbeat
  // (`heartbeat_tokens` outstanding, reported `heartbeat_age` ago) and this
  // router's own count: the heartbeat value plus what this router's
  // outstanding count has changed by since the heartbeat, and never less
  // than this router's own outstanding count:
  //   max(own(now), heartbeat_tokens + own(now) - own(now - age)).
  // So requests that finished after the heartbeat no longer count, and
  // requests dispatched after it do. When this router's history does not
  // reach back to the heartbeat (older than kHistoryWindow, or the age is
  // unknown: negative), max(heartbeat_tokens, own(now)).
  int64_t EstimateLoad(const std::string& worker_id, int64_t heartbeat_tokens,
                       absl::Duration heartbeat_age) const;

 private:
  struct Point {
    absl::Time time;
    int64_t outstanding_tokens;
  };
  struct Worker {
    WorkerCounts counts;
    // Outstanding tokens after each change, oldest first; empty until the
    // first dispatch (the count was 0 before it).
    std::deque<Point> history;
    // History was dropped (window or entry bound): before history.front()
    // the count is unknown, not 0.
    bool truncated = false;
  };
  // Appends the current count of `w` at `now` and trims old entries.
  static void Record(Worker& w, absl::Time now);
  // This router's outstanding count on `w` at time `t`; false when unknown.
  static bool OutstandingAt(const Worker& w, absl::Time t, int64_t* out);

  const std::function<absl::Time()> clock_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace radixkv::router

#endif  // RADIXKV_ROUTER_WORKER_LOAD_TRACKER_H_
