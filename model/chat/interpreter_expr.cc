// Expression evaluation of the Interpreter (see interpreter.h).
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "model/chat/interpreter.h"
#include "model/chat/operators.h"
#include "model/chat/py_str.h"
#include "model/chat/py_unicode.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"

namespace radixkv::model::chat {
namespace {

absl::StatusOr<std::optional<int64_t>> SliceBound(const Value& v) {
  if (v.is_none()) return std::optional<int64_t>();
  if (!v.is_integral()) {
    return absl::InvalidArgumentError(
        "slice indices must be integers or None or have an __index__ method");
  }
  return std::optional<int64_t>(v.int_value());
}

}  // namespace

absl::Status Interpreter::Step() {
  if (++steps_ > limits_.max_steps) {
    return absl::ResourceExhaustedError(Cat(
        "template evaluation exceeded max_steps (", limits_.max_steps, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Interpreter::Eval(const Expr& e, const Scope& scope) {
  CHAT_RETURN_IF_ERROR(Step());
  absl::StatusOr<Value> v = EvalNode(e, scope);
  if (!v.ok()) return Locate(v.status(), e.pos);
  return v;
}

absl::StatusOr<Value> Interpreter::EvalNode(const Expr& e, const Scope& scope) {
  switch (e.kind) {
    case ExprKind::kConst:
      return e.constant;
    case ExprKind::kName:
      return EvalName(e, scope);
    case ExprKind::kGetAttr: {
      CHAT_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0], scope));
      return GetAttr(obj, e.name);
    }
    case ExprKind::kGetItem:
      return EvalGetItem(e, scope);
    case ExprKind::kSlice:
      return absl::InvalidArgumentError("slice outside of a subscript");
    case ExprKind::kCall:
      return EvalCall(e, scope);
    case ExprKind::kFilter:
      return EvalFilter(e, scope);
    case ExprKind::kTest:
      return EvalTest(e, scope);
    case ExprKind::kUnary:
      return EvalUnary(e, scope);
    case ExprKind::kBinary: {
      CHAT_ASSIGN_OR_RETURN(Value a, Eval(*e.children[0], scope));
      CHAT_ASSIGN_OR_RETURN(Value b, Eval(*e.children[1], scope));
      return PyBinary(*this, e.op, a, b);
    }
    case ExprKind::kAnd:
    case ExprKind::kOr: {
      CHAT_ASSIGN_OR_RETURN(Value a, Eval(*e.children[0], scope));
      if (Truthy(a) == (e.kind == ExprKind::kOr)) return a;
      return Eval(*e.children[1], scope);
    }
    case ExprKind::kCompare:
      return EvalCompare(e, scope);
    case ExprKind::kConcat:
      return EvalConcat(e, scope);
    case ExprKind::kCondExpr:
      return EvalCondExpr(e, scope);
    case ExprKind::kList:
    case ExprKind::kTuple:
    case ExprKind::kDict:
      return EvalCollection(e, scope);
    case ExprKind::kBlockInput:
      if (block_input_ == nullptr) {
        return absl::InternalError("block input used outside a filter block");
      }
      return *block_input_;
  }
  return absl::InternalError("unknown expression kind");
}

absl::StatusOr<Value> Interpreter::EvalName(const Expr& e, const Scope& scope) {
  if (const Value* v = scope.Find(e.name)) return *v;
  return Value::Undefined(Cat("'", e.name, "' is undefined"));
}

absl::StatusOr<Value> Interpreter::EvalGetItem(const Expr& e,
                                               const Scope& scope) {
  CHAT_ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0], scope));
  const Expr& index = *e.children[1];
  if (index.kind == ExprKind::kSlice) return EvalSlice(obj, index, scope);
  CHAT_ASSIGN_OR_RETURN(Value key, Eval(index, scope));
  return GetItem(obj, key);
}

