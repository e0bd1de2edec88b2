#include "model/chat/jinja_tests.h"

#include "absl/status/status.h"
#include "model/chat/arg_binder.h"
#include "model/chat/interpreter.h"
#include "model/chat/operators.h"
#include "model/chat/py_unicode.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"

namespace radixkv::model::chat {
namespace {

struct TestEntry {
  std::string_view name;
  TestFn fn;
};

absl::StatusOr<bool> NoArgs(std::string_view name, const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs(name, args, {}).status());
  return true;
}

template <ValueType kType>
absl::StatusOr<bool> IsType(Interpreter&, const Value& v,
                            const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(NoArgs("test", args).status());
  return v.type() == kType;
}

// value % divisor == remainder, with Python's %.
absl::StatusOr<bool> ModuloIs(Interpreter& interp, const Value& v,
                              const Value& divisor, int64_t remainder) {
  CHAT_ASSIGN_OR_RETURN(Value mod, PyBinary(interp, Op::kMod, v, divisor));
  return PyEquals(mod, Value::Int(remainder));
}

absl::StatusOr<bool> Odd(Interpreter& interp, const Value& v,
                         const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(NoArgs("odd", args).status());
  return ModuloIs(interp, v, Value::Int(2), 1);
}

absl::StatusOr<bool> Even(Interpreter& interp, const Value& v,
                          const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(NoArgs("even", args).status());
  return ModuloIs(interp, v, Value::Int(2), 0);
}

absl::StatusOr<bool> DivisibleBy(Interpreter& interp, const Value& v,
                                 const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a, BindArgs("divisibleby", args, {{"num", {}}}));
  return ModuloIs(interp, v, a[0], 0);
}

absl::StatusOr<bool> Defined(Interpreter&, const Value& v,
                             const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(NoArgs("defined", args).status());
  return !v.is_undefined();
}

absl::StatusOr<bool> Undefined(Interpreter&, const Value& v,
                               const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(NoArgs("undefined", args).status());
  return v.is_undefined();
}

absl::StatusOr<bool> IsTrue(Interpreter&, const Value& v,
                            const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(NoArgs("true", args).status());
  return v.is_bool() && v.bool_value();
}

absl::StatusOr<bool> IsFalse(Interpreter&, const Value& v,
                             const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(NoArgs("false", args).status());
  return v.is_bool() && !v.bool_value();
}

absl::StatusOr<bool> Number(Interpreter&, const Value& v,
                            const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(NoArgs("number", args).status());
  return v.is_number();
}

template <bool kLower>
absl::StatusOr<bool> Case(Interpreter& interp, const Value& v,
                          const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(NoArgs(kLower ? "lower" : "upper", args).status());
  CHAT_ASSIGN_OR_RETURN(std::string s, interp.Str(v));
  return kLower ? PyStrIsLower(s) : PyStrIsUpper(s);
}

// len(value) and value.__getitem__ both exist.
absl::StatusOr<bool> Sequence(Interpreter&, const Value& v,
                              const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(NoArgs("sequence", args).status());
  switch (v.type()) {
    case ValueType::kUndefined:
    case ValueType::kString:
    case ValueType::kDict:
      return true;
    case ValueType::kList:
      return v.kind() == SequenceKind::kList ||
             v.kind() == SequenceKind::kTuple ||
             v.kind() == SequenceKind::kRange;
    default:
      return false;
  }
}

absl::StatusOr<bool> Iterable(Interpreter&, const Value& v,
                              const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(NoArgs("iterable", args).status());
  switch (v.type()) {
    case ValueType::kUndefined:
    case ValueType::kString:
    case ValueType::kDict:
    case ValueType::kList:
      return true;
    case ValueType::kObject:
      return v.object().type_name() == "LoopContext";
    default:
      return false;
  }
}

absl::StatusOr<bool> Callable(Interpreter&, const Value& v,
                              const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(NoArgs("callable", args).status());
  return v.is_object() && v.object().callable();
}

