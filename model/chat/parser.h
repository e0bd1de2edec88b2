// The jinja2 parser over lexer tokens: statements (for, if, set, macro,
// call, filter, with, print, break, continue, generation) and expressions
// with jinja2's precedence (`if`-`else` < or < and < not < comparisons and
// `in` < + - < ~ < * / // % < ** < unary - + < filters `|` and tests `is` <
// calls, `.attr` and `[index]`).
#ifndef RADIXKV_MODEL_CHAT_PARSER_H_
#define RADIXKV_MODEL_CHAT_PARSER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "model/chat/ast.h"
#include "model/chat/lexer.h"

namespace radixkv::model::chat {

// Nesting depth (statements inside statements, expressions inside
// expressions) beyond which parsing fails instead of recursing.
inline constexpr int kMaxParseDepth = 200;

// Parses a token stream (ending with kEof). INVALID_ARGUMENT with the
// position for syntax errors, unknown tags, filters and tests (jinja2
// rejects those at compile time too), `break`/`continue` outside a loop, and
// the features refused by name: `{% block %}`, `{% extends %}`,
// `{% include %}`, `{% import %}`, `{% from %}`, `{% autoescape %}`,
// recursive loops, dotted filter/test names, and the filters and tests
// listed in filters.h / jinja_tests.h as not supported.
absl::StatusOr<TemplateAst> ParseTemplate(std::vector<Token> tokens);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_PARSER_H_
