// WorkerFailureMarks: which worker processes the router avoids after they
// failed a request, for a cooldown. A mark belongs to one registration epoch:
// a worker that registers again (a restarted process, a new epoch) starts
// unmarked, since the process that failed is gone.
#ifndef RADIXKV_ROUTER_WORKER_FAILURE_MARKS_H_
#define RADIXKV_ROUTER_WORKER_FAILURE_MARKS_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace radixkv::router {

// Thread-safe. Time is passed in (tests inject it). Holds one entry per
// worker id the router has marked (worker ids come from the cache service's
// registry, which bounds them).
class WorkerFailureMarks {
 public:
  explicit WorkerFailureMarks(absl::Duration cooldown) : cooldown_(cooldown) {}

  // Marks worker `worker_id` at registration `epoch` as failed at `now`:
  // avoided until now + cooldown. A later mark of the same epoch extends it;
  // a mark of another epoch replaces it.
  void MarkFailed(const std::string& worker_id, int64_t epoch, absl::Time now);

  // True while `worker_id` at `epoch` is within the cooldown of a failure of
  // that same epoch.
  bool IsAvoided(const std::string& worker_id, int64_t epoch,
                 absl::Time now) const;

 private:
  struct Mark {
    int64_t epoch = 0;
    absl::Time until;
  };
  const absl::Duration cooldown_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Mark> marks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace radixkv::router

#endif  // RADIXKV_ROUTER_WORKER_FAILURE_MARKS_H_
