// HfTokenizer: a Hugging Face tokenizer.json (the `tokenizers` library's
// format), encoding and decoding byte for byte as `tokenizers` does.
//
// Pipeline (tokenizers' TokenizerImpl::encode): added tokens are split out of
// the text, the rest is normalized, pre-tokenized and split into BPE tokens,
// then the post-processor adds special tokens. Supported components:
//   normalizer      NFC NFD NFKC NFKD Lowercase Strip Prepend Replace Sequence
//   pre_tokenizer   Split ByteLevel Metaspace Digits Punctuation Whitespace
//                   WhitespaceSplit Sequence
//   model           BPE (no dropout)
//   post_processor  TemplateProcessing BertProcessing RobertaProcessing
//                   ByteLevel Sequence
//   decoder         ByteLevel Metaspace Replace(String) ByteFallback Fuse
//                   Strip Sequence
// Every other component, a non-null truncation or padding, and other model
// types (WordPiece, Unigram, WordLevel) are refused at load with
// INVALID_ARGUMENT naming the type and its JSON path.
#ifndef RADIXKV_MODEL_TOKENIZER_HF_TOKENIZER_H_
#define RADIXKV_MODEL_TOKENIZER_HF_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/tokenizer/added_vocabulary.h"
#include "model/tokenizer/bpe_model.h"
#include "model/tokenizer/decoder.h"
#include "model/tokenizer/normalizer.h"
#include "model/tokenizer/post_processor.h"
#include "model/tokenizer/pre_tokenizer.h"
#include "model/tokenizer/tokenizer.h"

namespace radixkv::model {

// Immutable after loading; const methods are thread-safe (the BPE word
// cache is internally synchronized).
class HfTokenizer : public Tokenizer {
 public:
  // Largest text Encode accepts, in bytes (piece offsets are 32-bit).
  static constexpr size_t kMaxTextBytes = size_t{1} << 30;

  // Parses tokenizer.json content. INVALID_ARGUMENT for malformed JSON, an
  // unsupported component (named with its path, e.g. "normalizer
  // 'BertNormalizer' at normalizer is not supported"), or inconsistent
  // vocabulary data.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> FromJson(
      absl::string_view json);

  // Reads and parses a tokenizer.json file. NOT_FOUND if it cannot be read;
  // otherwise as FromJson.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> LoadFile(
      const std::string& path);

  // Tokenizer interface. Encode: INVALID_ARGUMENT for invalid UTF-8 or more
  // than kMaxTextBytes.
  absl::StatusOr<std::vector<int32_t>> Encode(
      absl::string_view text, bool add_special_tokens) const override;
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                     bool skip_special_tokens) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> TokenToId(absl::string_view token) const override;
  std::optional<std::string> IdToToken(int32_t id) const override;
  bool IsSpecial(int32_t id) const override;

 private:
  HfTokenizer() = default;
  absl::Status Load(const json_fields::Json& root);
  const std::string* TokenString(int32_t id) const;

  std::unique_ptr<Normalizer> normalizer_;       // null: none
  std::unique_ptr<PreTokenizer> pre_tokenizer_;  // null: none
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<PostProcessor> post_processor_;  // null: none
  std::unique_ptr<Decoder> decoder_;               // null: join with " "
  AddedVocabulary added_;
  int32_t vocab_size_ = 0;
};

}  // namespace radixkv::model

#endif  // RADIXKV_MODEL_TOKENIZER_HF_TOKENIZER_H_
