// jinja2's built-in tests (jinja2/tests.py TESTS), used as `value is name`
// and by select/reject. All of them are implemented.
#ifndef RADIXKV_MODEL_CHAT_JINJA_TESTS_H_
#define RADIXKV_MODEL_CHAT_JINJA_TESTS_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "model/chat/filters.h"
#include "model/chat/value.h"

namespace radixkv::model::chat {

// `input is test(args)`.
using TestFn = absl::StatusOr<bool> (*)(Interpreter& interp, const Value& input,
                                        const CallArgs& args);

BuiltinStatus TestStatus(std::string_view name);

// The implementation of a test, nullptr for unknown names.
TestFn FindTest(std::string_view name);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_JINJA_TESTS_H_
