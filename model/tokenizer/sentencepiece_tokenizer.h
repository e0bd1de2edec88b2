// SentencePieceTokenizer: the Tokenizer of checkpoints that ship only a
// sentencepiece tokenizer.model (LLaMA 1/2 era), behaving as transformers'
// slow LlamaTokenizer does: special tokens written in the text (the model's
// control pieces such as "<s>", and "<unk>") are matched first and encoded
// as their ids, each remaining segment goes through sentencepiece (which
// adds its leading "\u2581"), and add_special_tokens puts BOS in front (EOS
// at the end when the tokenizer config asks for it).
//
// libsentencepiece runs inside the plug-in libradixkv_sentencepiece.so
// (sentencepiece_adapter.h says why), found in this order: the path in
// $RADIXKV_SENTENCEPIECE_PLUGIN; model/tokenizer/libradixkv_sentencepiece.so
// in the Bazel runfiles ($RUNFILES_DIR, $TEST_SRCDIR or <binary>.runfiles);
// the directory of the running binary. Deployments copy it next to the
// binary or set the variable.
#ifndef RADIXKV_MODEL_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
#define RADIXKV_MODEL_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/tokenizer/tokenizer.h"

extern "C" struct RadixkvSentencePieceApi;

namespace radixkv::model {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  struct Options {
    // What add_special_tokens adds (tokenizer_config.json add_bos_token /
    // add_eos_token; LlamaTokenizer's defaults).
    bool add_bos = true;
    bool add_eos = false;
  };

  // Loads a sentencepiece model file. NOT_FOUND when the file is missing;
  // INVALID_ARGUMENT with sentencepiece's message when it is not a
  // ModelProto; FAILED_PRECONDITION when the plug-in cannot be found or
  // loaded (the message lists the paths tried).
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(
      const std::string& model_path, Options options);
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(
      const std::string& model_path) {
    return Load(model_path, Options());
  }

  ~SentencePieceTokenizer() override;
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  absl::StatusOr<std::vector<int32_t>> Encode(
      absl::string_view text, bool add_special_tokens) const override;
  // With skip_special_tokens, sentencepiece's DecodeIds (control pieces
  // dropped, byte-fallback pieces merged, one leading U+2581 removed);
  // without, each special token's piece string stands between the decoded
  // runs of the others.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     bool skip_special_tokens) const override;
  int32_t vocab_size() const override;
  std::optional<int32_t> TokenToId(absl::string_view token) const override;
  std::optional<std::string> IdToToken(int32_t id) const override;
  bool IsSpecial(int32_t id) const override;

  int32_t bos_id() const;  // -1 if none
  int32_t eos_id() const;  // -1 if none

 private:
  SentencePieceTokenizer(const RadixkvSentencePieceApi* api, void* sp,
                         Options options);
  // Appends sentencepiece's ids of a segment without special tokens.
  absl::Status EncodePlain(absl::string_view text,
                           std::vector<int32_t>* out) const;

  const RadixkvSentencePieceApi* api_;
  void* sp_;  // SentencePieceProcessor owned through api_
  const Options options_;
  // The special tokens matched in text, longest first, with their ids.
  std::vector<std::pair<std::string, int32_t>> specials_;
};

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
