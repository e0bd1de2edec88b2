#include "worker/worker_service.h"

#include "process/raw_message.h"
#include "worker/cache_client.h"
#include "worker/generate_reactor.h"

namespace radixkv::worker {

namespace {

grpc::Status NotReady() {
  return grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is starting");
}

// Parses `body` into Request, runs `handle` and serializes its Response.
template <typename Request, typename Response, typename Handler>
grpc::Status Unary(const grpc::ByteBuffer& body, grpc::ByteBuffer* out,
                   Handler handle) {
  Request request;
  if (absl::Status parsed = process::ParseRawMessage(body, &request);
      !parsed.ok()) {
    return ToGrpcStatus(parsed);
  }
  Response response;
  handle(request, &response);
  return ToGrpcStatus(process::SerializeRawMessage(response, out));
}

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* WorkerServiceImpl::Generate(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) {
  return new GenerateReactor(scheduler_.load(), *request);
}

grpc::ServerUnaryReactor* WorkerServiceImpl::Abort(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Scheduler* scheduler = scheduler_.load();
  if (scheduler == nullptr) {
    reactor->Finish(NotReady());
    return reactor;
  }
  reactor->Finish(Unary<v1::AbortRequest, v1::AbortResponse>(
      *request, response,
      [&](const v1::AbortRequest& in, v1::AbortResponse* out) {
        out->set_aborted(scheduler->Abort(in.request_id()));
      }));
  return reactor;
}

grpc::ServerUnaryReactor* WorkerServiceImpl::GetStats(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  Scheduler* scheduler = scheduler_.load();
  if (scheduler == nullptr) {
    reactor->Finish(NotReady());
    return reactor;
  }
  reactor->Finish(Unary<v1::WorkerStatsRequest, v1::WorkerStatsResponse>(
      *request, response,
      [&](const v1::WorkerStatsRequest&, v1::WorkerStatsResponse* out) {
        SchedulerStats stats = scheduler->Stats();
        out->set_worker_id(scheduler->options().worker_id);
        out->set_model(scheduler->options().model_name);
        out->set_epoch(stats.epoch);
        *out->mutable_load() = stats.load;
        out->set_capacity_slots(scheduler->executor().capacity_slots());
        out->set_page_size(scheduler->executor().page_size());
        out->set_prompt_tokens(stats.prompt_tokens);
        out->set_prefill_tokens_computed(stats.prefill_tokens_computed);
        out->set_prefill_tokens_reused(stats.prefill_tokens_reused);
        out->set_decode_tokens(stats.decode_tokens);
        out->set_requests_finished(stats.requests_finished);
        out->set_requests_aborted(stats.requests_aborted);
        out->set_preemptions(stats.preemptions);
        out->set_steps(stats.steps);
        out->set_device(scheduler->executor().device());
      }));
  return reactor;
}

}  // namespace radixkv::worker
