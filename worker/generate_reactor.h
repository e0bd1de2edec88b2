// GenerateReactor: one Worker.Generate call on gRPC's callback API. It
// submits the request to the Scheduler and listens to its RequestStream:
// each event the scheduler pushes becomes one GenerateResponse, written as
// soon as the previous write completed (at most one write in flight, the
// others wait in the stream), and the final event ends the call with its
// status. No thread waits for the request: the scheduler's push (or gRPC's
// write completion) runs the next write.
#ifndef RADIXKV_WORKER_GENERATE_REACTOR_H_
#define RADIXKV_WORKER_GENERATE_REACTOR_H_

#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"
#include "worker/request_stream.h"
#include "worker/scheduler.h"

namespace radixkv::worker {

class GenerateReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                              private RequestStream::Listener {
 public:
  // Parses `body` (a GenerateRequest) and submits it to `scheduler` (which
  // must outlive the call; nullptr: UNAVAILABLE "worker is starting").
  // Errors end the call at once: INVALID_ARGUMENT "GenerateRequest:
  // unparseable message (N bytes)" or Scheduler::Submit's status. The
  // reactor deletes itself when gRPC is done with the call.
  GenerateReactor(Scheduler* scheduler, const grpc::ByteBuffer& body);

 private:
  // RequestStream::Listener, on the scheduler thread.
  void OnEventPushed() override { WriteNext(); }
  void OnWriteDone(bool ok) override;
  // The client cancelled, its deadline passed, or the connection broke.
  void OnCancel() override;
  void OnDone() override;

  // Starts the write of the next event, or finishes after the final one;
  // nothing while a write is in flight.
  void WriteNext();
  // Aborts the request in the scheduler, at most once, unless it ended.
  void AbortOnce();
  // Finishes the call once; while a write is in flight, when it completes.
  void FinishOnce(grpc::Status status);

  Scheduler* const scheduler_;
  std::shared_ptr<RequestStream> stream_;  // Set once, in the constructor.
  absl::Mutex mu_;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // Finish was called (nothing is written after).
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool abort_sent_ ABSL_GUARDED_BY(mu_) = false;
  // The final event was taken from the stream: its status, sent once its
  // response (if any) is written.
  std::optional<grpc::Status> final_status_ ABSL_GUARDED_BY(mu_);
  // A Finish that waits for the write in flight.
  std::optional<grpc::Status> deferred_finish_ ABSL_GUARDED_BY(mu_);
  // The write in flight (owned by the writer while writing_).
  grpc::ByteBuffer write_buffer_;
};

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_GENERATE_REACTOR_H_
