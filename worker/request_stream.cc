#include "worker/request_stream.h"

#include <utility>

namespace radixkv::worker {

void RequestStream::Push(GenerateEvent event) {
  Append(std::move(event));
  Notify();
}

void RequestStream::Append(GenerateEvent event) {
  absl::MutexLock lock(&mu_);
  events_.push_back(std::move(event));
}

void RequestStream::Notify() {
  absl::MutexLock lock(&listener_mu_);
  if (listener_ != nullptr) listener_->OnEventPushed();
}

bool RequestStream::TryPop(GenerateEvent* event) {
  absl::MutexLock lock(&mu_);
  if (events_.empty()) return false;
  *event = std::move(events_.front());
  events_.pop_front();
  return true;
}

bool RequestStream::Pop(GenerateEvent* event, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this]()
                   ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !events_.empty(); };
  if (!mu_.AwaitWithTimeout(absl::Condition(&ready), timeout)) return false;
  *event = std::move(events_.front());
  events_.pop_front();
  return true;
}

void RequestStream::SetListener(Listener* listener) {
  absl::MutexLock lock(&listener_mu_);
  listener_ = listener;
  if (listener_ == nullptr) return;
  bool queued;
  {
    absl::MutexLock events_lock(&mu_);
    queued = !events_.empty();
  }
  if (queued) listener_->OnEventPushed();
}

}  // namespace radixkv::worker
