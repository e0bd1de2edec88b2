#include "model/chat/operators.h"

#include <cmath>
#include <limits>

#include "model/chat/interpreter.h"
#include "model/chat/py_format.h"
#include "model/chat/py_unicode.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"

namespace radixkv::model::chat {
namespace {

absl::Status TypeError(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

absl::Status Overflow() {
  return absl::InvalidArgumentError(
      "integer overflow: only 64-bit integers are supported");
}

std::string_view OpSymbol(Op op) {
  switch (op) {
    case Op::kAdd:
      return "+";
    case Op::kSub:
      return "-";
    case Op::kMul:
      return "*";
    case Op::kDiv:
      return "/";
    case Op::kFloorDiv:
      return "//";
    case Op::kMod:
      return "%";
    case Op::kPow:
      return "** or pow()";
    case Op::kEq:
      return "==";
    case Op::kNe:
      return "!=";
    case Op::kLt:
      return "<";
    case Op::kLe:
      return "<=";
    case Op::kGt:
      return ">";
    case Op::kGe:
      return ">=";
    default:
      return "?";
  }
}

absl::Status Unsupported(Op op, const Value& a, const Value& b) {
  return TypeError(Cat("unsupported operand type(s) for ", OpSymbol(op), ": '",
                       PyTypeName(a), "' and '", PyTypeName(b), "'"));
}

// Python's int == float and int < float without rounding the int.
int CompareIntFloat(int64_t i, double d) {
  if (std::isnan(d)) return 2;  // unordered
  if (d >= 9.3e18) return -1;
  if (d <= -9.3e18) return 1;
  const double f = std::floor(d);
  const int64_t fi = static_cast<int64_t>(f);
  if (i < fi) return -1;
  if (i > fi) return 1;
  return f == d ? 0 : -1;
}

// -1, 0, 1, or 2 when unordered (NaN).
int CompareNumbers(const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) {
    return a.int_value() < b.int_value() ? -1 : (a.int_value() > b.int_value());
  }
  if (a.is_float() && b.is_float()) {
    const double x = a.float_value();
    const double y = b.float_value();
    if (std::isnan(x) || std::isnan(y)) return 2;
    return x < y ? -1 : (x > y);
  }
  if (a.is_float()) {
    const int c = CompareIntFloat(b.int_value(), a.float_value());
    return c == 2 ? 2 : -c;
  }
  return CompareIntFloat(a.int_value(), b.float_value());
}

bool OrderHolds(Op op, int c) {
  if (c == 2) return op == Op::kNe;
  switch (op) {
    case Op::kEq:
      return c == 0;
    case Op::kNe:
      return c != 0;
    case Op::kLt:
      return c < 0;
    case Op::kLe:
      return c <= 0;
    case Op::kGt:
      return c > 0;
    default:
      return c >= 0;
  }
}

bool IsOrderedSequence(const Value& v) {
  return v.is_list() &&
         (v.kind() == SequenceKind::kList || v.kind() == SequenceKind::kTuple);
}

absl::StatusOr<bool> Equals(const Value& a, const Value& b, int depth);

absl::StatusOr<bool> SequenceEquals(const std::vector<Value>& x,
                                    const std::vector<Value>& y, int depth) {
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i) {
    CHAT_ASSIGN_OR_RETURN(bool eq, Equals(x[i], y[i], depth + 1));
    if (!eq) return false;
  }
  return true;
}

absl::StatusOr<bool> DictEquals(const DictObject& x, const DictObject& y,
                                int depth) {
  if (x.size() != y.size()) return false;
  for (const auto& [key, value] : x.entries()) {
    const Value* other = y.Find(key);
    if (other == nullptr) return false;
    CHAT_ASSIGN_OR_RETURN(bool eq, Equals(value, *other, depth + 1));
    if (!eq) return false;
  }
  return true;
}

absl::StatusOr<bool> Equals(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) {
    return absl::ResourceExhaustedError("values nested too deeply to compare");
  }
  if (a.is_number() && b.is_number()) return CompareNumbers(a, b) == 0;
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case ValueType::kUndefined:
    case ValueType::kNone:
      return true;
    case ValueType::kString:
      return a.str() == b.str();
    case ValueType::kDict:
      return DictEquals(a.dict(), b.dict(), depth);
    case ValueType::kList: {
      const SequenceKind ka = a.kind();
      const SequenceKind kb = b.kind();
      const bool by_content = ka == kb && ka != SequenceKind::kGenerator &&
                              ka != SequenceKind::kDictValues;
      if (!by_content) return a.identity() == b.identity();
      return SequenceEquals(a.list().items, b.list().items, depth);
    }
    case ValueType::kObject:
      return a.identity() == b.identity();
    default:
      return false;
  }
}

