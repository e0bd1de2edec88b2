// Typed access to the fields of a parsed tokenizer.json (nlohmann::json)
// with INVALID_ARGUMENT errors that name the JSON path, e.g.
// "pre_tokenizer.pretokenizers[1].behavior: expected a string". A JSON null
// counts as absent, as serde's Option does in tokenizers.
#ifndef RADIXKV_MODEL_TOKENIZER_JSON_FIELDS_H_
#define RADIXKV_MODEL_TOKENIZER_JSON_FIELDS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace radixkv::model::json_fields {

using Json = nlohmann::json;

// "<path>.<key>" ("<key>" when path is empty).
std::string Child(absl::string_view path, absl::string_view key);

// "<path>[<index>]".
std::string Element(absl::string_view path, size_t index);

// INVALID_ARGUMENT "<path>: <message>".
absl::Status Invalid(absl::string_view path, absl::string_view message);

// INVALID_ARGUMENT "<what> '<type>' at <path> is not supported", the refusal
// of a component this reader does not implement.
absl::Status Unsupported(absl::string_view what, absl::string_view type,
                         absl::string_view path);

// The member `key` of object `obj`, or nullptr if absent or null.
const Json* Find(const Json& obj, absl::string_view key);

// Required string member.
absl::StatusOr<std::string> String(const Json& obj, absl::string_view key,
                                   absl::string_view path);

// Optional string member (absent or null -> nullopt).
absl::StatusOr<std::optional<std::string>> OptionalString(
    const Json& obj, absl::string_view key, absl::string_view path);

// Optional boolean member with a default.
absl::StatusOr<bool> Bool(const Json& obj, absl::string_view key,
                          absl::string_view path, bool default_value);

// Optional non-negative integer member with a default; INVALID_ARGUMENT
// above `max`.
absl::StatusOr<int64_t> Count(const Json& obj, absl::string_view key,
                              absl::string_view path, int64_t default_value,
                              int64_t max);

// Required member holding exactly one character (serde `char`).
absl::StatusOr<char32_t> Char(const Json& obj, absl::string_view key,
                              absl::string_view path);

// The "type" member of a component object; INVALID_ARGUMENT if `obj` is not
// an object or has no string "type".
absl::StatusOr<std::string> Type(const Json& obj, absl::string_view path);

// Required array member.
absl::StatusOr<const Json*> Array(const Json& obj, absl::string_view key,
                                  absl::string_view path);

// Builds one component per element of the array member `key` with
// `from_json(element, "<path>.<key>[i]")` (a Sequence's steps); the first
// error wins.
template <typename T, typename FromJson>
absl::StatusOr<std::vector<std::unique_ptr<T>>> ComponentList(
    const Json& obj, absl::string_view key, absl::string_view path,
    FromJson from_json) {
  absl::StatusOr<const Json*> list = Array(obj, key, path);
  if (!list.ok()) return list.status();
  const std::string list_path = Child(path, key);
  std::vector<std::unique_ptr<T>> out;
  for (size_t i = 0; i < (*list)->size(); ++i) {
    absl::StatusOr<std::unique_ptr<T>> item =
        from_json((**list)[i], Element(list_path, i));
    if (!item.ok()) return item.status();
    out.push_back(std::move(*item));
  }
  return out;
}

}  // namespace radixkv::model::json_fields

#endif  // RADIXKV_MODEL_TOKENIZER_JSON_FIELDS_H_
