#include "model/chat/methods.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "model/chat/arg_binder.h"
#include "model/chat/builtins.h"
#include "model/chat/interpreter.h"
#include "model/chat/operators.h"
#include "model/chat/py_str.h"
#include "model/chat/py_unicode.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"

namespace radixkv::model::chat {
namespace {

using MethodFn = absl::StatusOr<Value> (*)(Interpreter&, const Value& self,
                                           const CallArgs& args);

struct Method {
  std::string_view name;
  MethodFn fn;
};

absl::Status TypeError(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

absl::StatusOr<std::optional<std::string>> OptionalStr(std::string_view method,
                                                       const Value& v) {
  if (v.is_none()) return std::optional<std::string>();
  if (!v.is_string()) {
    return TypeError(
        Cat(method, " arg must be None or str, not ", PyTypeName(v)));
  }
  return std::optional<std::string>(v.str());
}

absl::StatusOr<std::string> RequireStr(std::string_view method,
                                       const Value& v) {
  if (!v.is_string()) {
    return TypeError(
        Cat(method, "() argument must be str, not ", PyTypeName(v)));
  }
  return v.str();
}

absl::StatusOr<std::optional<int64_t>> OptionalIndex(const Value& v) {
  if (v.is_none()) return std::optional<int64_t>();
  if (!v.is_integral()) {
    return TypeError("slice indices must be integers or None");
  }
  return std::optional<int64_t>(v.int_value());
}

absl::StatusOr<int64_t> RequireInt(const Value& v) {
  if (!v.is_integral()) {
    return TypeError(Cat("'", PyTypeName(v),
                         "' object cannot be interpreted as an integer"));
  }
  return v.int_value();
}

absl::StatusOr<Value> StrList(Interpreter& interp,
                              std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (std::string& p : parts) items.push_back(Value::String(std::move(p)));
  return interp.MakeList(std::move(items));
}

// --- str -------------------------------------------------------------------

template <std::string (*F)(std::string_view)>
absl::StatusOr<Value> StrTransform(Interpreter& interp, const Value& self,
                                   const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("str method", args, {}, true).status());
  CHAT_RETURN_IF_ERROR(interp.ChargeWork(self.str().size()));
  return interp.MakeString(F(self.str()));
}

template <bool (*F)(std::string_view)>
absl::StatusOr<Value> StrPredicate(Interpreter& interp, const Value& self,
                                   const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("str method", args, {}, true).status());
  CHAT_RETURN_IF_ERROR(interp.ChargeWork(self.str().size()));
  return Value::Bool(F(self.str()));
}

template <bool (*F)(char32_t)>
bool AllChars(std::string_view s) {
  const std::u32string cps = DecodeUtf8(s);
  if (cps.empty()) return false;
  for (char32_t c : cps) {
    if (!F(c)) return false;
  }
  return true;
}

bool IsPrintableStr(std::string_view s) {
  for (char32_t c : DecodeUtf8(s)) {
    if (!PyIsPrintable(c)) return false;
  }
  return true;
}

bool IsAsciiStr(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

template <bool kLeft, bool kRight>
absl::StatusOr<Value> StrStrip(Interpreter& interp, const Value& self,
                               const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(
      auto a, BindArgs("strip", args, {{"chars", Value::None()}}, true));
  CHAT_ASSIGN_OR_RETURN(auto chars, OptionalStr("strip", a[0]));
  CHAT_RETURN_IF_ERROR(interp.ChargeWork(self.str().size()));
  return interp.MakeString(PyStrip(self.str(), chars, kLeft, kRight));
}

template <bool kReverse>
absl::StatusOr<Value> StrSplit(Interpreter& interp, const Value& self,
                               const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(
      auto a, BindArgs("split", args,
                       {{"sep", Value::None()}, {"maxsplit", Value::Int(-1)}}));
  CHAT_ASSIGN_OR_RETURN(auto sep, OptionalStr("split", a[0]));
  if (sep.has_value() && sep->empty()) return TypeError("empty separator");
  CHAT_ASSIGN_OR_RETURN(int64_t maxsplit, RequireInt(a[1]));
  CHAT_RETURN_IF_ERROR(interp.ChargeWork(self.str().size() * 2));
  return StrList(interp, kReverse ? PyRSplit(self.str(), sep, maxsplit)
                                  : PySplit(self.str(), sep, maxsplit));
}

absl::StatusOr<Value> StrSplitLines(Interpreter& interp, const Value& self,
                                    const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(
      auto a, BindArgs("splitlines", args, {{"keepends", Value::Bool(false)}}));
  CHAT_RETURN_IF_ERROR(interp.ChargeWork(self.str().size() * 2));
  return StrList(interp, PySplitLines(self.str(), Truthy(a[0])));
}

absl::StatusOr<Value> StrReplace(Interpreter& interp, const Value& self,
                                 const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(
      auto a,
      BindArgs("replace", args,
               {{"old", {}}, {"new", {}}, {"count", Value::Int(-1)}}, true));
  CHAT_ASSIGN_OR_RETURN(std::string old_text, RequireStr("replace", a[0]));
  CHAT_ASSIGN_OR_RETURN(std::string new_text, RequireStr("replace", a[1]));
  CHAT_ASSIGN_OR_RETURN(int64_t count, RequireInt(a[2]));
  CHAT_RETURN_IF_ERROR(interp.ChargeWork(self.str().size()));
  const uint64_t estimate =
      old_text.empty() ? (self.str().size() + 1) * (new_text.size() + 4)
                       : self.str().size() / old_text.size() * new_text.size();
  if (estimate > interp.limits().max_string_bytes) {
    return absl::ResourceExhaustedError("replace() result exceeds the limits");
  }
  return interp.MakeString(PyReplace(self.str(), old_text, new_text, count));
}

// startswith / endswith: a str or a tuple of str, optional start and end.
template <bool kEnd>
absl::StatusOr<Value> StrAffix(Interpreter& interp, const Value& self,
                               const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a, BindArgs(kEnd ? "endswith" : "startswith", args,
                                         {{"prefix", {}},
                                          {"start", Value::None()},
                                          {"end", Value::None()}},
                                         true));
  CHAT_ASSIGN_OR_RETURN(auto start, OptionalIndex(a[1]));
  CHAT_ASSIGN_OR_RETURN(auto end, OptionalIndex(a[2]));
  CHAT_RETURN_IF_ERROR(interp.ChargeWork(self.str().size()));
  const std::string s =
      (start || end) ? PySubstring(self.str(), start, end) : self.str();
  std::vector<Value> candidates;
  if (a[0].is_list() && a[0].kind() == SequenceKind::kTuple) {
    candidates = a[0].list().items;
  } else {
    candidates.push_back(a[0]);
  }
  for (const Value& c : candidates) {
    if (!c.is_string()) {
      return TypeError(Cat(kEnd ? "endswith" : "startswith",
                           " first arg must be str or a tuple of str, not ",
                           PyTypeName(c)));
    }
    const std::string& x = c.str();
    const bool hit = x.size() <= s.size() &&
                     (kEnd ? s.compare(s.size() - x.size(), x.size(), x) == 0
                           : s.compare(0, x.size(), x) == 0);
    if (hit) return Value::Bool(true);
  }
  return Value::Bool(false);
}

// find, rfind, index, rindex, count.
template <int kMode>  // 0 find, 1 rfind, 2 index, 3 rindex, 4 count
absl::StatusOr<Value> StrSearch(Interpreter& interp, const Value& self,
                                const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(
      auto a,
      BindArgs("find", args,
               {{"sub", {}}, {"start", Value::None()}, {"end", Value::None()}},
               true));
  CHAT_ASSIGN_OR_RETURN(std::string sub, RequireStr("find", a[0]));
  CHAT_ASSIGN_OR_RETURN(auto start, OptionalIndex(a[1]));
  CHAT_ASSIGN_OR_RETURN(auto end, OptionalIndex(a[2]));
  CHAT_RETURN_IF_ERROR(interp.ChargeWork(self.str().size() * 4));
  if (kMode == 4) return Value::Int(PyCount(self.str(), sub, start, end));
  const int64_t at = PyFind(self.str(), sub, start, end, kMode % 2 == 1);
  if (at < 0 && kMode >= 2) return TypeError("substring not found");
  return Value::Int(at);
}

absl::StatusOr<Value> StrJoin(Interpreter& interp, const Value& self,
                              const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a,
                        BindArgs("join", args, {{"iterable", {}}}, true));
  CHAT_ASSIGN_OR_RETURN(std::vector<Value> items, PyIterate(interp, a[0]));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return TypeError(Cat("sequence item ", i, ": expected str instance, ",
                           PyTypeName(items[i]), " found"));
    }
    if (i > 0) out += self.str();
    out += items[i].str();
    if (out.size() > interp.limits().max_string_bytes) {
      return absl::ResourceExhaustedError("join() result exceeds the limits");
    }
  }
  return interp.MakeString(std::move(out));
}