absl::StatusOr<Value> Interpreter::EvalSlice(const Value& obj,
                                             const Expr& slice,
                                             const Scope& scope) {
  std::optional<int64_t> bounds[3];
  for (int i = 0; i < 3; ++i) {
    if (slice.children[i] == nullptr) continue;
    CHAT_ASSIGN_OR_RETURN(Value v, Eval(*slice.children[i], scope));
    CHAT_ASSIGN_OR_RETURN(bounds[i], SliceBound(v));
  }
  if (obj.is_undefined()) return UndefinedError(obj);
  if (bounds[2].has_value() && *bounds[2] == 0) {
    return absl::InvalidArgumentError("slice step cannot be zero");
  }
  const bool sequence = obj.is_list() && (obj.kind() == SequenceKind::kList ||
                                          obj.kind() == SequenceKind::kTuple ||
                                          obj.kind() == SequenceKind::kRange);
  if (!obj.is_string() && !sequence) {
    return Value::Undefined(
        Cat("'", PyTypeName(obj), " object' has no element slice"));
  }
  if (obj.is_string()) {
    CHAT_RETURN_IF_ERROR(ChargeWork(obj.str().size() * 4));
    const std::u32string cps = DecodeUtf8(obj.str());
    const SliceIndices r = NormalizeSlice(static_cast<int64_t>(cps.size()),
                                          bounds[0], bounds[1], bounds[2]);
    std::u32string out;
    for (int64_t i = 0, at = r.start; i < r.count; ++i, at += r.step) {
      out.push_back(cps[at]);
    }
    return MakeString(EncodeUtf8(out), obj.is_markup());
  }
  const ListObject& list = obj.list();
  const SliceIndices r = NormalizeSlice(static_cast<int64_t>(list.items.size()),
                                        bounds[0], bounds[1], bounds[2]);
  std::vector<Value> out;
  out.reserve(r.count);
  for (int64_t i = 0, at = r.start; i < r.count; ++i, at += r.step) {
    out.push_back(list.items[at]);
  }
  CHAT_ASSIGN_OR_RETURN(Value result, MakeList(std::move(out), list.kind));
  if (list.kind == SequenceKind::kRange) {
    result.list().range_start = list.range_start + r.start * list.range_step;
    result.list().range_stop = list.range_start + r.stop * list.range_step;
    result.list().range_step = list.range_step * r.step;
  }
  return result;
}

absl::StatusOr<CallArgs> Interpreter::EvalArgs(const Expr& e,
                                               const Scope& scope,
                                               size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.children.size(); ++i) {
    CHAT_ASSIGN_OR_RETURN(Value v, Eval(*e.children[i], scope));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [name, expr] : e.kwargs) {
    CHAT_ASSIGN_OR_RETURN(Value v, Eval(*expr, scope));
    args.keyword.emplace_back(name, std::move(v));
  }
  if (e.dyn_args != nullptr) {
    CHAT_ASSIGN_OR_RETURN(Value v, Eval(*e.dyn_args, scope));
    CHAT_ASSIGN_OR_RETURN(std::vector<Value> items, PyIterate(*this, v));
    for (Value& item : items) args.positional.push_back(std::move(item));
  }
  if (e.dyn_kwargs != nullptr) {
    CHAT_ASSIGN_OR_RETURN(Value v, Eval(*e.dyn_kwargs, scope));
    if (!v.is_dict()) {
      return absl::InvalidArgumentError(
          Cat("argument after ** must be a mapping, not ", PyTypeName(v)));
    }
    for (const auto& [key, value] : v.dict().entries()) {
      if (!key.is_string()) {
        return absl::InvalidArgumentError("keywords must be strings");
      }
      args.keyword.emplace_back(key.str(), value);
    }
  }
  return args;
}

absl::StatusOr<Value> Interpreter::EvalCall(const Expr& e, const Scope& scope) {
  CHAT_ASSIGN_OR_RETURN(Value callee, Eval(*e.children[0], scope));
  CHAT_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, scope, 1));
  return CallValue(callee, std::move(args));
}

