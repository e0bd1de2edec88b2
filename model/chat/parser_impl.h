// The recursive-descent parser behind ParseTemplate (parser.h); statements
// live in parser.cc, expressions in parser_expr.cc.
#ifndef RADIXKV_MODEL_CHAT_PARSER_IMPL_H_
#define RADIXKV_MODEL_CHAT_PARSER_IMPL_H_

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/chat/ast.h"
#include "model/chat/lexer.h"

namespace radixkv::model::chat::parser_internal {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  absl::StatusOr<TemplateAst> ParseTemplate();

  // Expressions (parser_expr.cc).
  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr = true);
  // jinja2's parse_tuple: a comma list becomes a tuple, one item is itself.
  absl::StatusOr<ExprPtr> ParseTuple(
      bool simplified = false, bool with_condexpr = true,
      std::initializer_list<std::string_view> extra_end_names = {},
      bool explicit_parentheses = false);
  // A `|f(args)|g` chain applied to `input` (a kBlockInput when null).
  absl::StatusOr<ExprPtr> ParseFilterChain(ExprPtr input, bool start_inline);

 private:
  // Token access.
  const Token& Current() const { return tokens_[index_]; }
  const Token& Peek() const;
  void Advance() {
    if (index_ + 1 < tokens_.size()) ++index_;
  }
  bool IsName(std::string_view name) const;
  bool IsOp(std::string_view op) const;
  bool SkipName(std::string_view name);
  bool SkipOp(std::string_view op);
  absl::Status Expect(TokenKind kind, std::string_view what);
  absl::Status ExpectOp(std::string_view op);
  absl::StatusOr<std::string> ExpectName();
  absl::Status Error(std::string_view message) const;
  absl::Status ErrorAt(SourcePos pos, std::string_view message) const;
  std::string Describe(const Token& token) const;
  absl::Status Enter();  // depth guard
  void Leave() { --depth_; }

  // Statements (parser.cc).
  absl::StatusOr<Body> Subparse(std::vector<std::string_view> end_names);
  absl::StatusOr<Body> ParseStatements(std::vector<std::string_view> end_names,
                                       bool drop_needle);
  absl::StatusOr<StmtPtr> ParseStatement();
  absl::StatusOr<StmtPtr> ParseFor();
  absl::StatusOr<StmtPtr> ParseIf();
  absl::StatusOr<StmtPtr> ParseSet();
  absl::StatusOr<StmtPtr> ParseMacro();
  absl::StatusOr<StmtPtr> ParseCallBlock();
  absl::StatusOr<StmtPtr> ParseFilterBlock();
  absl::StatusOr<StmtPtr> ParseWith();
  absl::StatusOr<StmtPtr> ParsePrint();
  absl::StatusOr<StmtPtr> ParseLoopControl(StmtKind kind);
  absl::StatusOr<StmtPtr> ParseGeneration();
  absl::Status ParseSignature(MacroDef* def);
  absl::StatusOr<Body> ParseMacroBody(std::string_view end_name);
  absl::StatusOr<Target> ParseAssignTarget(
      bool with_namespace,
      std::initializer_list<std::string_view> extra_end_names = {});
  absl::StatusOr<Target> TargetFromExpr(const Expr& expr) const;

  // Expressions (parser_expr.cc).
  absl::StatusOr<ExprPtr> ParseCondExpr();
  absl::StatusOr<ExprPtr> ParseOr();
  absl::StatusOr<ExprPtr> ParseAnd();
  absl::StatusOr<ExprPtr> ParseNot();
  absl::StatusOr<ExprPtr> ParseCompare();
  absl::StatusOr<ExprPtr> ParseMath1();
  absl::StatusOr<ExprPtr> ParseConcat();
  absl::StatusOr<ExprPtr> ParseMath2();
  absl::StatusOr<ExprPtr> ParsePow();
  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter);
  absl::StatusOr<ExprPtr> ParsePrimary();
  absl::StatusOr<ExprPtr> ParseList();
  absl::StatusOr<ExprPtr> ParseDict();
  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node);
  absl::StatusOr<ExprPtr> ParseSubscribed();
  absl::Status ParseCallArgs(Expr* call);
  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee);
  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node);
  absl::StatusOr<std::string> ParseDottedName(std::string_view what);
  bool IsTupleEnd(
      std::initializer_list<std::string_view> extra_end_names) const;

  std::vector<Token> tokens_;
  size_t index_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;  // enclosing for loops in the current macro scope
};

}  // namespace radixkv::model::chat::parser_internal

#endif  // RADIXKV_MODEL_CHAT_PARSER_IMPL_H_
