#include "model/chat/py_unicode.h"

#include <unicode/ucasemap.h>
#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include <cstdint>

namespace radixkv::model::chat {
namespace {

// Length of the UTF-8 sequence starting with `lead`, 0 if `lead` cannot
// start one.
int SequenceLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Decodes the code point at `*pos` of valid UTF-8 and advances `*pos`.
char32_t DecodeAt(std::string_view s, size_t* pos) {
  const unsigned char lead = static_cast<unsigned char>(s[*pos]);
  const int len = SequenceLength(lead);
  if (len <= 1) {
    ++*pos;
    return lead;
  }
  char32_t c = lead & (0xFF >> (len + 1));
  for (int i = 1; i < len; ++i) {
    c = (c << 6) | (static_cast<unsigned char>(s[*pos + i]) & 0x3F);
  }
  *pos += len;
  return c;
}

const UCaseMap* RootCaseMap() {
  static const UCaseMap* const kMap = [] {
    UErrorCode error = U_ZERO_ERROR;
    return static_cast<const UCaseMap*>(ucasemap_open("", 0, &error));
  }();
  return kMap;
}

enum class CaseOp { kUpper, kLower };

// Whole-string full case mapping with ICU's root locale.
std::string MapCase(CaseOp op, std::string_view s) {
  if (s.empty() || RootCaseMap() == nullptr) return std::string(s);
  std::string out(s.size() + 16, '\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    UErrorCode error = U_ZERO_ERROR;
    const int32_t n =
        op == CaseOp::kUpper
            ? ucasemap_utf8ToUpper(RootCaseMap(), out.data(), out.size(),
                                   s.data(), s.size(), &error)
            : ucasemap_utf8ToLower(RootCaseMap(), out.data(), out.size(),
                                   s.data(), s.size(), &error);
    if (error == U_BUFFER_OVERFLOW_ERROR) {
      out.assign(n, '\0');
      continue;
    }
    if (U_FAILURE(error)) return std::string(s);
    out.resize(n);
    return out;
  }
  return std::string(s);
}

std::string CodePointUtf8(char32_t c) {
  std::string s;
  AppendUtf8(c, &s);
  return s;
}

// Full title-case mapping of one character (e.g. U+00DF -> "Ss").
std::string TitleChar(char32_t c) {
  UChar src[2];
  int32_t src_len = 0;
  U16_APPEND_UNSAFE(src, src_len, c);
  UChar dest[8];
  UErrorCode error = U_ZERO_ERROR;
  const int32_t n = u_strToTitle(dest, 8, src, src_len, nullptr, "", &error);
  if (U_FAILURE(error) || n > 8) return CodePointUtf8(c);
  std::string out;
  for (int32_t i = 0; i < n;) {
    UChar32 d;
    U16_NEXT_UNSAFE(dest, i, d);
    AppendUtf8(static_cast<char32_t>(d), &out);
  }
  return out;
}

bool IsCased(char32_t c) { return u_hasBinaryProperty(c, UCHAR_CASED); }
bool IsLowerChar(char32_t c) { return u_hasBinaryProperty(c, UCHAR_LOWERCASE); }
bool IsUpperChar(char32_t c) { return u_hasBinaryProperty(c, UCHAR_UPPERCASE); }
bool IsTitleChar(char32_t c) { return u_charType(c) == U_TITLECASE_LETTER; }
bool IsCaseIgnorable(char32_t c) {
  return u_hasBinaryProperty(c, UCHAR_CASE_IGNORABLE);
}

// CPython's Final_Sigma test for U+03A3 at index i: preceded by a cased
// character and not followed by one (case-ignorable characters skipped).
bool IsFinalSigma(const std::u32string& cps, size_t i) {
  size_t j = i;
  bool cased_before = false;
  while (j > 0) {
    --j;
    if (!IsCaseIgnorable(cps[j])) {
      cased_before = IsCased(cps[j]);
      break;
    }
  }
  if (!cased_before) return false;
  for (size_t k = i + 1; k < cps.size(); ++k) {
    if (!IsCaseIgnorable(cps[k])) return !IsCased(cps[k]);
  }
  return true;
}

// CPython's lower_ucs4: full lowercase with the Final_Sigma rule.
std::string LowerCharAt(const std::u32string& cps, size_t i) {
  if (cps[i] == 0x03A3) {
    return CodePointUtf8(IsFinalSigma(cps, i) ? 0x03C2 : 0x03C3);
  }
  return MapCase(CaseOp::kLower, CodePointUtf8(cps[i]));
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char lead = static_cast<unsigned char>(s[i]);
    const int len = SequenceLength(lead);
    if (len == 0 || i + len > s.size()) return false;
    for (int k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    if (len >= 3) {
      const unsigned char second = static_cast<unsigned char>(s[i + 1]);
      if (lead == 0xE0 && second < 0xA0) return false;   // overlong
      if (lead == 0xED && second >= 0xA0) return false;  // surrogate
      if (lead == 0xF0 && second < 0x90) return false;   // overlong
      if (lead == 0xF4 && second >= 0x90) return false;  // > U+10FFFF
    }
    i += len;
  }
  return true;
}

std::u32string DecodeUtf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) out.push_back(DecodeAt(s, &pos));
  return out;
}

