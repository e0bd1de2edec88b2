// Python's str() and repr() of template values, byte for byte: what
// `{{ value }}` prints (None, True, 1.0, ['a', 'b'], {'k': 'v'}, ...).
#ifndef RADIXKV_MODEL_CHAT_VALUE_REPR_H_
#define RADIXKV_MODEL_CHAT_VALUE_REPR_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "model/chat/value.h"

namespace radixkv::model::chat {

// Python's repr(float): the shortest digits that round-trip, fixed notation
// for decimal exponents -4 <= e < 16 ("0.0001", "1e+16", "1.0", "nan",
// "-inf").
std::string PyFloatRepr(double d);

// Python's repr(str): quoted with ' (or " when the text holds ' but no "),
// escaping \\, the quote, \t \n \r, other control characters and the
// non-printable characters as \xhh, \uhhhh, \Uhhhhhhhh.
std::string PyStrRepr(std::string_view s);

// Python's str(value): a string as is, undefined as "", everything else as
// its repr. RESOURCE_EXHAUSTED past `max_bytes`; INVALID_ARGUMENT for values
// whose Python text holds a memory address (generators, macros' callers,
// bound methods).
absl::StatusOr<std::string> ToPyStr(const Value& v, size_t max_bytes);

// Python's repr(value), errors as ToPyStr; `depth` counts enclosing
// containers (kMaxValueDepth bounds it).
absl::StatusOr<std::string> ToPyRepr(const Value& v, size_t max_bytes,
                                     int depth = 0);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_VALUE_REPR_H_
