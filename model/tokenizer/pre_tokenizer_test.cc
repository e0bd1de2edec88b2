#include "model/tokenizer/pre_tokenizer.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer/refusal_testing.h"

namespace radixkv::model {
namespace {

using ::testing::ElementsAre;

using Json = json_fields::Json;
using Strings = std::vector<std::string>;

std::unique_ptr<PreTokenizer> Make(const std::string& json) {
  absl::StatusOr<std::unique_ptr<PreTokenizer>> p =
      PreTokenizer::FromJson(Json::parse(json), "pre_tokenizer");
  EXPECT_TRUE(p.ok()) << p.status();
  return std::move(*p);
}

// The pieces of `text`, each prefixed with '^' when it is at the origin.
Strings Apply(const PreTokenizer& p, const std::string& text,
              bool at_origin = true) {
  Strings out;
  EXPECT_TRUE(
      p.PreTokenize(text, at_origin, [&](absl::string_view t, bool origin) {
         out.push_back((origin ? "^" : "") + std::string(t));
         return absl::OkStatus();
       }).ok());
  return out;
}

Strings Split(const char* behavior, const std::string& text,
              bool invert = false) {
  return Apply(
      *Make(std::string(R"({"type": "Split", "pattern": {"String": "-"},
                                   "invert": )") +
            (invert ? "true" : "false") + R"(, "behavior": ")" + behavior +
            "\"}"),
      text);
}

// tokenizers' normalizer.rs split test: "The-final--countdown" on '-'.
TEST(PreTokenizerTest, SplitBehaviors) {
  const std::string text = "The-final--countdown";
  EXPECT_THAT(Split("Removed", text),
              ElementsAre("^The", "final", "countdown"));
  EXPECT_THAT(Split("Isolated", text),
              ElementsAre("^The", "-", "final", "-", "-", "countdown"));
  EXPECT_THAT(Split("MergedWithPrevious", text),
              ElementsAre("^The-", "final-", "-", "countdown"));
  EXPECT_THAT(Split("MergedWithNext", text),
              ElementsAre("^The", "-final", "-", "-countdown"));
  EXPECT_THAT(Split("Contiguous", text),
              ElementsAre("^The", "-", "final", "--", "countdown"));
  EXPECT_THAT(Split("Removed", "-a-", /*invert=*/true), ElementsAre("^-", "-"));
  EXPECT_THAT(Split("MergedWithNext", "a-"), ElementsAre("^a", "-"));
}

TEST(PreTokenizerTest, WhitespaceDigitsPunctuation) {
  EXPECT_THAT(Apply(*Make(R"({"type": "Whitespace"})"), "How are you doing?"),
              ElementsAre("^How", "are", "you", "doing", "?"));
  EXPECT_THAT(Apply(*Make(R"({"type": "Whitespace"})"), "\n"), ElementsAre());
  EXPECT_THAT(Apply(*Make(R"({"type": "WhitespaceSplit"})"), "Hey man!"),
              ElementsAre("^Hey", "man!"));
  EXPECT_THAT(Apply(*Make(R"({"type": "Digits", "individual_digits": true})"),
                    "Hey 123 friend!"),
              ElementsAre("^Hey ", "1", "2", "3", " friend!"));
  EXPECT_THAT(Apply(*Make(R"({"type": "Digits", "individual_digits": false})"),
                    "Hey 123 friend!"),
              ElementsAre("^Hey ", "123", " friend!"));
  EXPECT_THAT(
      Apply(*Make(R"({"type": "Punctuation"})"),
            "Hey friend!     How are you?!?"),
      ElementsAre("^Hey friend", "!", "     How are you", "?", "!", "?"));
}

TEST(PreTokenizerTest, ByteLevel) {
  const auto gpt2 = Make(R"({"type": "ByteLevel", "add_prefix_space": false,
                             "trim_offsets": true, "use_regex": true})");
  EXPECT_THAT(Apply(*gpt2, "Hello my friend, how is your day going?"),
              ElementsAre("^Hello", "\xC4\xA0my",
                          "\xC4\xA0"
                          "friend",
                          ",", "\xC4\xA0how", "\xC4\xA0is", "\xC4\xA0your",
                          "\xC4\xA0"
                          "day",
                          "\xC4\xA0going", "?"));
  EXPECT_THAT(Apply(*gpt2, "Hello there       dear"),
              ElementsAre("^Hello", "\xC4\xA0there",
                          "\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0\xC4\xA0",
                          "\xC4\xA0"
                          "dear"));
  // "i⭢j": the arrow's three bytes become three characters.
  EXPECT_THAT(Apply(*gpt2, "i\xE2\xAD\xA2j"),
              ElementsAre("^i", "\xC3\xA2\xC5\x83\xC2\xA2", "j"));
  const auto prefix = Make(R"({"type": "ByteLevel", "add_prefix_space": true,
                               "use_regex": false})");
  EXPECT_THAT(Apply(*prefix, "Hi you"), ElementsAre("^\xC4\xA0Hi\xC4\xA0you"));
  EXPECT_THAT(Apply(*prefix, " Hi", false), ElementsAre("\xC4\xA0Hi"));
}

