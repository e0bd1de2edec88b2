#include "model/chat/json_dumps.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "model/chat/py_unicode.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"
#include "model/chat/value_repr.h"

namespace radixkv::model::chat {
namespace {

void AppendUnicodeEscape(unsigned code, std::string* out) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "\\u%04x", code);
  out->append(buf);
}

// json's py_encode_basestring / py_encode_basestring_ascii.
void AppendJsonString(const std::string& s, bool ensure_ascii,
                      std::string* out) {
  out->push_back('"');
  for (char32_t c : DecodeUtf8(s)) {
    switch (c) {
      case '"':
        out->append("\\\"");
        continue;
      case '\\':
        out->append("\\\\");
        continue;
      case '\b':
        out->append("\\b");
        continue;
      case '\f':
        out->append("\\f");
        continue;
      case '\n':
        out->append("\\n");
        continue;
      case '\r':
        out->append("\\r");
        continue;
      case '\t':
        out->append("\\t");
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
      if (c >= 0x10000) {
        const unsigned v = c - 0x10000;
        AppendUnicodeEscape(0xD800 | (v >> 10), out);
        AppendUnicodeEscape(0xDC00 | (v & 0x3FF), out);
      } else {
        AppendUnicodeEscape(c, out);
      }
    } else {
      AppendUtf8(c, out);
    }
  }
  out->push_back('"');
}

std::string JsonFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return PyFloatRepr(d);
}

absl::Status NotSerializable(const Value& v) {
  return absl::InvalidArgumentError(
      Cat("Object of type ", PyTypeName(v), " is not JSON serializable"));
}

class JsonWriter {
 public:
  JsonWriter(const JsonDumpsOptions& options, size_t max_bytes)
      : options_(options), max_bytes_(max_bytes) {}

  absl::Status Write(const Value& v, int level) {
    if (level > kMaxValueDepth) {
      return absl::ResourceExhaustedError(
          Cat("value nested deeper than ", kMaxValueDepth, " levels"));
    }
    switch (v.type()) {
      case ValueType::kNone:
        out_.append("null");
        break;
      case ValueType::kBool:
        out_.append(v.bool_value() ? "true" : "false");
        break;
      case ValueType::kInt:
        CatTo(&out_, v.int_value());
        break;
      case ValueType::kFloat:
        out_.append(JsonFloat(v.float_value()));
        break;
      case ValueType::kString:
        AppendJsonString(v.str(), options_.ensure_ascii, &out_);
        break;
      case ValueType::kList:
        if (v.kind() != SequenceKind::kList &&
            v.kind() != SequenceKind::kTuple) {
          return NotSerializable(v);
        }
        CHAT_RETURN_IF_ERROR(WriteList(v.list().items, level));
        break;
      case ValueType::kDict:
        CHAT_RETURN_IF_ERROR(WriteDict(v.dict(), level));
        break;
      default:
        return NotSerializable(v);
    }
    if (out_.size() > max_bytes_) {
      return absl::ResourceExhaustedError(
          Cat("tojson output exceeds the limit of ", max_bytes_, " bytes"));
    }
    return absl::OkStatus();
  }

  std::string Take() { return std::move(out_); }

 private:
  // Opens a container; returns the separator between its items.
  std::string Open(char bracket, int level) {
    out_.push_back(bracket);
    if (!options_.indent.has_value()) return options_.item_separator;
    const std::string newline_indent = NewlineIndent(level + 1);
    out_.append(newline_indent);
    return options_.item_separator + newline_indent;
  }

  void Close(char bracket, int level) {
    if (options_.indent.has_value()) out_.append(NewlineIndent(level));
    out_.push_back(bracket);
  }

  std::string NewlineIndent(int level) const {
    std::string s = "\n";
    for (int i = 0; i < level; ++i) s.append(*options_.indent);
    return s;
  }

  absl::Status WriteList(const std::vector<Value>& items, int level) {
    if (items.empty()) {
      out_.append("[]");
      return absl::OkStatus();
    }
    const std::string separator = Open('[', level);
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out_.append(separator);
      CHAT_RETURN_IF_ERROR(Write(items[i], level + 1));
    }
    Close(']', level);
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> KeyText(const Value& key) const {
    switch (key.type()) {
      case ValueType::kString:
        return key.str();
      case ValueType::kFloat:
        return JsonFloat(key.float_value());
      case ValueType::kBool:
        return std::string(key.bool_value() ? "true" : "false");
      case ValueType::kNone:
        return std::string("null");
      case ValueType::kInt:
        return Cat(key.int_value());
      default:
        return absl::InvalidArgumentError(
            Cat("keys must be str, int, float, bool or None, not ",
                PyTypeName(key)));
    }
  }

  absl::StatusOr<std::vector<const std::pair<Value, Value>*>> Entries(
      const DictObject& dict) const {
    std::vector<const std::pair<Value, Value>*> entries;
    for (const auto& entry : dict.entries()) entries.push_back(&entry);
    if (!options_.sort_keys) return entries;
    bool all_strings = true;
    bool all_numbers = true;
    for (const auto* e : entries) {
      all_strings = all_strings && e->first.is_string();
      all_numbers = all_numbers && e->first.is_number();
    }
    if (!all_strings && !all_numbers) {
      return absl::InvalidArgumentError(
          "'<' not supported between dict keys of different types");
    }
    std::stable_sort(entries.begin(), entries.end(),
                     [all_strings](const auto* a, const auto* b) {
                       if (all_strings) return a->first.str() < b->first.str();
                       return a->first.float_value() < b->first.float_value();
                     });
    return entries;
  }

  absl::Status WriteDict(const DictObject& dict, int level) {
    if (dict.size() == 0) {
      out_.append("{}");
      return absl::OkStatus();
    }
    CHAT_ASSIGN_OR_RETURN(auto entries, Entries(dict));
    const std::string separator = Open('{', level);
    bool first = true;
    for (const auto* entry : entries) {
      if (!first) out_.append(separator);
      first = false;
      CHAT_ASSIGN_OR_RETURN(std::string key, KeyText(entry->first));
      AppendJsonString(key, options_.ensure_ascii, &out_);
      out_.append(options_.key_separator);
      CHAT_RETURN_IF_ERROR(Write(entry->second, level + 1));
    }
    Close('}', level);
    return absl::OkStatus();
  }

  const JsonDumpsOptions& options_;
  const size_t max_bytes_;
  std::string out_;
};

}  // namespace

absl::StatusOr<std::string> PyJsonDumps(const Value& v,
                                        const JsonDumpsOptions& options,
                                        size_t max_bytes) {
  JsonWriter writer(options, max_bytes);
  CHAT_RETURN_IF_ERROR(writer.Write(v, 0));
  return writer.Take();
}

}  // namespace radixkv::model::chat