absl::StatusOr<bool> Order(Op op, const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) {
    return absl::ResourceExhaustedError("values nested too deeply to compare");
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (a.is_number() && b.is_number()) {
    return OrderHolds(op, CompareNumbers(a, b));
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.str().compare(b.str());
    return OrderHolds(op, c < 0 ? -1 : (c > 0));
  }
  if (IsOrderedSequence(a) && IsOrderedSequence(b) && a.kind() == b.kind()) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      CHAT_ASSIGN_OR_RETURN(bool eq, Equals(x[i], y[i], depth + 1));
      if (!eq) return Order(op, x[i], y[i], depth + 1);
    }
    const int c = x.size() < y.size() ? -1 : (x.size() > y.size());
    return OrderHolds(op, c);
  }
  return TypeError(Cat("'", OpSymbol(op),
                       "' not supported between instances of '", PyTypeName(a),
                       "' and '", PyTypeName(b), "'"));
}

absl::StatusOr<Value> IntArithmetic(Op op, int64_t x, int64_t y) {
  int64_t r = 0;
  switch (op) {
    case Op::kAdd:
      if (__builtin_add_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    case Op::kSub:
      if (__builtin_sub_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    case Op::kMul:
      if (__builtin_mul_overflow(x, y, &r)) return Overflow();
      return Value::Int(r);
    case Op::kFloorDiv:
    case Op::kMod: {
      if (y == 0) return TypeError("integer division or modulo by zero");
      if (x == std::numeric_limits<int64_t>::min() && y == -1) {
        return op == Op::kMod ? Value::Int(0)
                              : absl::StatusOr<Value>(Overflow());
      }
      int64_t q = x / y;
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        m += y;
        --q;
      }
      return Value::Int(op == Op::kMod ? m : q);
    }
    default:
      break;
  }
  // kPow with y >= 0.
  int64_t result = 1;
  int64_t base = x;
  for (int64_t e = y; e > 0; e >>= 1) {
    if ((e & 1) && __builtin_mul_overflow(result, base, &result)) {
      return Overflow();
    }
    if (e > 1 && __builtin_mul_overflow(base, base, &base)) return Overflow();
  }
  return Value::Int(result);
}

// CPython's float floor division and modulo (float_divmod).
void FloatDivMod(double x, double y, double* floordiv, double* mod) {
  double m = std::fmod(x, y);
  double div = (x - m) / y;
  if (m != 0.0) {
    if ((y < 0) != (m < 0)) {
      m += y;
      div -= 1.0;
    }
  } else {
    m = std::copysign(0.0, y);
  }
  double fd;
  if (div != 0.0) {
    fd = std::floor(div);
    if (div - fd > 0.5) fd += 1.0;
  } else {
    fd = std::copysign(0.0, x / y);
  }
  *floordiv = fd;
  *mod = m;
}

absl::StatusOr<Value> FloatPow(double x, double y) {
  if (x == 0.0 && y < 0.0) {
    return TypeError("0.0 cannot be raised to a negative power");
  }
  if (x < 0.0 && y != std::floor(y) && std::isfinite(y)) {
    return TypeError(
        "a negative number raised to a fractional power gives a complex "
        "number, which is not supported");
  }
  const double r = std::pow(x, y);
  if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) {
    return TypeError("(34, 'Numerical result out of range')");
  }
  return Value::Float(r);
}

absl::StatusOr<Value> NumberArithmetic(Op op, const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) {
    if (op == Op::kDiv) {
      if (b.int_value() == 0) return TypeError("division by zero");
      return Value::Float(static_cast<double>(a.int_value()) /
                          static_cast<double>(b.int_value()));
    }
    if (op == Op::kPow && b.int_value() < 0) {
      return FloatPow(a.float_value(), b.float_value());
    }
    return IntArithmetic(op, a.int_value(), b.int_value());
  }
  const double x = a.float_value();
  const double y = b.float_value();
  switch (op) {
    case Op::kAdd:
      return Value::Float(x + y);
    case Op::kSub:
      return Value::Float(x - y);
    case Op::kMul:
      return Value::Float(x * y);
    case Op::kDiv:
      if (y == 0.0) return TypeError("float division by zero");
      return Value::Float(x / y);
    case Op::kFloorDiv:
    case Op::kMod: {
      if (y == 0.0) return TypeError("float divmod()");
      double fd, m;
      FloatDivMod(x, y, &fd, &m);
      return Value::Float(op == Op::kMod ? m : fd);
    }
    default:
      return FloatPow(x, y);
  }
}

