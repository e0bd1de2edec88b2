#include "model/chat/parser.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "model/chat/name_check.h"
#include "model/chat/parser_impl.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"

namespace radixkv::model::chat {
namespace parser_internal {
namespace {

// Tags jinja2 knows that a chat template renderer without a template
// loader (or with autoescape fixed off) cannot honour.
constexpr std::string_view kRefusedTags[] = {"block",  "extends", "include",
                                             "import", "from",    "autoescape"};

void CollectNames(const Expr& expr, MacroDef* def);

void CollectNamesInBody(const Body& body, MacroDef* def);

void CollectNamesInExprs(const std::vector<ExprPtr>& exprs, MacroDef* def) {
  for (const ExprPtr& e : exprs) {
    if (e != nullptr) CollectNames(*e, def);
  }
}

// Marks the special names `caller`, `varargs`, `kwargs` read by a macro
// body (jinja2's find_undeclared over the body, nested macros included).
void CollectNames(const Expr& expr, MacroDef* def) {
  if (expr.kind == ExprKind::kName) {
    if (expr.name == "caller") def->uses_caller = true;
    if (expr.name == "varargs") def->uses_varargs = true;
    if (expr.name == "kwargs") def->uses_kwargs = true;
  }
  CollectNamesInExprs(expr.children, def);
  for (const auto& [name, value] : expr.kwargs) CollectNames(*value, def);
  if (expr.dyn_args != nullptr) CollectNames(*expr.dyn_args, def);
  if (expr.dyn_kwargs != nullptr) CollectNames(*expr.dyn_kwargs, def);
}

void CollectMacroDef(const MacroDef& inner, MacroDef* def) {
  CollectNamesInExprs(inner.defaults, def);
  CollectNamesInBody(inner.body, def);
}

void CollectNamesInStmt(const Stmt& stmt, MacroDef* def) {
  switch (stmt.kind) {
    case StmtKind::kOutput:
      CollectNames(*static_cast<const OutputStmt&>(stmt).expr, def);
      break;
    case StmtKind::kIf: {
      const auto& s = static_cast<const IfStmt&>(stmt);
      CollectNamesInExprs(s.tests, def);
      for (const Body& b : s.bodies) CollectNamesInBody(b, def);
      CollectNamesInBody(s.else_body, def);
      break;
    }
    case StmtKind::kFor: {
      const auto& s = static_cast<const ForStmt&>(stmt);
      CollectNames(*s.iter, def);
      if (s.condition != nullptr) CollectNames(*s.condition, def);
      CollectNamesInBody(s.body, def);
      CollectNamesInBody(s.else_body, def);
      break;
    }
    case StmtKind::kSet:
      CollectNames(*static_cast<const SetStmt&>(stmt).value, def);
      break;
    case StmtKind::kSetBlock: {
      const auto& s = static_cast<const SetBlockStmt&>(stmt);
      if (s.filter != nullptr) CollectNames(*s.filter, def);
      CollectNamesInBody(s.body, def);
      break;
    }
    case StmtKind::kMacro:
      CollectMacroDef(static_cast<const MacroStmt&>(stmt).def, def);
      break;
    case StmtKind::kCallBlock: {
      const auto& s = static_cast<const CallBlockStmt&>(stmt);
      CollectMacroDef(s.caller, def);
      CollectNames(*s.call, def);
      break;
    }
    case StmtKind::kFilterBlock: {
      const auto& s = static_cast<const FilterBlockStmt&>(stmt);
      CollectNames(*s.filter, def);
      CollectNamesInBody(s.body, def);
      break;
    }
    case StmtKind::kWith: {
      const auto& s = static_cast<const WithStmt&>(stmt);
      CollectNamesInExprs(s.values, def);
      CollectNamesInBody(s.body, def);
      break;
    }
    case StmtKind::kGeneration:
      CollectNamesInBody(static_cast<const GenerationStmt&>(stmt).body, def);
      break;
    default:
      break;
  }
}

void CollectNamesInBody(const Body& body, MacroDef* def) {
  for (const StmtPtr& s : body) CollectNamesInStmt(*s, def);
}

}  // namespace

const Token& Parser::Peek() const {
  return tokens_[std::min(index_ + 1, tokens_.size() - 1)];
}

bool Parser::IsName(std::string_view name) const {
  return Current().kind == TokenKind::kName && Current().text == name;
}

bool Parser::IsOp(std::string_view op) const {
  return Current().kind == TokenKind::kOperator && Current().text == op;
}

bool Parser::SkipName(std::string_view name) {
  if (!IsName(name)) return false;
  Advance();
  return true;
}

bool Parser::SkipOp(std::string_view op) {
  if (!IsOp(op)) return false;
  Advance();
  return true;
}

std::string Parser::Describe(const Token& token) const {
  switch (token.kind) {
    case TokenKind::kData:
      return "template data / text";
    case TokenKind::kVariableBegin:
      return "begin of print statement";
    case TokenKind::kVariableEnd:
      return "end of print statement";
    case TokenKind::kBlockBegin:
      return "begin of statement block";
    case TokenKind::kBlockEnd:
      return "end of statement block";
    case TokenKind::kEof:
      return "end of template";
    case TokenKind::kString:
      return "string";
    case TokenKind::kInteger:
      return "integer";
    case TokenKind::kFloat:
      return "float";
    default:
      return token.text;
  }
}

absl::Status Parser::ErrorAt(SourcePos pos, std::string_view message) const {
  return absl::InvalidArgumentError(Cat(FormatPos(pos), ": ", message));
}

absl::Status Parser::Error(std::string_view message) const {
  return ErrorAt(Current().pos, message);
}

absl::Status Parser::Expect(TokenKind kind, std::string_view what) {
  if (Current().kind == kind) {
    Advance();
    return absl::OkStatus();
  }
  if (Current().kind == TokenKind::kEof) {
    return Error(Cat("unexpected end of template, expected '", what, "'"));
  }
  return Error(
      Cat("expected token '", what, "', got '", Describe(Current()), "'"));
}

absl::Status Parser::ExpectOp(std::string_view op) {
  if (SkipOp(op)) return absl::OkStatus();
  return Error(
      Cat("expected token '", op, "', got '", Describe(Current()), "'"));
}

absl::StatusOr<std::string> Parser::ExpectName() {
  if (Current().kind != TokenKind::kName) {
    return Error(Cat("expected token 'name', got '", Describe(Current()), "'"));
  }
  std::string name = Current().text;
  Advance();
  return name;
}

absl::Status Parser::Enter() {
  if (++depth_ > kMaxParseDepth) {
    return Error(
        Cat("template nested deeper than ", kMaxParseDepth, " levels"));
  }
  return absl::OkStatus();
}

absl::StatusOr<TemplateAst> Parser::ParseTemplate() {
  TemplateAst ast;
  CHAT_ASSIGN_OR_RETURN(ast.body, Subparse({}));
  return ast;
}

absl::StatusOr<Body> Parser::Subparse(std::vector<std::string_view> end_names) {
  CHAT_RETURN_IF_ERROR(Enter());
  Body body;
  while (Current().kind != TokenKind::kEof) {
    const Token& token = Current();
    if (token.kind == TokenKind::kData) {
      auto text = std::make_unique<TextStmt>();
      text->pos = token.pos;
      text->text = token.text;
      body.push_back(std::move(text));
      Advance();
    } else if (token.kind == TokenKind::kVariableBegin) {
      auto out = std::make_unique<OutputStmt>();
      out->pos = token.pos;
      Advance();
      CHAT_ASSIGN_OR_RETURN(out->expr, ParseTuple());
      CHAT_RETURN_IF_ERROR(Expect(TokenKind::kVariableEnd, "}}"));
      body.push_back(std::move(out));
    } else if (token.kind == TokenKind::kBlockBegin) {
      Advance();
      for (std::string_view end : end_names) {
        if (IsName(end)) {
          Leave();
          return body;
        }
      }
      CHAT_ASSIGN_OR_RETURN(StmtPtr stmt, ParseStatement());
      if (stmt != nullptr) body.push_back(std::move(stmt));
      CHAT_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd, "%}"));
    } else {
      return Error(Cat("unexpected '", Describe(token), "'"));
    }
  }
  if (!end_names.empty()) {
    std::vector<std::string> quoted;
    for (std::string_view e : end_names) quoted.push_back(Cat("'", e, "'"));
    return Error(
        Cat("unexpected end of template; Jinja was looking "
            "for the following tags: ",
            absl::StrJoin(quoted, " or ")));
  }
  Leave();
  return body;
}

