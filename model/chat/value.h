// The values a chat template computes with, modelled on the Python objects
// jinja2 hands a template: undefined (jinja2's Undefined), None, bool, int
// (64-bit here), float, str (optionally markupsafe.Markup), sequences (list,
// tuple, generator, range, dict views), dict (insertion-ordered) and opaque
// objects (namespace, macro, loop, bound method, ...).
//
// Lists, dicts and objects are shared by reference like Python's, so
// `{% set b = a %}` aliases `a`; strings are immutable and shared.
#ifndef RADIXKV_MODEL_CHAT_VALUE_H_
#define RADIXKV_MODEL_CHAT_VALUE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace radixkv::model::chat {

class DictObject;
class Interpreter;
class Object;
struct ListObject;

// Nesting depth beyond which recursive operations on values (repr, json,
// equality, ordering, conversion from JSON) fail instead of recursing.
inline constexpr int kMaxValueDepth = 256;

enum class ValueType : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kDict,
  kObject,
};

// The Python type a ListObject stands for; it decides repr, len(), indexing
// and truthiness.
enum class SequenceKind : uint8_t {
  kList,
  kTuple,
  kGenerator,  // single pass, no len(), always truthy (filters like map)
  kRange,
  kDictKeys,
  kDictValues,
  kDictItems,
};

class Value {
 public:
  // An undefined value without a hint.
  Value() = default;

  // jinja2's Undefined; `hint` is the error message used when the value is
  // used in a way Undefined forbids. `security` marks the sandbox's
  // "access to attribute ... is unsafe" undefined.
  static Value Undefined(std::string hint, bool security = false);
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value String(std::string s);
  // A markupsafe.Markup string (from |safe or |escape).
  static Value Markup(std::string s);
  static Value NewList(std::vector<Value> items,
                       SequenceKind kind = SequenceKind::kList);
  static Value Tuple(std::vector<Value> items);
  static Value NewDict();
  static Value FromDict(std::shared_ptr<DictObject> dict);
  static Value FromList(std::shared_ptr<ListObject> list);
  static Value FromObject(std::shared_ptr<Object> object);

  ValueType type() const { return type_; }
  bool is_undefined() const { return type_ == ValueType::kUndefined; }
  bool is_none() const { return type_ == ValueType::kNone; }
  bool is_bool() const { return type_ == ValueType::kBool; }
  bool is_int() const { return type_ == ValueType::kInt; }
  bool is_float() const { return type_ == ValueType::kFloat; }
  bool is_string() const { return type_ == ValueType::kString; }
  bool is_list() const { return type_ == ValueType::kList; }
  bool is_dict() const { return type_ == ValueType::kDict; }
  bool is_object() const { return type_ == ValueType::kObject; }
  // int, float or bool (Python's numbers.Number).
  bool is_number() const {
    return type_ == ValueType::kInt || type_ == ValueType::kFloat ||
           type_ == ValueType::kBool;
  }
  // int or bool (Python's int, which bool subclasses).
  bool is_integral() const {
    return type_ == ValueType::kInt || type_ == ValueType::kBool;
  }

  bool bool_value() const { return flag_; }
  // The integer of an int or bool.
  int64_t int_value() const { return type_ == ValueType::kBool ? flag_ : int_; }
  // The float of any number (int and bool converted).
  double float_value() const;
  const std::string& str() const;
  bool is_markup() const { return type_ == ValueType::kString && flag_; }
  ListObject& list() const;
  // The sequence kind of a list value.
  SequenceKind kind() const;
  DictObject& dict() const;
  Object& object() const;
  std::shared_ptr<Object> object_ptr() const;
  // The hint of an undefined value ("" when none was given).
  const std::string& undefined_hint() const;
  bool undefined_is_security() const { return flag_; }
  // Address of the shared list/dict/object, nullptr for other types (for
  // Python's `is` on containers).
  const void* identity() const { return ptr_.get(); }

 private:
  ValueType type_ = ValueType::kUndefined;
  bool flag_ = false;  // bool value, Markup flag, security-undefined flag
  union {
    int64_t int_ = 0;
    double float_;
  };
  // std::string for str and undefined hints, ListObject, DictObject or Object.
  std::shared_ptr<void> ptr_;
};

struct ListObject {
  SequenceKind kind = SequenceKind::kList;
  std::vector<Value> items;
  size_t cursor = 0;  // generators: items before it were consumed
  // kRange: the arguments shown by repr, range(start, stop[, step]).
  int64_t range_start = 0;
  int64_t range_stop = 0;
  int64_t range_step = 1;
};

// Python's hashable values: str, numbers, None, undefined, tuples of
// hashables, objects (by identity).
bool IsHashable(const Value& v);

// Python's dict: insertion-ordered, keyed by hashable values with Python
// key equality (1, 1.0 and True are one key).
class DictObject {
 public:
  // The value stored under `key`, nullptr when absent or unhashable.
  const Value* Find(const Value& key) const;
  const Value* FindString(std::string_view key) const;
  // Inserts or overwrites (the first insertion fixes the position).
  // INVALID_ARGUMENT if `key` is unhashable.
  absl::Status Set(Value key, Value value);
  void SetString(std::string key, Value value);
  const std::vector<std::pair<Value, Value>>& entries() const {
    return entries_;
  }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<Value, Value>> entries_;
  absl::flat_hash_map<std::string, size_t> string_index_;
};

// Arguments of a call, after evaluation.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Objects other than the built-in containers: namespace(), macros, loop,
// bound methods, cycler(), joiner(), range's helpers.
class Object : public std::enable_shared_from_this<Object> {
 public:
  virtual ~Object() = default;
  // Python type name for messages and `repr` ("Namespace", "Macro", ...).
  virtual std::string_view type_name() const = 0;
  // `obj.name`: the attribute, or an undefined value when there is none.
  virtual absl::StatusOr<Value> GetAttr(Interpreter& interp,
                                        std::string_view name);
  virtual bool callable() const { return false; }
  // `obj(args)`; INVALID_ARGUMENT "'type' object is not callable" by default.
  virtual absl::StatusOr<Value> Call(Interpreter& interp, CallArgs args);
  // Python's repr(), at most `max_bytes` long, `depth` levels below the
  // outermost value. The default is an error: Python's text would carry a
  // memory address, which no byte-exact render can reproduce.
  virtual absl::StatusOr<std::string> Repr(size_t max_bytes, int depth);
  // len(obj) where the Python object has one.
  virtual std::optional<int64_t> Length() const { return std::nullopt; }
};

// Python's type name of a value ("str", "list", "NoneType", ...).
std::string_view PyTypeName(const Value& v);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_VALUE_H_
