// WorkerServiceImpl: the gRPC Worker service (proto radixkv/v1/worker.proto)
// over a Scheduler: Generate (server streaming), Abort, GetStats.
//
// Every method is on gRPC's callback API with raw bodies: a request costs no
// thread while it waits or streams (the scheduler's pushes drive the
// writes), no handler blocks, and the service parses the bodies itself so
// that an unparseable one is INVALID_ARGUMENT naming the message.
#ifndef RADIXKV_WORKER_WORKER_SERVICE_H_
#define RADIXKV_WORKER_WORKER_SERVICE_H_

#include <atomic>

#include "grpcpp/grpcpp.h"
#include "radixkv/v1/worker.grpc.pb.h"
#include "worker/scheduler.h"

namespace radixkv::worker {

using RawCallbackWorkerService = v1::Worker::WithRawCallbackMethod_Generate<
    v1::Worker::WithRawCallbackMethod_Abort<
        v1::Worker::WithRawCallbackMethod_GetStats<v1::Worker::Service>>>;

class WorkerServiceImpl final : public RawCallbackWorkerService {
 public:
  // `scheduler` must outlive the service (shut the gRPC server down first).
  // It may be nullptr and set later (the process binds its port before it
  // registers with the cache service); until then every RPC answers
  // UNAVAILABLE.
  explicit WorkerServiceImpl(Scheduler* scheduler = nullptr)
      : scheduler_(scheduler) {}

  void set_scheduler(Scheduler* scheduler) { scheduler_.store(scheduler); }

  // Streams one GenerateResponse per generated token (token id, text delta
  // with return_text, usage); the last one has finished = true. At most one
  // write is in flight; events the scheduler pushes meanwhile wait in the
  // request's RequestStream. A client that goes away (cancellation,
  // deadline, failed write) aborts the request once (its lease is
  // released). Errors: see worker.proto; a request that fails after tokens
  // were streamed ends the stream with that status; an unparseable body is
  // INVALID_ARGUMENT "GenerateRequest: unparseable message (N bytes)".
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(
      grpc::CallbackServerContext* context,
      const grpc::ByteBuffer* request) override;

  // Unary and non-blocking (Scheduler::Abort and Stats only take its lock),
  // so they finish inside the handler.
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override;

 private:
  std::atomic<Scheduler*> scheduler_;
};

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_WORKER_SERVICE_H_
