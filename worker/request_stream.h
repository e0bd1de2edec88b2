// RequestStream: the output channel of one request, from the scheduler
// thread (which pushes GenerateEvents) to whoever serves the request: the
// Worker service's Generate reactor (notified on each push, no thread per
// request) or a test (which pops).
#ifndef RADIXKV_WORKER_REQUEST_STREAM_H_
#define RADIXKV_WORKER_REQUEST_STREAM_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "radixkv/v1/common.pb.h"

namespace radixkv::worker {

// One streamed update of a request (mirrors radixkv.v1.GenerateResponse).
struct GenerateEvent {
  // New token ids since the previous event.
  std::vector<int32_t> token_ids;
  // Decoded text delta (when the request asked for text).
  std::string text;
  bool finished = false;
  v1::FinishReason finish_reason = v1::FINISH_REASON_UNSPECIFIED;
  // Non-OK: the request failed (finished is true as well).
  absl::Status status;
  v1::Usage usage;
  // Seconds from arrival to this event.
  double elapsed_s = 0;
  // The sample of a request with n > 1 this event belongs to.
  int32_t sample_index = 0;
  // finished ends this sample only: other samples of the request go on and
  // the stream with them (n > 1). The stream's last event has finished
  // true and more_samples false.
  bool more_samples = false;
  // Per token of token_ids when the request asked for logprobs.
  std::vector<v1::TokenLogprobs> logprobs;
  // The request's prompt logprobs (GenerateResponse.prompt_logprobs), in
  // the event of sample 0's first token.
  std::vector<v1::TokenLogprobs> prompt_logprobs;
};

// Events in push order; the last one has finished = true and more_samples =
// false. Thread-safe.
class RequestStream {
 public:
  // Told that an event was pushed. Runs on the pushing thread (the
  // scheduler's) while the stream holds its listener lock: it must not
  // block and must not call SetListener; it may call TryPop.
  class Listener {
   public:
    virtual ~Listener() = default;
    virtual void OnEventPushed() = 0;
  };

  explicit RequestStream(std::string request_id)
      : request_id_(std::move(request_id)) {}

  const std::string& request_id() const { return request_id_; }

  // Appends an event, then notifies the listener (if any).
  void Push(GenerateEvent event);

  // Push in two halves, so that a producer can append on its own thread and
  // leave the listener's work (a gRPC write) to another (StreamNotifier):
  // Append queues the event without notifying; Notify runs the listener (if
  // any) on the calling thread, under the listener lock as Push does.
  void Append(GenerateEvent event);
  void Notify();

  // Takes the oldest event if there is one. Never blocks.
  bool TryPop(GenerateEvent* event);

  // Waits up to `timeout` for an event. Returns false on timeout.
  bool Pop(GenerateEvent* event, absl::Duration timeout);

  // Installs `listener` (nullptr: removes it). A listener installed while
  // events are queued is notified once at once, on this thread. When
  // SetListener returns, no notification of the previous listener is
  // running or will run, so its owner may free it.
  void SetListener(Listener* listener);

 private:
  const std::string request_id_;
  // Held while the listener runs (it takes mu_ through TryPop): lock order
  // listener_mu_ -> (the listener's own locks) -> mu_.
  absl::Mutex listener_mu_;
  Listener* listener_ ABSL_GUARDED_BY(listener_mu_) = nullptr;
  absl::Mutex mu_;
  std::deque<GenerateEvent> events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_REQUEST_STREAM_H_
