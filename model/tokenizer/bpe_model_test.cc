#include "model/tokenizer/bpe_model.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer/refusal_testing.h"

namespace radixkv::model {
namespace {

using ::testing::ElementsAre;

using Json = json_fields::Json;

std::unique_ptr<BpeModel> Make(const std::string& json) {
  absl::StatusOr<std::unique_ptr<BpeModel>> m =
      BpeModel::FromJson(Json::parse(json), "model");
  EXPECT_TRUE(m.ok()) << m.status();
  return std::move(*m);
}

std::vector<int32_t> Ids(const BpeModel& m, absl::string_view word) {
  std::vector<int32_t> ids;
  absl::Status s = m.Tokenize(word, &ids);
  EXPECT_TRUE(s.ok()) << s;
  return ids;
}

constexpr char kVocab[] =
    R"("vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "abc": 5})";

TEST(BpeModelTest, MergesApplyByRankThenLeftmost) {
  const auto ab_first = Make(std::string("{") + kVocab +
                             R"(, "merges": ["a b", "ab c", "b c"]})");
  EXPECT_THAT(Ids(*ab_first, "abc"), ElementsAre(5));
  const auto bc_first = Make(std::string("{") + kVocab +
                             R"(, "merges": [["b", "c"], ["a", "b"]]})");
  EXPECT_THAT(Ids(*bc_first, "abc"), ElementsAre(0, 4));
  // Ties on rank go left first: "abab" -> ab ab.
  EXPECT_THAT(Ids(*ab_first, "abab"), ElementsAre(3, 3));
  EXPECT_THAT(Ids(*ab_first, "cab"), ElementsAre(2, 3));
  // Cached words give the same result; long words are not cached.
  EXPECT_THAT(Ids(*ab_first, "abc"), ElementsAre(5));
  const std::string long_word(300, 'a');
  EXPECT_EQ(Ids(*ab_first, long_word).size(), 300u);
  EXPECT_EQ(Ids(*ab_first, long_word).size(), 300u);
}

TEST(BpeModelTest, IgnoreMergesTakesWholeVocabularyWords) {
  const std::string vocab =
      R"("vocab": {"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4}, "merges": ["a b"])";
  EXPECT_THAT(Ids(*Make("{" + vocab + R"(, "ignore_merges": true})"), "abc"),
              ElementsAre(4));
  EXPECT_THAT(Ids(*Make("{" + vocab + "}"), "abc"), ElementsAre(3, 2));
}

TEST(BpeModelTest, ByteFallbackAndUnknown) {
  const auto fallback = Make(R"({"vocab": {"<unk>": 0, "a": 1, "<0xC3>": 2,
      "<0xA9>": 3}, "merges": [], "byte_fallback": true, "unk_token": "<unk>"})");
  EXPECT_THAT(Ids(*fallback, "a\xC3\xA9"), ElementsAre(1, 2, 3));
  EXPECT_THAT(Ids(*fallback, "a\xC3\xA8"), ElementsAre(1, 0));  // <0xA8> absent
  const auto fused = Make(R"({"vocab": {"<unk>": 0, "a": 1}, "merges": [],
                              "unk_token": "<unk>", "fuse_unk": true})");
  EXPECT_THAT(Ids(*fused, "xyaz"), ElementsAre(0, 1, 0));
  const auto unfused = Make(R"({"vocab": {"<unk>": 0, "a": 1}, "merges": [],
                                "unk_token": "<unk>"})");
  EXPECT_THAT(Ids(*unfused, "xyaz"), ElementsAre(0, 0, 1, 0));
  const auto no_unk = Make(R"({"vocab": {"a": 1}, "merges": []})");
  EXPECT_THAT(Ids(*no_unk, "xyaz"), ElementsAre(1));
  const auto missing_unk = Make(R"({"vocab": {"a": 1}, "merges": [],
                                    "unk_token": "<unk>"})");
  std::vector<int32_t> ids;
  EXPECT_EQ(missing_unk->Tokenize("x", &ids).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BpeModelTest, SubwordPrefixAndSuffix) {
  const auto prefix = Make(R"({"vocab": {"a": 0, "##b": 1, "ab": 2, "b": 3},
      "merges": ["a ##b"], "continuing_subword_prefix": "##"})");
  EXPECT_THAT(Ids(*prefix, "ab"), ElementsAre(2));
  EXPECT_THAT(Ids(*prefix, "ba"), ElementsAre(3));  // "##a" unknown: dropped
  const auto suffix = Make(R"({"vocab": {"a": 0, "b</w>": 1, "ab</w>": 2},
      "merges": ["a b</w>"], "end_of_word_suffix": "</w>"})");
  EXPECT_THAT(Ids(*suffix, "ab"), ElementsAre(2));
}

TEST(BpeModelTest, LegacyMergesWithSpacesInTokens) {
  const auto m = Make(R"({"vocab": {"a": 0, "b c d": 1, "ab c d": 2},
                          "merges": ["a b c d"]})");
  EXPECT_EQ(m->TokenToId("ab c d"), 2);
  EXPECT_EQ(*m->IdToToken(1), "b c d");
  EXPECT_EQ(m->IdToToken(7), nullptr);
}

TEST(BpeModelTest, RefusesBadModels) {
  testing::ExpectRefusals(
      {
          {R"({"vocab": {"a": 0}, "merges": [], "dropout": 0.1})",
           "BPE dropout '0.1' at model.dropout is not supported"},
          {R"({"vocab": {"a": 0}, "merges": ["a b"]})",
           "model.merges[0]: merge token 'b' is not in the vocabulary"},
          {R"({"vocab": {"a": 0, "b": 1}, "merges": ["a b"]})",
           "merged token 'ab'"},
          {R"({"vocab": {"a": 0, "b c": 1}, "merges": ["a b c"]})",
           "does not split into two tokens"},
          {R"({"vocab": {"a": 0, "b": 0}, "merges": []})",
           "id 0 is given to both"},
          {R"({"vocab": {"a": -1}, "merges": []})", "model.vocab.a"},
          {R"({"vocab": {"a": 0}, "merges": [3]})", "model.merges[0]"},
          {R"({"merges": []})", "model.vocab"},
      },
      [](const std::string& j) {
        return BpeModel::FromJson(Json::parse(j), "model");
      });
  EXPECT_TRUE(BpeModel::FromJson(
                  Json::parse(R"({"vocab": {}, "merges": [], "dropout": 0.0})"),
                  "model")
                  .ok());
}

}  // namespace
}  // namespace radixkv::model
