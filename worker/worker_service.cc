#include "worker/worker_service.h"

#include "absl/time/time.h"
#include "spdlog/spdlog.h"
#include "worker/cache_client.h"

namespace radixkv::worker {

namespace {

grpc::Status NotReady() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is starting");
}

}  // namespace

grpc::Status WorkerServiceImpl::Generate(
    grpc::ServerContext* context, const v1::GenerateRequest* request,
    grpc::ServerWriter<v1::GenerateResponse>* writer) {
  Scheduler* scheduler = scheduler_.load();
  if (scheduler == nullptr) return NotReady();
  absl::StatusOr<std::shared_ptr<RequestStream>> stream =
      scheduler->Submit(*request);
  if (!stream.ok()) return ToGrpcStatus(stream.status());
  const std::string& request_id = (*stream)->request_id();
  while (true) {
    GenerateEvent event;
    if (!(*stream)->Pop(&event, absl::Milliseconds(20))) {
      if (context->IsCancelled()) {
        scheduler->Abort(request_id);
        return grpc::Status(grpc::StatusCode::CANCELLED,
                            "cancelled by the client");
      }
      continue;
    }
    if (!event.token_ids.empty() || (event.finished && event.status.ok())) {
      v1::GenerateResponse response;
      response.set_request_id(request_id);
      response.mutable_token_ids()->Assign(event.token_ids.begin(),
                                           event.token_ids.end());
      response.set_text(event.text);
      response.set_finished(event.finished);
      response.set_finish_reason(event.finish_reason);
      *response.mutable_usage() = event.usage;
      response.set_worker_id(scheduler->options().worker_id);
      response.set_elapsed_s(event.elapsed_s);
      if (!writer->Write(response)) {
        scheduler->Abort(request_id);
        return grpc::Status(grpc::StatusCode::CANCELLED,
                            "stream write failed (client gone)");
      }
    }
    if (event.finished) return ToGrpcStatus(event.status);
  }
}

grpc::Status WorkerServiceImpl::Abort(grpc::ServerContext* context,
                                      const v1::AbortRequest* request,
                                      v1::AbortResponse* response) {
  Scheduler* scheduler = scheduler_.load();
  if (scheduler == nullptr) return NotReady();
  response->set_aborted(scheduler->Abort(request->request_id()));
  return grpc::Status::OK;
}

grpc::Status WorkerServiceImpl::GetStats(grpc::ServerContext* context,
                                         const v1::WorkerStatsRequest* request,
                                         v1::WorkerStatsResponse* response) {
  Scheduler* scheduler = scheduler_.load();
  if (scheduler == nullptr) return NotReady();
  SchedulerStats stats = scheduler->Stats();
  response->set_worker_id(scheduler->options().worker_id);
  response->set_model(scheduler->options().model_name);
  response->set_epoch(stats.epoch);
  *response->mutable_load() = stats.load;
  response->set_capacity_slots(scheduler->executor().capacity_slots());
  response->set_page_size(scheduler->executor().page_size());
  response->set_prompt_tokens(stats.prompt_tokens);
  response->set_prefill_tokens_computed(stats.prefill_tokens_computed);
  response->set_prefill_tokens_reused(stats.prefill_tokens_reused);
  response->set_decode_tokens(stats.decode_tokens);
  response->set_requests_finished(stats.requests_finished);
  response->set_requests_aborted(stats.requests_aborted);
  response->set_preemptions(stats.preemptions);
  response->set_steps(stats.steps);
  response->set_device(scheduler->executor().device());
  return grpc::Status::OK;
}

}  // namespace radixkv::worker