// Python's `is`: identity for containers and objects; value identity for
// None, bools and the small ints CPython caches; strings and other numbers
// compare by value (CPython's interning makes `is` unreliable on them).
absl::StatusOr<bool> SameAs(Interpreter&, const Value& v,
                            const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a, BindArgs("sameas", args, {{"other", {}}}));
  const Value& o = a[0];
  if (v.type() != o.type()) return false;
  switch (v.type()) {
    case ValueType::kUndefined:
    case ValueType::kList:
    case ValueType::kDict:
    case ValueType::kObject:
      return v.identity() == o.identity();
    default:
      return PyEquals(v, o);
  }
}

absl::StatusOr<bool> Escaped(Interpreter&, const Value& v,
                             const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(NoArgs("escaped", args).status());
  return v.is_markup();
}

absl::StatusOr<bool> In(Interpreter& interp, const Value& v,
                        const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a, BindArgs("in", args, {{"seq", {}}}));
  return PyContains(interp, a[0], v);
}

template <Op kOp>
absl::StatusOr<bool> Compare(Interpreter&, const Value& v,
                             const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a,
                        BindArgs("compare", args, {{"other", {}}}, true));
  return PyCompare(kOp, v, a[0]);
}

absl::StatusOr<bool> IsFilter(Interpreter&, const Value& v,
                              const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(NoArgs("filter", args).status());
  return v.is_string() && FilterStatus(v.str()) != BuiltinStatus::kUnknown;
}

absl::StatusOr<bool> IsTest(Interpreter&, const Value& v,
                            const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(NoArgs("test", args).status());
  return v.is_string() && FindTest(v.str()) != nullptr;
}

absl::StatusOr<bool> Integer(Interpreter&, const Value& v,
                             const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(NoArgs("integer", args).status());
  return v.is_int();
}

constexpr TestEntry kTests[] = {
    {"odd", Odd},
    {"even", Even},
    {"divisibleby", DivisibleBy},
    {"defined", Defined},
    {"undefined", Undefined},
    {"filter", IsFilter},
    {"test", IsTest},
    {"none", IsType<ValueType::kNone>},
    {"boolean", IsType<ValueType::kBool>},
    {"false", IsFalse},
    {"true", IsTrue},
    {"integer", Integer},
    {"float", IsType<ValueType::kFloat>},
    {"lower", Case<true>},
    {"upper", Case<false>},
    {"string", IsType<ValueType::kString>},
    {"mapping", IsType<ValueType::kDict>},
    {"number", Number},
    {"sequence", Sequence},
    {"iterable", Iterable},
    {"callable", Callable},
    {"sameas", SameAs},
    {"escaped", Escaped},
    {"in", In},
    {"==", Compare<Op::kEq>},
    {"eq", Compare<Op::kEq>},
    {"equalto", Compare<Op::kEq>},
    {"!=", Compare<Op::kNe>},
    {"ne", Compare<Op::kNe>},
    {">", Compare<Op::kGt>},
    {"gt", Compare<Op::kGt>},
    {"greaterthan", Compare<Op::kGt>},
    {"ge", Compare<Op::kGe>},
    {">=", Compare<Op::kGe>},
    {"<", Compare<Op::kLt>},
    {"lt", Compare<Op::kLt>},
    {"lessthan", Compare<Op::kLt>},
    {"<=", Compare<Op::kLe>},
    {"le", Compare<Op::kLe>},
};

}  // namespace

TestFn FindTest(std::string_view name) {
  for (const TestEntry& entry : kTests) {
    if (entry.name == name) return entry.fn;
  }
  return nullptr;
}

BuiltinStatus TestStatus(std::string_view name) {
  return FindTest(name) != nullptr ? BuiltinStatus::kSupported
                                   : BuiltinStatus::kUnknown;
}

}  // namespace radixkv::model::chat
