// Python-style binding of call arguments to a native function's parameters
// (filters, tests, methods, globals), with Python's TypeError messages.
#ifndef RADIXKV_MODEL_CHAT_ARG_BINDER_H_
#define RADIXKV_MODEL_CHAT_ARG_BINDER_H_

#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "model/chat/value.h"

namespace radixkv::model::chat {

// One parameter; without a default it is required.
struct Param {
  std::string_view name;
  std::optional<Value> default_value;
};

// Binds `args` to `params` like `def function(p0, p1=d1, ...)`: positional
// arguments fill parameters in order, keyword arguments by name (refused
// when `positional_only`, as for most str methods). INVALID_ARGUMENT for too
// many arguments, unknown or duplicate keywords and missing required ones.
absl::StatusOr<std::vector<Value>> BindArgs(std::string_view function,
                                            const CallArgs& args,
                                            const std::vector<Param>& params,
                                            bool positional_only = false);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_ARG_BINDER_H_
