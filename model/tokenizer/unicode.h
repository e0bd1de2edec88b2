// Unicode character properties and transformations the Hugging Face
// tokenizers pipeline relies on, on top of ICU. Each predicate names the Rust
// function whose behaviour it reproduces (tokenizers is written in Rust).
#ifndef RADIXKV_MODEL_TOKENIZER_UNICODE_H_
#define RADIXKV_MODEL_TOKENIZER_UNICODE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace radixkv::model::unicode {

// Rust `char::is_whitespace`: the Unicode White_Space property.
bool IsWhitespace(char32_t c);

// Rust `char::is_numeric`: general category Nd, Nl or No.
bool IsNumeric(char32_t c);

// tokenizers' `is_punc`: ASCII punctuation (Rust
// `char::is_ascii_punctuation`, which includes ASCII symbols such as `$`)
// or any general category P*.
bool IsPunctuation(char32_t c);

// Rust regex `\w` (UTS #18 Annex C): Alphabetic, M*, Nd, Pc or
// Join_Control. tokenizers' AddedVocabulary `single_word` test uses it.
bool IsRegexWordChar(char32_t c);

// Unicode normalization forms (tokenizers' NFC, NFD, NFKC, NFKD normalizers).
enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// Replaces *text (valid UTF-8) by its normalization in `form`. INTERNAL if
// ICU fails (it does not on valid input).
absl::Status Normalize(NormalForm form, std::string* text);

// Appends the lowercase of valid UTF-8 `text` as tokenizers' Lowercase
// normalizer does: each character mapped alone by Rust `char::to_lowercase`
// (full mapping, no context, so a final capital sigma becomes U+03C3).
void AppendLowercase(absl::string_view text, std::string* out);

}  // namespace radixkv::model::unicode

#endif  // RADIXKV_MODEL_TOKENIZER_UNICODE_H_