absl::StatusOr<Body> Parser::ParseStatements(
    std::vector<std::string_view> end_names, bool drop_needle) {
  SkipOp(":");
  CHAT_RETURN_IF_ERROR(Expect(TokenKind::kBlockEnd, "%}"));
  CHAT_ASSIGN_OR_RETURN(Body body, Subparse(std::move(end_names)));
  if (drop_needle) Advance();
  return body;
}

absl::StatusOr<StmtPtr> Parser::ParseStatement() {
  if (Current().kind != TokenKind::kName) return Error("tag name expected");
  const std::string tag = Current().text;
  if (tag == "for") return ParseFor();
  if (tag == "if") return ParseIf();
  if (tag == "set") return ParseSet();
  if (tag == "macro") return ParseMacro();
  if (tag == "call") return ParseCallBlock();
  if (tag == "filter") return ParseFilterBlock();
  if (tag == "with") return ParseWith();
  if (tag == "print") return ParsePrint();
  if (tag == "break") return ParseLoopControl(StmtKind::kBreak);
  if (tag == "continue") return ParseLoopControl(StmtKind::kContinue);
  if (tag == "generation") return ParseGeneration();
  for (std::string_view refused : kRefusedTags) {
    if (tag == refused) {
      return Error(
          Cat("the '", tag, "' tag is not supported by this renderer"));
    }
  }
  return Error(Cat("Encountered unknown tag '", tag, "'"));
}

