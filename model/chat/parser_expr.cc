// Expression half of the jinja2 parser (see parser_impl.h).
#include <utility>

#include "absl/status/status.h"
#include "model/chat/parser_impl.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"

namespace radixkv::model::chat::parser_internal {
namespace {

ExprPtr MakeExpr(ExprKind kind, SourcePos pos) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->pos = pos;
  return e;
}

ExprPtr MakeBinary(ExprKind kind, Op op, SourcePos pos, ExprPtr lhs,
                   ExprPtr rhs) {
  ExprPtr e = MakeExpr(kind, pos);
  e->op = op;
  e->children.push_back(std::move(lhs));
  e->children.push_back(std::move(rhs));
  return e;
}

bool CompareOpOf(const Token& token, Op* op) {
  if (token.kind != TokenKind::kOperator) return false;
  static constexpr std::pair<std::string_view, Op> kOps[] = {
      {"==", Op::kEq}, {"!=", Op::kNe}, {"<", Op::kLt},
      {"<=", Op::kLe}, {">", Op::kGt},  {">=", Op::kGe}};
  for (const auto& [text, value] : kOps) {
    if (token.text == text) {
      *op = value;
      return true;
    }
  }
  return false;
}

// Class a multiplicative or additive operator token belongs to.
bool MathOpOf(const Token& token, bool multiplicative, Op* op) {
  if (token.kind != TokenKind::kOperator) return false;
  if (multiplicative) {
    if (token.text == "*")
      *op = Op::kMul;
    else if (token.text == "/")
      *op = Op::kDiv;
    else if (token.text == "//")
      *op = Op::kFloorDiv;
    else if (token.text == "%")
      *op = Op::kMod;
    else
      return false;
    return true;
  }
  if (token.text == "+")
    *op = Op::kAdd;
  else if (token.text == "-")
    *op = Op::kSub;
  else
    return false;
  return true;
}

}  // namespace

