#include "model/tokenizer/hf_tokenizer.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer/refusal_testing.h"

namespace radixkv::model {
namespace {

using ::testing::ElementsAre;

// A byte-level tokenizer in the Llama 3 layout over a tiny vocabulary:
// Split (Isolated) + ByteLevel, BOS by a template, <|eot|> special.
constexpr char kByteLevel[] = R"({
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [
    {"id": 8, "content": "<|bos|>", "special": true, "normalized": false,
     "lstrip": false, "rstrip": false, "single_word": false},
    {"id": 9, "content": "<|eot|>", "special": true, "normalized": false,
     "lstrip": false, "rstrip": false, "single_word": false},
    {"id": 10, "content": "<tool>", "special": false, "normalized": false,
     "lstrip": false, "rstrip": false, "single_word": false}],
  "normalizer": NORMALIZER,
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": " ?\\p{L}+|\\p{N}|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false,
     "use_regex": false}]},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}},
               {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [],
    "special_tokens": {"<|bos|>": {"id": "<|bos|>", "ids": [8],
                                   "tokens": ["<|bos|>"]}}},
  "decoder": {"type": "ByteLevel", "add_prefix_space": true,
              "trim_offsets": true, "use_regex": true},
  "model": {"type": "BPE", "dropout": null, "unk_token": null,
    "continuing_subword_prefix": null, "end_of_word_suffix": null,
    "fuse_unk": false, "byte_fallback": false, "ignore_merges": true,
    "vocab": {"h": 0, "i": 1, "\u0120": 2, "hi": 3, "\u0120hi": 4, "1": 5,
              "\u00c3": 6, "\u00a9": 7},
    "merges": ["h i", "\u0120 hi"]}
})";

