#include "model/tokenizer/incremental_detokenizer.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"

namespace radixkv::model {

absl::StatusOr<IncrementalDetokenizer> IncrementalDetokenizer::Create(
    const Tokenizer* tokenizer, absl::Span<const int32_t> prompt_ids,
    bool skip_special_tokens) {
  IncrementalDetokenizer d(tokenizer, skip_special_tokens);
  // Skipped specials decode to nothing and take no part in a decode, so they
  // are left out of the window entirely.
  std::vector<int32_t> context;
  for (auto it = prompt_ids.rbegin();
       it != prompt_ids.rend() && context.size() < kMaxPromptContextTokens;
       ++it) {
    if (!(skip_special_tokens && tokenizer->IsSpecial(*it))) {
      context.push_back(*it);
    }
  }
  std::reverse(context.begin(), context.end());
  // The window must start on a whole character: a cut one decodes to
  // U+FFFD (and ByteFallback turns a whole byte run into U+FFFD), which
  // would then differ from the full decode.
  size_t start = context.size() > kPromptContextTokens
                     ? context.size() - kPromptContextTokens
                     : 0;
  for (size_t s = start + 1; s-- > 0;) {
    absl::StatusOr<std::string> text = tokenizer->Decode(
        absl::MakeConstSpan(context).subspan(s), skip_special_tokens);
    if (!text.ok()) return text.status();
    if (!absl::StrContains(*text, utf8::kReplacementChar)) {
      start = s;
      break;
    }
  }
  d.ids_.assign(context.begin() + start, context.end());
  d.read_offset_ = d.ids_.size();
  return d;
}

absl::StatusOr<std::string> IncrementalDetokenizer::Append(int32_t id) {
  if (id < 0 || id >= tokenizer_->vocab_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token id ", id, " outside [0, ", tokenizer_->vocab_size(), ")"));
  }
  if (skip_special_tokens_ && tokenizer_->IsSpecial(id)) return std::string();
  ids_.push_back(id);
  const bool bound_hit = ids_.size() - read_offset_ > kMaxPendingTokens;
  absl::StatusOr<std::string> delta = Step(bound_hit);
  if (!delta.ok()) {
    ids_.pop_back();
    return delta;
  }
  if (bound_hit && delta->empty()) {
    // Tokens that decode to nothing: stop carrying them in the window.
    prefix_offset_ = read_offset_;
    read_offset_ = ids_.size();
  }
  return delta;
}

absl::StatusOr<std::string> IncrementalDetokenizer::Flush() {
  return Step(/*force=*/true);
}

absl::StatusOr<std::string> IncrementalDetokenizer::Step(bool force) {
  const absl::Span<const int32_t> all(ids_);
  absl::StatusOr<std::string> prefix_text = tokenizer_->Decode(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_),
      skip_special_tokens_);
  if (!prefix_text.ok()) return prefix_text.status();
  absl::StatusOr<std::string> new_text =
      tokenizer_->Decode(all.subspan(prefix_offset_), skip_special_tokens_);
  if (!new_text.ok()) return new_text.status();
  if (new_text->size() <= prefix_text->size() ||
      (!force && utf8::EndsWithReplacementChar(*new_text))) {
    return std::string();  // nothing complete yet
  }
  std::string delta = new_text->substr(prefix_text->size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  text_ += delta;
  return delta;
}

}  // namespace radixkv::model
