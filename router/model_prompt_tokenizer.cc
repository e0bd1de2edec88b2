#include "router/model_prompt_tokenizer.h"

#include <utility>

namespace radixkv::router {

absl::StatusOr<std::unique_ptr<ModelPromptTokenizer>>
ModelPromptTokenizer::Load(const std::string& model_dir) {
  auto tokenizer = worker::Tokenizer::Load(model_dir + "/tokenizer.model");
  if (!tokenizer.ok()) return tokenizer.status();
  return std::unique_ptr<ModelPromptTokenizer>(
      new ModelPromptTokenizer(*std::move(tokenizer)));
}

absl::StatusOr<std::vector<int32_t>> ModelPromptTokenizer::Encode(
    absl::string_view text) const {
  return tokenizer_->Encode(text, /*add_bos=*/true);
}

}  // namespace radixkv::router
