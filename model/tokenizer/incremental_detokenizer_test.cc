#include "model/tokenizer/incremental_detokenizer.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "model/tokenizer/golden_tokenizers.h"
#include "model/tokenizer/hf_tokenizer.h"
#include "model/tokenizer/utf8.h"

namespace radixkv::model {
namespace {

// Texts whose characters span several byte-level tokens.
const std::vector<std::string>& MultiByteTexts() {
  static const auto* const texts = new std::vector<std::string>{
      "日本語のテキストと中文混合",
      "한국어 텍스트",
      "emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD"
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 ok",
      "Ελληνικά και русский текст, العربية",
      "naïve café — 東京 Ünïcödé\n\tdef f(x): return x**2",
  };
  return *texts;
}

struct Streamed {
  std::vector<std::string> deltas;
  std::string all;
};

Streamed StreamIds(const Tokenizer& t, absl::Span<const int32_t> prompt,
                   absl::Span<const int32_t> generated, bool skip_special) {
  absl::StatusOr<IncrementalDetokenizer> created =
      IncrementalDetokenizer::Create(&t, prompt, skip_special);
  EXPECT_TRUE(created.ok()) << created.status();
  IncrementalDetokenizer& detok = *created;
  Streamed out;
  for (int32_t id : generated) {
    absl::StatusOr<std::string> d = detok.Append(id);
    EXPECT_TRUE(d.ok()) << d.status();
    out.deltas.push_back(*d);
    out.all += *d;
  }
  absl::StatusOr<std::string> rest = detok.Flush();
  EXPECT_TRUE(rest.ok()) << rest.status();
  out.deltas.push_back(*rest);
  out.all += *rest;
  EXPECT_EQ(out.all, detok.text());
  return out;
}

class IncrementalGoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> dir = testing::GoldenTokenizersDir();
    if (!dir.ok()) GTEST_SKIP() << "golden tokenizers absent: " << dir.status();
    absl::StatusOr<std::unique_ptr<HfTokenizer>> t =
        testing::LoadGoldenTokenizer(GetParam());
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_ = std::move(*t);
  }
  std::unique_ptr<HfTokenizer> tokenizer_;
};

TEST_P(IncrementalGoldenTest, DeltasConcatenateToFullDecodeAndStayWhole) {
  for (const std::string& text : MultiByteTexts()) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(text, false);
    ASSERT_TRUE(ids.ok());
    absl::StatusOr<std::string> full = tokenizer_->Decode(*ids, false);
    ASSERT_TRUE(full.ok());
    const Streamed s = StreamIds(*tokenizer_, {}, *ids, false);
    EXPECT_EQ(absl::CEscape(s.all), absl::CEscape(*full)) << text;
    for (const std::string& d : s.deltas) {
      EXPECT_TRUE(utf8::IsValid(d));
      EXPECT_FALSE(absl::StrContains(d, utf8::kReplacementChar))
          << "delta \"" << absl::CEscape(d) << "\" of " << text;
    }
  }
}

TEST_P(IncrementalGoldenTest, PromptContextKeepsTheLeadingSpace) {
  for (const std::string& text : MultiByteTexts()) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode(text, false);
    ASSERT_TRUE(ids.ok());
    const std::string full = *tokenizer_->Decode(*ids, false);
    for (size_t k = 1; k < ids->size(); ++k) {
      const absl::Span<const int32_t> all(*ids);
      const std::string prompt_text = *tokenizer_->Decode(all.first(k), false);
      // Only cuts where the prompt ends on a whole character.
      if (!absl::StartsWith(full, prompt_text)) continue;
      const Streamed s =
          StreamIds(*tokenizer_, all.first(k), all.subspan(k), false);
      EXPECT_EQ(absl::CEscape(s.all),
                absl::CEscape(full.substr(prompt_text.size())))
          << text << " cut at " << k;
    }
  }
}

TEST_P(IncrementalGoldenTest, SkipSpecialMatchesGoldenDecode) {
  absl::StatusOr<std::vector<testing::GoldenCase>> cases =
      testing::LoadGoldenCases(GetParam());
  ASSERT_TRUE(cases.ok()) << cases.status();
  for (const testing::GoldenCase& c : *cases) {
    const Streamed plain = StreamIds(*tokenizer_, {}, c.ids, false);
    EXPECT_EQ(absl::CEscape(plain.all), absl::CEscape(c.decoded)) << c.text;
    const Streamed skip = StreamIds(*tokenizer_, {}, c.ids_with_special, true);
    EXPECT_EQ(absl::CEscape(skip.all), absl::CEscape(c.decoded_skip_special))
        << c.text;
  }
}

TEST_P(IncrementalGoldenTest, OutOfRangeIdLeavesStateUnchanged) {
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer_->Encode("Hello", false);
  ASSERT_TRUE(ids.ok());
  IncrementalDetokenizer detok =
      *IncrementalDetokenizer::Create(tokenizer_.get(), {}, false);
  EXPECT_EQ(detok.Append(-1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(detok.Append(tokenizer_->vocab_size()).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::string all;
  for (int32_t id : *ids) all += *detok.Append(id);
  all += *detok.Flush();
  EXPECT_EQ(all, *tokenizer_->Decode(*ids, false));
}

INSTANTIATE_TEST_SUITE_P(AllGolden, IncrementalGoldenTest,
                         ::testing::ValuesIn(testing::GoldenTokenizerNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return testing::GoldenParamName(info.param);
                         });

// A tokenizer whose tokens are raw bytes: a character split over tokens, and
// bytes that never complete one.
constexpr char kByteTokenizer[] = R"({
  "model": {"type": "BPE", "vocab": {"a": 0, "<0xE6>": 1, "<0x97>": 2,
                                     "<0xA5>": 3}, "merges": [],
            "byte_fallback": true},
  "decoder": {"type": "ByteFallback"}
})";

TEST(IncrementalDetokenizerTest, HoldsASplitCharacterUntilComplete) {
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t =
      HfTokenizer::FromJson(kByteTokenizer);
  ASSERT_TRUE(t.ok()) << t.status();
  IncrementalDetokenizer detok =
      *IncrementalDetokenizer::Create(t->get(), {}, false);
  EXPECT_EQ(*detok.Append(0), "a");
  EXPECT_EQ(*detok.Append(1), "");
  EXPECT_EQ(*detok.Append(2), "");
  EXPECT_EQ(*detok.Append(3), "\xE6\x97\xA5");  // 日
  EXPECT_EQ(*detok.Flush(), "");
}

TEST(IncrementalDetokenizerTest, BoundsBytesThatNeverCompleteACharacter) {
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t =
      HfTokenizer::FromJson(kByteTokenizer);
  ASSERT_TRUE(t.ok()) << t.status();
  IncrementalDetokenizer detok =
      *IncrementalDetokenizer::Create(t->get(), {}, false);
  std::string all;
  size_t held = 0;
  for (int i = 0; i < 100; ++i) {
    const std::string d = *detok.Append(2);  // continuation bytes only
    if (d.empty()) {
      ++held;
      EXPECT_LE(held, IncrementalDetokenizer::kMaxPendingTokens);
    } else {
      held = 0;
    }
    all += d;
  }
  all += *detok.Flush();
  std::string expected;
  for (int i = 0; i < 100; ++i) expected += std::string(utf8::kReplacementChar);
  EXPECT_EQ(all, expected);
}

}  // namespace
}  // namespace radixkv::model