template <char kAlign>
absl::StatusOr<Value> StrPad(Interpreter& interp, const Value& self,
                             const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(
      auto a,
      BindArgs("center", args,
               {{"width", {}}, {"fillchar", Value::String(" ")}}, true));
  CHAT_ASSIGN_OR_RETURN(int64_t width, RequireInt(a[0]));
  if (!a[1].is_string() || CodePointCount(a[1].str()) != 1) {
    return TypeError("The fill character must be exactly one character long");
  }
  if (width > static_cast<int64_t>(interp.limits().max_string_bytes)) {
    return absl::ResourceExhaustedError("padding exceeds the limits");
  }
  return interp.MakeString(PyPad(self.str(), width, a[1].str(), kAlign));
}

absl::StatusOr<Value> StrZfill(Interpreter& interp, const Value& self,
                               const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a, BindArgs("zfill", args, {{"width", {}}}, true));
  CHAT_ASSIGN_OR_RETURN(int64_t width, RequireInt(a[0]));
  if (width > static_cast<int64_t>(interp.limits().max_string_bytes)) {
    return absl::ResourceExhaustedError("padding exceeds the limits");
  }
  return interp.MakeString(PyZfill(self.str(), width));
}

template <bool kSuffix>
absl::StatusOr<Value> StrRemoveAffix(Interpreter& interp, const Value& self,
                                     const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a,
                        BindArgs("removeprefix", args, {{"prefix", {}}}, true));
  CHAT_ASSIGN_OR_RETURN(std::string x, RequireStr("removeprefix", a[0]));
  const std::string& s = self.str();
  if (x.size() <= s.size()) {
    if (!kSuffix && s.compare(0, x.size(), x) == 0) {
      return interp.MakeString(s.substr(x.size()));
    }
    if (kSuffix && s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return interp.MakeString(s.substr(0, s.size() - x.size()));
    }
  }
  return self;
}

