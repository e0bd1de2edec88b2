#include "router/worker_load_tracker.h"

#include <algorithm>

namespace radixkv::router {

void WorkerLoadTracker::Dispatch(const std::string& worker_id,
                                 int64_t prefill_tokens,
                                 int64_t decode_tokens) {
  absl::MutexLock lock(&mu_);
  WorkerCounts& c = counts_[worker_id];
  c.outstanding_tokens += std::max<int64_t>(0, prefill_tokens) +
                          std::max<int64_t>(0, decode_tokens);
  ++c.in_flight_requests;
  ++c.dispatched_requests;
}

void WorkerLoadTracker::Progress(const std::string& worker_id, int64_t tokens,
                                 int64_t* charged_left) {
  const int64_t settled = std::clamp<int64_t>(tokens, 0, *charged_left);
  *charged_left -= settled;
  absl::MutexLock lock(&mu_);
  WorkerCounts& c = counts_[worker_id];
  c.outstanding_tokens = std::max<int64_t>(0, c.outstanding_tokens - settled);
}

void WorkerLoadTracker::Finish(const std::string& worker_id,
                               int64_t charged_left) {
  absl::MutexLock lock(&mu_);
  WorkerCounts& c = counts_[worker_id];
  c.outstanding_tokens = std::max<int64_t>(
      0, c.outstanding_tokens - std::max<int64_t>(0, charged_left));
  c.in_flight_requests = std::max<int64_t>(0, c.in_flight_requests - 1);
}

WorkerLoadTracker::WorkerCounts WorkerLoadTracker::Get(
    const std::string& worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = counts_.find(worker_id);
  return it == counts_.end() ? WorkerCounts{} : it->second;
}

}  // namespace radixkv::router
