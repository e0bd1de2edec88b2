// Python's printf-style string formatting, `format % args`, used by the `%`
// operator on strings and jinja2's |format filter.
#ifndef RADIXKV_MODEL_CHAT_PY_FORMAT_H_
#define RADIXKV_MODEL_CHAT_PY_FORMAT_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "model/chat/value.h"

namespace radixkv::model::chat {

class Interpreter;

// `format % args`: a tuple supplies the positional arguments, a dict the
// `%(key)s` ones, anything else is the single argument. Conversions
// d i u x X o c s r e E f F g G and %%, with flags "-+ #0", width and
// precision (`*` included). INVALID_ARGUMENT with Python's message for
// argument count and type mismatches; `%a` is refused.
absl::StatusOr<std::string> PyPercentFormat(Interpreter& interp,
                                            std::string_view format,
                                            const Value& args);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_PY_FORMAT_H_
