// StreamNotifier: one thread that runs the listeners of RequestStreams the
// scheduler appended events to, so that turning events into gRPC writes
// (serializing each GenerateResponse, StartWrite) overlaps the next forward
// instead of delaying it. vLLM's AsyncLLM runs its output handling in a
// task of its own and SGLang detokenizes in a process of its own for the
// same reason: the step loop only hands results over.
//
// Order: the events of one stream stay in the stream's queue in append
// order; a Notify lets its listener take all of them, so notifications may
// be merged or run late but never reorder events.
#ifndef RADIXKV_WORKER_STREAM_NOTIFIER_H_
#define RADIXKV_WORKER_STREAM_NOTIFIER_H_

#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "worker/request_stream.h"

namespace radixkv::worker {

class StreamNotifier {
 public:
  // Starts the thread.
  StreamNotifier();
  // Notifies what was posted, then joins the thread.
  ~StreamNotifier();

  StreamNotifier(const StreamNotifier&) = delete;
  StreamNotifier& operator=(const StreamNotifier&) = delete;

  // Queues a Notify of each stream (held until it ran). Never blocks on a
  // listener. Thread-safe.
  void Post(std::vector<std::shared_ptr<RequestStream>> streams);

 private:
  void Loop();

  absl::Mutex mu_;
  std::vector<std::shared_ptr<RequestStream>> pending_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_STREAM_NOTIFIER_H_
