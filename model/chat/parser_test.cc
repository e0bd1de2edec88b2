#include "model/chat/parser.h"

#include <string>

#include "gtest/gtest.h"
#include "model/chat/lexer.h"

namespace radixkv::model::chat {
namespace {

absl::StatusOr<TemplateAst> ParseSource(const std::string& source) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(source);
  if (!tokens.ok()) return tokens.status();
  return ParseTemplate(std::move(*tokens));
}

std::string ErrorOf(const std::string& source) {
  absl::StatusOr<TemplateAst> ast = ParseSource(source);
  EXPECT_FALSE(ast.ok()) << source;
  if (ast.ok()) return "";
  EXPECT_EQ(ast.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(ast.status().message());
}

TEST(ParserTest, BuildsStatementsAndPrecedence) {
  absl::StatusOr<TemplateAst> ast = ParseSource(
      "a{{ x + y * 2 ~ z | upper is string }}{% if c %}{% endif %}");
  ASSERT_TRUE(ast.ok()) << ast.status();
  ASSERT_EQ(ast->body.size(), 3u);
  EXPECT_EQ(ast->body[0]->kind, StmtKind::kText);
  EXPECT_EQ(ast->body[2]->kind, StmtKind::kIf);
  // x + ((y * 2) ~ (z|upper is string)): + binds looser than ~, filters and
  // tests tighter than ~.
  const Expr& e = *static_cast<const OutputStmt&>(*ast->body[1]).expr;
  ASSERT_EQ(e.kind, ExprKind::kBinary);
  EXPECT_EQ(e.op, Op::kAdd);
  const Expr& concat = *e.children[1];
  ASSERT_EQ(concat.kind, ExprKind::kConcat);
  EXPECT_EQ(concat.children[0]->kind, ExprKind::kBinary);
  EXPECT_EQ(concat.children[1]->kind, ExprKind::kTest);
  EXPECT_EQ(concat.children[1]->children[0]->kind, ExprKind::kFilter);
}

TEST(ParserTest, MacroRecordsTheSpecialNamesItReads) {
  absl::StatusOr<TemplateAst> ast = ParseSource(
      "{% macro m(a, b=1) %}{{ caller() }}{{ kwargs }}{% endmacro %}");
  ASSERT_TRUE(ast.ok()) << ast.status();
  const MacroDef& def = static_cast<const MacroStmt&>(*ast->body[0]).def;
  EXPECT_EQ(def.params, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(def.defaults[0], nullptr);
  EXPECT_NE(def.defaults[1], nullptr);
  EXPECT_TRUE(def.uses_caller);
  EXPECT_TRUE(def.uses_kwargs);
  EXPECT_FALSE(def.uses_varargs);
}

TEST(ParserTest, SyntaxErrorsNameThePosition) {
  EXPECT_EQ(ErrorOf("{% frob %}"),
            "line 1, column 4: Encountered unknown tag 'frob'");
  EXPECT_EQ(ErrorOf("{% if x %}a"),
            "line 1, column 12: unexpected end of template; Jinja was looking "
            "for the following tags: 'elif' or 'else' or 'endif'");
  EXPECT_EQ(ErrorOf("{{ 1 + }}"),
            "line 1, column 8: unexpected 'end of print statement'");
  EXPECT_EQ(ErrorOf("{% for x y %}"),
            "line 1, column 10: expected token 'in', got 'y'");
  EXPECT_EQ(ErrorOf("{% endfor %}"),
            "line 1, column 4: Encountered unknown tag 'endfor'");
  EXPECT_EQ(ErrorOf("{% macro m(a=1, b) %}{% endmacro %}"),
            "line 1, column 18: non-default argument follows default argument");
  EXPECT_EQ(ErrorOf("{% call x %}{% endcall %}"),
            "line 1, column 4: expected call");
  EXPECT_EQ(ErrorOf("{% set 1 = 2 %}"),
            "line 1, column 8: can't assign to this expression");
  EXPECT_EQ(ErrorOf("{{ x is odd is even }}"),
            "line 1, column 13: You cannot chain multiple tests with is");
}

TEST(ParserTest, LoopControlsOnlyInsideLoopsOfTheSameMacro) {
  EXPECT_EQ(ErrorOf("{% break %}"), "line 1, column 4: 'break' outside loop");
  EXPECT_EQ(
      ErrorOf("{% for x in y %}{% macro m() %}{% continue %}{% endmacro %}"
              "{% endfor %}"),
      "line 1, column 35: 'continue' outside loop");
  EXPECT_TRUE(ParseSource("{% for x in y %}{% if x %}{% break %}{% endif %}"
                          "{% endfor %}")
                  .ok());
}

TEST(ParserTest, RefusedFeaturesAreNamed) {
  EXPECT_EQ(
      ErrorOf("{% include 'x' %}"),
      "line 1, column 4: the 'include' tag is not supported by this renderer");
  EXPECT_EQ(
      ErrorOf("{% extends 'x' %}"),
      "line 1, column 4: the 'extends' tag is not supported by this renderer");
  EXPECT_EQ(ErrorOf("{% for x in y recursive %}{% endfor %}"),
            "line 1, column 15: recursive for loops are not supported by this "
            "renderer");
  EXPECT_EQ(ErrorOf("{{ x|wordwrap }}"),
            "line 1, column 6: the 'wordwrap' filter is not supported");
  EXPECT_EQ(ErrorOf("{{ x|a.b }}"),
            "line 1, column 6: dotted filter names ('a.') are not supported");
}

TEST(ParserTest, UnknownFiltersAndTestsFailUnlessInsideAnIf) {
  EXPECT_EQ(ErrorOf("{{ x|nope }}"),
            "line 1, column 6: No filter named 'nope'");
  EXPECT_EQ(ErrorOf("{{ x is nope }}"),
            "line 1, column 6: No test named 'nope'");
  EXPECT_EQ(
      ErrorOf("{% if a %}{% for i in b %}{{ i|nope }}{% endfor %}{% endif %}"),
      "line 1, column 32: No filter named 'nope'");
  EXPECT_TRUE(ParseSource("{% if a %}{{ x|nope }}{% endif %}").ok());
  EXPECT_TRUE(ParseSource("{{ x|nope if a else 1 }}").ok());
  EXPECT_TRUE(ParseSource("{% if x is nope %}{% endif %}").ok());
}

TEST(ParserTest, NestingIsBounded) {
  const std::string deep =
      "{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}";
  EXPECT_NE(ErrorOf(deep).find("nested deeper than 200 levels"),
            std::string::npos);
  std::string blocks;
  for (int i = 0; i < 300; ++i) blocks += "{% if x %}";
  EXPECT_NE(ErrorOf(blocks).find("nested deeper than 200 levels"),
            std::string::npos);
}

}  // namespace
}  // namespace radixkv::model::chat
