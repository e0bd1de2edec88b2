#include "router/openai/chat_prompt.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "router/openai/openai_error.h"

namespace radixkv::router::openai {

absl::StatusOr<std::vector<int32_t>> RenderChatTokens(
    const ModelCatalog::Entry& model, const OpenAiRequest& request) {
  if (!model.chat_template.has_value()) {
    return BadParam("messages",
                    absl::StrCat("model '", model.name,
                                 "' has no chat template (tokenizer_config."
                                 "json chat_template or chat_template.jinja)"));
  }
  model::chat::ChatTemplateInputs in;
  in.messages = request.messages;
  in.add_generation_prompt = request.add_generation_prompt;
  in.bos_token = model.bos_token;
  in.eos_token = model.eos_token;
  in.documents = request.documents;
  in.extra = request.chat_template_kwargs;
  absl::StatusOr<std::string> text = model.chat_template->Render(in);
  if (!text.ok()) {
    if (absl::IsResourceExhausted(text.status())) return text.status();
    return BadParam("messages", absl::StrCat("chat template of ", model.name,
                                             ": ", text.status().message()));
  }
  if (static_cast<int64_t>(text->size()) > model.max_prompt_text_bytes) {
    return BadParam("messages",
                    absl::StrCat("the rendered conversation has ", text->size(),
                                 " bytes, more than model ", model.name,
                                 "'s context can hold"));
  }
  absl::StatusOr<std::vector<int32_t>> ids =
      model.tokenizer->Encode(*text, /*add_special_tokens=*/false);
  if (!ids.ok()) return ids.status();
  if (ids->empty()) {
    return BadParam("messages", "the rendered conversation is empty");
  }
  return ids;
}

}  // namespace radixkv::router::openai
