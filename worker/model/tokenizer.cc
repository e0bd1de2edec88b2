#include "worker/model/tokenizer.h"

#include <algorithm>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/sentencepiece_tokenizer.h"

namespace radixkv::worker {
namespace {

// U+FFFD REPLACEMENT CHARACTER in UTF-8: what sentencepiece produces for an
// incomplete byte-fallback sequence.
constexpr absl::string_view kReplacementChar = "\xEF\xBF\xBD";

bool EndsWithReplacementChar(absl::string_view s) {
  return s.size() >= kReplacementChar.size() &&
         s.substr(s.size() - kReplacementChar.size()) == kReplacementChar;
}

// Number of context tokens decoded before the first generated one, so the
// window sees the same leading-space situation as a full decode.
constexpr size_t kPromptContextTokens = 5;

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(
    const std::string& model_path) {
  absl::StatusOr<std::unique_ptr<model::SentencePieceTokenizer>> sp =
      model::SentencePieceTokenizer::Load(model_path);
  if (!sp.ok()) return sp.status();
  return std::unique_ptr<Tokenizer>(new Tokenizer(*std::move(sp)));
}

Tokenizer::Tokenizer(std::unique_ptr<model::SentencePieceTokenizer> sp)
    : sp_(std::move(sp)) {}

Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text,
                                                       bool add_bos) const {
  return sp_->Encode(text, add_bos);
}

absl::StatusOr<std::string> Tokenizer::Decode(
    absl::Span<const int32_t> ids) const {
  return sp_->Decode(ids, /*skip_special_tokens=*/true);
}

int32_t Tokenizer::vocab_size() const { return sp_->vocab_size(); }
int32_t Tokenizer::bos_id() const { return sp_->bos_id(); }
int32_t Tokenizer::eos_id() const { return sp_->eos_id(); }

IncrementalDetokenizer::IncrementalDetokenizer(
    const Tokenizer* tokenizer, absl::Span<const int32_t> prompt_ids)
    : tokenizer_(tokenizer) {
  const size_t keep = std::min(prompt_ids.size(), kPromptContextTokens);
  ids_.assign(prompt_ids.end() - keep, prompt_ids.end());
  prefix_offset_ = 0;
  read_offset_ = ids_.size();
}

absl::StatusOr<std::string> IncrementalDetokenizer::Append(int32_t id) {
  ids_.push_back(id);
  absl::Span<const int32_t> all(ids_);
  absl::StatusOr<std::string> prefix_text = tokenizer_->Decode(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_));
  if (!prefix_text.ok()) return prefix_text.status();
  absl::StatusOr<std::string> new_text =
      tokenizer_->Decode(all.subspan(prefix_offset_));
  if (!new_text.ok()) {
    ids_.pop_back();
    return new_text.status();
  }
  if (new_text->size() <= prefix_text->size() ||
      EndsWithReplacementChar(*new_text)) {
    return std::string();  // nothing complete yet
  }
  std::string delta = new_text->substr(prefix_text->size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  text_ += delta;
  return delta;
}

absl::StatusOr<std::string> IncrementalDetokenizer::Flush() {
  absl::Span<const int32_t> all(ids_);
  absl::StatusOr<std::string> prefix_text = tokenizer_->Decode(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_));
  if (!prefix_text.ok()) return prefix_text.status();
  absl::StatusOr<std::string> new_text =
      tokenizer_->Decode(all.subspan(prefix_offset_));
  if (!new_text.ok()) return new_text.status();
  if (new_text->size() <= prefix_text->size()) return std::string();
  std::string delta = new_text->substr(prefix_text->size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  text_ += delta;
  return delta;
}

}  // namespace radixkv::worker
