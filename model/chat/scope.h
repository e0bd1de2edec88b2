// Variable scopes of a render, with jinja2's rules: the template has one
// scope, every for-loop iteration, macro call, caller call, with block,
// block set, filter block and generation block gets a child scope, and
// `{% set %}` writes into the innermost scope (so a set inside a loop body
// does not outlive the iteration, while a set inside an `if` does).
#ifndef RADIXKV_MODEL_CHAT_SCOPE_H_
#define RADIXKV_MODEL_CHAT_SCOPE_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "model/chat/value.h"

namespace radixkv::model::chat {

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}

  // The innermost binding of `name` in this scope or its ancestors.
  const Value* Find(std::string_view name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent_.get()) {
      auto it = s->vars_.find(absl::string_view(name.data(), name.size()));
      if (it != s->vars_.end()) return &it->second;
    }
    return nullptr;
  }

  void Set(std::string_view name, Value value) {
    vars_.insert_or_assign(std::string(name), std::move(value));
  }

  // Drops every binding (breaks reference cycles through macros, which hold
  // the scope they were defined in).
  void Clear() {
    absl::flat_hash_map<std::string, Value> doomed;
    doomed.swap(vars_);
  }

 private:
  std::shared_ptr<Scope> parent_;
  absl::flat_hash_map<std::string, Value> vars_;
};

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_SCOPE_H_