TEST(PreTokenizerTest, Metaspace) {
  const auto always = Make(R"({"type": "Metaspace", "replacement": "\u2581",
                               "prepend_scheme": "always", "split": true})");
  EXPECT_THAT(Apply(*always, "Hey friend!"), ElementsAre("^\xE2\x96\x81Hey",
                                                         "\xE2\x96\x81"
                                                         "friend!"));
  EXPECT_THAT(Apply(*always, "Hey   friend!"),
              ElementsAre("^\xE2\x96\x81Hey", "\xE2\x96\x81", "\xE2\x96\x81",
                          "\xE2\x96\x81"
                          "friend!"));
  EXPECT_THAT(Apply(*always, "how", false), ElementsAre("\xE2\x96\x81how"));
  const auto first = Make(R"({"type": "Metaspace", "replacement": "\u2581",
                              "prepend_scheme": "first", "split": false})");
  EXPECT_THAT(Apply(*first, "Hey my", true),
              ElementsAre("^\xE2\x96\x81Hey\xE2\x96\x81my"));
  EXPECT_THAT(Apply(*first, "how are", false), ElementsAre("how\xE2\x96\x81"
                                                           "are"));
  EXPECT_THAT(Apply(*first, " Hey ", true),
              ElementsAre("^\xE2\x96\x81Hey\xE2\x96\x81"));
  const auto never = Make(R"({"type": "Metaspace", "replacement": "_",
                              "prepend_scheme": "never"})");
  EXPECT_THAT(Apply(*never, "a b"), ElementsAre("^a", "_b"));
}

TEST(PreTokenizerTest, SequenceFeedsEachPieceToTheNextStep) {
  const auto seq = Make(R"({"type": "Sequence", "pretokenizers": [
      {"type": "WhitespaceSplit"},
      {"type": "Digits", "individual_digits": true}]})");
  EXPECT_THAT(Apply(*seq, "ab12 c3"), ElementsAre("^ab", "1", "2", "c", "3"));
}

TEST(PreTokenizerTest, RefusesUnsupportedByNameAndPath) {
  testing::ExpectRefusals(
      {
          {R"({"type": "BertPreTokenizer"})",
           "pre_tokenizer 'BertPreTokenizer' at pre_tokenizer is not "
           "supported"},
          {R"({"type": "Sequence", "pretokenizers": [
                   {"type": "UnicodeScripts"}]})",
           "'UnicodeScripts' at pre_tokenizer.pretokenizers[0]"},
          {R"({"type": "Split", "pattern": {"String": "-"},
                   "behavior": "Dropped"})",
           "split behavior 'Dropped' at pre_tokenizer.behavior"},
          {R"({"type": "Split", "pattern": {"Regex": "\\bx"},
                   "behavior": "Isolated"})",
           "pre_tokenizer.pattern"},
          {R"({"type": "Split", "pattern": {"Both": "-"},
                   "behavior": "Isolated"})",
           "pre_tokenizer.pattern"},
          {R"({"type": "Metaspace", "replacement": "_",
                   "add_prefix_space": false})",
           "add_prefix_space does not match"},
          {R"({"type": "Metaspace", "replacement": "ab"})",
           "exactly one character"},
          {R"({"type": "CharDelimiterSplit", "delimiter": " "})",
           "'CharDelimiterSplit'"},
      },
      [](const std::string& j) {
        return PreTokenizer::FromJson(Json::parse(j), "pre_tokenizer");
      });
}

}  // namespace
}  // namespace radixkv::model
