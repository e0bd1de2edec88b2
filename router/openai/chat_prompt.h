// The prompt of an OpenAI chat request: its messages rendered with the
// model's chat template (model/chat, as transformers' apply_chat_template)
// and tokenized without adding special tokens (the template writes them,
// as vLLM tokenizes chat prompts).
#ifndef RADIXKV_ROUTER_OPENAI_CHAT_PROMPT_H_
#define RADIXKV_ROUTER_OPENAI_CHAT_PROMPT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "router/model_catalog.h"
#include "router/openai/openai_request.h"

namespace radixkv::router::openai {

// INVALID_ARGUMENT naming "messages" when the model has no chat template,
// the template raises (raise_exception) or fails, or the prompt is longer
// than the model's context; RESOURCE_EXHAUSTED when rendering reaches a
// renderer limit.
absl::StatusOr<std::vector<int32_t>> RenderChatTokens(
    const ModelCatalog::Entry& model, const OpenAiRequest& request);

}  // namespace radixkv::router::openai

#endif  // RADIXKV_ROUTER_OPENAI_CHAT_PROMPT_H_
