#include "router/openai/openai_responder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "router/openai/openai_error.h"

namespace radixkv::router::openai {

class OpenAiResponder::ChoiceSink final : public GenerateSink {
 public:
  ChoiceSink(OpenAiResponder* owner, int index)
      : owner_(owner), index_(index) {}
  void Write(const radixkv::v1::GenerateResponse& chunk,
             std::function<void(bool)> done) override {
    owner_->OnChunk(index_, chunk, std::move(done));
  }
  void Finish(const absl::Status& status) override {
    owner_->OnChoiceDone(index_, status);
  }

 private:
  OpenAiResponder* const owner_;
  const int index_;
};

OpenAiResponder::OpenAiResponder(
    std::shared_ptr<process::HttpExchange> exchange, ResponseHeader header,
    int num_prompts, int n, bool stream, bool include_usage,
    std::optional<int32_t> top_logprobs, TokenText token_text)
    : exchange_(std::move(exchange)),
      header_(std::move(header)),
      stream_(stream),
      include_usage_(include_usage),
      n_(n),
      top_logprobs_(top_logprobs),
      token_text_(std::move(token_text)),
      choices_(static_cast<size_t>(num_prompts) * n),
      calls_(num_prompts) {
  for (int i = 0; i < num_prompts; ++i) {
    sinks_.push_back(std::make_unique<ChoiceSink>(this, i));
  }
}

OpenAiResponder::~OpenAiResponder() = default;

GenerateSink* OpenAiResponder::sink(int index) { return sinks_[index].get(); }

void OpenAiResponder::SetCall(int index, std::shared_ptr<GenerateCall> call) {
  absl::MutexLock lock(&mu_);
  calls_[index].call = std::move(call);
}

void OpenAiResponder::Start() {
  {
    absl::MutexLock lock(&mu_);
    self_ = shared_from_this();
  }
  exchange_->OnClientGone([weak = weak_from_this()] {
    std::shared_ptr<OpenAiResponder> self = weak.lock();
    if (self == nullptr) return;
    std::vector<std::shared_ptr<GenerateCall>> calls;
    {
      absl::MutexLock lock(&self->mu_);
      for (const CallState& c : self->calls_) {
        if (c.call != nullptr && !c.done) calls.push_back(c.call);
      }
    }
    for (auto& call : calls) call->ClientGone();
  });
}

std::string OpenAiResponder::EventsOf(
    int index, const radixkv::v1::GenerateResponse& chunk,
    const nlohmann::ordered_json& logprobs) {
  ChoiceState& c = choices_[index];
  const std::optional<std::string> finish =
      FinishReasonName(chunk.finish_reason(), chunk.finished());
  std::string events;
  const bool chat = header_.endpoint == Endpoint::kChat;
  if (chat && !c.role_sent) {
    // A first chat chunk per choice carries the role (and empty content).
    events = ChunkEvent(header_, index, "", /*first=*/true, std::nullopt,
                        include_usage_);
    c.role_sent = true;
  }
  if (!chunk.text().empty() || finish.has_value() || !chat ||
      !logprobs.is_null()) {
    absl::StrAppend(
        &events, ChunkEvent(header_, index, chunk.text(),
                            /*first=*/false, finish, include_usage_, logprobs));
  }
  return events;
}

void OpenAiResponder::OnChunk(int index,
                              const radixkv::v1::GenerateResponse& chunk,
                              std::function<void(bool)> written) {
  absl::ReleasableMutexLock lock(&mu_);
  // A worker answering with a sample it was not asked for is a bug there;
  // its chunks count as sample 0 rather than index out of bounds.
  const int sample = chunk.sample_index() >= 0 && chunk.sample_index() < n_
                         ? chunk.sample_index()
                         : 0;
  const int choice = index * n_ + sample;
  ChoiceState& c = choices_[choice];
  c.text += chunk.text();
  if (chunk.has_usage()) {
    c.usage = chunk.usage();
    // The prompt is computed once for its n samples: usage counts it once.
    if (sample > 0) {
      c.usage.set_prompt_tokens(0);
      c.usage.set_cached_tokens(0);
    }
  }
  nlohmann::ordered_json logprobs;
  if (top_logprobs_.has_value() && chunk.logprobs_size() > 0 &&
      token_text_ != nullptr) {
    logprobs = LogprobsJson(header_.endpoint, chunk.logprobs(), *top_logprobs_,
                            token_text_, &c.text_offset);
    AppendLogprobs(header_.endpoint, logprobs, &c.logprobs);
  }
  if (chunk.finished()) {
    c.finish_reason = FinishReasonName(chunk.finish_reason(), true);
  }
  if (!stream_) {
    lock.Release();
    return written(true);
  }
  if (!stream_started_) {
    stream_started_ = true;
    exchange_->StartStream(200, "text/event-stream",
                           {{"Cache-Control", "no-cache"}});
  }
  // Sent under the lock: the events of all choices reach the connection in
  // the order they were made.
  exchange_->SendChunk(EventsOf(choice, chunk, logprobs), std::move(written));
}

void OpenAiResponder::FailChoice(int index, const absl::Status& status) {
  OnChoiceDone(index, status);
}

void OpenAiResponder::OnChoiceDone(int index, const absl::Status& status) {
  std::vector<std::shared_ptr<GenerateCall>> to_abort;
  std::shared_ptr<OpenAiResponder> release;  // dropped last, outside the lock
  {
    absl::MutexLock lock(&mu_);
    CallState& c = calls_[index];
    if (c.done) return;
    c.done = true;
    ++done_;
    if (!status.ok() && error_.ok()) {
      error_ = status;
      // The request has failed: the other prompts stop.
      for (CallState& other : calls_) {
        if (!other.done && other.call != nullptr)
          to_abort.push_back(other.call);
      }
    }
    if (done_ == static_cast<int>(calls_.size())) {
      Complete();
      release = std::move(self_);
    }
  }
  // Outside the lock: an abort may end a call inline, which comes back here.
  for (auto& call : to_abort) call->Abort();
}

void OpenAiResponder::Complete() {
  std::vector<radixkv::v1::Usage> usages;
  std::vector<Choice> choices;
  for (const ChoiceState& c : choices_) {
    usages.push_back(c.usage);
    choices.push_back({c.text, c.finish_reason, c.logprobs});
  }
  if (!error_.ok()) {
    const OpenAiError e = ToOpenAiError(error_);
    if (stream_started_) {
      exchange_->SendChunk(ErrorEvent(ErrorBody(e)));
      exchange_->EndStream();
    } else {
      exchange_->Reply(e.http_status, "application/json", ErrorBody(e));
    }
    return;
  }
  if (!stream_) {
    exchange_->Reply(200, "application/json",
                     ResponseBody(header_, choices, usages));
    return;
  }
  if (!stream_started_) {  // every choice ended without a chunk
    exchange_->StartStream(200, "text/event-stream",
                           {{"Cache-Control", "no-cache"}});
  }
  std::string tail;
  if (include_usage_) tail = UsageEvent(header_, usages);
  tail += kDoneEvent;
  exchange_->SendChunk(std::move(tail));
  exchange_->EndStream();
}

}  // namespace radixkv::router::openai
