// Tokenizer: the text <-> token id interface a server uses, whatever the
// tokenizer file format (Hugging Face tokenizer.json, sentencepiece).
#ifndef RADIXKV_MODEL_TOKENIZER_TOKENIZER_H_
#define RADIXKV_MODEL_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace radixkv::model {

// Implementations are thread-compatible and their const methods may be
// called concurrently.
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encodes UTF-8 `text` to token ids. Special tokens written in the text
  // are recognised and encoded as their ids. `add_special_tokens` applies the
  // tokenizer's post-processing (e.g. a leading BOS), as Hugging Face's
  // `encode(text, add_special_tokens=...)`. INVALID_ARGUMENT if `text` is not
  // valid UTF-8. The cost is linear in the text (plus the model's per-word
  // cost); the caller bounds the text size.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(
      absl::string_view text, bool add_special_tokens) const = 0;

  // Decodes ids to UTF-8 text, as Hugging Face's `decode(ids,
  // skip_special_tokens=...)`; `skip_special_tokens` drops special tokens
  // (BOS, EOS, chat markers). Bytes that do not form UTF-8 (e.g. a partial
  // character at the end) decode to U+FFFD. INVALID_ARGUMENT if an id is
  // outside [0, vocab_size()) or has no token.
  virtual absl::StatusOr<std::string> Decode(
      absl::Span<const int32_t> ids, bool skip_special_tokens) const = 0;

  // Number of token ids: every valid id is in [0, vocab_size()).
  virtual int32_t vocab_size() const = 0;

  // The id of a token given as its vocabulary string (e.g. "<|eot_id|>",
  // "Ġthe"); nullopt if there is none.
  virtual std::optional<int32_t> TokenToId(absl::string_view token) const = 0;

  // The vocabulary string of `id`; nullopt if `id` has no token.
  virtual std::optional<std::string> IdToToken(int32_t id) const = 0;

  // True if `id` is a special token (skipped by skip_special_tokens).
  virtual bool IsSpecial(int32_t id) const = 0;
};

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_TOKENIZER_H_
