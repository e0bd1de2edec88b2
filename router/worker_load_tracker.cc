#include "router/worker_load_tracker.h"

#include <algorithm>
#include <utility>

namespace radixkv::router {

WorkerLoadTracker::WorkerLoadTracker(std::function<absl::Time()> clock)
    : clock_(std::move(clock)) {}

void WorkerLoadTracker::Record(Worker& w, absl::Time now) {
  const int64_t value = w.counts.outstanding_tokens;
  if (!w.history.empty() && now - w.history.back().time < kHistoryResolution) {
    w.history.back().outstanding_tokens = value;
  } else {
    w.history.push_back(Point{now, value});
  }
  // Keep one entry at or before the window's start: it gives the count
  // throughout the window.
  while (w.history.size() > kMaxHistoryEntries ||
         (w.history.size() > 1 && w.history[1].time <= now - kHistoryWindow)) {
    w.history.pop_front();
    w.truncated = true;
  }
}

bool WorkerLoadTracker::OutstandingAt(const Worker& w, absl::Time t,
                                      int64_t* out) {
  // The last entry at or before t.
  auto it = std::upper_bound(
      w.history.begin(), w.history.end(), t,
      [](absl::Time time, const Point& p) { return time < p.time; });
  if (it == w.history.begin()) {
    if (w.truncated) return false;
    *out = 0;  // before this router's first dispatch to the worker
    return true;
  }
  *out = std::prev(it)->outstanding_tokens;
  return true;
}

void WorkerLoadTracker::Dispatch(const std::string& worker_id,
                                 int64_t prefill_tokens,
                                 int64_t decode_tokens) {
  TryDispatch(worker_id, prefill_tokens, decode_tokens, 0);
}

bool WorkerLoadTracker::TryDispatch(const std::string& worker_id,
                                    int64_t prefill_tokens,
                                    int64_t decode_tokens,
                                    int64_t max_in_flight_requests) {
  const absl::Time now = clock_();
  absl::MutexLock lock(&mu_);
  Worker& w = workers_[worker_id];
  if (max_in_flight_requests > 0 &&
      w.counts.in_flight_requests >= max_in_flight_requests) {
    return false;
  }
  w.counts.outstanding_tokens += std::max<int64_t>(0, prefill_tokens) +
                                 std::max<int64_t>(0, decode_tokens);
  ++w.counts.in_flight_requests;
  ++w.counts.dispatched_requests;
  Record(w, now);
  return true;
}

void WorkerLoadTracker::Progress(const std::string& worker_id, int64_t tokens,
                                 int64_t* charged_left) {
  const int64_t settled = std::clamp<int64_t>(tokens, 0, *charged_left);
  *charged_left -= settled;
  if (settled == 0) return;
  const absl::Time now = clock_();
  absl::MutexLock lock(&mu_);
  Worker& w = workers_[worker_id];
  w.counts.outstanding_tokens =
      std::max<int64_t>(0, w.counts.outstanding_tokens - settled);
  Record(w, now);
}

void WorkerLoadTracker::Finish(const std::string& worker_id,
                               int64_t charged_left) {
  const absl::Time now = clock_();
  absl::MutexLock lock(&mu_);
  Worker& w = workers_[worker_id];
  w.counts.outstanding_tokens = std::max<int64_t>(
      0, w.counts.outstanding_tokens - std::max<int64_t>(0, charged_left));
  w.counts.in_flight_requests =
      std::max<int64_t>(0, w.counts.in_flight_requests - 1);
  Record(w, now);
}

WorkerLoadTracker::WorkerCounts WorkerLoadTracker::Get(
    const std::string& worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  return it == workers_.end() ? WorkerCounts{} : it->second.counts;
}

int64_t WorkerLoadTracker::EstimateLoad(const std::string& worker_id,
                                        int64_t heartbeat_tokens,
                                        absl::Duration heartbeat_age) const {
  const absl::Time now = clock_();
  heartbeat_tokens = std::max<int64_t>(0, heartbeat_tokens);
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return heartbeat_tokens;
  const Worker& w = it->second;
  const int64_t own_now = w.counts.outstanding_tokens;
  int64_t own_then = 0;
  if (heartbeat_age < absl::ZeroDuration() || heartbeat_age > kHistoryWindow ||
      !OutstandingAt(w, now - heartbeat_age, &own_then)) {
    return std::max(heartbeat_tokens, own_now);
  }
  return std::max(own_now, heartbeat_tokens + own_now - own_then);
}

}  // namespace radixkv::router
