#include "model/chat/lexer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace radixkv::model::chat {
namespace {

// The data tokens of `source`, joined with '|'.
std::string DataOf(const std::string& source) {
  absl::StatusOr<std::vector<Token>> tokens =
      Tokenize(NormalizeTemplateSource(source));
  EXPECT_TRUE(tokens.ok()) << tokens.status();
  if (!tokens.ok()) return "";
  std::string out;
  for (const Token& t : *tokens) {
    if (t.kind == TokenKind::kData) out += t.text + "|";
  }
  return out;
}

std::string ErrorOf(const std::string& source) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(source);
  EXPECT_FALSE(tokens.ok());
  return tokens.ok() ? "" : std::string(tokens.status().message());
}

TEST(LexerTest, NormalizesNewlinesAndDropsOneTrailingNewline) {
  EXPECT_EQ(NormalizeTemplateSource("a\r\nb\rc\n"), "a\nb\nc");
  EXPECT_EQ(NormalizeTemplateSource("a\n\n"), "a\n");
  EXPECT_EQ(NormalizeTemplateSource("\n"), "");
}

TEST(LexerTest, TrimBlocksEatsTheNewlineAfterBlockAndCommentTags) {
  EXPECT_EQ(DataOf("{% if x %}\nyes\n{% endif %}\nafter"), "yes\n|after|");
  EXPECT_EQ(DataOf("a {# c #}\nb"), "a |b|");
  // Not after {{ }}.
  EXPECT_EQ(DataOf("{{ x }}\nb"), "\nb|");
  // `+%}` keeps it.
  EXPECT_EQ(DataOf("{% if x +%}\nb{% endif %}"), "\nb|");
}

TEST(LexerTest, LstripBlocksRemovesIndentBeforeBlockTagsOnly) {
  EXPECT_EQ(DataOf("a\n    {% if x %}b{% endif %}"), "a\n|b|");
  EXPECT_EQ(DataOf("a\n \t {# c #}b"), "a\n|b|");
  EXPECT_EQ(DataOf("a\n    {{ x }}"), "a\n    |");
  // Text before the tag on the same line stops it; `{%+` disables it.
  EXPECT_EQ(DataOf("a  {% if x %}{% endif %}"), "a  |");
  EXPECT_EQ(DataOf("a\n  {%+ if x %}{% endif %}"), "a\n  |");
  // At the start of the template, and after a tag that ate a newline.
  EXPECT_EQ(DataOf("  {% if x %}\n  {% endif %}z"), "z|");
}

TEST(LexerTest, MinusStripsAllWhitespaceOnItsSide) {
  EXPECT_EQ(DataOf("a \n\t{%- if x -%} \n b{%- endif %}"), "a|b|");
  EXPECT_EQ(DataOf("x  {{- 1 -}}  \n y"), "x|y|");
  EXPECT_EQ(DataOf("x\u3000{{- 1 }}"), "x|");  // Python whitespace, U+3000
}

TEST(LexerTest, RawBlocksKeepTheirText) {
  EXPECT_EQ(DataOf("{% raw %}{{ x }} {% if %}{% endraw %}"),
            "{{ x }} {% if %}|");
  EXPECT_EQ(DataOf("a {%- raw -%}  x  {%- endraw %}"), "a|x|");
}

TEST(LexerTest, TagTokensAndValues) {
  absl::StatusOr<std::vector<Token>> tokens =
      Tokenize("{{ a.b[0] ~ 'x\\ny' // 2 ** 1.5e1 != 0x1F }}");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  std::vector<std::string> texts;
  for (const Token& t : *tokens) texts.push_back(t.text);
  const std::vector<std::string> expected = {
      "{{", "a", ".",  "b",     "[",  "0",    "]",  "~", "x\ny",
      "//", "2", "**", "1.5e1", "!=", "0x1F", "}}", ""};
  EXPECT_EQ(texts, expected);
  EXPECT_EQ((*tokens)[14].int_value, 31);
  EXPECT_DOUBLE_EQ((*tokens)[12].float_value, 15.0);
  EXPECT_EQ((*tokens)[8].kind, TokenKind::kString);
  EXPECT_EQ(tokens->back().kind, TokenKind::kEof);
}

TEST(LexerTest, BracesInsideExpressionsDoNotEndTheTag) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize("{{ {'a': {}}}}tail");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ((*tokens)[tokens->size() - 2].text, "tail");
}

TEST(LexerTest, StringEscapesFollowPythonUnicodeEscape) {
  absl::StatusOr<std::vector<Token>> tokens =
      Tokenize(R"({{ '\x41\u00e9\U0001F600\d\101' "q\"" '\é' }})");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ((*tokens)[1].text, "A\xc3\xa9\xf0\x9f\x98\x80\\dA");
  EXPECT_EQ((*tokens)[2].text, "q\"");
  // A backslash before a non-ASCII character yields its \x escape text.
  EXPECT_EQ((*tokens)[3].text, "\\xe9");
}

TEST(LexerTest, PositionsAreLineAndCodePointColumn) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize("é\n  {{ x }}");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ((*tokens)[1].pos.line, 2);
  EXPECT_EQ((*tokens)[1].pos.column, 3);
  EXPECT_EQ(FormatPos((*tokens)[2].pos), "line 2, column 6");
}

TEST(LexerTest, Errors) {
  EXPECT_EQ(ErrorOf("{{ 'abc }}"),
            "line 1, column 4: unterminated string literal");
  EXPECT_EQ(ErrorOf("{{ (1 }}"),
            "line 1, column 7: unexpected '}', expected ')'");
  EXPECT_EQ(ErrorOf("{{ 1 "),
            "line 1, column 1: unexpected end of template, expected end of "
            "print statement '}}'");
  EXPECT_EQ(ErrorOf("{{ ) }}"), "line 1, column 4: unexpected ')'");
  EXPECT_EQ(ErrorOf("{{ (] }}"),
            "line 1, column 5: unexpected ']', expected ')'");
  EXPECT_EQ(ErrorOf("{{ $ }}"), "line 1, column 4: unexpected char '$'");
  EXPECT_EQ(ErrorOf("{# open"), "line 1, column 1: Missing end of comment tag");
  EXPECT_EQ(ErrorOf("{% raw %}x"),
            "line 1, column 1: Missing end of raw directive");
  EXPECT_EQ(ErrorOf("{{ café }}"),
            "line 1, column 7: non-ASCII identifiers are not supported");
  EXPECT_EQ(
      ErrorOf("{{ 99999999999999999999 }}"),
      "line 1, column 4: integer literal beyond 64 bits is not supported");
  EXPECT_EQ(ErrorOf("{{ '\\x4' }}"),
            "line 1, column 4: truncated \\xXX escape");
  EXPECT_EQ(ErrorOf("{{ '\\N{DASH}' }}"),
            "line 1, column 4: \\N{...} escapes in string literals are not "
            "supported");
}

}  // namespace
}  // namespace radixkv::model::chat