template <bool kReverse>
absl::StatusOr<Value> StrPartition(Interpreter& interp, const Value& self,
                                   const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a,
                        BindArgs("partition", args, {{"sep", {}}}, true));
  CHAT_ASSIGN_OR_RETURN(std::string sep, RequireStr("partition", a[0]));
  if (sep.empty()) return TypeError("empty separator");
  const std::string& s = self.str();
  const size_t hit = kReverse ? s.rfind(sep) : s.find(sep);
  std::vector<Value> parts;
  if (hit == std::string::npos) {
    parts =
        kReverse
            ? std::vector<Value>{Value::String(""), Value::String(""), self}
            : std::vector<Value>{self, Value::String(""), Value::String("")};
  } else {
    parts = {Value::String(s.substr(0, hit)), Value::String(sep),
             Value::String(s.substr(hit + sep.size()))};
  }
  return interp.MakeList(std::move(parts), SequenceKind::kTuple);
}

constexpr Method kStrMethods[] = {
    {"capitalize", StrTransform<PyCapitalize>},
    {"center", StrPad<'^'>},
    {"count", StrSearch<4>},
    {"endswith", StrAffix<true>},
    {"find", StrSearch<0>},
    {"index", StrSearch<2>},
    {"isalnum", StrPredicate<AllChars<PyIsAlnum>>},
    {"isalpha", StrPredicate<AllChars<PyIsAlpha>>},
    {"isascii", StrPredicate<IsAsciiStr>},
    {"isdecimal", StrPredicate<AllChars<PyIsDecimal>>},
    {"isdigit", StrPredicate<AllChars<PyIsDigit>>},
    {"islower", StrPredicate<PyStrIsLower>},
    {"isnumeric", StrPredicate<AllChars<PyIsNumeric>>},
    {"isprintable", StrPredicate<IsPrintableStr>},
    {"isspace", StrPredicate<AllChars<PyIsSpace>>},
    {"istitle", StrPredicate<PyStrIsTitle>},
    {"isupper", StrPredicate<PyStrIsUpper>},
    {"join", StrJoin},
    {"ljust", StrPad<'<'>},
    {"lower", StrTransform<PyLower>},
    {"lstrip", StrStrip<true, false>},
    {"partition", StrPartition<false>},
    {"removeprefix", StrRemoveAffix<false>},
    {"removesuffix", StrRemoveAffix<true>},
    {"replace", StrReplace},
    {"rfind", StrSearch<1>},
    {"rindex", StrSearch<3>},
    {"rjust", StrPad<'>'>},
    {"rpartition", StrPartition<true>},
    {"rsplit", StrSplit<true>},
    {"rstrip", StrStrip<false, true>},
    {"split", StrSplit<false>},
    {"splitlines", StrSplitLines},
    {"startswith", StrAffix<false>},
    {"strip", StrStrip<true, true>},
    {"swapcase", StrTransform<PySwapcase>},
    {"title", StrTransform<PyTitle>},
    {"upper", StrTransform<PyUpper>},
    {"zfill", StrZfill},
};

