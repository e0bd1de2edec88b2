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
    std::optional<int32_t> top_logprobs, TokenText token_text,
    PromptAnswers prompts)
    : exchange_(std::move(exchange)),
      header_(std::move(header)),
      stream_(stream),
      include_usage_(include_usage),
      n_(n),
      top_logprobs_(top_logprobs),
      token_text_(std::move(token_text)),
      prompt_answers_(std::move(prompts)),
      echo_logprobs_(!prompt_answers_.echo_texts.empty() &&
                     top_logprobs_.has_value()),
      needs_prompt_logprobs_(echo_logprobs_ ||
                             prompt_answers_.prompt_logprobs.has_value()),
      choices_(static_cast<size_t>(num_prompts) * n),
      calls_(num_prompts),
      prompts_(num_prompts) {
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
    int index, const std::string& text,
    const radixkv::v1::GenerateResponse& chunk,
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
  if (!text.empty() || finish.has_value() || !chat || !logprobs.is_null()) {
    absl::StrAppend(
        &events, ChunkEvent(header_, index, text,
                            /*first=*/false, finish, include_usage_, logprobs));
  }
  return events;
}

namespace {

// GenerateResponse.prompt_logprobs of sample 0's first chunk: one entry per
// prompt token but the first. INTERNAL when the worker answered another
// count (a worker that does not implement SamplingParams.prompt_logprobs
// answers none).
absl::Status CheckPromptLogprobs(const radixkv::v1::GenerateResponse& chunk) {
  const int32_t prompt_tokens = chunk.usage().prompt_tokens();
  if (prompt_tokens < 1 || chunk.prompt_logprobs_size() == prompt_tokens - 1) {
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat(
      "worker ", chunk.worker_id(), " answered ", chunk.prompt_logprobs_size(),
      " prompt logprobs for a prompt of ", prompt_tokens,
      " tokens (SamplingParams.prompt_logprobs asks for ", prompt_tokens - 1,
      ")"));
}

}  // namespace

std::vector<std::shared_ptr<GenerateCall>> OpenAiResponder::FailLocked(
    const absl::Status& status) {
  std::vector<std::shared_ptr<GenerateCall>> to_abort;
  if (!error_.ok()) return to_abort;
  error_ = status;
  for (CallState& c : calls_) {
    if (!c.done && c.call != nullptr) to_abort.push_back(c.call);
  }
  return to_abort;
}

std::string OpenAiResponder::Apply(int index, int choice,
                                   const radixkv::v1::GenerateResponse& chunk) {
  ChoiceState& c = choices_[choice];
  std::string text;
  nlohmann::ordered_json logprobs;
  if (!c.started) {
    c.started = true;
    if (!prompt_answers_.echo_texts.empty()) {
      text = prompt_answers_.echo_texts[index];
      if (echo_logprobs_ && token_text_ != nullptr) {
        logprobs = EchoedPromptLogprobsJson(
            prompt_answers_.first_token_ids[index], prompts_[index].logprobs,
            *top_logprobs_, token_text_, &c.text_offset);
      }
    }
  }
  text += chunk.text();
  c.text += text;
  const int sample = choice % n_;
  if (chunk.has_usage()) {
    c.usage = chunk.usage();
    // The prompt is computed once for its n samples: usage counts it once.
    if (sample > 0) {
      c.usage.set_prompt_tokens(0);
      c.usage.set_cached_tokens(0);
    }
  }
  if (top_logprobs_.has_value() && chunk.logprobs_size() > 0 &&
      token_text_ != nullptr) {
    AppendLogprobs(header_.endpoint,
                   LogprobsJson(header_.endpoint, chunk.logprobs(),
                                *top_logprobs_, token_text_, &c.text_offset),
                   &logprobs);
  }
  if (!logprobs.is_null()) {
    AppendLogprobs(header_.endpoint, logprobs, &c.logprobs);
  }
  if (chunk.finished()) {
    c.finish_reason = FinishReasonName(chunk.finish_reason(), true);
  }
  if (!stream_) return "";
  return EventsOf(choice, text, chunk, logprobs);
}

void OpenAiResponder::OnChunk(int index,
                              const radixkv::v1::GenerateResponse& chunk,
                              std::function<void(bool)> written) {
  absl::ReleasableMutexLock lock(&mu_);
  if (!error_.ok()) {  // the request failed: the rest is not answered
    lock.Release();
    return written(true);
  }
  // A worker answering with a sample it was not asked for is a bug there;
  // its chunks count as sample 0 rather than index out of bounds.
  const int sample = chunk.sample_index() >= 0 && chunk.sample_index() < n_
                         ? chunk.sample_index()
                         : 0;
  const int choice = index * n_ + sample;
  PromptState& prompt = prompts_[index];
  bool carries_prompt_logprobs = false;
  if (needs_prompt_logprobs_ && !prompt.have_logprobs && sample == 0 &&
      !choices_[choice].started) {
    if (absl::Status s = CheckPromptLogprobs(chunk); !s.ok()) {
      std::vector<std::shared_ptr<GenerateCall>> to_abort = FailLocked(s);
      lock.Release();
      written(true);
      for (auto& call : to_abort) call->Abort();
      return;
    }
    prompt.logprobs = chunk.prompt_logprobs();
    prompt.have_logprobs = true;
    carries_prompt_logprobs = true;
  }
  if (echo_logprobs_ && !prompt.have_logprobs) {
    // Its echo needs the prompt logprobs of sample 0's first chunk.
    prompt.held.emplace_back(choice, chunk);
    lock.Release();
    return written(true);
  }
  std::string events = Apply(index, choice, chunk);
  if (carries_prompt_logprobs) {
    for (const auto& [held_choice, held_chunk] : prompt.held) {
      events += Apply(index, held_choice, held_chunk);
    }
    prompt.held.clear();
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
  exchange_->SendChunk(std::move(events), std::move(written));
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
  if (error_.ok() && needs_prompt_logprobs_) {
    for (const PromptState& p : prompts_) {
      if (!p.have_logprobs || !p.held.empty()) {
        error_ = absl::InternalError(
            "a prompt's generation ended without its prompt logprobs");
        break;
      }
    }
  }
  // vLLM's prompt_logprobs, one list per prompt.
  std::vector<std::optional<nlohmann::ordered_json>> prompt_logprobs(
      prompts_.size());
  if (error_.ok() && prompt_answers_.prompt_logprobs.has_value() &&
      token_text_ != nullptr) {
    for (size_t i = 0; i < prompts_.size(); ++i) {
      prompt_logprobs[i] = VllmPromptLogprobsJson(
          prompts_[i].logprobs, *prompt_answers_.prompt_logprobs, token_text_);
    }
  }
  const bool chat = header_.endpoint == Endpoint::kChat;
  std::vector<radixkv::v1::Usage> usages;
  std::vector<Choice> choices;
  for (size_t i = 0; i < choices_.size(); ++i) {
    const ChoiceState& c = choices_[i];
    usages.push_back(c.usage);
    choices.push_back({c.text, c.finish_reason, c.logprobs,
                       chat ? std::nullopt : prompt_logprobs[i / n_]});
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
                     ResponseBody(header_, choices, usages,
                                  chat ? prompt_logprobs[0] : std::nullopt));
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
