// Attribute and item access, calls, macros and the limits of the
// Interpreter (see interpreter.h).
#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "model/chat/filters.h"
#include "model/chat/interpreter.h"
#include "model/chat/jinja_tests.h"
#include "model/chat/methods.h"
#include "model/chat/operators.h"
#include "model/chat/py_unicode.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"
#include "model/chat/value_repr.h"

namespace radixkv::model::chat {
namespace {

constexpr char kLocatedPayload[] = "radixkv.model.chat/located";

// jinja2's object_type_repr: "dict object", "None", ...
std::string ObjectTypeRepr(const Value& v) {
  if (v.is_none()) return "None";
  return Cat(PyTypeName(v), " object");
}

Value MissingAttribute(const Value& obj, std::string_view name) {
  return Value::Undefined(
      Cat("'", ObjectTypeRepr(obj), "' has no attribute '", name, "'"));
}

Value MissingElement(const Value& obj, const Value& key) {
  absl::StatusOr<std::string> repr = ToPyRepr(key, 256);
  return Value::Undefined(
      Cat(ObjectTypeRepr(obj), " has no element ", repr.ok() ? *repr : "?"));
}

// Python's seq[index] for str and indexable sequences; nullopt when the
// index is out of range.
std::optional<Value> IndexSequence(const Value& obj, int64_t index) {
  if (obj.is_string()) {
    const std::u32string cps = DecodeUtf8(obj.str());
    const int64_t n = static_cast<int64_t>(cps.size());
    if (index < 0) index += n;
    if (index < 0 || index >= n) return std::nullopt;
    std::string s;
    AppendUtf8(cps[index], &s);
    return Value::String(std::move(s));
  }
  const auto& items = obj.list().items;
  const int64_t n = static_cast<int64_t>(items.size());
  if (index < 0) index += n;
  if (index < 0 || index >= n) return std::nullopt;
  return items[index];
}

bool IsIndexable(const Value& obj) {
  return obj.is_string() ||
         (obj.is_list() && (obj.kind() == SequenceKind::kList ||
                            obj.kind() == SequenceKind::kTuple ||
                            obj.kind() == SequenceKind::kRange));
}

}  // namespace

absl::Status Locate(absl::Status status, SourcePos pos) {
  if (status.ok() || status.GetPayload(kLocatedPayload).has_value()) {
    return status;
  }
  absl::Status located(status.code(),
                       Cat(FormatPos(pos), ": ", status.message()));
  located.SetPayload(kLocatedPayload, absl::Cord("1"));
  return located;
}

absl::StatusOr<Value> Interpreter::GetAttr(const Value& obj,
                                           std::string_view name) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_object()) return obj.object().GetAttr(*this, name);
  CHAT_ASSIGN_OR_RETURN(std::optional<Value> method, LookupMethod(obj, name));
  if (method.has_value()) return *method;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().FindString(name)) return *v;
  }
  return MissingAttribute(obj, name);
}

absl::StatusOr<Value> Interpreter::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (IsIndexable(obj) && key.is_integral()) {
    if (obj.is_string()) CHAT_RETURN_IF_ERROR(ChargeWork(obj.str().size()));
    std::optional<Value> item = IndexSequence(obj, key.int_value());
    if (item.has_value()) return *item;
    return MissingElement(obj, key);
  }
  if (obj.is_dict() && IsHashable(key)) {
    if (const Value* v = obj.dict().Find(key)) return *v;
  }
  if (!key.is_string()) return MissingElement(obj, key);
  if (obj.is_object()) return obj.object().GetAttr(*this, key.str());
  CHAT_ASSIGN_OR_RETURN(std::optional<Value> method,
                        LookupMethod(obj, key.str()));
  if (method.has_value()) return *method;
  return MissingAttribute(obj, key.str());
}

absl::StatusOr<Value> Interpreter::CallValue(const Value& callee,
                                             CallArgs args) {
  if (callee.is_undefined()) return UndefinedError(callee);
  if (callee.is_object() && callee.object().callable()) {
    return callee.object().Call(*this, std::move(args));
  }
  return absl::InvalidArgumentError(
      Cat("'", PyTypeName(callee), "' object is not callable"));
}

absl::StatusOr<Value> Interpreter::ApplyFilter(std::string_view name,
                                               const Value& input,
                                               const CallArgs& args) {
  const FilterFn fn = FindFilter(name);
  if (fn == nullptr) {
    return absl::InvalidArgumentError(
        FilterStatus(name) == BuiltinStatus::kRefused
            ? Cat("the '", name, "' filter is not supported")
            : Cat("No filter named '", name, "'"));
  }
  return fn(*this, input, args);
}

absl::StatusOr<bool> Interpreter::ApplyTest(std::string_view name,
                                            const Value& input,
                                            const CallArgs& args) {
  const TestFn fn = FindTest(name);
  if (fn == nullptr) {
    return absl::InvalidArgumentError(
        TestStatus(name) == BuiltinStatus::kRefused
            ? Cat("the '", name, "' test is not supported")
            : Cat("No test named '", name, "'"));
  }
  return fn(*this, input, args);
}

