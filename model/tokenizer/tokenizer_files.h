// Reads what a checkpoint (or tokenizer) folder says about special tokens,
// stop tokens and chat templates, as Hugging Face transformers reads it:
//   tokenizer_config.json   bos_token, eos_token, pad_token, unk_token (a
//                           string or an AddedToken object {"content": ...}),
//                           add_bos_token, add_eos_token, chat_template (a
//                           string, or a list of {"name", "template"})
//   chat_template.jinja     the default template; when present it replaces
//                           every template of tokenizer_config.json
//                           (transformers 5)
//   additional_chat_templates/<name>.jinja   further named templates
//   generation_config.json  eos_token_id (an int or a list: Llama 3 stops on
//                           several), bos_token_id
//   config.json             eos_token_id / bos_token_id when
//                           generation_config.json has none (also under
//                           "text_config")
// The chat templates are returned as text; rendering them is //model/chat's.
#ifndef RADIXKV_MODEL_TOKENIZER_TOKENIZER_FILES_H_
#define RADIXKV_MODEL_TOKENIZER_TOKENIZER_FILES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer/tokenizer.h"

namespace radixkv::model {

// One chat template: "default" for the unnamed one.
struct ChatTemplateSource {
  std::string name;
  std::string text;
};

struct TokenizerFiles {
  // Special token strings of tokenizer_config.json (absent or null: none).
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> unk_token;
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;

  // bos_token's id in the tokenizer, else the configs' bos_token_id.
  std::optional<int32_t> bos_token_id;

  // The ids generation stops on, without repeats, in this order: the
  // eos_token_id of generation_config.json (else config.json), then
  // eos_token's id in the tokenizer if not already listed.
  std::vector<int32_t> eos_token_ids;

  // "default" first when there is one, then the others by name.
  std::vector<ChatTemplateSource> chat_templates;

  // The template called `name`, or nullptr.
  const ChatTemplateSource* FindChatTemplate(absl::string_view name) const;
};

// Reads the files above from `dir` (each optional). `tokenizer` (may be
// null) resolves token strings to ids. INVALID_ARGUMENT naming the file and
// field for malformed JSON or a field of the wrong type (e.g. an
// eos_token_id that is not a non-negative integer or list of them);
// NOT_FOUND if `dir` is not a readable folder.
absl::StatusOr<TokenizerFiles> LoadTokenizerFiles(const std::string& dir,
                                                  const Tokenizer* tokenizer);

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_TOKENIZER_FILES_H_
