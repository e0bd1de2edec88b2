// WorkerLoadTracker: the router's own count of outstanding tokens per worker,
// charged at dispatch (not when decoding starts), so that a burst of requests
// routed within one heartbeat interval is visible to the next placement.
#ifndef RADIXKV_ROUTER_WORKER_LOAD_TRACKER_H_
#define RADIXKV_ROUTER_WORKER_LOAD_TRACKER_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

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

  // Charges a new request: `prefill_tokens` (uncached prompt tokens the
  // worker is expected to compute) + `decode_tokens` (max_new_tokens).
  void Dispatch(const std::string& worker_id, int64_t prefill_tokens,
                int64_t decode_tokens);
  // Reduces the charge as output streams back: the first chunk settles the
  // prefill, each output token one decode token. `charged_left` is the
  // caller's per-request remainder (updated in place; never goes below 0).
  void Progress(const std::string& worker_id, int64_t tokens,
                int64_t* charged_left);
  // Ends a request: drops whatever remains of its charge.
  void Finish(const std::string& worker_id, int64_t charged_left);

  WorkerCounts Get(const std::string& worker_id) const;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, WorkerCounts> counts_ ABSL_GUARDED_BY(mu_);
};

}  // namespace radixkv::router

#endif  // RADIXKV_ROUTER_WORKER_LOAD_TRACKER_H_
