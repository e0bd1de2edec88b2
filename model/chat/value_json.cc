#include "model/chat/value_json.h"

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "model/chat/py_unicode.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"

namespace radixkv::model::chat {
namespace {

absl::StatusOr<Value> Convert(const nlohmann::ordered_json& json, int depth) {
  if (depth > kMaxValueDepth) {
    return absl::ResourceExhaustedError(
        Cat("JSON input nested deeper than ", kMaxValueDepth, " levels"));
  }
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(
            Cat("JSON integer ", u, " is outside the supported 64-bit range"));
      }
      return Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string: {
      const std::string& s = json.get_ref<const std::string&>();
      if (!IsValidUtf8(s)) {
        return absl::InvalidArgumentError("JSON string is not valid UTF-8");
      }
      return Value::String(s);
    }
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) {
        CHAT_ASSIGN_OR_RETURN(Value v, Convert(item, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::NewList(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value dict = Value::NewDict();
      for (const auto& [key, item] : json.items()) {
        if (!IsValidUtf8(key)) {
          return absl::InvalidArgumentError("JSON key is not valid UTF-8");
        }
        CHAT_ASSIGN_OR_RETURN(Value v, Convert(item, depth + 1));
        dict.dict().SetString(key, std::move(v));
      }
      return dict;
    }
    default:
      return absl::InvalidArgumentError(
          "JSON input holds a binary or discarded value");
  }
}

}  // namespace

absl::StatusOr<Value> ValueFromJson(const nlohmann::ordered_json& json) {
  return Convert(json, 0);
}

}  // namespace radixkv::model::chat