std::string EncodeUtf8(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t c : code_points) AppendUtf8(c, &out);
  return out;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    out->push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (c >> 6)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (c >> 12)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (c >> 18)));
    out->push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (char ch : s) {
    if ((static_cast<unsigned char>(ch) & 0xC0) != 0x80) ++n;
  }
  return n;
}

bool PyIsSpace(char32_t c) {
  if (c < 0x80) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  }
  return c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

bool PyIsPrintable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(c)) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

bool PyIsAlpha(char32_t c) {
  switch (u_charType(c)) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return true;
    default:
      return false;
  }
}

bool PyIsDecimal(char32_t c) {
  return u_getIntPropertyValue(c, UCHAR_NUMERIC_TYPE) == U_NT_DECIMAL;
}

bool PyIsDigit(char32_t c) {
  const int type = u_getIntPropertyValue(c, UCHAR_NUMERIC_TYPE);
  return type == U_NT_DECIMAL || type == U_NT_DIGIT;
}

bool PyIsNumeric(char32_t c) {
  return u_getIntPropertyValue(c, UCHAR_NUMERIC_TYPE) != U_NT_NONE;
}

bool PyIsAlnum(char32_t c) { return PyIsAlpha(c) || PyIsNumeric(c); }

bool PyIsWordChar(char32_t c) { return c == '_' || PyIsAlnum(c); }

std::string PyUpper(std::string_view s) { return MapCase(CaseOp::kUpper, s); }

std::string PyLower(std::string_view s) { return MapCase(CaseOp::kLower, s); }

std::string PyCapitalize(std::string_view s) {
  const std::u32string cps = DecodeUtf8(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    out += i == 0 ? TitleChar(cps[i]) : LowerCharAt(cps, i);
  }
  return out;
}

std::string PyTitle(std::string_view s) {
  const std::u32string cps = DecodeUtf8(s);
  std::string out;
  bool previous_is_cased = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    out += previous_is_cased ? LowerCharAt(cps, i) : TitleChar(cps[i]);
    previous_is_cased = IsCased(cps[i]);
  }
  return out;
}

std::string PySwapcase(std::string_view s) {
  const std::u32string cps = DecodeUtf8(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (IsUpperChar(cps[i])) {
      out += LowerCharAt(cps, i);
    } else if (IsLowerChar(cps[i])) {
      out += MapCase(CaseOp::kUpper, CodePointUtf8(cps[i]));
    } else {
      AppendUtf8(cps[i], &out);
    }
  }
  return out;
}

bool PyStrIsLower(std::string_view s) {
  bool cased = false;
  for (char32_t c : DecodeUtf8(s)) {
    if (IsUpperChar(c) || IsTitleChar(c)) return false;
    if (IsLowerChar(c)) cased = true;
  }
  return cased;
}

bool PyStrIsUpper(std::string_view s) {
  bool cased = false;
  for (char32_t c : DecodeUtf8(s)) {
    if (IsLowerChar(c) || IsTitleChar(c)) return false;
    if (IsUpperChar(c)) cased = true;
  }
  return cased;
}

bool PyStrIsTitle(std::string_view s) {
  bool cased = false;
  bool previous_is_cased = false;
  for (char32_t c : DecodeUtf8(s)) {
    if (IsUpperChar(c) || IsTitleChar(c)) {
      if (previous_is_cased) return false;
      previous_is_cased = cased = true;
    } else if (IsLowerChar(c)) {
      if (!previous_is_cased) return false;
      previous_is_cased = cased = true;
    } else {
      previous_is_cased = false;
    }
  }
  return cased;
}

}  // namespace radixkv::model::chat
