#include "model/tokenizer/decoder.h"

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

Strings Apply(const char* json, Strings tokens) {
  absl::StatusOr<std::unique_ptr<Decoder>> d =
      Decoder::FromJson(Json::parse(json), "decoder");
  EXPECT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE((*d)->DecodeChain(&tokens).ok());
  return tokens;
}

// Expected values from tokenizers' decoders/*.rs tests.
TEST(DecoderTest, ByteFallback) {
  const char* bf = R"({"type": "ByteFallback"})";
  EXPECT_THAT(Apply(bf, {"Hey", "friend!"}), ElementsAre("Hey", "friend!"));
  EXPECT_THAT(Apply(bf, {"<0x61>"}), ElementsAre("a"));
  EXPECT_THAT(Apply(bf, {"<0xE5>"}), ElementsAre("\xEF\xBF\xBD"));
  EXPECT_THAT(Apply(bf, {"<0xE5>", "<0x8f>"}),
              ElementsAre("\xEF\xBF\xBD", "\xEF\xBF\xBD"));
  EXPECT_THAT(Apply(bf, {"<0xE5>", "<0x8f>", "<0xab>", "a"}),
              ElementsAre("\xE5\x8F\xAB", "a"));
  EXPECT_THAT(Apply(bf, {"<0xE5>", "<0x8f>", "a"}),
              ElementsAre("\xEF\xBF\xBD", "\xEF\xBF\xBD", "a"));
  EXPECT_THAT(Apply(bf, {"<0xZZ>", "<0x+A>"}), ElementsAre("<0xZZ>", "\n"));
}

TEST(DecoderTest, StripFuseReplaceMetaspace) {
  EXPECT_THAT(
      Apply(R"({"type": "Strip", "content": "H", "start": 1, "stop": 0})",
            {"Hey", " friend!", "HHH"}),
      ElementsAre("ey", " friend!", "HH"));
  EXPECT_THAT(
      Apply(R"({"type": "Strip", "content": "y", "start": 0, "stop": 1})",
            {"Hey", " friend!"}),
      ElementsAre("He", " friend!"));
  EXPECT_THAT(Apply(R"({"type": "Fuse"})", {"Hey", " friend!"}),
              ElementsAre("Hey friend!"));
  EXPECT_THAT(Apply(R"({"type": "Replace", "pattern": {"String": "_"},
                      "content": " "})",
                    {"hello", "_hello"}),
              ElementsAre("hello", " hello"));
  EXPECT_THAT(Apply(R"({"type": "Metaspace", "replacement": "\u2581",
                      "prepend_scheme": "always"})",
                    {"\xE2\x96\x81Hey",
                     "\xE2\x96\x81"
                     "friend!"}),
              ElementsAre("Hey", " friend!"));
  EXPECT_THAT(Apply(R"({"type": "Metaspace", "replacement": "\u2581",
                      "prepend_scheme": "never"})",
                    {"\xE2\x96\x81Hey",
                     "\xE2\x96\x81"
                     "friend!"}),
              ElementsAre(" Hey", " friend!"));
}

TEST(DecoderTest, ByteLevel) {
  const char* bl = R"({"type": "ByteLevel", "add_prefix_space": true,
                       "trim_offsets": true, "use_regex": true})";
  EXPECT_THAT(Apply(bl, {"Hello", "\xC4\xA0my",
                         "\xC4\xA0"
                         "friend",
                         ","}),
              ElementsAre("Hello my friend,"));
  // A token outside the byte alphabet (an added token with a space) keeps
  // its own bytes; a cut character becomes U+FFFD.
  EXPECT_THAT(Apply(bl, {"<| a |>", "\xC3\xA6"}),
              ElementsAre("<| a |>\xEF\xBF\xBD"));
}

TEST(DecoderTest, SequenceAsLlama2) {
  EXPECT_THAT(Apply(R"({"type": "Sequence", "decoders": [
                    {"type": "Replace", "pattern": {"String": "\u2581"},
                     "content": " "},
                    {"type": "ByteFallback"}, {"type": "Fuse"},
                    {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})",
                    {"\xE2\x96\x81Hi", "<0xE6>", "<0x97>", "<0xA5>", "!"}),
              ElementsAre("Hi\xE6\x97\xA5!"));
}

TEST(DecoderTest, RefusesUnsupportedByNameAndPath) {
  testing::ExpectRefusals(
      {
          {R"({"type": "WordPiece", "prefix": "##"})",
           "decoder 'WordPiece' at decoder is not supported"},
          {R"({"type": "Sequence", "decoders": [{"type": "CTC"}]})",
           "'CTC' at decoder.decoders[0]"},
          {R"({"type": "BPEDecoder"})", "'BPEDecoder'"},
          {R"({"type": "Replace", "pattern": {"Regex": "_+"},
                   "content": " "})",
           "Replace decoder with pattern 'Regex' at decoder.pattern"},
      },
      [](const std::string& j) {
        return Decoder::FromJson(Json::parse(j), "decoder");
      });
}

}  // namespace
}  // namespace radixkv::model
