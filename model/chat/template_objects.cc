#include "model/chat/template_objects.h"

#include "absl/status/status.h"
#include "model/chat/builtins.h"
#include "model/chat/interpreter.h"
#include "model/chat/operators.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"
#include "model/chat/value_repr.h"

namespace radixkv::model::chat {

absl::StatusOr<Value> MacroObject::Call(Interpreter& interp, CallArgs args) {
  return interp.InvokeMacro(*def_, closure_, std::move(args));
}

absl::StatusOr<Value> MacroObject::GetAttr(Interpreter& interp,
                                           std::string_view name) {
  if (name == "name") return Value::String(def_->name);
  if (name == "arguments") {
    std::vector<Value> params;
    for (const std::string& p : def_->params)
      params.push_back(Value::String(p));
    return Value::Tuple(std::move(params));
  }
  if (name == "catch_kwargs") return Value::Bool(def_->uses_kwargs);
  if (name == "catch_varargs") return Value::Bool(def_->uses_varargs);
  if (name == "caller") return Value::Bool(def_->uses_caller);
  return Object::GetAttr(interp, name);
}

absl::StatusOr<std::string> MacroObject::Repr(size_t, int) {
  return Cat("<Macro ", PyStrRepr(def_->name), ">");
}

absl::StatusOr<Value> LoopObject::Call(Interpreter&, CallArgs) {
  return absl::InvalidArgumentError(
      "The loop must have the 'recursive' marker to be called recursively.");
}

absl::StatusOr<Value> LoopObject::GetAttr(Interpreter& interp,
                                          std::string_view name) {
  const int64_t n = static_cast<int64_t>(items_.size());
  const int64_t i = static_cast<int64_t>(index0_);
  if (name == "index") return Value::Int(i + 1);
  if (name == "index0") return Value::Int(i);
  if (name == "revindex") return Value::Int(n - i);
  if (name == "revindex0") return Value::Int(n - i - 1);
  if (name == "first") return Value::Bool(i == 0);
  if (name == "last") return Value::Bool(i + 1 == n);
  if (name == "length") return Value::Int(n);
  if (name == "depth") return Value::Int(1);
  if (name == "depth0") return Value::Int(0);
  if (name == "previtem") {
    if (i == 0) return Value::Undefined("there is no previous item");
    return items_[i - 1];
  }
  if (name == "nextitem") {
    if (i + 1 >= n) return Value::Undefined("there is no next item");
    return items_[i + 1];
  }
  auto self = std::static_pointer_cast<LoopObject>(shared_from_this());
  if (name == "cycle") {
    return NativeFunction::Make("cycle", [self](Interpreter&, CallArgs args) {
      if (args.positional.empty()) {
        return absl::StatusOr<Value>(
            absl::InvalidArgumentError("no items for cycling given"));
      }
      return absl::StatusOr<Value>(
          args.positional[self->index0_ % args.positional.size()]);
    });
  }
  if (name == "changed") {
    return NativeFunction::Make(
        "changed",
        [self](Interpreter&, CallArgs args) -> absl::StatusOr<Value> {
          Value current = Value::Tuple(std::move(args.positional));
          if (self->last_changed_.has_value()) {
            CHAT_ASSIGN_OR_RETURN(bool same,
                                  PyEquals(*self->last_changed_, current));
            if (same) return Value::Bool(false);
          }
          self->last_changed_ = std::move(current);
          return Value::Bool(true);
        });
  }
  return Object::GetAttr(interp, name);
}

absl::StatusOr<std::string> LoopObject::Repr(size_t, int) {
  return Cat("<LoopContext ", index0_ + 1, "/", items_.size(), ">");
}

}  // namespace radixkv::model::chat
