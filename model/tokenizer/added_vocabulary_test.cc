#include "model/tokenizer/added_vocabulary.h"

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

class AddedVocabularyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<BpeModel>> m = BpeModel::FromJson(
        Json::parse(R"({"vocab": {}, "merges": []})"), "model");
    ASSERT_TRUE(m.ok());
    model_ = std::move(*m);
    absl::StatusOr<std::unique_ptr<Normalizer>> n = Normalizer::FromJson(
        Json::parse(R"({"type": "Lowercase"})"), "normalizer");
    ASSERT_TRUE(n.ok());
    lowercase_ = std::move(*n);
  }

  absl::StatusOr<AddedVocabulary> Build(const char* tokens) {
    const Json j = Json::parse(tokens);
    return AddedVocabulary::Build(&j, "added_tokens", *model_,
                                  lowercase_.get());
  }

  // Pieces as "text" (^ at the origin) or "#id".
  Strings Extract(const AddedVocabulary& v, absl::string_view text) {
    Strings out;
    EXPECT_TRUE(v.ExtractAndNormalize(
                     text, lowercase_.get(),
                     [&](absl::string_view t, bool origin, int32_t id) {
                       out.push_back(id >= 0 ? "#" + std::to_string(id)
                                             : (origin ? "^" : "") +
                                                   std::string(t));
                       return absl::OkStatus();
                     })
                    .ok());
    return out;
  }

  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Normalizer> lowercase_;
};

// tokenizers' added_vocabulary.rs tests "options_use_cases",
// "test_single_word_is_correct" and "test_lstrip_unicode_space".
TEST_F(AddedVocabularyTest, OptionsUseCases) {
  absl::StatusOr<AddedVocabulary> v = Build(R"([
    {"id": 0, "content": "my", "lstrip": true, "rstrip": true},
    {"id": 1, "content": "name"},
    {"id": 2, "content": "ony", "single_word": true},
    {"id": 3, "content": "[CLS]", "special": true},
    {"id": 4, "content": "[SEP]", "special": true}])");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(Extract(*v, "[CLS] My name is Anthony [SEP]"),
              ElementsAre("#3", "#0", "#1", " is anthony ", "#4"));
  EXPECT_EQ(v->Find(3)->content, "[CLS]");
  EXPECT_TRUE(v->Find(3)->special);
  EXPECT_FALSE(v->Find(3)->normalized);  // specials default to raw matching
  EXPECT_EQ(v->TokenToId("ony"), 2);
  EXPECT_EQ(v->id_bound(), 5);
}

TEST_F(AddedVocabularyTest, SingleWord) {
  absl::StatusOr<AddedVocabulary> v =
      Build(R"([{"id": 0, "content": "<mask>", "single_word": true}])");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(
      Extract(*v, "<mask> My name <mask> A<mask> <mask>ony <mask>"),
      ElementsAre("#0", " my name ", "#0", " a<mask> <mask>ony ", "#0"));
  // Punctuation is not a word character, a combining mark is.
  EXPECT_THAT(Extract(*v, "<mask>, <mask>- \xE2\x97\x8C\xCC\xB0<mask>"),
              ElementsAre("#0", ", ", "#0", "- \xE2\x97\x8C\xCC\xB0<mask>"));
}

TEST_F(AddedVocabularyTest, StripsUnicodeSpaces) {
  absl::StatusOr<AddedVocabulary> v = Build(R"([{"id": 0, "content": "<mask>",
      "lstrip": true, "rstrip": true, "single_word": true}])");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(Extract(*v, "Hi <mask> there\t<mask>\t<mask>\xE2\x80\x80"),
              ElementsAre("^hi", "#0", "there", "#0", "#0"));
}

TEST_F(AddedVocabularyTest, LongestMatchFirst) {
  absl::StatusOr<AddedVocabulary> v = Build(R"([
      {"id": 0, "content": "<a>", "special": true},
      {"id": 1, "content": "<a><b>", "special": true}])");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_THAT(Extract(*v, "x<a><b><a>y"), ElementsAre("^x", "#1", "#0", "y"));
}

TEST_F(AddedVocabularyTest, RefusesInconsistentTokens) {
  testing::ExpectRefusals(
      {
          {R"([{"id": 5, "content": "<x>"}])",
           "has id 5 but Hugging Face tokenizers would give it 0"},
          {R"([{"id": 0, "content": "<x>"}, {"id": 1, "content": "<x>"}])",
           "added_tokens[1]: duplicate added token '<x>'"},
          {R"([{"id": 0, "content": ""}])", "added_tokens[0]: empty"},
          {R"([{"content": "<x>"}])", "missing id"},
          {R"({"id": 0})", "expected an array"},
      },
      [this](const std::string& j) { return Build(j.c_str()); });
}

}  // namespace
}  // namespace radixkv::model