absl::StatusOr<Value> Interpreter::EvalFilter(const Expr& e,
                                              const Scope& scope) {
  CHAT_ASSIGN_OR_RETURN(Value input, Eval(*e.children[0], scope));
  CHAT_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, scope, 1));
  return ApplyFilter(e.name, input, args);
}

absl::StatusOr<Value> Interpreter::EvalTest(const Expr& e, const Scope& scope) {
  CHAT_ASSIGN_OR_RETURN(Value input, Eval(*e.children[0], scope));
  CHAT_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, scope, 1));
  CHAT_ASSIGN_OR_RETURN(bool result, ApplyTest(e.name, input, args));
  return Value::Bool(result);
}

absl::StatusOr<Value> Interpreter::EvalUnary(const Expr& e,
                                             const Scope& scope) {
  CHAT_ASSIGN_OR_RETURN(Value v, Eval(*e.children[0], scope));
  if (e.op == Op::kNot) return Value::Bool(!Truthy(v));
  return PyUnary(e.op, v);
}

absl::StatusOr<Value> Interpreter::EvalCompare(const Expr& e,
                                               const Scope& scope) {
  CHAT_ASSIGN_OR_RETURN(Value left, Eval(*e.children[0], scope));
  for (size_t i = 0; i < e.compare_ops.size(); ++i) {
    CHAT_ASSIGN_OR_RETURN(Value right, Eval(*e.children[i + 1], scope));
    const Op op = e.compare_ops[i];
    bool holds;
    if (op == Op::kIn || op == Op::kNotIn) {
      CHAT_ASSIGN_OR_RETURN(bool in, PyContains(*this, right, left));
      holds = op == Op::kIn ? in : !in;
    } else {
      CHAT_ASSIGN_OR_RETURN(holds, PyCompare(op, left, right));
    }
    if (!holds) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

absl::StatusOr<Value> Interpreter::EvalConcat(const Expr& e,
                                              const Scope& scope) {
  std::string out;
  for (const ExprPtr& part : e.children) {
    CHAT_ASSIGN_OR_RETURN(Value v, Eval(*part, scope));
    CHAT_ASSIGN_OR_RETURN(std::string text, Str(v));
    out += text;
    if (out.size() > limits_.max_string_bytes) {
      return absl::ResourceExhaustedError(Cat(
          "string exceeds max_string_bytes (", limits_.max_string_bytes, ")"));
    }
  }
  return MakeString(std::move(out));
}

absl::StatusOr<Value> Interpreter::EvalCondExpr(const Expr& e,
                                                const Scope& scope) {
  CHAT_ASSIGN_OR_RETURN(Value test, Eval(*e.children[0], scope));
  if (Truthy(test)) return Eval(*e.children[1], scope);
  if (e.children[2] != nullptr) return Eval(*e.children[2], scope);
  return Value::Undefined(
      Cat("the inline if-expression on line ", e.pos.line,
          " evaluated to false and no else section was defined."));
}

absl::StatusOr<Value> Interpreter::EvalCollection(const Expr& e,
                                                  const Scope& scope) {
  if (e.kind == ExprKind::kDict) {
    Value dict = Value::NewDict();
    for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
      CHAT_ASSIGN_OR_RETURN(Value key, Eval(*e.children[i], scope));
      CHAT_ASSIGN_OR_RETURN(Value value, Eval(*e.children[i + 1], scope));
      CHAT_RETURN_IF_ERROR(dict.dict().Set(std::move(key), std::move(value)));
    }
    CHAT_RETURN_IF_ERROR(ChargeWork(e.children.size() * sizeof(Value)));
    return dict;
  }
  std::vector<Value> items;
  items.reserve(e.children.size());
  for (const ExprPtr& child : e.children) {
    CHAT_ASSIGN_OR_RETURN(Value v, Eval(*child, scope));
    items.push_back(std::move(v));
  }
  return MakeList(std::move(items), e.kind == ExprKind::kTuple
                                        ? SequenceKind::kTuple
                                        : SequenceKind::kList);
}

}  // namespace radixkv::model::chat
