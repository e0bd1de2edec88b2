// UTF-8 helpers for the tokenizer pipeline: decoding code points of text
// already known to be valid, strict validation (Rust's `str` rules), and the
// lossy conversion of arbitrary bytes (Rust's `String::from_utf8_lossy`, which
// Hugging Face tokenizers' byte-level decoder uses).
#ifndef RADIXKV_MODEL_TOKENIZER_UTF8_H_
#define RADIXKV_MODEL_TOKENIZER_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace radixkv::model::utf8 {

// U+FFFD REPLACEMENT CHARACTER, UTF-8 encoded.
inline constexpr absl::string_view kReplacementChar = "\xEF\xBF\xBD";

// Byte length of the sequence a valid lead byte starts (1..4).
inline int SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Decodes the code point starting at s[*pos] and advances *pos past it.
// Precondition: `s` is valid UTF-8 and *pos < s.size() is a boundary.
inline char32_t DecodeValid(absl::string_view s, size_t* pos) {
  const unsigned char b0 = static_cast<unsigned char>(s[*pos]);
  const int n = SequenceLength(b0);
  char32_t cp = n == 1   ? b0
                : n == 2 ? (b0 & 0x1F)
                : n == 3 ? (b0 & 0x0F)
                         : b0 & 0x07;
  for (int k = 1; k < n; ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(s[*pos + k]) & 0x3F);
  }
  *pos += n;
  return cp;
}

// The last code point of non-empty valid UTF-8 `s`.
char32_t LastCodePoint(absl::string_view s);

// Appends the UTF-8 encoding of `cp` (a Unicode scalar value).
void Append(char32_t cp, std::string* out);

// True if `s` is well-formed UTF-8 (no overlongs, surrogates or values above
// U+10FFFF), the rule Rust's `str` enforces.
bool IsValid(absl::string_view s);

// Appends `bytes` with every maximal ill-formed subsequence replaced by one
// U+FFFD, exactly as Rust's `String::from_utf8_lossy` (the Unicode
// "substitution of maximal subparts" practice).
void AppendLossy(absl::string_view bytes, std::string* out);

// True if `s` ends with U+FFFD.
bool EndsWithReplacementChar(absl::string_view s);

}  // namespace radixkv::model::utf8

#endif  // RADIXKV_MODEL_TOKENIZER_UTF8_H_
