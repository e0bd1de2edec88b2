// WorkerServiceImpl: the gRPC Worker service (proto radixkv/v1/worker.proto)
// over a Scheduler: Generate (server streaming), Abort, GetStats.
#ifndef RADIXKV_WORKER_WORKER_SERVICE_H_
#define RADIXKV_WORKER_WORKER_SERVICE_H_

#include <atomic>
#include <string>

#include "grpcpp/grpcpp.h"
#include "radixkv/v1/worker.grpc.pb.h"
#include "worker/scheduler.h"

namespace radixkv::worker {

class WorkerServiceImpl final : public v1::Worker::Service {
 public:
  // `scheduler` must outlive the service (shut the gRPC server down first).
  // It may be nullptr and set later (the process binds its port before it
  // registers with the cache service); until then every RPC answers
  // UNAVAILABLE.
  explicit WorkerServiceImpl(Scheduler* scheduler = nullptr)
      : scheduler_(scheduler) {}

  void set_scheduler(Scheduler* scheduler) { scheduler_.store(scheduler); }

  // Streams one GenerateResponse per generated token (token id, text delta
  // with return_text, usage); the last one has finished = true. A client
  // cancellation or a failed stream write aborts the request (its lease is
  // released). Errors: see worker.proto; a request that fails after tokens
  // were streamed ends the stream with that status.
  grpc::Status Generate(
      grpc::ServerContext* context, const v1::GenerateRequest* request,
      grpc::ServerWriter<v1::GenerateResponse>* writer) override;

  grpc::Status Abort(grpc::ServerContext* context,
                     const v1::AbortRequest* request,
                     v1::AbortResponse* response) override;

  grpc::Status GetStats(grpc::ServerContext* context,
                        const v1::WorkerStatsRequest* request,
                        v1::WorkerStatsResponse* response) override;

 private:
  std::atomic<Scheduler*> scheduler_;
};

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_WORKER_SERVICE_H_
