#include "worker/generate_reactor.h"

#include <utility>

#include "process/raw_message.h"
#include "radixkv/v1/worker.pb.h"
#include "worker/cache_client.h"

namespace radixkv::worker {

namespace {

v1::GenerateResponse ToResponse(const GenerateEvent& event,
                                const std::string& request_id,
                                const std::string& worker_id) {
  v1::GenerateResponse response;
  response.set_request_id(request_id);
  response.mutable_token_ids()->Assign(event.token_ids.begin(),
                                       event.token_ids.end());
  response.set_text(event.text);
  response.set_finished(event.finished);
  response.set_finish_reason(event.finish_reason);
  *response.mutable_usage() = event.usage;
  response.set_worker_id(worker_id);
  response.set_elapsed_s(event.elapsed_s);
  response.set_sample_index(event.sample_index);
  response.mutable_logprobs()->Assign(event.logprobs.begin(),
                                      event.logprobs.end());
  response.mutable_prompt_logprobs()->Assign(event.prompt_logprobs.begin(),
                                             event.prompt_logprobs.end());
  return response;
}

}  // namespace

GenerateReactor::GenerateReactor(Scheduler* scheduler,
                                 const grpc::ByteBuffer& body)
    : scheduler_(scheduler) {
  if (scheduler_ == nullptr) {
    FinishOnce(
        grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker is starting"));
    return;
  }
  v1::GenerateRequest request;
  if (absl::Status parsed = process::ParseRawMessage(body, &request);
      !parsed.ok()) {
    FinishOnce(ToGrpcStatus(parsed));
    return;
  }
  absl::StatusOr<std::shared_ptr<RequestStream>> stream =
      scheduler_->Submit(request);
  if (!stream.ok()) {
    FinishOnce(ToGrpcStatus(stream.status()));
    return;
  }
  stream_ = *std::move(stream);
  // gRPC holds writes started before the reactor is bound (the handler has
  // not returned yet) until it is.
  stream_->SetListener(this);
}

void GenerateReactor::WriteNext() {
  std::optional<grpc::Status> finish;
  bool write = false;
  {
    absl::MutexLock lock(&mu_);
    if (writing_ || finishing_) return;
    GenerateEvent event;
    while (!write && !final_status_.has_value() && stream_->TryPop(&event)) {
      if (event.finished && !event.more_samples) {
        final_status_ = ToGrpcStatus(event.status);
      }
      // A failure carries no tokens: it is the call's status only.
      if (event.token_ids.empty() && !(event.finished && event.status.ok())) {
        continue;
      }
      const absl::Status serialized = process::SerializeRawMessage(
          ToResponse(event, stream_->request_id(),
                     scheduler_->options().worker_id),
          &write_buffer_);
      if (serialized.ok()) {
        write = writing_ = true;
      } else {
        final_status_ = ToGrpcStatus(serialized);
      }
    }
    if (!write && final_status_.has_value()) {
      finishing_ = true;
      finish = final_status_;
    }
  }
  if (write) StartWrite(&write_buffer_);
  if (finish.has_value()) Finish(*finish);
}

void GenerateReactor::OnWriteDone(bool ok) {
  std::optional<grpc::Status> deferred;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    deferred.swap(deferred_finish_);
  }
  if (!ok) {
    AbortOnce();
    FinishOnce(deferred.value_or(grpc::Status(
        grpc::StatusCode::CANCELLED, "stream write failed (client gone)")));
    return;
  }
  if (deferred.has_value()) {
    FinishOnce(*std::move(deferred));
    return;
  }
  WriteNext();
}

void GenerateReactor::OnCancel() {
  AbortOnce();
  FinishOnce(
      grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
}

void GenerateReactor::OnDone() {
  // After this no push reaches the reactor any more.
  if (stream_ != nullptr) stream_->SetListener(nullptr);
  delete this;
}

void GenerateReactor::AbortOnce() {
  {
    absl::MutexLock lock(&mu_);
    if (stream_ == nullptr || abort_sent_ || final_status_.has_value()) return;
    abort_sent_ = true;
  }
  scheduler_->Abort(stream_->request_id());
}

void GenerateReactor::FinishOnce(grpc::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (finishing_) return;
    if (writing_) {
      if (!deferred_finish_.has_value()) deferred_finish_ = std::move(status);
      return;
    }
    finishing_ = true;
  }
  Finish(std::move(status));
}

}  // namespace radixkv::worker