absl::StatusOr<ExprPtr> Parser::ParseExpression(bool with_condexpr) {
  CHAT_RETURN_IF_ERROR(Enter());
  absl::StatusOr<ExprPtr> e = with_condexpr ? ParseCondExpr() : ParseOr();
  Leave();
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseCondExpr() {
  SourcePos pos = Current().pos;
  CHAT_ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
  while (SkipName("if")) {
    CHAT_ASSIGN_OR_RETURN(ExprPtr test, ParseOr());
    ExprPtr otherwise;
    if (SkipName("else")) {
      CHAT_ASSIGN_OR_RETURN(otherwise, ParseCondExpr());
    }
    ExprPtr cond = MakeExpr(ExprKind::kCondExpr, pos);
    cond->children.push_back(std::move(test));
    cond->children.push_back(std::move(expr));
    cond->children.push_back(std::move(otherwise));
    expr = std::move(cond);
    pos = Current().pos;
  }
  return expr;
}

absl::StatusOr<ExprPtr> Parser::ParseOr() {
  const SourcePos pos = Current().pos;
  CHAT_ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
  while (SkipName("or")) {
    CHAT_ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
    left = MakeBinary(ExprKind::kOr, Op::kAdd, pos, std::move(left),
                      std::move(right));
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseAnd() {
  const SourcePos pos = Current().pos;
  CHAT_ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
  while (SkipName("and")) {
    CHAT_ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
    left = MakeBinary(ExprKind::kAnd, Op::kAdd, pos, std::move(left),
                      std::move(right));
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseNot() {
  if (IsName("not")) {
    const SourcePos pos = Current().pos;
    Advance();
    CHAT_RETURN_IF_ERROR(Enter());
    absl::StatusOr<ExprPtr> operand = ParseNot();
    Leave();
    if (!operand.ok()) return operand.status();
    ExprPtr e = MakeExpr(ExprKind::kUnary, pos);
    e->op = Op::kNot;
    e->children.push_back(std::move(*operand));
    return e;
  }
  return ParseCompare();
}

absl::StatusOr<ExprPtr> Parser::ParseCompare() {
  const SourcePos pos = Current().pos;
  CHAT_ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
  std::vector<Op> ops;
  std::vector<ExprPtr> operands;
  while (true) {
    Op op;
    if (CompareOpOf(Current(), &op)) {
      Advance();
    } else if (SkipName("in")) {
      op = Op::kIn;
    } else if (IsName("not") && Peek().kind == TokenKind::kName &&
               Peek().text == "in") {
      Advance();
      Advance();
      op = Op::kNotIn;
    } else {
      break;
    }
    CHAT_ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
    ops.push_back(op);
    operands.push_back(std::move(operand));
  }
  if (ops.empty()) return first;
  ExprPtr e = MakeExpr(ExprKind::kCompare, pos);
  e->compare_ops = std::move(ops);
  e->children.push_back(std::move(first));
  for (ExprPtr& operand : operands) e->children.push_back(std::move(operand));
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseMath1() {
  const SourcePos pos = Current().pos;
  CHAT_ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
  Op op;
  while (MathOpOf(Current(), /*multiplicative=*/false, &op)) {
    Advance();
    CHAT_ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
    left = MakeBinary(ExprKind::kBinary, op, pos, std::move(left),
                      std::move(right));
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseConcat() {
  const SourcePos pos = Current().pos;
  CHAT_ASSIGN_OR_RETURN(ExprPtr first, ParseMath2());
  if (!IsOp("~")) return first;
  ExprPtr e = MakeExpr(ExprKind::kConcat, pos);
  e->children.push_back(std::move(first));
  while (SkipOp("~")) {
    CHAT_ASSIGN_OR_RETURN(ExprPtr part, ParseMath2());
    e->children.push_back(std::move(part));
  }
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseMath2() {
  const SourcePos pos = Current().pos;
  CHAT_ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
  Op op;
  while (MathOpOf(Current(), /*multiplicative=*/true, &op)) {
    Advance();
    CHAT_ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
    left = MakeBinary(ExprKind::kBinary, op, pos, std::move(left),
                      std::move(right));
  }
  return left;
}

// jinja2 folds `**` to the left: 2 ** 3 ** 2 is 64.
absl::StatusOr<ExprPtr> Parser::ParsePow() {
  const SourcePos pos = Current().pos;
  CHAT_ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
  while (SkipOp("**")) {
    CHAT_ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
    left = MakeBinary(ExprKind::kBinary, Op::kPow, pos, std::move(left),
                      std::move(right));
  }
  return left;
}

absl::StatusOr<ExprPtr> Parser::ParseUnary(bool with_filter) {
  CHAT_RETURN_IF_ERROR(Enter());
  const SourcePos pos = Current().pos;
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    const Op op = IsOp("-") ? Op::kNeg : Op::kPos;
    Advance();
    CHAT_ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
    node = MakeExpr(ExprKind::kUnary, pos);
    node->op = op;
    node->children.push_back(std::move(operand));
  } else {
    CHAT_ASSIGN_OR_RETURN(node, ParsePrimary());
  }
  CHAT_ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
  if (with_filter) {
    CHAT_ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
  }
  Leave();
  return node;
}

absl::StatusOr<ExprPtr> Parser::ParsePrimary() {
  const Token& token = Current();
  const SourcePos pos = token.pos;
  if (token.kind == TokenKind::kName) {
    ExprPtr e = MakeExpr(ExprKind::kConst, pos);
    if (token.text == "true" || token.text == "True") {
      e->constant = Value::Bool(true);
    } else if (token.text == "false" || token.text == "False") {
      e->constant = Value::Bool(false);
    } else if (token.text == "none" || token.text == "None") {
      e->constant = Value::None();
    } else {
      e->kind = ExprKind::kName;
      e->name = token.text;
    }
    Advance();
    return e;
  }
  if (token.kind == TokenKind::kString) {
    std::string text;
    while (Current().kind == TokenKind::kString) {
      text += Current().text;
      Advance();
    }
    ExprPtr e = MakeExpr(ExprKind::kConst, pos);
    e->constant = Value::String(std::move(text));
    return e;
  }
  if (token.kind == TokenKind::kInteger || token.kind == TokenKind::kFloat) {
    ExprPtr e = MakeExpr(ExprKind::kConst, pos);
    e->constant = token.kind == TokenKind::kInteger
                      ? Value::Int(token.int_value)
                      : Value::Float(token.float_value);
    Advance();
    return e;
  }
  if (IsOp("(")) {
    Advance();
    CHAT_ASSIGN_OR_RETURN(ExprPtr e, ParseTuple(false, true, {}, true));
    CHAT_RETURN_IF_ERROR(ExpectOp(")"));
    return e;
  }
  if (IsOp("[")) return ParseList();
  if (IsOp("{")) return ParseDict();
  return Error(Cat("unexpected '", Describe(token), "'"));
}

bool Parser::IsTupleEnd(
    std::initializer_list<std::string_view> extra_end_names) const {
  const TokenKind kind = Current().kind;
  if (kind == TokenKind::kVariableEnd || kind == TokenKind::kBlockEnd ||
      IsOp(")")) {
    return true;
  }
  for (std::string_view name : extra_end_names) {
    if (IsName(name)) return true;
  }
  return false;
}

absl::StatusOr<ExprPtr> Parser::ParseTuple(
    bool simplified, bool with_condexpr,
    std::initializer_list<std::string_view> extra_end_names,
    bool explicit_parentheses) {
  const SourcePos pos = Current().pos;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) CHAT_RETURN_IF_ERROR(ExpectOp(","));
    if (IsTupleEnd(extra_end_names)) break;
    ExprPtr item;
    if (simplified) {
      CHAT_ASSIGN_OR_RETURN(item, ParsePrimary());
    } else {
      CHAT_ASSIGN_OR_RETURN(item, ParseExpression(with_condexpr));
    }
    items.push_back(std::move(item));
    if (!IsOp(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parentheses) {
      return Error(
          Cat("Expected an expression, got '", Describe(Current()), "'"));
    }
  }
  ExprPtr e = MakeExpr(ExprKind::kTuple, pos);
  e->children = std::move(items);
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseList() {
  ExprPtr e = MakeExpr(ExprKind::kList, Current().pos);
  CHAT_RETURN_IF_ERROR(ExpectOp("["));
  while (!IsOp("]")) {
    if (!e->children.empty()) CHAT_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp("]")) break;
    CHAT_ASSIGN_OR_RETURN(ExprPtr item, ParseExpression());
    e->children.push_back(std::move(item));
  }
  CHAT_RETURN_IF_ERROR(ExpectOp("]"));
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseDict() {
  ExprPtr e = MakeExpr(ExprKind::kDict, Current().pos);
  CHAT_RETURN_IF_ERROR(ExpectOp("{"));
  while (!IsOp("}")) {
    if (!e->children.empty()) CHAT_RETURN_IF_ERROR(ExpectOp(","));
    if (IsOp("}")) break;
    CHAT_ASSIGN_OR_RETURN(ExprPtr key, ParseExpression());
    CHAT_RETURN_IF_ERROR(ExpectOp(":"));
    CHAT_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
    e->children.push_back(std::move(key));
    e->children.push_back(std::move(value));
  }
  CHAT_RETURN_IF_ERROR(ExpectOp("}"));
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParsePostfix(ExprPtr node) {
  while (true) {
    if (IsOp(".") || IsOp("[")) {
      CHAT_ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node)));
    } else if (IsOp("(")) {
      CHAT_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::ParseFilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      CHAT_ASSIGN_OR_RETURN(node, ParseFilterChain(std::move(node), false));
    } else if (IsName("is")) {
      CHAT_ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
    } else if (IsOp("(")) {
      CHAT_ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::ParseSubscript(ExprPtr node) {
  const SourcePos pos = Current().pos;
  if (SkipOp(".")) {
    const Token& attr = Current();
    if (attr.kind == TokenKind::kName) {
      ExprPtr e = MakeExpr(ExprKind::kGetAttr, pos);
      e->name = attr.text;
      e->children.push_back(std::move(node));
      Advance();
      return e;
    }
    if (attr.kind != TokenKind::kInteger)
      return Error("expected name or number");
    ExprPtr index = MakeExpr(ExprKind::kConst, attr.pos);
    index->constant = Value::Int(attr.int_value);
    Advance();
    ExprPtr e = MakeExpr(ExprKind::kGetItem, pos);
    e->children.push_back(std::move(node));
    e->children.push_back(std::move(index));
    return e;
  }
  CHAT_RETURN_IF_ERROR(ExpectOp("["));
  std::vector<ExprPtr> args;
  while (!IsOp("]")) {
    if (!args.empty()) CHAT_RETURN_IF_ERROR(ExpectOp(","));
    CHAT_ASSIGN_OR_RETURN(ExprPtr arg, ParseSubscribed());
    args.push_back(std::move(arg));
  }
  CHAT_RETURN_IF_ERROR(ExpectOp("]"));
  ExprPtr index;
  if (args.size() == 1) {
    index = std::move(args[0]);
  } else {
    index = MakeExpr(ExprKind::kTuple, pos);
    index->children = std::move(args);
  }
  ExprPtr e = MakeExpr(ExprKind::kGetItem, pos);
  e->children.push_back(std::move(node));
  e->children.push_back(std::move(index));
  return e;
}

absl::StatusOr<ExprPtr> Parser::ParseSubscribed() {
  const SourcePos pos = Current().pos;
  ExprPtr start;
  if (!SkipOp(":")) {
    CHAT_ASSIGN_OR_RETURN(start, ParseExpression());
    if (!SkipOp(":")) return start;
  }
  ExprPtr slice = MakeExpr(ExprKind::kSlice, pos);
  slice->children.push_back(std::move(start));
  ExprPtr stop;
  if (!IsOp(":") && !IsOp("]") && !IsOp(",")) {
    CHAT_ASSIGN_OR_RETURN(stop, ParseExpression());
  }
  slice->children.push_back(std::move(stop));
  ExprPtr step;
  if (SkipOp(":") && !IsOp("]") && !IsOp(",")) {
    CHAT_ASSIGN_OR_RETURN(step, ParseExpression());
  }
  slice->children.push_back(std::move(step));
  return slice;
}

absl::Status Parser::ParseCallArgs(Expr* call) {
  const SourcePos pos = Current().pos;
  CHAT_RETURN_IF_ERROR(ExpectOp("("));
  bool require_comma = false;
  const auto invalid = [&] {
    return ErrorAt(pos, "invalid syntax for function call expression");
  };
  while (!IsOp(")")) {
    if (require_comma) {
      CHAT_RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
    }
    if (SkipOp("*")) {
      if (call->dyn_args != nullptr || call->dyn_kwargs != nullptr)
        return invalid();
      CHAT_ASSIGN_OR_RETURN(call->dyn_args, ParseExpression());
    } else if (SkipOp("**")) {
      if (call->dyn_kwargs != nullptr) return invalid();
      CHAT_ASSIGN_OR_RETURN(call->dyn_kwargs, ParseExpression());
    } else if (Current().kind == TokenKind::kName &&
               Peek().kind == TokenKind::kOperator && Peek().text == "=") {
      if (call->dyn_kwargs != nullptr) return invalid();
      std::string key = Current().text;
      Advance();
      Advance();
      CHAT_ASSIGN_OR_RETURN(ExprPtr value, ParseExpression());
      call->kwargs.emplace_back(std::move(key), std::move(value));
    } else {
      if (call->dyn_args != nullptr || call->dyn_kwargs != nullptr ||
          !call->kwargs.empty()) {
        return invalid();
      }
      CHAT_ASSIGN_OR_RETURN(ExprPtr arg, ParseExpression());
      call->children.push_back(std::move(arg));
    }
    require_comma = true;
  }
  return ExpectOp(")");
}

absl::StatusOr<ExprPtr> Parser::ParseCall(ExprPtr callee) {
  ExprPtr e = MakeExpr(ExprKind::kCall, callee->pos);
  e->children.push_back(std::move(callee));
  CHAT_RETURN_IF_ERROR(ParseCallArgs(e.get()));
  return e;
}

absl::StatusOr<std::string> Parser::ParseDottedName(std::string_view what) {
  const SourcePos pos = Current().pos;
  CHAT_ASSIGN_OR_RETURN(std::string name, ExpectName());
  if (IsOp(".")) {
    return ErrorAt(
        pos, Cat("dotted ", what, " names ('", name, ".') are not supported"));
  }
  return name;
}

absl::StatusOr<ExprPtr> Parser::ParseFilterChain(ExprPtr input,
                                                 bool start_inline) {
  if (input == nullptr) input = MakeExpr(ExprKind::kBlockInput, Current().pos);
  while (IsOp("|") || start_inline) {
    if (!start_inline) Advance();
    start_inline = false;
    const SourcePos pos = Current().pos;
    CHAT_ASSIGN_OR_RETURN(std::string name, ParseDottedName("filter"));
    ExprPtr e = MakeExpr(ExprKind::kFilter, pos);
    e->name = std::move(name);
    e->children.push_back(std::move(input));
    if (IsOp("(")) CHAT_RETURN_IF_ERROR(ParseCallArgs(e.get()));
    input = std::move(e);
  }
  return input;
}

absl::StatusOr<ExprPtr> Parser::ParseTest(ExprPtr node) {
  const SourcePos pos = Current().pos;
  Advance();  // is
  const bool negated = SkipName("not");
  CHAT_ASSIGN_OR_RETURN(std::string name, ParseDottedName("test"));
  ExprPtr e = MakeExpr(ExprKind::kTest, pos);
  e->name = std::move(name);
  e->children.push_back(std::move(node));
  const TokenKind kind = Current().kind;
  if (IsOp("(")) {
    CHAT_RETURN_IF_ERROR(ParseCallArgs(e.get()));
  } else if ((kind == TokenKind::kName || kind == TokenKind::kString ||
              kind == TokenKind::kInteger || kind == TokenKind::kFloat ||
              IsOp("[") || IsOp("{")) &&
             !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) return Error("You cannot chain multiple tests with is");
    CHAT_ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
    CHAT_ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
    e->children.push_back(std::move(arg));
  }
  if (!negated) return e;
  ExprPtr neg = MakeExpr(ExprKind::kUnary, pos);
  neg->op = Op::kNot;
  neg->children.push_back(std::move(e));
  return neg;
}

}  // namespace radixkv::model::chat::parser_internal
