// jinja2's built-in filters (jinja2/filters.py FILTERS) with Hugging Face
// transformers' own `tojson` (json.dumps with ensure_ascii=False, indent,
// separators, sort_keys). Filters whose output is random or that need
// machinery this renderer does not have are known but refused by name:
// filesizeformat, groupby, pprint, random, striptags, urlencode, urlize,
// wordwrap, xmlattr.
#ifndef RADIXKV_MODEL_CHAT_FILTERS_H_
#define RADIXKV_MODEL_CHAT_FILTERS_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "model/chat/value.h"

namespace radixkv::model::chat {

// Whether a filter or test name is implemented, known to jinja2 but
// refused, or unknown.
enum class BuiltinStatus { kSupported, kRefused, kUnknown };

// `input|filter(args)`.
using FilterFn = absl::StatusOr<Value> (*)(Interpreter& interp,
                                           const Value& input,
                                           const CallArgs& args);

BuiltinStatus FilterStatus(std::string_view name);

// The implementation of a supported filter, nullptr otherwise.
FilterFn FindFilter(std::string_view name);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_FILTERS_H_
