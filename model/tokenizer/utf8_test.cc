#include "model/tokenizer/utf8.h"

#include <string>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace radixkv::model::utf8 {
namespace {

std::string Lossy(absl::string_view bytes) {
  std::string out;
  AppendLossy(bytes, &out);
  return absl::CEscape(out);
}

const std::string kFffd = absl::CEscape(std::string(kReplacementChar));

// Expected values are Rust's String::from_utf8_lossy.
TEST(Utf8Test, LossyReplacesEachMaximalIllFormedSubpart) {
  EXPECT_EQ(Lossy("plain ascii"), "plain ascii");
  EXPECT_EQ(Lossy("\xE6\x97\xA5"), absl::CEscape("\xE6\x97\xA5"));
  EXPECT_EQ(Lossy("ab\xFF"
                  "cd"),
            "ab" + kFffd + "cd");
  EXPECT_EQ(Lossy("\xF0\x9F\x98"), kFffd);                  // truncated 4-byte
  EXPECT_EQ(Lossy("\xC3("), kFffd + "(");                   // bad continuation
  EXPECT_EQ(Lossy("\xE0\x80\x80"), kFffd + kFffd + kFffd);  // overlong
  EXPECT_EQ(Lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate
  EXPECT_EQ(Lossy("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);
  EXPECT_EQ(Lossy("\xE6\x97"), kFffd);
  EXPECT_EQ(Lossy("\xE6\x97x"), kFffd + "x");
}

TEST(Utf8Test, ValidationFollowsRustStr) {
  EXPECT_TRUE(IsValid(""));
  EXPECT_TRUE(IsValid("naïve 東京 \xF0\x9F\x98\x80 and a long ascii tail ..."));
  EXPECT_FALSE(IsValid("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(IsValid("\xED\xB2\x80"));      // surrogate
  EXPECT_FALSE(IsValid("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsValid("0123456789abcdef\x80"));
}

TEST(Utf8Test, DecodeAndAppendRoundTrip) {
  for (char32_t cp : {U'a', U'\u00E9', U'\u6771', U'\U0001F600'}) {
    std::string s;
    Append(cp, &s);
    size_t pos = 0;
    EXPECT_EQ(DecodeValid(s, &pos), cp);
    EXPECT_EQ(pos, s.size());
    EXPECT_EQ(LastCodePoint("x" + s), cp);
  }
}

}  // namespace
}  // namespace radixkv::model::utf8