namespace {

// Removes and returns the keyword argument `name`.
std::optional<Value> TakeKeyword(CallArgs& args, std::string_view name) {
  for (auto it = args.keyword.begin(); it != args.keyword.end(); ++it) {
    if (it->first == name) {
      Value v = std::move(it->second);
      args.keyword.erase(it);
      return v;
    }
  }
  return std::nullopt;
}

// jinja2's Macro.__call__ after the named parameters are bound: `caller`,
// `kwargs` and `varargs` when the body reads them, errors for leftovers.
absl::Status BindSpecialNames(const MacroDef& def, CallArgs& args,
                              Scope& scope) {
  const bool caller_is_param = std::find(def.params.begin(), def.params.end(),
                                         "caller") != def.params.end();
  if (def.uses_caller && !caller_is_param) {
    std::optional<Value> caller = TakeKeyword(args, "caller");
    scope.Set("caller", caller.has_value()
                            ? std::move(*caller)
                            : Value::Undefined("No caller defined"));
  }
  if (def.uses_kwargs) {
    Value dict = Value::NewDict();
    for (auto& [k, v] : args.keyword) dict.dict().SetString(k, std::move(v));
    scope.Set("kwargs", std::move(dict));
  } else if (!args.keyword.empty()) {
    return absl::InvalidArgumentError(Cat("macro '", def.name,
                                          "' takes no keyword argument '",
                                          args.keyword.front().first, "'"));
  }
  if (def.uses_varargs) {
    std::vector<Value> rest;
    for (size_t i = def.params.size(); i < args.positional.size(); ++i) {
      rest.push_back(args.positional[i]);
    }
    scope.Set("varargs", Value::Tuple(std::move(rest)));
  } else if (args.positional.size() > def.params.size()) {
    return absl::InvalidArgumentError(Cat("macro '", def.name,
                                          "' takes not more than ",
                                          def.params.size(), " argument(s)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Interpreter::BindMacroArgs(const MacroDef& def, CallArgs& args,
                                        Scope& scope) {
  for (size_t i = 0; i < def.params.size(); ++i) {
    const std::string& param = def.params[i];
    if (i < args.positional.size()) {
      scope.Set(param, args.positional[i]);
    } else if (std::optional<Value> kw = TakeKeyword(args, param)) {
      scope.Set(param, std::move(*kw));
    } else if (def.defaults[i] != nullptr) {
      // Defaults are evaluated per call, seeing the parameters before them.
      CHAT_ASSIGN_OR_RETURN(Value v, Eval(*def.defaults[i], scope));
      scope.Set(param, std::move(v));
    } else {
      scope.Set(param, Value::Undefined(
                           Cat("parameter '", param, "' was not provided")));
    }
  }
  return BindSpecialNames(def, args, scope);
}

absl::StatusOr<Value> Interpreter::InvokeMacro(
    const MacroDef& def, const std::shared_ptr<Scope>& closure, CallArgs args) {
  if (call_depth_ >= limits_.max_call_depth) {
    return absl::ResourceExhaustedError(
        Cat("macro calls nested deeper than max_call_depth (",
            limits_.max_call_depth, ")"));
  }
  auto scope = std::make_shared<Scope>(closure);
  CHAT_RETURN_IF_ERROR(BindMacroArgs(def, args, *scope));
  std::string buffer;
  std::string* saved = out_;
  out_ = &buffer;
  ++call_depth_;
  absl::StatusOr<Flow> flow = ExecBody(def.body, scope);
  --call_depth_;
  out_ = saved;
  if (!flow.ok()) return flow.status();
  return MakeString(std::move(buffer));
}

absl::Status Interpreter::ChargeWork(uint64_t bytes) {
  work_ += bytes;
  if (work_ > limits_.max_work_bytes) {
    return absl::ResourceExhaustedError(
        Cat("template evaluation exceeded max_work_bytes (",
            limits_.max_work_bytes, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Interpreter::MakeString(std::string s, bool markup) {
  if (s.size() > limits_.max_string_bytes) {
    return absl::ResourceExhaustedError(Cat("string exceeds max_string_bytes (",
                                            limits_.max_string_bytes, ")"));
  }
  CHAT_RETURN_IF_ERROR(ChargeWork(s.size()));
  return markup ? Value::Markup(std::move(s)) : Value::String(std::move(s));
}

absl::StatusOr<Value> Interpreter::MakeList(std::vector<Value> items,
                                            SequenceKind kind) {
  CHAT_RETURN_IF_ERROR(ChargeWork(items.size() * sizeof(Value)));
  return Value::NewList(std::move(items), kind);
}

absl::StatusOr<std::string> Interpreter::Str(const Value& v) {
  if (v.is_string()) return v.str();
  CHAT_ASSIGN_OR_RETURN(std::string s, ToPyStr(v, limits_.max_string_bytes));
  CHAT_RETURN_IF_ERROR(ChargeWork(s.size()));
  return s;
}

absl::StatusOr<std::string> Interpreter::Repr(const Value& v) {
  CHAT_ASSIGN_OR_RETURN(std::string s, ToPyRepr(v, limits_.max_string_bytes));
  CHAT_RETURN_IF_ERROR(ChargeWork(s.size()));
  return s;
}

}  // namespace radixkv::model::chat
