// Python's methods of str, list, tuple and dict values as a template calls
// them (`message.content.strip()`, `tool.items()`, `messages.pop()`), under
// jinja2's ImmutableSandboxedEnvironment: the methods that mutate a list or
// dict (append, extend, insert, remove, reverse, sort; clear, pop, popitem,
// setdefault, update of dict) are "unsafe" undefined values whose call fails
// with a SecurityError message. list.pop() and list.clear() are not in the
// sandbox's list and do mutate, as in jinja2.
#ifndef RADIXKV_MODEL_CHAT_METHODS_H_
#define RADIXKV_MODEL_CHAT_METHODS_H_

#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "model/chat/value.h"

namespace radixkv::model::chat {

// The attribute `name` of `receiver` (str, list kinds, dict, or a number or
// None): a bound method, an unsafe undefined, or nullopt when Python has no
// such attribute. INVALID_ARGUMENT naming the method when Python has it but
// this renderer does not implement it (e.g. str.translate).
absl::StatusOr<std::optional<Value>> LookupMethod(const Value& receiver,
                                                  std::string_view name);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_METHODS_H_