absl::StatusOr<Target> Parser::TargetFromExpr(const Expr& expr) const {
  Target target;
  target.pos = expr.pos;
  if (expr.kind == ExprKind::kName) {
    target.name = expr.name;
    return target;
  }
  if (expr.kind == ExprKind::kTuple) {
    target.kind = Target::Kind::kTuple;
    for (const ExprPtr& item : expr.children) {
      CHAT_ASSIGN_OR_RETURN(Target t, TargetFromExpr(*item));
      target.items.push_back(std::move(t));
    }
    return target;
  }
  return ErrorAt(expr.pos, "can't assign to this expression");
}

absl::StatusOr<Target> Parser::ParseAssignTarget(
    bool with_namespace,
    std::initializer_list<std::string_view> extra_end_names) {
  if (with_namespace && Current().kind == TokenKind::kName &&
      Peek().kind == TokenKind::kOperator && Peek().text == ".") {
    Target target;
    target.kind = Target::Kind::kNamespaceAttr;
    target.pos = Current().pos;
    target.name = Current().text;
    Advance();
    Advance();
    CHAT_ASSIGN_OR_RETURN(target.attr, ExpectName());
    return target;
  }
  CHAT_ASSIGN_OR_RETURN(
      ExprPtr expr,
      ParseTuple(/*simplified=*/true, /*with_condexpr=*/true, extra_end_names));
  return TargetFromExpr(*expr);
}

absl::StatusOr<StmtPtr> Parser::ParseFor() {
  auto stmt = std::make_unique<ForStmt>();
  stmt->pos = Current().pos;
  Advance();
  CHAT_ASSIGN_OR_RETURN(stmt->target, ParseAssignTarget(false, {"in"}));
  if (!SkipName("in")) {
    return Error(Cat("expected token 'in', got '", Describe(Current()), "'"));
  }
  CHAT_ASSIGN_OR_RETURN(
      stmt->iter, ParseTuple(false, /*with_condexpr=*/false, {"recursive"}));
  if (SkipName("if")) {
    CHAT_ASSIGN_OR_RETURN(stmt->condition, ParseExpression());
  }
  if (IsName("recursive")) {
    return Error("recursive for loops are not supported by this renderer");
  }
  ++loop_depth_;
  CHAT_ASSIGN_OR_RETURN(stmt->body, ParseStatements({"endfor", "else"}, false));
  --loop_depth_;
  const bool has_else = IsName("else");
  Advance();
  if (has_else) {
    CHAT_ASSIGN_OR_RETURN(stmt->else_body, ParseStatements({"endfor"}, true));
  }
  return stmt;
}

