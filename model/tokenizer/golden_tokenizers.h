// Test support: the Hugging Face golden tokenizers of
// $RADIXKV_SHARED_DIR/golden/tokenizers (see its README.md): four
// tokenizer.json folders with cases.json made by `tokenizers` itself.
#ifndef RADIXKV_MODEL_TOKENIZER_GOLDEN_TOKENIZERS_H_
#define RADIXKV_MODEL_TOKENIZER_GOLDEN_TOKENIZERS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer/hf_tokenizer.h"

namespace radixkv::model::testing {

// The folder names under golden/tokenizers.
inline const std::vector<std::string>& GoldenTokenizerNames() {
  static const auto* const names = new std::vector<std::string>{
      "llama3-bpe", "qwen2-bpe", "gpt2-bytelevel", "llama2-spm-fast"};
  return *names;
}

// A gtest parameter name for a golden folder name ('-' -> '_').
inline std::string GoldenParamName(const std::string& name) {
  std::string out = name;
  for (char& c : out) {
    if (c == '-') c = '_';
  }
  return out;
}

// One case of cases.json.
struct GoldenCase {
  std::string text;
  std::vector<int32_t> ids;  // encode(text, add_special_tokens=False)
  std::vector<int32_t>
      ids_with_special;              // encode(text, add_special_tokens=True)
  std::string decoded;               // decode(ids)
  std::string decoded_skip_special;  // decode(ids_with_special, skip=True)
};

// Absolute path of golden/tokenizers; NOT_FOUND (with how to set
// RADIXKV_SHARED_DIR) when the shared folder is absent.
absl::StatusOr<std::string> GoldenTokenizersDir();

// Loads <dir>/<name>/tokenizer.json.
absl::StatusOr<std::unique_ptr<HfTokenizer>> LoadGoldenTokenizer(
    const std::string& name);

// Reads <dir>/<name>/cases.json.
absl::StatusOr<std::vector<GoldenCase>> LoadGoldenCases(
    const std::string& name);

}  // namespace radixkv::model::testing

#endif  // RADIXKV_MODEL_TOKENIZER_GOLDEN_TOKENIZERS_H_
