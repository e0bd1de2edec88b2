// The objects the renderer creates for template constructs: macros (and
// call blocks' `caller`) and the `loop` variable of for loops.
#ifndef RADIXKV_MODEL_CHAT_TEMPLATE_OBJECTS_H_
#define RADIXKV_MODEL_CHAT_TEMPLATE_OBJECTS_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/chat/ast.h"
#include "model/chat/scope.h"
#include "model/chat/value.h"

namespace radixkv::model::chat {

// jinja2.runtime.Macro: calling it renders the body in a child scope of the
// scope the macro was defined in and returns the output as a string.
class MacroObject : public Object {
 public:
  MacroObject(const MacroDef* def, std::shared_ptr<Scope> closure)
      : def_(def), closure_(std::move(closure)) {}

  std::string_view type_name() const override { return "Macro"; }
  bool callable() const override { return true; }
  absl::StatusOr<Value> Call(Interpreter& interp, CallArgs args) override;
  absl::StatusOr<Value> GetAttr(Interpreter& interp,
                                std::string_view name) override;
  absl::StatusOr<std::string> Repr(size_t max_bytes, int depth) override;

 private:
  const MacroDef* def_;
  std::shared_ptr<Scope> closure_;
};

// jinja2.runtime.LoopContext over the (already filtered) items of a loop.
class LoopObject : public Object {
 public:
  explicit LoopObject(std::vector<Value> items) : items_(std::move(items)) {}

  const std::vector<Value>& items() const { return items_; }
  void set_index0(size_t index0) { index0_ = index0; }

  std::string_view type_name() const override { return "LoopContext"; }
  bool callable() const override { return true; }
  absl::StatusOr<Value> Call(Interpreter& interp, CallArgs args) override;
  absl::StatusOr<Value> GetAttr(Interpreter& interp,
                                std::string_view name) override;
  absl::StatusOr<std::string> Repr(size_t max_bytes, int depth) override;
  std::optional<int64_t> Length() const override {
    return static_cast<int64_t>(items_.size());
  }

 private:
  std::vector<Value> items_;
  size_t index0_ = 0;
  std::optional<Value> last_changed_;  // arguments of the last changed()
};

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_TEMPLATE_OBJECTS_H_