std::unique_ptr<HfTokenizer> Load(absl::string_view normalizer = "null") {
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t = HfTokenizer::FromJson(
      absl::StrReplaceAll(kByteLevel, {{"NORMALIZER", normalizer}}));
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

TEST(HfTokenizerTest, EncodesThroughThePipeline) {
  const auto t = Load();
  EXPECT_THAT(*t->Encode("hi hi", false), ElementsAre(3, 4));
  EXPECT_THAT(*t->Encode("hi hi", true), ElementsAre(8, 3, 4));
  EXPECT_THAT(*t->Encode("hi<|eot|>1 \xC3\xA9", false),
              ElementsAre(3, 9, 5, 2, 6, 7));
  EXPECT_THAT(*t->Encode("<tool>hi", false), ElementsAre(10, 3));
  EXPECT_THAT(*t->Encode("", true), ElementsAre(8));
  EXPECT_EQ(t->vocab_size(), 11);
}

TEST(HfTokenizerTest, NormalizerRunsOnEachPieceBetweenAddedTokens) {
  const auto t = Load(R"({"type": "Lowercase"})");
  EXPECT_THAT(*t->Encode("HI<|eot|>Hi", false), ElementsAre(3, 9, 3));
  // Non-normalized added tokens are matched on the raw text only: the
  // lowercased "<|eot|>" is plain text (here nothing of it is in the
  // vocabulary).
  EXPECT_THAT(*t->Encode("<|EOT|>", false), ElementsAre());
}

TEST(HfTokenizerTest, DecodesAndSkipsSpecials) {
  const auto t = Load();
  EXPECT_EQ(*t->Decode({8, 3, 4, 9}, false), "<|bos|>hi hi<|eot|>");
  EXPECT_EQ(*t->Decode({8, 3, 4, 9, 10}, true), "hi hi<tool>");
  EXPECT_EQ(*t->Decode({6}, false), "\xEF\xBF\xBD");  // a cut character
  EXPECT_EQ(*t->Decode({6, 7}, false), "\xC3\xA9");
  EXPECT_EQ(t->Decode({11}, false).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t->Decode({-1}, false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HfTokenizerTest, VocabularyLookups) {
  const auto t = Load();
  EXPECT_EQ(t->TokenToId("<|eot|>"), 9);
  EXPECT_EQ(t->TokenToId("\xC4\xA0hi"), 4);
  EXPECT_FALSE(t->TokenToId("nope").has_value());
  EXPECT_EQ(t->IdToToken(10), "<tool>");
  EXPECT_EQ(t->IdToToken(4), "\xC4\xA0hi");
  EXPECT_FALSE(t->IdToToken(11).has_value());
  EXPECT_TRUE(t->IsSpecial(9));
  EXPECT_FALSE(t->IsSpecial(10));
  EXPECT_FALSE(t->IsSpecial(3));
}

TEST(HfTokenizerTest, RefusesInvalidText) {
  const auto t = Load();
  EXPECT_EQ(t->Encode("bad \xFF", false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(HfTokenizerTest, NoDecoderJoinsWithSpaces) {
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t = HfTokenizer::FromJson(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*(*t)->Decode({0, 1, 0}, false), "a b a");
  EXPECT_THAT(*(*t)->Encode("ab", true), ElementsAre(0, 1));
}

// Each refusal names the component type and its JSON path.
TEST(HfTokenizerTest, RefusesUnsupportedComponents) {
  const std::string base =
      absl::StrReplaceAll(kByteLevel, {{"NORMALIZER", "null"}});
  testing::ExpectRefusals(
      {
          {"{not json", "not a JSON object"},
          {absl::StrReplaceAll(
               base, {{"\"version\": \"1.0\"", "\"version\": \"2.0\""}}),
           "tokenizer.json version '\"2.0\"' at version"},
          {absl::StrReplaceAll(base, {{"\"truncation\": null",
                                       "\"truncation\": {\"max_length\": 8}"}}),
           "truncation '{\"max_length\":8}' at truncation is not supported"},
          {absl::StrReplaceAll(
               base, {{"\"padding\": null", "\"padding\": {\"pad_id\": 0}"}}),
           "padding '"},
          {absl::StrReplaceAll(kByteLevel,
                               {{"NORMALIZER", R"({"type": "Nmt"})"}}),
           "normalizer 'Nmt' at normalizer is not supported"},
          {absl::StrReplaceAll(
               base, {{"\"type\": \"BPE\"", "\"type\": \"WordPiece\""}}),
           "model 'WordPiece' at model.type is not supported"},
          {absl::StrReplaceAll(
               base, {{"\"type\": \"BPE\"", "\"type\": \"Unigram\""}}),
           "model 'Unigram' at model.type"},
          {absl::StrReplaceAll(
               base, {{"\"type\": \"BPE\"", "\"type\": \"WordLevel\""}}),
           "model 'WordLevel' at model.type"},
          {absl::StrReplaceAll(base,
                               {{"\"dropout\": null", "\"dropout\": 0.25"}}),
           "BPE dropout '0.25' at model.dropout"},
          {absl::StrReplaceAll(
               base, {{"\"type\": \"Split\"", "\"type\": \"UnicodeScripts\""}}),
           "pre_tokenizer 'UnicodeScripts' at pre_tokenizer.pretokenizers[0]"},
          {absl::StrReplaceAll(base, {{"\"type\": \"TemplateProcessing\"",
                                       "\"type\": \"Unknown\""}}),
           "post_processor 'Unknown' at post_processor"},
          {absl::StrReplaceAll(base, {{"\"decoder\": {\"type\": \"ByteLevel\"",
                                       "\"decoder\": {\"type\": \"CTC\""}}),
           "decoder 'CTC' at decoder"},
          {absl::StrReplaceAll(base, {{"\"id\": 9,", "\"id\": 12,"}}),
           "added_tokens[1]: added token '<|eot|>' has id 12"},
      },
      [](const std::string& j) { return HfTokenizer::FromJson(j); });
}

TEST(HfTokenizerTest, LoadFile) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path =
      std::string(tmp != nullptr ? tmp : "/tmp") + "/hf_tokenizer_test.json";
  std::ofstream(path) << absl::StrReplaceAll(kByteLevel,
                                             {{"NORMALIZER", "null"}});
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t = HfTokenizer::LoadFile(path);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_THAT(*(*t)->Encode("hi", false), ElementsAre(3));
  EXPECT_EQ(HfTokenizer::LoadFile(path + ".absent").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace radixkv::model
