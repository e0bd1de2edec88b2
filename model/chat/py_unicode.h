// Python 3 `str` semantics over UTF-8 bytes: code-point indexing, the
// character classes of str.isspace()/isprintable()/isalnum() and regex \w,
// and the case mappings of str.upper()/lower()/title()/capitalize()/
// swapcase(). Character properties come from ICU (libicu), so they follow
// ICU's Unicode version, which can differ from CPython's for characters
// assigned in between.
//
// Every function taking a string expects valid UTF-8 (the renderer checks
// templates and inputs once, at their boundary).
#ifndef RADIXKV_MODEL_CHAT_PY_UNICODE_H_
#define RADIXKV_MODEL_CHAT_PY_UNICODE_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace radixkv::model::chat {

// True iff `s` is well-formed UTF-8 without surrogates or overlong forms.
bool IsValidUtf8(std::string_view s);

// Decodes valid UTF-8 into code points.
std::u32string DecodeUtf8(std::string_view s);

// Encodes code points (each <= 0x10FFFF, not a surrogate) as UTF-8.
std::string EncodeUtf8(std::u32string_view code_points);

// Appends one code point as UTF-8.
void AppendUtf8(char32_t c, std::string* out);

// Number of code points (Python's len(str)).
size_t CodePointCount(std::string_view s);

// Python str.isspace() for one character (Unicode White_Space as CPython
// defines it: bidi classes WS, B, S and category Zs).
bool PyIsSpace(char32_t c);

// Python str.isprintable() for one character: not in Cc, Cf, Cs, Co, Cn, Zl,
// Zp, Zs, except U+0020.
bool PyIsPrintable(char32_t c);

// Python str.isalnum() for one character.
bool PyIsAlnum(char32_t c);

// Python str.isalpha(), isdecimal(), isdigit(), isnumeric() for one character.
bool PyIsAlpha(char32_t c);
bool PyIsDecimal(char32_t c);
bool PyIsDigit(char32_t c);
bool PyIsNumeric(char32_t c);

// Python regex `\w` on str patterns: alphanumeric or '_'.
bool PyIsWordChar(char32_t c);

// Python str.upper() / str.lower(): full Unicode case mappings (root locale).
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);

// Python str.capitalize(): first character title-cased, the rest lowercased.
std::string PyCapitalize(std::string_view s);

// Python str.title(): a character is title-cased after an uncased character
// and lowercased after a cased one.
std::string PyTitle(std::string_view s);

// Python str.swapcase().
std::string PySwapcase(std::string_view s);

// Python str.islower() / isupper() / istitle() on a whole string.
bool PyStrIsLower(std::string_view s);
bool PyStrIsUpper(std::string_view s);
bool PyStrIsTitle(std::string_view s);

}  // namespace radixkv::model::chat

#endif  // RADIXKV_MODEL_CHAT_PY_UNICODE_H_
