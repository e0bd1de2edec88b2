#include "model/tokenizer/normalizer.h"

#include <string>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer/refusal_testing.h"

namespace radixkv::model {
namespace {

using Json = json_fields::Json;

// Normalizes `text` with the normalizer described by `json`.
std::string Apply(const char* json, std::string text,
                  bool* head_moved = nullptr) {
  absl::StatusOr<std::unique_ptr<Normalizer>> n =
      Normalizer::FromJson(Json::parse(json), "normalizer");
  EXPECT_TRUE(n.ok()) << n.status();
  bool moved = false;
  EXPECT_TRUE((*n)->Normalize(&text, &moved).ok());
  if (head_moved != nullptr) *head_moved = moved;
  return absl::CEscape(text);
}

TEST(NormalizerTest, UnicodeForms) {
  EXPECT_EQ(Apply(R"({"type": "NFC"})", "e\xCC\x81"),
            absl::CEscape("\xC3\xA9"));
  EXPECT_EQ(Apply(R"({"type": "NFD"})", "\xC3\xA9"),
            absl::CEscape("e\xCC\x81"));
  // U+FB01 LATIN SMALL LIGATURE FI, U+2460 CIRCLED DIGIT ONE.
  EXPECT_EQ(Apply(R"({"type": "NFKC"})", "\xEF\xAC\x81 \xE2\x91\xA0"), "fi 1");
  EXPECT_EQ(Apply(R"({"type": "NFKD"})", "\xC3\xA9\xEF\xAC\x81"),
            absl::CEscape("e\xCC\x81"
                          "fi"));
}

TEST(NormalizerTest, LowercaseMapsEachCharacterAlone) {
  // Final capital sigma -> U+03C3 (no context); U+0130 -> "i" + U+0307.
  EXPECT_EQ(Apply(R"({"type": "Lowercase"})",
                  "HeLLo \xCE\xA3\xCE\x91\xCE\xA3 \xC4\xB0"),
            absl::CEscape("hello \xCF\x83\xCE\xB1\xCF\x83 i\xCC\x87"));
}

TEST(NormalizerTest, StripPrependReplace) {
  bool moved = false;
  EXPECT_EQ(
      Apply(R"({"type": "Strip", "strip_left": true, "strip_right": true})",
            " \t hi \xE3\x80\x80", &moved),
      "hi");
  EXPECT_TRUE(moved);
  EXPECT_EQ(
      Apply(R"({"type": "Strip", "strip_left": false, "strip_right": true})",
            "  hi  ", &moved),
      "  hi");
  EXPECT_FALSE(moved);
  EXPECT_EQ(Apply(R"({"type": "Prepend", "prepend": "\u2581"})", "hi"),
            absl::CEscape("\xE2\x96\x81hi"));
  EXPECT_EQ(Apply(R"({"type": "Prepend", "prepend": "\u2581"})", ""), "");
  EXPECT_EQ(Apply(R"({"type": "Replace", "pattern": {"String": " "},
                    "content": "\u2581"})",
                  "a b  c"),
            absl::CEscape("a\xE2\x96\x81"
                          "b\xE2\x96\x81\xE2\x96\x81"
                          "c"));
  EXPECT_EQ(Apply(R"({"type": "Replace", "pattern": {"Regex": "\\s+"},
                    "content": " "})",
                  "This     is   a         test"),
            "This is a test");
  EXPECT_EQ(Apply(R"({"type": "Replace", "pattern": {"String": "x"},
                    "content": ""})",
                  "xxab", &moved),
            "ab");
  EXPECT_TRUE(moved);
}

TEST(NormalizerTest, SequenceAppliesInOrder) {
  EXPECT_EQ(Apply(R"({"type": "Sequence", "normalizers": [
                  {"type": "Prepend", "prepend": "\u2581"},
                  {"type": "Replace", "pattern": {"String": " "},
                   "content": "\u2581"}]})",
                  "Hello world"),
            absl::CEscape("\xE2\x96\x81Hello\xE2\x96\x81world"));
}

TEST(NormalizerTest, RefusesUnsupportedByNameAndPath) {
  testing::ExpectRefusals(
      {
          {R"({"type": "BertNormalizer"})",
           "normalizer 'BertNormalizer' at normalizer is not supported"},
          {R"({"type": "Sequence", "normalizers": [{"type": "NFC"},
                   {"type": "Precompiled", "precompiled_charsmap": ""}]})",
           "normalizer 'Precompiled' at normalizer.normalizers[1]"},
          {R"({"type": "StripAccents"})", "'StripAccents'"},
          {R"j({"type": "Replace", "pattern": {"Regex": "(a)"},
                   "content": "$1"})j",
           "capture group"},
          {R"({"type": "Replace", "pattern": {"Regex": "\\ba"},
                   "content": ""})",
           "normalizer.pattern"},
          {R"({"type": "Strip", "strip_left": true})", "strip_right"},
          {R"({"type": "Prepend"})", "normalizer.prepend: missing"},
      },
      [](const std::string& j) {
        return Normalizer::FromJson(Json::parse(j), "normalizer");
      });
}

}  // namespace
}  // namespace radixkv::model
