#include "worker/stream_notifier.h"

#include <utility>

namespace radixkv::worker {

StreamNotifier::StreamNotifier() : thread_([this] { Loop(); }) {}

StreamNotifier::~StreamNotifier() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void StreamNotifier::Post(std::vector<std::shared_ptr<RequestStream>> streams) {
  if (streams.empty()) return;
  absl::MutexLock lock(&mu_);
  if (pending_.empty()) {
    pending_ = std::move(streams);
  } else {
    pending_.insert(pending_.end(), std::make_move_iterator(streams.begin()),
                    std::make_move_iterator(streams.end()));
  }
}

void StreamNotifier::Loop() {
  std::vector<std::shared_ptr<RequestStream>> batch;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](StreamNotifier* n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(n->mu_) {
            return n->stop_ || !n->pending_.empty();
          },
          this));
      if (pending_.empty()) return;  // stop_, and everything notified
      batch.swap(pending_);
    }
    for (const std::shared_ptr<RequestStream>& stream : batch) {
      stream->Notify();
    }
    batch.clear();
  }
}

}  // namespace radixkv::worker