absl::StatusOr<StmtPtr> Parser::ParseIf() {
  auto stmt = std::make_unique<IfStmt>();
  stmt->pos = Current().pos;
  Advance();
  while (true) {
    CHAT_ASSIGN_OR_RETURN(ExprPtr test, ParseTuple(false, false));
    stmt->tests.push_back(std::move(test));
    CHAT_ASSIGN_OR_RETURN(Body body,
                          ParseStatements({"elif", "else", "endif"}, false));
    stmt->bodies.push_back(std::move(body));
    const std::string end = Current().text;
    Advance();
    if (end == "elif") continue;
    if (end == "else") {
      CHAT_ASSIGN_OR_RETURN(stmt->else_body, ParseStatements({"endif"}, true));
    }
    return stmt;
  }
}

absl::StatusOr<StmtPtr> Parser::ParseSet() {
  const SourcePos pos = Current().pos;
  Advance();
  CHAT_ASSIGN_OR_RETURN(Target target, ParseAssignTarget(true));
  if (SkipOp("=")) {
    auto stmt = std::make_unique<SetStmt>();
    stmt->pos = pos;
    stmt->target = std::move(target);
    CHAT_ASSIGN_OR_RETURN(stmt->value, ParseTuple());
    return stmt;
  }
  auto stmt = std::make_unique<SetBlockStmt>();
  stmt->pos = pos;
  stmt->target = std::move(target);
  if (IsOp("|")) {
    CHAT_ASSIGN_OR_RETURN(stmt->filter, ParseFilterChain(nullptr, false));
  }
  CHAT_ASSIGN_OR_RETURN(stmt->body, ParseStatements({"endset"}, true));
  return stmt;
}

absl::Status Parser::ParseSignature(MacroDef* def) {
  CHAT_RETURN_IF_ERROR(ExpectOp("("));
  while (!IsOp(")")) {
    if (!def->params.empty()) CHAT_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp(")")) break;
    CHAT_ASSIGN_OR_RETURN(std::string param, ExpectName());
    ExprPtr default_value;
    if (SkipOp("=")) {
      CHAT_ASSIGN_OR_RETURN(default_value, ParseExpression());
    } else if (!def->defaults.empty() && def->defaults.back() != nullptr) {
      return Error("non-default argument follows default argument");
    }
    def->params.push_back(std::move(param));
    def->defaults.push_back(std::move(default_value));
  }
  return ExpectOp(")");
}

// A macro or caller body: its own function scope, so loop controls of
// enclosing loops do not reach into it (a Python SyntaxError in jinja2).
absl::StatusOr<Body> Parser::ParseMacroBody(std::string_view end_name) {
  const int saved_loop_depth = loop_depth_;
  loop_depth_ = 0;
  absl::StatusOr<Body> body = ParseStatements({end_name}, true);
  loop_depth_ = saved_loop_depth;
  return body;
}

absl::StatusOr<StmtPtr> Parser::ParseMacro() {
  auto stmt = std::make_unique<MacroStmt>();
  stmt->pos = Current().pos;
  stmt->def.pos = Current().pos;
  Advance();
  CHAT_ASSIGN_OR_RETURN(stmt->def.name, ExpectName());
  CHAT_RETURN_IF_ERROR(ParseSignature(&stmt->def));
  CHAT_ASSIGN_OR_RETURN(stmt->def.body, ParseMacroBody("endmacro"));
  CollectNamesInBody(stmt->def.body, &stmt->def);
  return stmt;
}