absl::StatusOr<Value> AddStrings(Interpreter& interp, const Value& a,
                                 const Value& b) {
  if (a.is_markup() || b.is_markup()) {
    const std::string left = a.is_markup() ? a.str() : HtmlEscape(a.str());
    const std::string right = b.is_markup() ? b.str() : HtmlEscape(b.str());
    return interp.MakeString(left + right, /*markup=*/true);
  }
  if (a.str().size() + b.str().size() > interp.limits().max_string_bytes) {
    return absl::ResourceExhaustedError(Cat("string exceeds the limit of ",
                                            interp.limits().max_string_bytes,
                                            " bytes"));
  }
  return interp.MakeString(a.str() + b.str());
}

absl::StatusOr<Value> Repeat(Interpreter& interp, const Value& seq,
                             int64_t times) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    const size_t n = seq.str().size();
    if (n != 0 &&
        static_cast<uint64_t>(times) > interp.limits().max_string_bytes / n) {
      return absl::ResourceExhaustedError(Cat("string exceeds the limit of ",
                                              interp.limits().max_string_bytes,
                                              " bytes"));
    }
    std::string out;
    out.reserve(n * times);
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return interp.MakeString(std::move(out), seq.is_markup());
  }
  const auto& items = seq.list().items;
  if (!items.empty() &&
      static_cast<uint64_t>(times) >
          interp.limits().max_work_bytes / (items.size() * sizeof(Value))) {
    return absl::ResourceExhaustedError("list repetition exceeds the limits");
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) {
    out.insert(out.end(), items.begin(), items.end());
  }
  return interp.MakeList(std::move(out), seq.kind());
}

absl::StatusOr<Value> AddSequences(Interpreter& interp, const Value& a,
                                   const Value& b) {
  if (!IsOrderedSequence(b) || a.kind() != b.kind()) {
    return TypeError(Cat("can only concatenate ", PyTypeName(a), " (not \"",
                         PyTypeName(b), "\") to ", PyTypeName(a)));
  }
  std::vector<Value> items = a.list().items;
  items.insert(items.end(), b.list().items.begin(), b.list().items.end());
  return interp.MakeList(std::move(items), a.kind());
}

}  // namespace

bool Truthy(const Value& v) {
  switch (v.type()) {
    case ValueType::kUndefined:
    case ValueType::kNone:
      return false;
    case ValueType::kBool:
      return v.bool_value();
    case ValueType::kInt:
      return v.int_value() != 0;
    case ValueType::kFloat:
      return v.float_value() != 0.0;
    case ValueType::kString:
      return !v.str().empty();
    case ValueType::kList:
      return v.kind() == SequenceKind::kGenerator || !v.list().items.empty();
    case ValueType::kDict:
      return v.dict().size() != 0;
    case ValueType::kObject: {
      const std::optional<int64_t> n = v.object().Length();
      return !n.has_value() || *n != 0;
    }
  }
  return false;
}

absl::Status UndefinedError(const Value& undefined) {
  const std::string& hint = undefined.undefined_hint();
  return absl::InvalidArgumentError(hint.empty() ? "value is undefined" : hint);
}

absl::StatusOr<bool> PyEquals(const Value& a, const Value& b) {
  return Equals(a, b, 0);
}

absl::StatusOr<bool> PyCompare(Op op, const Value& a, const Value& b) {
  if (op == Op::kEq || op == Op::kNe) {
    CHAT_ASSIGN_OR_RETURN(bool eq, Equals(a, b, 0));
    return op == Op::kEq ? eq : !eq;
  }
  return Order(op, a, b, 0);
}

absl::StatusOr<Value> PyBinary(Interpreter& interp, Op op, const Value& a,
                               const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (a.is_number() && b.is_number()) return NumberArithmetic(op, a, b);
  if (op == Op::kAdd) {
    if (a.is_string() && b.is_string()) return AddStrings(interp, a, b);
    if (a.is_string()) {
      return TypeError(
          Cat("can only concatenate str (not \"", PyTypeName(b), "\") to str"));
    }
    if (IsOrderedSequence(a)) return AddSequences(interp, a, b);
  }
  if (op == Op::kMul) {
    const bool a_seq = a.is_string() || IsOrderedSequence(a);
    const bool b_seq = b.is_string() || IsOrderedSequence(b);
    if (a_seq && b.is_integral()) return Repeat(interp, a, b.int_value());
    if (b_seq && a.is_integral()) return Repeat(interp, b, a.int_value());
  }
  if (op == Op::kMod && a.is_string()) {
    CHAT_ASSIGN_OR_RETURN(std::string s, PyPercentFormat(interp, a.str(), b));
    return interp.MakeString(std::move(s), a.is_markup());
  }
  return Unsupported(op, a, b);
}

