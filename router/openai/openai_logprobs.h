// The logprobs of OpenAI's responses, from GenerateResponse.logprobs:
// chat completions' {"content": [{"token", "logprob", "bytes",
// "top_logprobs": [{"token", "logprob", "bytes"}]}]} and the legacy
// completions' {"tokens", "token_logprobs", "top_logprobs": [{token:
// logprob}], "text_offset"} (OpenAI API reference).
#ifndef RADIXKV_ROUTER_OPENAI_OPENAI_LOGPROBS_H_
#define RADIXKV_ROUTER_OPENAI_OPENAI_LOGPROBS_H_

#include <cstdint>
#include <functional>
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

// Appends the entries of `more` (a LogprobsJson of the same endpoint) to
// `all`, which may be null (then it becomes `more`).
void AppendLogprobs(Endpoint endpoint, const nlohmann::ordered_json& more,
                    nlohmann::ordered_json* all);

}  // namespace radixkv::router::openai

#endif  // RADIXKV_ROUTER_OPENAI_OPENAI_LOGPROBS_H_
