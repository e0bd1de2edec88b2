// The globals a chat template sees: jinja2's defaults (range, dict,
// namespace, cycler, joiner, lipsum) with the sandbox's range limit, and
// the two transformers adds (raise_exception, strftime_now); plus the
// object types they create.
#ifndef RADIXKV_MODEL_CHAT_BUILTINS_H_
#define RADIXKV_MODEL_CHAT_BUILTINS_H_

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/chat/render_options.h"
#include "model/chat/value.h"

namespace radixkv::model::chat {

// jinja2's sandbox: range() may produce at most this many items.
inline constexpr int64_t kMaxRange = 100000;

// A natively implemented callable: a builtin function or a bound method.
class NativeFunction : public Object {
 public:
  using Fn = std::function<absl::StatusOr<Value>(Interpreter&, CallArgs)>;
  NativeFunction(std::string name, Fn fn)
      : name_(std::move(name)), fn_(std::move(fn)) {}
  static Value Make(std::string name, Fn fn);

  std::string_view type_name() const override {
    return "builtin_function_or_method";
  }
  bool callable() const override { return true; }
  absl::StatusOr<Value> Call(Interpreter& interp, CallArgs args) override {
    return fn_(interp, std::move(args));
  }

 private:
  std::string name_;
  Fn fn_;
};

// jinja2.utils.Namespace: attributes set with `{% set ns.attr = value %}`.
class NamespaceObject : public Object {
 public:
  std::string_view type_name() const override { return "Namespace"; }
  absl::StatusOr<Value> GetAttr(Interpreter& interp,
                                std::string_view name) override;
  absl::StatusOr<std::string> Repr(size_t max_bytes, int depth) override;
  DictObject& attrs() { return attrs_; }

 private:
  DictObject attrs_;
};

// The template globals, name and value.
std::vector<std::pair<std::string, Value>> TemplateGlobals();

// Python's datetime.strftime(format) on a naive local time: %f is the
// microsecond, %z and %Z are empty, everything else goes to C strftime in
// the C locale. INVALID_ARGUMENT if the result would exceed 64 KiB.
absl::StatusOr<std::string> PyStrftime(std::string_view format,
                                       const LocalDateTime& time);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_BUILTINS_H_