absl::StatusOr<StmtPtr> Parser::ParseCallBlock() {
  auto stmt = std::make_unique<CallBlockStmt>();
  stmt->pos = Current().pos;
  stmt->caller.pos = Current().pos;
  stmt->caller.name = "caller";
  Advance();
  if (IsOp("(")) CHAT_RETURN_IF_ERROR(ParseSignature(&stmt->caller));
  CHAT_ASSIGN_OR_RETURN(stmt->call, ParseExpression());
  if (stmt->call->kind != ExprKind::kCall) {
    return ErrorAt(stmt->pos, "expected call");
  }
  CHAT_ASSIGN_OR_RETURN(stmt->caller.body, ParseMacroBody("endcall"));
  CollectNamesInBody(stmt->caller.body, &stmt->caller);
  return stmt;
}

absl::StatusOr<StmtPtr> Parser::ParseFilterBlock() {
  auto stmt = std::make_unique<FilterBlockStmt>();
  stmt->pos = Current().pos;
  Advance();
  CHAT_ASSIGN_OR_RETURN(stmt->filter, ParseFilterChain(nullptr, true));
  CHAT_ASSIGN_OR_RETURN(stmt->body, ParseStatements({"endfilter"}, true));
  return stmt;
}

absl::StatusOr<StmtPtr> Parser::ParseWith() {
  auto stmt = std::make_unique<WithStmt>();
  stmt->pos = Current().pos;
  Advance();
  while (Current().kind != TokenKind::kBlockEnd) {
    if (!stmt->targets.empty()) CHAT_RETURN_IF_ERROR(ExpectOp(","));
    CHAT_ASSIGN_OR_RETURN(Target target, ParseAssignTarget(false));
    CHAT_RETURN_IF_ERROR(ExpectOp("="));
    CHAT_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
    stmt->targets.push_back(std::move(target));
    stmt->values.push_back(std::move(value));
  }
  CHAT_ASSIGN_OR_RETURN(stmt->body, ParseStatements({"endwith"}, true));
  return stmt;
}

absl::StatusOr<StmtPtr> Parser::ParsePrint() {
  const SourcePos pos = Current().pos;
  Advance();
  std::vector<ExprPtr> items;
  while (Current().kind != TokenKind::kBlockEnd) {
    if (!items.empty()) CHAT_RETURN_IF_ERROR(ExpectOp(","));
    CHAT_ASSIGN_OR_RETURN(ExprPtr e, ParseExpression());
    items.push_back(std::move(e));
  }
  // `{% print a, b %}` outputs each expression in turn, like `{{ a }}{{ b }}`.
  auto concat = std::make_unique<Expr>();
  concat->kind = ExprKind::kConcat;
  concat->pos = pos;
  concat->children = std::move(items);
  auto out = std::make_unique<OutputStmt>();
  out->pos = pos;
  out->expr = std::move(concat);
  return out;
}

absl::StatusOr<StmtPtr> Parser::ParseLoopControl(StmtKind kind) {
  const SourcePos pos = Current().pos;
  if (loop_depth_ == 0) {
    return Error(Cat("'", Current().text, "' outside loop"));
  }
  Advance();
  auto stmt = std::make_unique<LoopControlStmt>(kind);
  stmt->pos = pos;
  return stmt;
}

absl::StatusOr<StmtPtr> Parser::ParseGeneration() {
  auto stmt = std::make_unique<GenerationStmt>();
  stmt->pos = Current().pos;
  Advance();
  CHAT_ASSIGN_OR_RETURN(stmt->body, ParseMacroBody("endgeneration"));
  return stmt;
}

}  // namespace parser_internal

absl::StatusOr<TemplateAst> ParseTemplate(std::vector<Token> tokens) {
  if (tokens.empty() || tokens.back().kind != TokenKind::kEof) {
    return absl::InvalidArgumentError("token stream must end with kEof");
  }
  CHAT_ASSIGN_OR_RETURN(
      TemplateAst ast,
      parser_internal::Parser(std::move(tokens)).ParseTemplate());
  CHAT_RETURN_IF_ERROR(CheckFilterAndTestNames(ast));
  return ast;
}

}  // namespace radixkv::model::chat
