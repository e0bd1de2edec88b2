#include "tests/generate_burst.h"

#include <utility>

#include "absl/synchronization/notification.h"

namespace radixkv::tests {

StartGenerate ToWorker(v1::Worker::Stub* stub) {
  return
      [stub](grpc::ClientContext* context, const v1::GenerateRequest* request,
             grpc::ClientReadReactor<v1::GenerateResponse>* reactor) {
        stub->async()->Generate(context, request, reactor);
      };
}

StartGenerate ToRouter(v1::Router::Stub* stub) {
  return
      [stub](grpc::ClientContext* context, const v1::GenerateRequest* request,
             grpc::ClientReadReactor<v1::GenerateResponse>* reactor) {
        stub->async()->Generate(context, request, reactor);
      };
}

class GenerateBurst::Call final
    : public grpc::ClientReadReactor<v1::GenerateResponse> {
 public:
  Call(GenerateBurst* burst, const StartGenerate& start,
       v1::GenerateRequest request, absl::Duration deadline)
      : burst_(burst), request_(std::move(request)), start_(absl::Now()) {
    context_.set_deadline(absl::ToChronoTime(start_ + deadline));
    start(&context_, &request_, this);
    StartRead(&response_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    {
      absl::MutexLock lock(&mu_);
      if (outcome_.tokens == 0 && response_.token_ids_size() > 0) {
        outcome_.first_token = absl::Now() - start_;
      }
      outcome_.tokens += response_.token_ids_size();
    }
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    {
      absl::MutexLock lock(&mu_);
      outcome_.code = status.error_code();
      outcome_.message = status.error_message();
      outcome_.latency = absl::Now() - start_;
    }
    burst_->Ended(status.error_code());
    done_.Notify();  // The last touch: the call may be freed after it.
  }

  void Cancel() { context_.TryCancel(); }
  void Await() { done_.WaitForNotification(); }
  Outcome outcome() {
    absl::MutexLock lock(&mu_);
    return outcome_;
  }

 private:
  GenerateBurst* const burst_;
  const v1::GenerateRequest request_;
  const absl::Time start_;
  grpc::ClientContext context_;
  v1::GenerateResponse response_;
  absl::Mutex mu_;
  Outcome outcome_ ABSL_GUARDED_BY(mu_);
  absl::Notification done_;
};

GenerateBurst::GenerateBurst(std::vector<StartGenerate> starts,
                             std::vector<v1::GenerateRequest> requests,
                             absl::Duration deadline) {
  calls_.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    calls_.push_back(std::make_unique<Call>(this, starts[i % starts.size()],
                                            std::move(requests[i]), deadline));
  }
}

GenerateBurst::~GenerateBurst() {
  for (auto& call : calls_) call->Cancel();
  for (auto& call : calls_) call->Await();
}

void GenerateBurst::Ended(grpc::StatusCode code) {
  absl::MutexLock lock(&mu_);
  ++ended_[code];
  ++num_ended_;
}

std::map<grpc::StatusCode, int> GenerateBurst::EndedByCode() const {
  absl::MutexLock lock(&mu_);
  return ended_;
}

int GenerateBurst::ended() const {
  absl::MutexLock lock(&mu_);
  return num_ended_;
}

bool GenerateBurst::WaitUntil(
    const std::function<bool(const std::map<grpc::StatusCode, int>&)>& pred,
    absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto holds = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return pred(ended_); };
  return mu_.AwaitWithTimeout(absl::Condition(&holds), timeout);
}

bool GenerateBurst::WaitAll(absl::Duration timeout) const {
  const int n = size();
  absl::MutexLock lock(&mu_);
  auto all = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return num_ended_ == n; };
  return mu_.AwaitWithTimeout(absl::Condition(&all), timeout);
}

std::vector<GenerateBurst::Outcome> GenerateBurst::outcomes() const {
  std::vector<Outcome> out;
  out.reserve(calls_.size());
  for (const auto& call : calls_) out.push_back(call->outcome());
  return out;
}

}  // namespace radixkv::tests
