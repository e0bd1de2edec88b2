#include "router/worker_failure_marks.h"

namespace radixkv::router {

void WorkerFailureMarks::MarkFailed(const std::string& worker_id, int64_t epoch,
                                    absl::Time now) {
  absl::MutexLock lock(&mu_);
  marks_[worker_id] = Mark{epoch, now + cooldown_};
}

bool WorkerFailureMarks::IsAvoided(const std::string& worker_id, int64_t epoch,
                                   absl::Time now) const {
  absl::MutexLock lock(&mu_);
  auto it = marks_.find(worker_id);
  return it != marks_.end() && it->second.epoch == epoch &&
         it->second.until > now;
}

}  // namespace radixkv::router
