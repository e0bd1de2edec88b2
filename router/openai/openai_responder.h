// OpenAiResponder: the answer to one OpenAI completion request that runs
// as one GenerateCall per prompt (a list of prompts), each with n samples
// (GenerateRequest.n; choice index = prompt index x n + sample_index, as
// OpenAI numbers them). It gathers the
// choices' chunks into one non-streamed JSON body, or writes them as
// server-sent events in arrival order with the per-chunk backpressure of
// the HTTP connection; the first failing choice aborts the others and
// answers with its error (as a status code before the stream started, as an
// error event after).
//
// Echo (/v1/completions): each choice's first chunk starts with its
// prompt's text and, with logprobs, its logprobs object with the prompt's
// tokens (GenerateResponse.prompt_logprobs, which come with sample 0's first
// token: a sample's chunks that come before are held until then). vLLM's
// prompt_logprobs are answered with the non-streamed body.
#ifndef RADIXKV_ROUTER_OPENAI_OPENAI_RESPONDER_H_
#define RADIXKV_ROUTER_OPENAI_OPENAI_RESPONDER_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "process/http_server.h"
#include "router/generate_call.h"
#include "router/openai/openai_logprobs.h"
#include "router/openai/openai_response.h"

namespace radixkv::router::openai {

// What the response answers about its prompts.
struct PromptAnswers {
  // Echo: per prompt, the text its choices start with; empty: no echo.
  std::vector<std::string> echo_texts;
  // Echo with logprobs: per prompt, its first token id, the first entry of
  // the echoed logprobs (GenerateResponse.prompt_logprobs start at the
  // second).
  std::vector<int32_t> first_token_ids;
  // vLLM's prompt_logprobs: alternatives per position (nullopt: not asked;
  // non-streamed responses only).
  std::optional<int32_t> prompt_logprobs;
};

class OpenAiResponder : public std::enable_shared_from_this<OpenAiResponder> {
 public:
  // `top_logprobs`: alternatives per token when logprobs are returned
  // (nullopt: none), with `token_text` naming the tokens (needed for them,
  // for echo with logprobs and for prompt_logprobs).
  OpenAiResponder(std::shared_ptr<process::HttpExchange> exchange,
                  ResponseHeader header, int num_prompts, int n, bool stream,
                  bool include_usage, std::optional<int32_t> top_logprobs = {},
                  TokenText token_text = nullptr, PromptAnswers prompts = {});
  ~OpenAiResponder();

  // The sink of prompt `index` (valid while the responder lives; the
  // GenerateCall of that prompt holds the responder through it).
  GenerateSink* sink(int index);
  // The call of prompt `index`, for aborts; set once it started.
  void SetCall(int index, std::shared_ptr<GenerateCall> call);
  // Ends prompt `index` before it started (its admission failed).
  void FailChoice(int index, const absl::Status& status);
  // Keeps the responder alive until every choice is done (the calls hold
  // only its sinks), and aborts every started choice when the client goes
  // away. Call once, before the first call starts.
  void Start();

 private:
  class ChoiceSink;
  struct ChoiceState {
    std::string text;
    std::optional<std::string> finish_reason;
    radixkv::v1::Usage usage;
    bool role_sent = false;
    // The first chunk was applied (with the echo, when asked).
    bool started = false;
    nlohmann::ordered_json logprobs;
    int64_t text_offset = 0;
  };
  struct PromptState {
    // GenerateResponse.prompt_logprobs, once sample 0's first chunk came.
    bool have_logprobs = false;
    google::protobuf::RepeatedPtrField<radixkv::v1::TokenLogprobs> logprobs;
    // Echo with logprobs: chunks (choice, chunk) of other samples that came
    // before sample 0's first one, in arrival order.
    std::vector<std::pair<int, radixkv::v1::GenerateResponse>> held;
  };
  struct CallState {
    bool done = false;
    std::shared_ptr<GenerateCall> call;
  };

  void OnChunk(int index, const radixkv::v1::GenerateResponse& chunk,
               std::function<void(bool)> written);
  void OnChoiceDone(int index, const absl::Status& status);
  // Adds `chunk` of prompt `index` to its choice `choice` (after the echo
  // on the choice's first chunk); returns its stream events (none when not
  // streaming).
  std::string Apply(int index, int choice,
                    const radixkv::v1::GenerateResponse& chunk)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The stream's events of `chunk` for choice `index` with the text `text`
  // (the chunk's, after the echo) and the logprobs object `logprobs`.
  std::string EventsOf(int index, const std::string& text,
                       const radixkv::v1::GenerateResponse& chunk,
                       const nlohmann::ordered_json& logprobs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the request with `status` (kept when an error came first) and
  // returns the started calls to abort (outside the lock).
  std::vector<std::shared_ptr<GenerateCall>> FailLocked(
      const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers once every choice is done.
  void Complete() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AbortOthers(int index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<process::HttpExchange> exchange_;
  const ResponseHeader header_;
  const bool stream_;
  const bool include_usage_;
  const int n_;
  const std::optional<int32_t> top_logprobs_;
  const TokenText token_text_;
  const PromptAnswers prompt_answers_;
  // Echo with logprobs: a choice starts only once its prompt's logprobs
  // came.
  const bool echo_logprobs_;
  // The worker was asked for GenerateResponse.prompt_logprobs.
  const bool needs_prompt_logprobs_;
  std::vector<std::unique_ptr<ChoiceSink>> sinks_;

  absl::Mutex mu_;
  std::vector<ChoiceState> choices_ ABSL_GUARDED_BY(mu_);
  std::vector<CallState> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<PromptState> prompts_ ABSL_GUARDED_BY(mu_);
  int done_ ABSL_GUARDED_BY(mu_) = 0;
  bool stream_started_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status error_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<OpenAiResponder> self_ ABSL_GUARDED_BY(mu_);
};

}  // namespace radixkv::router::openai

#endif  // RADIXKV_ROUTER_OPENAI_OPENAI_RESPONDER_H_
