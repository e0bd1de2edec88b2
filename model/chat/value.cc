#include "model/chat/value.h"

#include <cmath>

#include "model/chat/str_cat.h"

namespace radixkv::model::chat {
namespace {

const std::string& EmptyString() {
  static const std::string* const kEmpty = new std::string();
  return *kEmpty;
}

// Python's int == float: exact, without rounding the int.
bool IntEqualsFloat(int64_t i, double d) {
  if (!std::isfinite(d) || d != std::floor(d)) return false;
  if (d < -9.3e18 || d > 9.3e18) return false;
  return static_cast<double>(i) == d && static_cast<int64_t>(d) == i;
}

bool KeyEquals(const Value& a, const Value& b, int depth) {
  if (depth > kMaxValueDepth) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() && b.is_float()) return a.float_value() == b.float_value();
    if (a.is_float()) return IntEqualsFloat(b.int_value(), a.float_value());
    if (b.is_float()) return IntEqualsFloat(a.int_value(), b.float_value());
    return a.int_value() == b.int_value();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case ValueType::kString:
      return a.str() == b.str();
    case ValueType::kNone:
    case ValueType::kUndefined:
      return true;
    case ValueType::kList: {
      const ListObject& x = a.list();
      const ListObject& y = b.list();
      if (x.kind != SequenceKind::kTuple || y.kind != SequenceKind::kTuple ||
          x.items.size() != y.items.size()) {
        return false;
      }
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!KeyEquals(x.items[i], y.items[i], depth + 1)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

}  // namespace

Value Value::Undefined(std::string hint, bool security) {
  Value v;
  v.flag_ = security;
  if (!hint.empty()) v.ptr_ = std::make_shared<std::string>(std::move(hint));
  return v;
}

Value Value::None() {
  Value v;
  v.type_ = ValueType::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.type_ = ValueType::kBool;
  v.flag_ = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.type_ = ValueType::kInt;
  v.int_ = i;
  return v;
}

Value Value::Float(double d) {
  Value v;
  v.type_ = ValueType::kFloat;
  v.float_ = d;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.type_ = ValueType::kString;
  v.ptr_ = std::make_shared<std::string>(std::move(s));
  return v;
}

Value Value::Markup(std::string s) {
  Value v = String(std::move(s));
  v.flag_ = true;
  return v;
}

Value Value::NewList(std::vector<Value> items, SequenceKind kind) {
  auto list = std::make_shared<ListObject>();
  list->kind = kind;
  list->items = std::move(items);
  return FromList(std::move(list));
}

Value Value::Tuple(std::vector<Value> items) {
  return NewList(std::move(items), SequenceKind::kTuple);
}

Value Value::NewDict() { return FromDict(std::make_shared<DictObject>()); }

Value Value::FromDict(std::shared_ptr<DictObject> dict) {
  Value v;
  v.type_ = ValueType::kDict;
  v.ptr_ = std::move(dict);
  return v;
}

Value Value::FromList(std::shared_ptr<ListObject> list) {
  Value v;
  v.type_ = ValueType::kList;
  v.ptr_ = std::move(list);
  return v;
}

Value Value::FromObject(std::shared_ptr<Object> object) {
  Value v;
  v.type_ = ValueType::kObject;
  v.ptr_ = std::move(object);
  return v;
}

double Value::float_value() const {
  if (type_ == ValueType::kFloat) return float_;
  return static_cast<double>(int_value());
}

const std::string& Value::str() const {
  if (type_ != ValueType::kString || ptr_ == nullptr) return EmptyString();
  return *static_cast<const std::string*>(ptr_.get());
}

ListObject& Value::list() const {
  return *static_cast<ListObject*>(ptr_.get());
}

SequenceKind Value::kind() const { return list().kind; }

DictObject& Value::dict() const {
  return *static_cast<DictObject*>(ptr_.get());
}

Object& Value::object() const { return *static_cast<Object*>(ptr_.get()); }

std::shared_ptr<Object> Value::object_ptr() const {
  return std::static_pointer_cast<Object>(ptr_);
}

const std::string& Value::undefined_hint() const {
  if (type_ != ValueType::kUndefined || ptr_ == nullptr) return EmptyString();
  return *static_cast<const std::string*>(ptr_.get());
}

bool IsHashable(const Value& v) {
  switch (v.type()) {
    case ValueType::kDict:
      return false;
    case ValueType::kList:
      if (v.kind() != SequenceKind::kTuple) {
        return v.kind() == SequenceKind::kGenerator ||
               v.kind() == SequenceKind::kRange;
      }
      for (const Value& item : v.list().items) {
        if (!IsHashable(item)) return false;
      }
      return true;
    default:
      return true;
  }
}

const Value* DictObject::Find(const Value& key) const {
  if (key.is_string()) return FindString(key.str());
  for (const auto& [k, v] : entries_) {
    if (!k.is_string() && KeyEquals(k, key, 0)) return &v;
  }
  return nullptr;
}

const Value* DictObject::FindString(std::string_view key) const {
  auto it = string_index_.find(absl::string_view(key.data(), key.size()));
  return it == string_index_.end() ? nullptr : &entries_[it->second].second;
}

absl::Status DictObject::Set(Value key, Value value) {
  if (key.is_string()) {
    SetString(key.str(), std::move(value));
    return absl::OkStatus();
  }
  if (!IsHashable(key)) {
    return absl::InvalidArgumentError(
        Cat("unhashable type: '", PyTypeName(key), "'"));
  }
  for (auto& [k, v] : entries_) {
    if (!k.is_string() && KeyEquals(k, key, 0)) {
      v = std::move(value);
      return absl::OkStatus();
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
  return absl::OkStatus();
}

void DictObject::SetString(std::string key, Value value) {
  auto it = string_index_.find(key);
  if (it != string_index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  string_index_.emplace(key, entries_.size());
  entries_.emplace_back(Value::String(std::move(key)), std::move(value));
}

absl::StatusOr<Value> Object::GetAttr(Interpreter&, std::string_view name) {
  return Value::Undefined(
      Cat("'", type_name(), "' object has no attribute '", name, "'"));
}

absl::StatusOr<Value> Object::Call(Interpreter&, CallArgs) {
  return absl::InvalidArgumentError(
      Cat("'", type_name(), "' object is not callable"));
}

absl::StatusOr<std::string> Object::Repr(size_t, int) {
  return absl::InvalidArgumentError(
      Cat("cannot render a '", type_name(),
          "' object as text (Python would print its memory address)"));
}

std::string_view PyTypeName(const Value& v) {
  switch (v.type()) {
    case ValueType::kUndefined:
      return "Undefined";
    case ValueType::kNone:
      return "NoneType";
    case ValueType::kBool:
      return "bool";
    case ValueType::kInt:
      return "int";
    case ValueType::kFloat:
      return "float";
    case ValueType::kString:
      return v.is_markup() ? "Markup" : "str";
    case ValueType::kDict:
      return "dict";
    case ValueType::kObject:
      return v.object().type_name();
    case ValueType::kList:
      break;
  }
  switch (v.kind()) {
    case SequenceKind::kList:
      return "list";
    case SequenceKind::kTuple:
      return "tuple";
    case SequenceKind::kGenerator:
      return "generator";
    case SequenceKind::kRange:
      return "range";
    case SequenceKind::kDictKeys:
      return "dict_keys";
    case SequenceKind::kDictValues:
      return "dict_values";
    case SequenceKind::kDictItems:
      return "dict_items";
  }
  return "object";
}

}  // namespace radixkv::model::chat
