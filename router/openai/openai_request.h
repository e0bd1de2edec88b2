// The OpenAI request bodies the router serves, parsed into radixkv's own
// GenerateRequest. Parameters follow the OpenAI API reference
// (/v1/completions, /v1/chat/completions) and vLLM's extensions (top_k,
// min_p, repetition_penalty, ignore_eos, priority, cache_salt,
// prompt_logprobs, chat_template_kwargs, add_generation_prompt; vLLM's
// vllm/entrypoints/openai/protocol.py). A parameter that would
// change the output and is not implemented is INVALID_ARGUMENT naming it
// (BadParam), never ignored; so is every unknown parameter.
#ifndef RADIXKV_ROUTER_OPENAI_OPENAI_REQUEST_H_
#define RADIXKV_ROUTER_OPENAI_OPENAI_REQUEST_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "radixkv/v1/common.pb.h"

namespace radixkv::router::openai {

// Prompts per /v1/completions request at most (a list of prompts runs as
// that many requests).
inline constexpr int kMaxPromptsPerRequest = 64;
// max_tokens of /v1/completions when the request leaves it out (OpenAI's).
inline constexpr int32_t kDefaultCompletionMaxTokens = 16;

// One prompt of /v1/completions: text, or token ids.
struct CompletionPrompt {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
};

struct OpenAiRequest {
  std::string model;
  // /v1/completions: one or more prompts.
  std::vector<CompletionPrompt> prompts;
  // /v1/chat/completions: the messages (each content a string, or a list of
  // {"type": "text"} parts) and the template's extra variables.
  nlohmann::ordered_json messages;
  nlohmann::ordered_json chat_template_kwargs =
      nlohmann::ordered_json::object();
  std::optional<nlohmann::ordered_json> documents;
  bool add_generation_prompt = true;
  // Sampling, priority, cache_salt, model, return_text; no prompt. Its
  // max_new_tokens is 0 when a chat request leaves max_tokens out (the
  // rest of the model's context, decided once the prompt is tokenized).
  radixkv::v1::GenerateRequest base;
  bool stream = false;
  // stream_options.include_usage.
  bool include_usage = false;
  // Set when logprobs are asked for (completions: logprobs = k; chat:
  // logprobs true with top_logprobs = k, 0 when left out): the number of
  // alternatives per token, [0, 20].
  std::optional<int32_t> top_logprobs;
  // /v1/completions `echo`: each choice's text (and, with logprobs, its
  // logprobs object) starts with the prompt.
  bool echo = false;
  // vLLM's `prompt_logprobs`: the alternatives per prompt position, [0, 20],
  // answered as the response's `prompt_logprobs` (non-streamed only; a
  // streamed 0 is accepted and answers nothing, as vLLM). nullopt: not asked.
  std::optional<int32_t> prompt_logprobs;
};

// Parses a /v1/completions body. INVALID_ARGUMENT (with the param) for
// malformed JSON, a missing or empty model or prompt, values out of range,
// parameters not implemented (suffix, best_of > 1, logit_bias, echo with
// max_tokens 0) and unknown parameters. n (1..64), logprobs (0..20),
// presence_penalty and frequency_penalty ([-2, 2]), repetition_penalty
// ((0, 2]) and min_p ([0, 1]) map to GenerateRequest (definitions in
// common.proto). echo with logprobs = k and prompt_logprobs = p (both
// endpoints; > 0 refused with stream, as vLLM) set
// SamplingParams.prompt_logprobs to the larger of k and p.
absl::StatusOr<OpenAiRequest> ParseCompletionRequest(absl::string_view body);

// Parses a /v1/chat/completions body. As ParseCompletionRequest, plus
// messages (a non-empty array of objects with a string role; content a
// string, null, or a list of text parts: image, audio and other parts are
// refused naming messages[i].content[j].type), and refuses tools,
// tool_choice, functions, response_format other than {"type": "text"},
// modalities, audio, reasoning_effort, continue_final_message; logprobs is a
// boolean and top_logprobs (0..20) needs logprobs true.
absl::StatusOr<OpenAiRequest> ParseChatRequest(absl::string_view body);

}  // namespace radixkv::router::openai

#endif  // RADIXKV_ROUTER_OPENAI_OPENAI_REQUEST_H_
