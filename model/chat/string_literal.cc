#include "model/chat/string_literal.h"

#include <cstdio>

#include "absl/status/status.h"
#include "model/chat/py_unicode.h"

namespace radixkv::model::chat {
namespace {

int HexDigit(char32_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The text "backslashreplace" gives a non-ASCII character, minus its
// backslash: "xe9", "u6771", "U0001f600".
std::string EscapeTextOf(char32_t c) {
  char buf[12];
  if (c <= 0xFF) {
    std::snprintf(buf, sizeof(buf), "x%02x", static_cast<unsigned>(c));
  } else if (c <= 0xFFFF) {
    std::snprintf(buf, sizeof(buf), "u%04x", static_cast<unsigned>(c));
  } else {
    std::snprintf(buf, sizeof(buf), "U%08x", static_cast<unsigned>(c));
  }
  return buf;
}

absl::Status AppendCodePoint(char32_t c, std::string* out) {
  if (c > 0x10FFFF) {
    return absl::InvalidArgumentError(
        "illegal Unicode character in string literal");
  }
  if (c >= 0xD800 && c <= 0xDFFF) {
    return absl::InvalidArgumentError(
        "surrogate code point in string literal is not supported");
  }
  AppendUtf8(c, out);
  return absl::OkStatus();
}

// Decodes `count` hex digits at cps[*i] (after the escape letter).
absl::Status AppendHexEscape(const std::u32string& cps, size_t* i, int count,
                             std::string* out) {
  char32_t value = 0;
  for (int k = 0; k < count; ++k) {
    const int digit = *i + k < cps.size() ? HexDigit(cps[*i + k]) : -1;
    if (digit < 0) {
      return absl::InvalidArgumentError(
          count == 2 ? "truncated \\xXX escape"
                     : (count == 4 ? "truncated \\uXXXX escape"
                                   : "truncated \\UXXXXXXXX escape"));
    }
    value = value * 16 + digit;
  }
  *i += count;
  return AppendCodePoint(value, out);
}

void AppendOctalEscape(const std::u32string& cps, size_t* i, std::string* out) {
  char32_t value = 0;
  for (int k = 0; k < 3 && *i < cps.size() && cps[*i] >= '0' && cps[*i] <= '7';
       ++k, ++*i) {
    value = value * 8 + (cps[*i] - '0');
  }
  AppendUtf8(value, out);
}

// Handles the escape whose letter is cps[*i]; advances past it.
absl::Status DecodeEscape(const std::u32string& cps, size_t* i,
                          std::string* out) {
  const char32_t c = cps[*i];
  if (c >= 0x80) {
    out->push_back('\\');
    out->append(EscapeTextOf(c));
    ++*i;
    return absl::OkStatus();
  }
  if (c >= '0' && c <= '7') {
    AppendOctalEscape(cps, i, out);
    return absl::OkStatus();
  }
  ++*i;
  switch (c) {
    case '\n':
      return absl::OkStatus();
    case '\\':
    case '\'':
    case '"':
      out->push_back(static_cast<char>(c));
      return absl::OkStatus();
    case 'a':
      out->push_back('\a');
      return absl::OkStatus();
    case 'b':
      out->push_back('\b');
      return absl::OkStatus();
    case 'f':
      out->push_back('\f');
      return absl::OkStatus();
    case 'n':
      out->push_back('\n');
      return absl::OkStatus();
    case 'r':
      out->push_back('\r');
      return absl::OkStatus();
    case 't':
      out->push_back('\t');
      return absl::OkStatus();
    case 'v':
      out->push_back('\v');
      return absl::OkStatus();
    case 'x':
      return AppendHexEscape(cps, i, 2, out);
    case 'u':
      return AppendHexEscape(cps, i, 4, out);
    case 'U':
      return AppendHexEscape(cps, i, 8, out);
    case 'N':
      return absl::InvalidArgumentError(
          "\\N{...} escapes in string literals are not supported");
    default:
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
      return absl::OkStatus();
  }
}

}  // namespace

absl::StatusOr<std::string> DecodeStringLiteral(std::string_view body) {
  if (body.find('\\') == std::string_view::npos) return std::string(body);
  const std::u32string cps = DecodeUtf8(body);
  std::string out;
  out.reserve(body.size());
  size_t i = 0;
  while (i < cps.size()) {
    if (cps[i] != '\\') {
      AppendUtf8(cps[i++], &out);
      continue;
    }
    ++i;
    if (i >= cps.size()) {
      return absl::InvalidArgumentError("\\ at end of string");
    }
    const absl::Status status = DecodeEscape(cps, &i, &out);
    if (!status.ok()) return status;
  }
  return out;
}

}  // namespace radixkv::model::chat
