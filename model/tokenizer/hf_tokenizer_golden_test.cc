// HfTokenizer against the outside oracle: every case of the four golden
// tokenizers ($RADIXKV_SHARED_DIR/golden/tokenizers, made by Hugging Face
// tokenizers 0.23.2) must give the same ids and byte-identical decodes.
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "model/tokenizer/golden_tokenizers.h"
#include "model/tokenizer/hf_tokenizer.h"

namespace radixkv::model {
namespace {

class GoldenTokenizerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTokenizerTest, EveryCaseMatches) {
  absl::StatusOr<std::string> dir = testing::GoldenTokenizersDir();
  if (!dir.ok()) GTEST_SKIP() << "golden tokenizers absent: " << dir.status();
  absl::StatusOr<std::unique_ptr<HfTokenizer>> tokenizer =
      testing::LoadGoldenTokenizer(GetParam());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<std::vector<testing::GoldenCase>> cases =
      testing::LoadGoldenCases(GetParam());
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_GT(cases->size(), 100u);
  int matched = 0;
  for (const testing::GoldenCase& c : *cases) {
    const std::string where = "text \"" + absl::CEscape(c.text) + "\"";
    absl::StatusOr<std::vector<int32_t>> ids =
        (*tokenizer)->Encode(c.text, false);
    ASSERT_TRUE(ids.ok()) << where << ": " << ids.status();
    absl::StatusOr<std::vector<int32_t>> with_special =
        (*tokenizer)->Encode(c.text, true);
    ASSERT_TRUE(with_special.ok()) << where << ": " << with_special.status();
    absl::StatusOr<std::string> decoded = (*tokenizer)->Decode(c.ids, false);
    ASSERT_TRUE(decoded.ok()) << where << ": " << decoded.status();
    absl::StatusOr<std::string> decoded_skip =
        (*tokenizer)->Decode(c.ids_with_special, true);
    ASSERT_TRUE(decoded_skip.ok()) << where << ": " << decoded_skip.status();
    EXPECT_EQ(*ids, c.ids) << where;
    EXPECT_EQ(*with_special, c.ids_with_special) << where;
    EXPECT_EQ(absl::CEscape(*decoded), absl::CEscape(c.decoded)) << where;
    EXPECT_EQ(absl::CEscape(*decoded_skip),
              absl::CEscape(c.decoded_skip_special))
        << where;
    if (*ids == c.ids && *with_special == c.ids_with_special &&
        *decoded == c.decoded && *decoded_skip == c.decoded_skip_special) {
      ++matched;
    }
  }
  EXPECT_EQ(matched, static_cast<int>(cases->size()));
  std::cout << GetParam() << ": " << matched << " of " << cases->size()
            << " cases match\n";
}

INSTANTIATE_TEST_SUITE_P(AllGolden, GoldenTokenizerTest,
                         ::testing::ValuesIn(testing::GoldenTokenizerNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return testing::GoldenParamName(info.param);
                         });

}  // namespace
}  // namespace radixkv::model
