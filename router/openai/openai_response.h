// The JSON the OpenAI API answers with, built from radixkv's streamed
// GenerateResponse: completion and chat completion objects, their stream
// chunks (server-sent events), usage with the prefix-cache hit as
// prompt_tokens_details.cached_tokens, and model lists.
#ifndef RADIXKV_ROUTER_OPENAI_OPENAI_RESPONSE_H_
#define RADIXKV_ROUTER_OPENAI_OPENAI_RESPONSE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "radixkv/v1/common.pb.h"

namespace radixkv::router::openai {

enum class Endpoint { kCompletions, kChat };

// Fields every object of one response shares.
struct ResponseHeader {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;       // "cmpl-..." or "chatcmpl-..."
  int64_t created = 0;  // Unix seconds
  std::string model;
};

// A fresh response id: "cmpl-" or "chatcmpl-" + 32 random hex digits.
std::string NewResponseId(Endpoint endpoint);

// "stop" for EOS and stop tokens/strings, "length" for max_tokens, "abort"
// otherwise; nullopt for an unfinished sequence.
std::optional<std::string> FinishReasonName(radixkv::v1::FinishReason reason,
                                            bool finished);

// {"prompt_tokens", "completion_tokens", "total_tokens",
//  "prompt_tokens_details": {"cached_tokens"}}, summed over `usages`.
nlohmann::ordered_json UsageJson(const std::vector<radixkv::v1::Usage>& usages);

// One finished choice of a non-streamed response.
struct Choice {
  std::string text;
  std::optional<std::string> finish_reason;
  // The choice's logprobs object (openai_logprobs.h); null when not asked.
  nlohmann::ordered_json logprobs;
  // Completions: vLLM's prompt_logprobs of the choice's prompt (a field of
  // the choice, after finish_reason, as vLLM's CompletionResponseChoice);
  // absent when not asked.
  std::optional<nlohmann::ordered_json> prompt_logprobs;
};

// The whole non-streamed response: choices (index = position) and usage.
// Chat: `prompt_logprobs` (vLLM's, of the one prompt) is a top-level field
// after usage, as vLLM's ChatCompletionResponse; absent when nullopt.
std::string ResponseBody(const ResponseHeader& header,
                         const std::vector<Choice>& choices,
                         const std::vector<radixkv::v1::Usage>& usages,
                         const std::optional<nlohmann::ordered_json>&
                             prompt_logprobs = std::nullopt);

// One server-sent event "data: {...}\n\n" of a stream: the delta of choice
// `index` (chat: a first chunk per choice carries the role), or its final
// chunk with `finish_reason`. `usage_null` adds "usage": null, as OpenAI
// does on every chunk when stream_options.include_usage is set.
// `logprobs`: the logprobs object of the chunk's tokens (null: none).
std::string ChunkEvent(const ResponseHeader& header, int index,
                       const std::string& text, bool first,
                       const std::optional<std::string>& finish_reason,
                       bool usage_null,
                       const nlohmann::ordered_json& logprobs = nullptr);
// The usage chunk (empty choices) sent before [DONE] with include_usage.
std::string UsageEvent(const ResponseHeader& header,
                       const std::vector<radixkv::v1::Usage>& usages);
// An error inside a stream that already started, then the end marker.
std::string ErrorEvent(const std::string& error_body);
inline constexpr char kDoneEvent[] = "data: [DONE]\n\n";

// GET /v1/models: {"object": "list", "data": [{"id", "object": "model",
// "created", "owned_by": "radixkv"}]}.
std::string ModelListBody(const std::vector<std::string>& models,
                          int64_t created);

}  // namespace radixkv::router::openai

#endif  // RADIXKV_ROUTER_OPENAI_OPENAI_RESPONSE_H_
