#include "model/tokenizer/json_fields.h"

#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"

namespace radixkv::model::json_fields {

std::string Child(absl::string_view path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

std::string Element(absl::string_view path, size_t index) {
  return absl::StrCat(path, "[", index, "]");
}

absl::Status Invalid(absl::string_view path, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", message));
}

absl::Status Unsupported(absl::string_view what, absl::string_view type,
                         absl::string_view path) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, " '", type, "' at ", path, " is not supported"));
}

const Json* Find(const Json& obj, absl::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::string> String(const Json& obj, absl::string_view key,
                                   absl::string_view path) {
  const Json* v = Find(obj, key);
  if (v == nullptr) return Invalid(Child(path, key), "missing");
  if (!v->is_string()) return Invalid(Child(path, key), "expected a string");
  return v->get<std::string>();
}

absl::StatusOr<std::optional<std::string>> OptionalString(
    const Json& obj, absl::string_view key, absl::string_view path) {
  const Json* v = Find(obj, key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return Invalid(Child(path, key), "expected a string");
  return std::optional<std::string>(v->get<std::string>());
}

absl::StatusOr<bool> Bool(const Json& obj, absl::string_view key,
                          absl::string_view path, bool default_value) {
  const Json* v = Find(obj, key);
  if (v == nullptr) return default_value;
  if (!v->is_boolean()) return Invalid(Child(path, key), "expected a boolean");
  return v->get<bool>();
}

absl::StatusOr<int64_t> Count(const Json& obj, absl::string_view key,
                              absl::string_view path, int64_t default_value,
                              int64_t max) {
  const Json* v = Find(obj, key);
  if (v == nullptr) return default_value;
  if (!v->is_number_integer() || v->get<int64_t>() < 0 ||
      v->get<int64_t>() > max) {
    return Invalid(Child(path, key),
                   absl::StrCat("expected an integer in [0, ", max, "]"));
  }
  return v->get<int64_t>();
}

absl::StatusOr<char32_t> Char(const Json& obj, absl::string_view key,
                              absl::string_view path) {
  absl::StatusOr<std::string> s = String(obj, key, path);
  if (!s.ok()) return s.status();
  if (s->empty() || !utf8::IsValid(*s) ||
      static_cast<size_t>(utf8::SequenceLength(
          static_cast<unsigned char>((*s)[0]))) != s->size()) {
    return Invalid(Child(path, key), "expected exactly one character");
  }
  size_t pos = 0;
  return utf8::DecodeValid(*s, &pos);
}

absl::StatusOr<std::string> Type(const Json& obj, absl::string_view path) {
  if (!obj.is_object()) return Invalid(path, "expected an object");
  return String(obj, "type", path);
}

absl::StatusOr<const Json*> Array(const Json& obj, absl::string_view key,
                                  absl::string_view path) {
  const Json* v = Find(obj, key);
  if (v == nullptr || !v->is_array()) {
    return Invalid(Child(path, key), "expected an array");
  }
  return v;
}

}  // namespace radixkv::model::json_fields
