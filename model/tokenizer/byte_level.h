// GPT-2's byte-level alphabet: each byte 0..255 is written as one printable
// Unicode character so that byte-level BPE works on text (OpenAI GPT-2
// `bytes_to_unicode`, tokenizers' pre_tokenizers/byte_level.rs). Printable
// Latin-1 bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) map to themselves,
// the other 68 to U+0100.. in byte order (space -> U+0120 'Ġ').
#ifndef RADIXKV_MODEL_TOKENIZER_BYTE_LEVEL_H_
#define RADIXKV_MODEL_TOKENIZER_BYTE_LEVEL_H_

#include <string>

#include "absl/strings/string_view.h"

namespace radixkv::model::byte_level {

// Code point of byte b's character.
char32_t ByteToChar(unsigned char b);

// The byte code point `c` stands for, or -1 if `c` is not in the alphabet.
int CharToByte(char32_t c);

// Appends the byte-level form of `bytes` (each byte as its character).
void AppendEncoded(absl::string_view bytes, std::string* out);

// Appends the bytes a byte-level token stands for, as tokenizers' ByteLevel
// decoder: every character mapped back to its byte, or, if the token holds a
// character outside the alphabet (an added token such as "<| x |>" with a
// space), the token's own UTF-8 bytes. `token` is valid UTF-8.
void AppendDecoded(absl::string_view token, std::string* out);

}  // namespace radixkv::model::byte_level

#endif  // RADIXKV_MODEL_TOKENIZER_BYTE_LEVEL_H_
