// ModelPromptTokenizer: PromptTokenizer over the served model's own
// sentencepiece tokenizer (worker/model/tokenizer.h), loaded from
// <model_dir>/tokenizer.model, so router and worker tokenize identically.
#ifndef RADIXKV_ROUTER_MODEL_PROMPT_TOKENIZER_H_
#define RADIXKV_ROUTER_MODEL_PROMPT_TOKENIZER_H_

#include <memory>
#include <string>

#include "router/prompt_tokenizer.h"
#include "worker/model/tokenizer.h"

namespace radixkv::router {

class ModelPromptTokenizer : public PromptTokenizer {
 public:
  // NOT_FOUND / INVALID_ARGUMENT when <model_dir>/tokenizer.model is missing
  // or invalid; FAILED_PRECONDITION when the sentencepiece plug-in is absent.
  static absl::StatusOr<std::unique_ptr<ModelPromptTokenizer>> Load(
      const std::string& model_dir);

  absl::StatusOr<std::vector<int32_t>> Encode(
      absl::string_view text) const override;

 private:
  explicit ModelPromptTokenizer(std::unique_ptr<worker::Tokenizer> tokenizer)
      : tokenizer_(std::move(tokenizer)) {}
  std::unique_ptr<worker::Tokenizer> tokenizer_;
};

}  // namespace radixkv::router

#endif  // RADIXKV_ROUTER_MODEL_PROMPT_TOKENIZER_H_
