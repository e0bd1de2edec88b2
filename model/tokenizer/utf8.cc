#include "model/tokenizer/utf8.h"

namespace radixkv::model::utf8 {
namespace {

// Length of the well-formed sequence at bytes[i], or -(length of the maximal
// ill-formed subpart) when it is not well formed (Unicode Table 3-7).
int WellFormedLength(absl::string_view bytes, size_t i) {
  const unsigned char b0 = static_cast<unsigned char>(bytes[i]);
  if (b0 < 0x80) return 1;
  int n;
  unsigned char lo = 0x80, hi = 0xBF;  // range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (int k = 1; k < n; ++k) {
    if (i + k >= bytes.size()) return -k;
    const unsigned char b = static_cast<unsigned char>(bytes[i + k]);
    const unsigned char min = k == 1 ? lo : 0x80;
    const unsigned char max = k == 1 ? hi : 0xBF;
    if (b < min || b > max) return -k;
  }
  return n;
}

}  // namespace

char32_t LastCodePoint(absl::string_view s) {
  size_t start = s.size() - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) {
    --start;
  }
  return DecodeValid(s, &start);
}

void Append(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsValid(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII runs dominate real text: skip them eight bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t word;
      __builtin_memcpy(&word, s.data() + i, 8);
      if (word & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    const int n = WellFormedLength(s, i);
    if (n < 0) return false;
    i += n;
  }
  return true;
}

void AppendLossy(absl::string_view bytes, std::string* out) {
  size_t i = 0;
  size_t run_start = 0;  // start of the pending well-formed run
  while (i < bytes.size()) {
    const int n = WellFormedLength(bytes, i);
    if (n > 0) {
      i += n;
      continue;
    }
    out->append(bytes.data() + run_start, i - run_start);
    out->append(kReplacementChar.data(), kReplacementChar.size());
    i += -n;
    run_start = i;
  }
  out->append(bytes.data() + run_start, i - run_start);
}

bool EndsWithReplacementChar(absl::string_view s) {
  return s.size() >= kReplacementChar.size() &&
         s.substr(s.size() - kReplacementChar.size()) == kReplacementChar;
}

}  // namespace radixkv::model::utf8