// Python str attributes this renderer refuses by name.
constexpr std::string_view kStrRefused[] = {
    "casefold",   "encode",       "expandtabs", "format",
    "format_map", "isidentifier", "maketrans",  "translate"};

// --- list, tuple -------------------------------------------------------------

absl::StatusOr<Value> SeqCount(Interpreter&, const Value& self,
                               const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a, BindArgs("count", args, {{"value", {}}}, true));
  int64_t n = 0;
  for (const Value& item : self.list().items) {
    CHAT_ASSIGN_OR_RETURN(bool eq, PyEquals(item, a[0]));
    n += eq;
  }
  return Value::Int(n);
}

absl::StatusOr<Value> SeqIndex(Interpreter&, const Value& self,
                               const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(auto a, BindArgs("index", args, {{"value", {}}}, true));
  const auto& items = self.list().items;
  for (size_t i = 0; i < items.size(); ++i) {
    CHAT_ASSIGN_OR_RETURN(bool eq, PyEquals(items[i], a[0]));
    if (eq) return Value::Int(static_cast<int64_t>(i));
  }
  return TypeError("list.index(x): x not in list");
}

absl::StatusOr<Value> ListCopy(Interpreter& interp, const Value& self,
                               const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("copy", args, {}, true).status());
  return interp.MakeList(self.list().items);
}

absl::StatusOr<Value> ListPop(Interpreter&, const Value& self,
                              const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(
      auto a, BindArgs("pop", args, {{"index", Value::Int(-1)}}, true));
  CHAT_ASSIGN_OR_RETURN(int64_t index, RequireInt(a[0]));
  auto& items = self.list().items;
  if (items.empty()) return TypeError("pop from empty list");
  const int64_t n = static_cast<int64_t>(items.size());
  if (index < 0) index += n;
  if (index < 0 || index >= n) return TypeError("pop index out of range");
  Value v = items[index];
  items.erase(items.begin() + index);
  return v;
}

absl::StatusOr<Value> ListClear(Interpreter&, const Value& self,
                                const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("clear", args, {}, true).status());
  self.list().items.clear();
  return Value::None();
}

constexpr Method kListMethods[] = {
    {"clear", ListClear}, {"copy", ListCopy}, {"count", SeqCount},
    {"index", SeqIndex},  {"pop", ListPop},
};
constexpr Method kTupleMethods[] = {{"count", SeqCount}, {"index", SeqIndex}};
constexpr std::string_view kListUnsafe[] = {"append", "extend",  "insert",
                                            "remove", "reverse", "sort"};

// --- dict --------------------------------------------------------------------

absl::StatusOr<Value> DictGet(Interpreter&, const Value& self,
                              const CallArgs& args) {
  CHAT_ASSIGN_OR_RETURN(
      auto a,
      BindArgs("get", args, {{"key", {}}, {"default", Value::None()}}, true));
  if (!IsHashable(a[0])) {
    return TypeError(Cat("unhashable type: '", PyTypeName(a[0]), "'"));
  }
  const Value* v = self.dict().Find(a[0]);
  return v != nullptr ? *v : a[1];
}

