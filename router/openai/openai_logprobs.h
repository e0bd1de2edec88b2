// The logprobs of OpenAI's responses, from GenerateResponse.logprobs:
// chat completions' {"content": [{"token", "logprob", "bytes",
// "top_logprobs": [{"token", "logprob", "bytes"}]}]} and the legacy
// completions' {"tokens", "token_logprobs", "top_logprobs": [{token:
// logprob}], "text_offset"} (OpenAI API reference); and from
// GenerateResponse.prompt_logprobs the echoed prompt's part of the latter
// and vLLM's `prompt_logprobs` list.
#ifndef RADIXKV_ROUTER_OPENAI_OPENAI_LOGPROBS_H_
#define RADIXKV_ROUTER_OPENAI_OPENAI_LOGPROBS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "google/protobuf/repeated_ptr_field.h"
#include "nlohmann/json.hpp"
#include "radixkv/v1/common.pb.h"
#include "router/openai/openai_response.h"

namespace radixkv::router::openai {

// The text of one token id (the model's tokenizer, special tokens kept).
using TokenText = std::function<std::string(int32_t)>;

// The logprobs object of `entries` (one per generated token) in the format
// of `endpoint`, with at most `top` alternatives per token. For completions
// text_offset starts at *text_offset (characters of the choice's text
// before these tokens) and advances it by each token's text length.
nlohmann::ordered_json LogprobsJson(
    Endpoint endpoint,
    const google::protobuf::RepeatedPtrField<radixkv::v1::TokenLogprobs>&
        entries,
    int32_t top, const TokenText& token_text, int64_t* text_offset);

// The completions logprobs object of an echoed prompt: its first token
// `first_token_id` with token_logprobs and top_logprobs null (no context
// predicts it; OpenAI and vLLM answer null), then one entry per
// GenerateResponse.prompt_logprobs entry (prompt tokens 1, 2, ...) with at
// most `top` alternatives. text_offset as in LogprobsJson.
nlohmann::ordered_json EchoedPromptLogprobsJson(
    int32_t first_token_id,
    const google::protobuf::RepeatedPtrField<radixkv::v1::TokenLogprobs>&
        prompt_logprobs,
    int32_t top, const TokenText& token_text, int64_t* text_offset);

// The rank vLLM gives a prompt token at its position, from the worker's
// list of most likely tokens: position + 1 when it is among the first
// `top` of them (vLLM's top-k ranks); beyond those, vLLM's count of the
// vocabulary tokens at least as likely, which the list holds only when a
// less likely token follows the prompt token in it. nullopt when unknown
// (the prompt token is not in the list, or ties may reach past its end).
std::optional<int64_t> VllmPromptTokenRank(const radixkv::v1::TokenLogprobs& e,
                                           int32_t top);

// vLLM's `prompt_logprobs` (vllm/logprobs.py, one element per prompt
// token): null for the first token, then per position an object keyed by
// token id (as a string) of {"logprob", "rank", "decoded_token"}: the
// prompt token first, then the `top` most likely tokens (the prompt token
// once when it is among them). rank: VllmPromptTokenRank for the prompt
// token (null when unknown), position + 1 for the others.
nlohmann::ordered_json VllmPromptLogprobsJson(
    const google::protobuf::RepeatedPtrField<radixkv::v1::TokenLogprobs>&
        prompt_logprobs,
    int32_t top, const TokenText& token_text);

// Appends the entries of `more` (a LogprobsJson of the same endpoint) to
// `all`, which may be null (then it becomes `more`).
void AppendLogprobs(Endpoint endpoint, const nlohmann::ordered_json& more,
                    nlohmann::ordered_json* all);

}  // namespace radixkv::router::openai

#endif  // RADIXKV_ROUTER_OPENAI_OPENAI_LOGPROBS_H_
