// Tokenizer: text <-> token ids through a sentencepiece model
// (tokenizer.model, as shipped with LLaMA-family checkpoints), plus
// IncrementalDetokenizer for streaming text.
#ifndef RADIXKV_WORKER_MODEL_TOKENIZER_H_
#define RADIXKV_WORKER_MODEL_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/tokenizer/sentencepiece_tokenizer.h"

namespace radixkv::worker {

// Thread-compatible; const methods may be called concurrently.
//
// libsentencepiece runs inside the plug-in libradixkv_sentencepiece.so
// (see sentencepiece_adapter.h for why), found in this order: the path in
// $RADIXKV_SENTENCEPIECE_PLUGIN; worker/model/libradixkv_sentencepiece.so in
// the Bazel runfiles ($RUNFILES_DIR, $TEST_SRCDIR or <binary>.runfiles); the
// directory of the running binary. Deployments copy it next to the binary.
class Tokenizer {
 public:
  // Loads a sentencepiece model file. NOT_FOUND / INVALID_ARGUMENT with
  // sentencepiece's message when the file is missing or not a ModelProto;
  // FAILED_PRECONDITION when the plug-in cannot be found or loaded (the
  // message lists the paths tried).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(
      const std::string& model_path);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Encodes UTF-8 `text` to token ids ([1] + sp.encode(text) with add_bos,
  // the LLaMA prompt convention). INVALID_ARGUMENT on sentencepiece failure.
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                              bool add_bos) const;

  // Decodes ids to UTF-8 text, exactly like sentencepiece's DecodeIds:
  // control tokens (BOS/EOS) are dropped, byte-fallback pieces are merged
  // into UTF-8, one leading U+2581 space is removed. INVALID_ARGUMENT if an id
  // is outside [0, vocab_size).
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const;

  int32_t vocab_size() const;
  int32_t bos_id() const;  // -1 if none
  int32_t eos_id() const;  // -1 if none

 private:
  explicit Tokenizer(std::unique_ptr<model::SentencePieceTokenizer> sp);
  std::unique_ptr<model::SentencePieceTokenizer> sp_;
};

// Turns a growing token sequence into text deltas for streaming. Each delta
// is valid UTF-8 and never splits a character: while the decoded tail ends in
// an incomplete byte-fallback sequence (decoded as U+FFFD) the text is held
// back until the character completes. Concatenating all deltas (plus Flush())
// equals the decode of the generated ids in the context of the prompt, i.e.
// a word's leading space is kept even for the first generated token.
//
// Algorithm: the two-offset scheme of HF text-generation-inference
// (decode ids[prefix_offset:read_offset] and ids[prefix_offset:], emit the
// difference), so each step decodes only a short window.
class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive this object. `prompt_ids` are context only (their
  // text is not emitted).
  IncrementalDetokenizer(const Tokenizer* tokenizer,
                         absl::Span<const int32_t> prompt_ids);

  // Adds one generated token; returns the newly completed text (possibly
  // empty). INVALID_ARGUMENT for an out-of-range id.
  absl::StatusOr<std::string> Append(int32_t id);

  // Returns any held-back text (an incomplete UTF-8 tail decodes to U+FFFD)
  // at the end of generation.
  absl::StatusOr<std::string> Flush();

  // All text emitted so far (sum of the deltas).
  const std::string& text() const { return text_; }

 private:
  const Tokenizer* tokenizer_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;
  size_t read_offset_ = 0;
  std::string text_;
};

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_MODEL_TOKENIZER_H_
