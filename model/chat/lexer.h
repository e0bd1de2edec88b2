// The jinja2 lexer as Hugging Face transformers configures it
// (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False,
// default delimiters): template text becomes data tokens with the
// whitespace control already applied, tags become begin/end tokens around
// name, string, number and operator tokens.
//
// Whitespace rules (jinja2 "Whitespace Control"): a block or comment tag
// eats the first newline after it (trim_blocks); spaces and tabs between a
// line start and a block or comment tag are removed (lstrip_blocks, not for
// `{{`); `{%-`/`{{-`/`{#-` strip all whitespace before the tag and
// `-%}`/`-}}`/`-#}` all whitespace after it; `{%+` keeps the whitespace
// before a block and `+%}` the newline after it.
#ifndef RADIXKV_MODEL_CHAT_LEXER_H_
#define RADIXKV_MODEL_CHAT_LEXER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace radixkv::model::chat {

// 1-based position in the (newline-normalized) template source; the column
// counts code points.
struct SourcePos {
  int line = 1;
  int column = 1;
};

// "line L, column C".
std::string FormatPos(SourcePos pos);

enum class TokenKind {
  kData,           // template text, whitespace control applied
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,  // text holds the decoded value
  kInteger,
  kFloat,
  kOperator,  // text holds the spelling: "+", "//", "==", "(", ...
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0.0;
  SourcePos pos;
};

// jinja2's source preparation: \r\n and \r become \n and one trailing
// newline is dropped (keep_trailing_newline=False).
std::string NormalizeTemplateSource(std::string_view source);

// Tokenizes a normalized source (valid UTF-8). The last token is kEof.
// INVALID_ARGUMENT with the position for unterminated tags, comments, raw
// blocks and strings, unbalanced brackets, unknown characters, integer
// literals beyond 64 bits and non-ASCII identifiers (refused).
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_LEXER_H_
