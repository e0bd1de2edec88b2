#include "model/tokenizer/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/utf8.h"

namespace radixkv::model::unicode {
namespace {

uint32_t CategoryMask(char32_t c) {
  return U_MASK(u_charType(static_cast<UChar32>(c)));
}

const icu::Normalizer2* NormalizerFor(NormalForm form, UErrorCode* status) {
  switch (form) {
    case NormalForm::kNfc:
      return icu::Normalizer2::getNFCInstance(*status);
    case NormalForm::kNfd:
      return icu::Normalizer2::getNFDInstance(*status);
    case NormalForm::kNfkc:
      return icu::Normalizer2::getNFKCInstance(*status);
    case NormalForm::kNfkd:
      return icu::Normalizer2::getNFKDInstance(*status);
  }
  return nullptr;
}

}  // namespace

bool IsWhitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_WHITE_SPACE);
}

bool IsNumeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return (CategoryMask(c) & (U_GC_ND_MASK | U_GC_NL_MASK | U_GC_NO_MASK)) != 0;
}

bool IsPunctuation(char32_t c) {
  if (c < 0x80) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) ||
           (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
  }
  return (CategoryMask(c) & U_GC_P_MASK) != 0;
}

bool IsRegexWordChar(char32_t c) {
  if (c < 0x80) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z') || c == '_';
  }
  const UChar32 u = static_cast<UChar32>(c);
  return u_hasBinaryProperty(u, UCHAR_ALPHABETIC) ||
         u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL) ||
         (CategoryMask(c) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

absl::Status Normalize(NormalForm form, std::string* text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = NormalizerFor(form, &status);
  if (U_FAILURE(status) || normalizer == nullptr) {
    return absl::InternalError(
        absl::StrCat("ICU normalizer unavailable: ", u_errorName(status)));
  }
  const icu::StringPiece source(text->data(),
                                static_cast<int32_t>(text->size()));
  if (normalizer->isNormalizedUTF8(source, status) && U_SUCCESS(status)) {
    return absl::OkStatus();
  }
  status = U_ZERO_ERROR;
  std::string out;
  out.reserve(text->size() + text->size() / 4);
  icu::StringByteSink<std::string> sink(&out);
  normalizer->normalizeUTF8(0, source, sink, nullptr, status);
  if (U_FAILURE(status)) {
    return absl::InternalError(
        absl::StrCat("ICU normalization failed: ", u_errorName(status)));
  }
  *text = std::move(out);
  return absl::OkStatus();
}

void AppendLowercase(absl::string_view text, std::string* out) {
  size_t pos = 0;
  while (pos < text.size()) {
    const unsigned char b = static_cast<unsigned char>(text[pos]);
    if (b < 0x80) {
      out->push_back(b >= 'A' && b <= 'Z' ? static_cast<char>(b + 32)
                                          : static_cast<char>(b));
      ++pos;
      continue;
    }
    const char32_t c = utf8::DecodeValid(text, &pos);
    // U+0130 is the only character whose unconditional full lowercase
    // (SpecialCasing.txt) differs from its simple mapping: "i" + U+0307.
    if (c == 0x130) {
      out->append("i\xCC\x87");
      continue;
    }
    utf8::Append(static_cast<char32_t>(u_tolower(static_cast<UChar32>(c))),
                 out);
  }
}

}  // namespace radixkv::model::unicode
