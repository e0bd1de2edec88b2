#include "model/chat/value_repr.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "model/chat/py_unicode.h"
#include "model/chat/status_macros.h"
#include "model/chat/str_cat.h"

namespace radixkv::model::chat {
namespace {

absl::Status CheckSize(const std::string& out, size_t max_bytes) {
  if (out.size() <= max_bytes) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      Cat("text of a value exceeds the limit of ", max_bytes, " bytes"));
}

void AppendHexEscape(char prefix, int digits, char32_t c, std::string* out) {
  char buf[12];
  std::snprintf(buf, sizeof(buf), "\\%c%0*x", prefix, digits,
                static_cast<unsigned>(c));
  out->append(buf);
}

absl::Status AppendItems(const std::vector<Value>& items, size_t max_bytes,
                         int depth, std::string* out) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out->append(", ");
    CHAT_ASSIGN_OR_RETURN(std::string item,
                          ToPyRepr(items[i], max_bytes, depth + 1));
    out->append(item);
    CHAT_RETURN_IF_ERROR(CheckSize(*out, max_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SequenceRepr(const ListObject& list,
                                         size_t max_bytes, int depth) {
  std::string out;
  switch (list.kind) {
    case SequenceKind::kGenerator:
      return absl::InvalidArgumentError(
          "cannot render a generator object as text (Python would print its "
          "memory address); convert it with |list first");
    case SequenceKind::kRange:
      out = Cat("range(", list.range_start, ", ", list.range_stop);
      if (list.range_step != 1) CatTo(&out, ", ", list.range_step);
      out.push_back(')');
      return out;
    case SequenceKind::kTuple:
      out.push_back('(');
      CHAT_RETURN_IF_ERROR(AppendItems(list.items, max_bytes, depth, &out));
      if (list.items.size() == 1) out.push_back(',');
      out.push_back(')');
      return out;
    case SequenceKind::kList:
      break;
    case SequenceKind::kDictKeys:
      out = "dict_keys(";
      break;
    case SequenceKind::kDictValues:
      out = "dict_values(";
      break;
    case SequenceKind::kDictItems:
      out = "dict_items(";
      break;
  }
  out.push_back('[');
  CHAT_RETURN_IF_ERROR(AppendItems(list.items, max_bytes, depth, &out));
  out.push_back(']');
  if (list.kind != SequenceKind::kList) out.push_back(')');
  return out;
}

absl::StatusOr<std::string> DictRepr(const DictObject& dict, size_t max_bytes,
                                     int depth) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, value] : dict.entries()) {
    if (!first) out.append(", ");
    first = false;
    CHAT_ASSIGN_OR_RETURN(std::string k, ToPyRepr(key, max_bytes, depth + 1));
    CHAT_ASSIGN_OR_RETURN(std::string v, ToPyRepr(value, max_bytes, depth + 1));
    CatTo(&out, k, ": ", v);
    CHAT_RETURN_IF_ERROR(CheckSize(out, max_bytes));
  }
  out.push_back('}');
  return out;
}

}  // namespace

std::string PyFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  const auto result =
      std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string_view sci(buf, result.ptr - buf);  // "-1.25e+16"
  const size_t e_pos = sci.find('e');
  std::string_view mantissa = sci.substr(0, e_pos);
  const int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  std::string out;
  if (!mantissa.empty() && mantissa[0] == '-') {
    out.push_back('-');
    mantissa.remove_prefix(1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  const int decpt = exponent + 1;  // value = 0.DIGITS * 10^decpt
  const int ndigits = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= ndigits) {
      out += digits + std::string(decpt - ndigits, '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
    return out;
  }
  out.push_back(digits[0]);
  if (ndigits > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                std::abs(exponent));
  out += exp_buf;
  return out;
}

std::string PyStrRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : DecodeUtf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out.append("\\t");
    } else if (c == '\n') {
      out.append("\\n");
    } else if (c == '\r') {
      out.append("\\r");
    } else if (c < 0x20 || c == 0x7F) {
      AppendHexEscape('x', 2, c, &out);
    } else if (c < 0x7F || PyIsPrintable(c)) {
      AppendUtf8(c, &out);
    } else if (c <= 0xFF) {
      AppendHexEscape('x', 2, c, &out);
    } else if (c <= 0xFFFF) {
      AppendHexEscape('u', 4, c, &out);
    } else {
      AppendHexEscape('U', 8, c, &out);
    }
  }
  out.push_back(quote);
  return out;
}

absl::StatusOr<std::string> ToPyStr(const Value& v, size_t max_bytes) {
  switch (v.type()) {
    case ValueType::kUndefined:
      return std::string();
    case ValueType::kString:
      return v.str();
    default:
      return ToPyRepr(v, max_bytes, 0);
  }
}

absl::StatusOr<std::string> ToPyRepr(const Value& v, size_t max_bytes,
                                     int depth) {
  if (depth > kMaxValueDepth) {
    return absl::ResourceExhaustedError(
        Cat("value nested deeper than ", kMaxValueDepth, " levels"));
  }
  switch (v.type()) {
    case ValueType::kUndefined:
      return std::string("Undefined");
    case ValueType::kNone:
      return std::string("None");
    case ValueType::kBool:
      return std::string(v.bool_value() ? "True" : "False");
    case ValueType::kInt:
      return Cat(v.int_value());
    case ValueType::kFloat:
      return PyFloatRepr(v.float_value());
    case ValueType::kString:
      if (v.is_markup()) return Cat("Markup(", PyStrRepr(v.str()), ")");
      return PyStrRepr(v.str());
    case ValueType::kList:
      return SequenceRepr(v.list(), max_bytes, depth);
    case ValueType::kDict:
      return DictRepr(v.dict(), max_bytes, depth);
    case ValueType::kObject:
      return v.object().Repr(max_bytes, depth);
  }
  return std::string();
}

}  // namespace radixkv::model::chat
