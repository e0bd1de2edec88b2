// Decoding of jinja2 string literals: jinja2's lexer runs the text between
// the quotes through Python's "unicode-escape" codec after encoding
// non-ASCII characters with "backslashreplace", so \n, \t, \xhh, \uhhhh,
// \Uhhhhhhhh, octal escapes and backslash-newline work as in Python, unknown
// escapes such as \d stay as written, and a backslash before a non-ASCII
// character yields the text of that character's \x/\u/\U escape.
#ifndef RADIXKV_MODEL_CHAT_STRING_LITERAL_H_
#define RADIXKV_MODEL_CHAT_STRING_LITERAL_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace radixkv::model::chat {

// Decodes the UTF-8 text between a literal's quotes. INVALID_ARGUMENT for
// truncated \x/\u/\U escapes, code points above U+10FFFF, surrogates and
// \N{...} (refused: needs the Unicode name database).
absl::StatusOr<std::string> DecodeStringLiteral(std::string_view body);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_STRING_LITERAL_H_
