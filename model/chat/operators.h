// Python's operators on template values, as jinja2 applies them: truth
// value, ==, ordering, + - * / // % **, unary - +, `in`, len() and
// iteration, with Python's type rules and error messages (TypeError and
// ZeroDivisionError become INVALID_ARGUMENT statuses).
#ifndef RADIXKV_MODEL_CHAT_OPERATORS_H_
#define RADIXKV_MODEL_CHAT_OPERATORS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/chat/ast.h"
#include "model/chat/value.h"

namespace radixkv::model::chat {

class Interpreter;

// Python's bool(v); undefined is false, generators and objects are true.
bool Truthy(const Value& v);

// The error of using an undefined value where jinja2's Undefined raises
// (UndefinedError, or SecurityError for unsafe attributes): its hint.
absl::Status UndefinedError(const Value& undefined);

// Python's a == b (1 == 1.0 == True, list != tuple, dicts compare by
// content, objects by identity, undefined equals undefined).
absl::StatusOr<bool> PyEquals(const Value& a, const Value& b);

// Python's a OP b for OP in == != < <= > >=; ordering works on numbers,
// strings (by code point) and same-kind sequences, else INVALID_ARGUMENT
// "'<' not supported between instances of ...".
absl::StatusOr<bool> PyCompare(Op op, const Value& a, const Value& b);

// Python's a OP b for OP in + - * / // % **. Strings concatenate and
// repeat, `str % args` formats printf-style, lists concatenate and repeat;
// integers are 64-bit (INVALID_ARGUMENT on overflow, which Python would not
// have); Markup escapes a plain string it is added to.
absl::StatusOr<Value> PyBinary(Interpreter& interp, Op op, const Value& a,
                               const Value& b);

// Python's -v and +v.
absl::StatusOr<Value> PyUnary(Op op, const Value& v);

// Python's `item in container` (substring for strings, key for dicts; it
// consumes a generator up to the match; false for undefined).
absl::StatusOr<bool> PyContains(Interpreter& interp, const Value& container,
                                const Value& item);

// Python's len(v); undefined has length 0; generators have none.
absl::StatusOr<int64_t> PyLen(const Value& v);

// Python's list(v): characters of a string, keys of a dict, the remaining
// items of a generator (which it consumes), nothing for undefined.
absl::StatusOr<std::vector<Value>> PyIterate(Interpreter& interp,
                                             const Value& v);

// markupsafe.escape's replacements: & < > ' " as &amp; &lt; &gt; &#39; &#34;.
std::string HtmlEscape(std::string_view s);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_OPERATORS_H_