template <SequenceKind kKind>
absl::StatusOr<Value> DictView(Interpreter& interp, const Value& self,
                               const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("items", args, {}, true).status());
  std::vector<Value> items;
  for (const auto& [k, v] : self.dict().entries()) {
    if (kKind == SequenceKind::kDictKeys) {
      items.push_back(k);
    } else if (kKind == SequenceKind::kDictValues) {
      items.push_back(v);
    } else {
      items.push_back(Value::Tuple({k, v}));
    }
  }
  return interp.MakeList(std::move(items), kKind);
}

absl::StatusOr<Value> DictCopy(Interpreter& interp, const Value& self,
                               const CallArgs& args) {
  CHAT_RETURN_IF_ERROR(BindArgs("copy", args, {}, true).status());
  CHAT_RETURN_IF_ERROR(
      interp.ChargeWork(self.dict().size() * 2 * sizeof(Value)));
  return Value::FromDict(std::make_shared<DictObject>(self.dict()));
}

constexpr Method kDictMethods[] = {
    {"copy", DictCopy},
    {"get", DictGet},
    {"items", DictView<SequenceKind::kDictItems>},
    {"keys", DictView<SequenceKind::kDictKeys>},
    {"values", DictView<SequenceKind::kDictValues>},
};
constexpr std::string_view kDictUnsafe[] = {"clear", "pop", "popitem",
                                            "setdefault", "update"};

// --- numbers
// -------------------------------------------------------------------

constexpr std::string_view kIntAttributes[] = {
    "as_integer_ratio", "bit_count", "bit_length", "conjugate", "denominator",
    "from_bytes",       "imag",      "numerator",  "real",      "to_bytes"};
constexpr std::string_view kFloatAttributes[] = {
    "as_integer_ratio", "conjugate", "fromhex", "hex", "imag",
    "is_integer",       "real"};

template <size_t N>
bool Contains(const std::string_view (&names)[N], std::string_view name) {
  for (std::string_view n : names) {
    if (n == name) return true;
  }
  return false;
}

template <size_t N>
const Method* FindMethod(const Method (&methods)[N], std::string_view name) {
  for (const Method& m : methods) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

Value Bind(const Value& receiver, const Method& method) {
  const MethodFn fn = method.fn;
  return NativeFunction::Make(
      std::string(method.name),
      [receiver, fn](Interpreter& interp, CallArgs args) {
        return fn(interp, receiver, args);
      });
}

Value Unsafe(const Value& receiver, std::string_view name) {
  return Value::Undefined(Cat("access to attribute '", name, "' of '",
                              PyTypeName(receiver), "' object is unsafe."),
                          /*security=*/true);
}

absl::Status Refused(const Value& receiver, std::string_view name) {
  return absl::InvalidArgumentError(
      Cat("the method ", PyTypeName(receiver), ".", name,
          "() is not supported by this renderer"));
}

}  // namespace

absl::StatusOr<std::optional<Value>> LookupMethod(const Value& receiver,
                                                  std::string_view name) {
  if (name.size() > 4 && name.substr(0, 2) == "__" &&
      name.substr(name.size() - 2) == "__") {
    return std::optional<Value>(Unsafe(receiver, name));
  }
  const Method* method = nullptr;
  switch (receiver.type()) {
    case ValueType::kString:
      method = FindMethod(kStrMethods, name);
      if (method == nullptr && Contains(kStrRefused, name)) {
        return Refused(receiver, name);
      }
      break;
    case ValueType::kDict:
      method = FindMethod(kDictMethods, name);
      if (Contains(kDictUnsafe, name))
        return std::optional<Value>(Unsafe(receiver, name));
      if (method == nullptr && name == "fromkeys")
        return Refused(receiver, name);
      break;
    case ValueType::kList:
      if (receiver.kind() == SequenceKind::kList) {
        method = FindMethod(kListMethods, name);
        if (Contains(kListUnsafe, name)) {
          return std::optional<Value>(Unsafe(receiver, name));
        }
      } else if (receiver.kind() == SequenceKind::kTuple) {
        method = FindMethod(kTupleMethods, name);
      }
      break;
    case ValueType::kInt:
    case ValueType::kBool:
      if (Contains(kIntAttributes, name)) return Refused(receiver, name);
      break;
    case ValueType::kFloat:
      if (Contains(kFloatAttributes, name)) return Refused(receiver, name);
      break;
    default:
      break;
  }
  if (method == nullptr) return std::optional<Value>();
  return std::optional<Value>(Bind(receiver, *method));
}

}  // namespace radixkv::model::chat
