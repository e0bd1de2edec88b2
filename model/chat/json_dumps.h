// Python's json.dumps over template values, byte for byte: what Hugging
// Face transformers' `tojson` filter returns (transformers calls
// json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
// sort_keys=sort_keys) in utils/chat_template_utils.py).
#ifndef RADIXKV_MODEL_CHAT_JSON_DUMPS_H_
#define RADIXKV_MODEL_CHAT_JSON_DUMPS_H_

#include <cstddef>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "model/chat/value.h"

namespace radixkv::model::chat {

// json.dumps keyword arguments.
struct JsonDumpsOptions {
  // Escape every non-ASCII character as \uXXXX (surrogate pairs above
  // U+FFFF); otherwise only control characters, '"' and '\\' are escaped.
  bool ensure_ascii = false;
  // Per-level indentation; nullopt keeps everything on one line. An empty
  // string still breaks lines (Python's indent=0).
  std::optional<std::string> indent;
  // Separators; json.dumps' defaults are (", ", ": ") without indent and
  // (",", ": ") with one.
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// Serializes like json.dumps: dict keys that are numbers, bools or None
// become strings; tuples become arrays; floats print as repr(), NaN and
// infinities as NaN / Infinity / -Infinity. INVALID_ARGUMENT ("Object of
// type X is not JSON serializable") for undefined, generators, ranges,
// objects and unsortable keys; RESOURCE_EXHAUSTED past `max_bytes` or
// kMaxValueDepth.
absl::StatusOr<std::string> PyJsonDumps(const Value& v,
                                        const JsonDumpsOptions& options,
                                        size_t max_bytes);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_JSON_DUMPS_H_
