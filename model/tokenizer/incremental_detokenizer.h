// IncrementalDetokenizer: turns a growing sequence of generated token ids
// into text deltas for streaming, over any Tokenizer.
#ifndef RADIXKV_MODEL_TOKENIZER_INCREMENTAL_DETOKENIZER_H_
#define RADIXKV_MODEL_TOKENIZER_INCREMENTAL_DETOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/tokenizer/tokenizer.h"

namespace radixkv::model {

// Algorithm: the two-offset scheme of Hugging Face text-generation-inference
// (decode ids[prefix_offset:read_offset] and ids[prefix_offset:], emit the
// difference), so each step decodes only a short window, and the window
// starts a few tokens back so that a word's leading space comes out as in a
// full decode (decoders strip the first token's space).
//
// UTF-8 safety: while the decoded window ends in U+FFFD (a byte-level or
// byte-fallback character split across tokens is still incomplete), the text
// is held back, so a multi-byte character is emitted whole. Concatenating all
// deltas and Flush() equals Decode(prompt + generated)[Decode(prompt).size():]
// (with an empty prompt: Decode(generated)), for the tokenizers whose decode
// is prefix-stable (byte-level, Metaspace, sentencepiece-style).
//
// Bound: once more than kMaxPendingTokens tokens complete no text (a model
// emitting bytes that never form a character, or tokens that decode to
// nothing), the pending text is emitted as it decodes (with U+FFFD) or the
// window moves on, so a step never decodes more than a small window.
//
// Not thread-safe (one per generation stream).
class IncrementalDetokenizer {
 public:
  // Tokens decoded before the first generated one, from the prompt's end;
  // up to kMaxPromptContextTokens when the last ones do not start on a
  // whole character (a byte-level or byte-fallback character cut).
  static constexpr size_t kPromptContextTokens = 5;
  static constexpr size_t kMaxPromptContextTokens = 16;
  // Most tokens held back waiting for a character to complete.
  static constexpr size_t kMaxPendingTokens = 16;

  // `tokenizer` must outlive the result. `prompt_ids` are context only
  // (their text is not emitted). With `skip_special_tokens`, special tokens
  // produce no text (Tokenizer::Decode's skip_special_tokens).
  // INVALID_ARGUMENT if the prompt's last ids do not decode.
  static absl::StatusOr<IncrementalDetokenizer> Create(
      const Tokenizer* tokenizer, absl::Span<const int32_t> prompt_ids,
      bool skip_special_tokens);

  // Adds one generated token; returns the newly completed text (possibly
  // empty). INVALID_ARGUMENT for an id outside the vocabulary (state
  // unchanged).
  absl::StatusOr<std::string> Append(int32_t id);

  // Returns the held-back text at the end of generation (an incomplete
  // UTF-8 tail decodes to U+FFFD).
  absl::StatusOr<std::string> Flush();

  // All text emitted so far (the concatenated deltas).
  const std::string& text() const { return text_; }

 private:
  IncrementalDetokenizer(const Tokenizer* tokenizer, bool skip_special_tokens)
      : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // Emits the window's new text if it grew and is complete (or `force`).
  absl::StatusOr<std::string> Step(bool force);

  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
  std::string text_;
};

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_INCREMENTAL_DETOKENIZER_H_