absl::StatusOr<Value> PyUnary(Op op, const Value& v) {
  if (v.is_undefined()) return UndefinedError(v);
  if (v.is_float()) {
    return Value::Float(op == Op::kNeg ? -v.float_value() : v.float_value());
  }
  if (v.is_integral()) {
    if (op == Op::kPos) return Value::Int(v.int_value());
    if (v.int_value() == std::numeric_limits<int64_t>::min()) return Overflow();
    return Value::Int(-v.int_value());
  }
  return TypeError(Cat("bad operand type for unary ",
                       op == Op::kNeg ? "-" : "+", ": '", PyTypeName(v), "'"));
}

absl::StatusOr<bool> PyContains(Interpreter& interp, const Value& container,
                                const Value& item) {
  switch (container.type()) {
    case ValueType::kUndefined:
      return false;
    case ValueType::kString:
      if (!item.is_string()) {
        return TypeError(
            Cat("'in <string>' requires string as left operand, not ",
                PyTypeName(item)));
      }
      CHAT_RETURN_IF_ERROR(interp.ChargeWork(container.str().size()));
      return container.str().find(item.str()) != std::string::npos;
    case ValueType::kDict:
      if (!IsHashable(item)) {
        return TypeError(Cat("unhashable type: '", PyTypeName(item), "'"));
      }
      return container.dict().Find(item) != nullptr;
    case ValueType::kList: {
      ListObject& list = container.list();
      const bool generator = list.kind == SequenceKind::kGenerator;
      for (size_t i = generator ? list.cursor : 0; i < list.items.size(); ++i) {
        CHAT_ASSIGN_OR_RETURN(bool eq, PyEquals(list.items[i], item));
        if (eq) {
          if (generator) list.cursor = i + 1;
          return true;
        }
      }
      if (generator) list.cursor = list.items.size();
      return false;
    }
    default:
      return TypeError(Cat("argument of type '", PyTypeName(container),
                           "' is not iterable"));
  }
}

absl::StatusOr<int64_t> PyLen(const Value& v) {
  switch (v.type()) {
    case ValueType::kUndefined:
      return 0;
    case ValueType::kString:
      return static_cast<int64_t>(CodePointCount(v.str()));
    case ValueType::kDict:
      return static_cast<int64_t>(v.dict().size());
    case ValueType::kList:
      if (v.kind() != SequenceKind::kGenerator) {
        return static_cast<int64_t>(v.list().items.size());
      }
      break;
    case ValueType::kObject:
      if (std::optional<int64_t> n = v.object().Length()) return *n;
      break;
    default:
      break;
  }
  return TypeError(Cat("object of type '", PyTypeName(v), "' has no len()"));
}

absl::StatusOr<std::vector<Value>> PyIterate(Interpreter& interp,
                                             const Value& v) {
  std::vector<Value> items;
  switch (v.type()) {
    case ValueType::kUndefined:
      return items;
    case ValueType::kString:
      CHAT_RETURN_IF_ERROR(interp.ChargeWork(v.str().size() * sizeof(Value)));
      for (char32_t c : DecodeUtf8(v.str())) {
        std::string s;
        AppendUtf8(c, &s);
        items.push_back(Value::String(std::move(s)));
      }
      return items;
    case ValueType::kDict:
      CHAT_RETURN_IF_ERROR(interp.ChargeWork(v.dict().size() * sizeof(Value)));
      for (const auto& entry : v.dict().entries()) items.push_back(entry.first);
      return items;
    case ValueType::kList: {
      ListObject& list = v.list();
      const size_t start =
          list.kind == SequenceKind::kGenerator ? list.cursor : 0;
      CHAT_RETURN_IF_ERROR(
          interp.ChargeWork((list.items.size() - start) * sizeof(Value)));
      items.assign(list.items.begin() + start, list.items.end());
      if (list.kind == SequenceKind::kGenerator)
        list.cursor = list.items.size();
      return items;
    }
    default:
      return TypeError(Cat("'", PyTypeName(v), "' object is not iterable"));
  }
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '"':
        out += "&#34;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace radixkv::model::chat
