#include "model/tokenizer/byte_level.h"

#include <array>

#include "model/tokenizer/utf8.h"

namespace radixkv::model::byte_level {
namespace {

constexpr bool MapsToItself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) ||
         (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> to_char{};
  std::array<std::array<char, 2>, 256> encoded{};  // UTF-8 of to_char
  std::array<unsigned char, 256> encoded_len{};
  std::array<int, 0x144> to_byte{};  // the alphabet ends at U+0143
};

constexpr Tables MakeTables() {
  Tables t;
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = MapsToItself(b) ? b : 0x100 + next++;
    t.to_char[b] = c;
    // 1 or 2 UTF-8 bytes: the alphabet is below U+0800.
    if (c < 0x80) {
      t.encoded[b] = {static_cast<char>(c), 0};
      t.encoded_len[b] = 1;
    } else {
      t.encoded[b] = {static_cast<char>(0xC0 | (c >> 6)),
                      static_cast<char>(0x80 | (c & 0x3F))};
      t.encoded_len[b] = 2;
    }
  }
  for (auto& v : t.to_byte) v = -1;
  for (int b = 0; b < 256; ++b) t.to_byte[t.to_char[b]] = b;
  return t;
}

constexpr Tables kTables = MakeTables();

}  // namespace

char32_t ByteToChar(unsigned char b) { return kTables.to_char[b]; }

int CharToByte(char32_t c) {
  return c < kTables.to_byte.size() ? kTables.to_byte[c] : -1;
}

void AppendEncoded(absl::string_view bytes, std::string* out) {
  const Tables& t = kTables;
  const size_t start = out->size();
  out->resize(start + 2 * bytes.size());
  char* dst = out->data() + start;
  for (char ch : bytes) {
    const unsigned char b = static_cast<unsigned char>(ch);
    dst[0] = t.encoded[b][0];
    dst[1] = t.encoded[b][1];
    dst += t.encoded_len[b];
  }
  out->resize(dst - out->data());
}

void AppendDecoded(absl::string_view token, std::string* out) {
  const size_t start = out->size();
  size_t pos = 0;
  while (pos < token.size()) {
    const int b = CharToByte(utf8::DecodeValid(token, &pos));
    if (b < 0) {
      out->resize(start);
      out->append(token.data(), token.size());
      return;
    }
    out->push_back(static_cast<char>(b));
  }
}

}  // namespace radixkv::model::byte_level
