// Conversion of JSON input (messages, tools, documents, extra template
// arguments) into template values, as Python's json.loads would build them:
// objects keep their key order, integers stay int, numbers with a fraction
// or exponent become float.
#ifndef RADIXKV_MODEL_CHAT_VALUE_JSON_H_
#define RADIXKV_MODEL_CHAT_VALUE_JSON_H_

#include "absl/status/statusor.h"
#include "model/chat/value.h"
#include "nlohmann/json.hpp"

namespace radixkv::model::chat {

// The value of `json`. INVALID_ARGUMENT for integers outside int64, strings
// that are not valid UTF-8 and binary values; RESOURCE_EXHAUSTED for
// nesting deeper than kMaxValueDepth.
absl::StatusOr<Value> ValueFromJson(const nlohmann::ordered_json& json);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_VALUE_JSON_H_
