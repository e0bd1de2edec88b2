// HfTokenizer against the outside oracle: every case of the four golden
// tokenizers ($RADIXKV_SHARED_DIR/golden/tokenizers, made by Hugging Face
// tokenizers 0.23.2) must give the same ids and byte-identical decodes;
// concurrent encodes and random-text round trips on top.
#include <atomic>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "model/tokenizer/golden_tokenizers.h"
#include "model/tokenizer/hf_tokenizer.h"
#include "model/tokenizer/utf8.h"

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

// Concurrent encodes (shared BPE cache, per-thread buffers) give the same
// ids as sequential ones.
TEST_P(GoldenTokenizerTest, ConcurrentEncodesAgree) {
  absl::StatusOr<std::string> dir = testing::GoldenTokenizersDir();
  if (!dir.ok()) GTEST_SKIP() << "golden tokenizers absent: " << dir.status();
  absl::StatusOr<std::unique_ptr<HfTokenizer>> tokenizer =
      testing::LoadGoldenTokenizer(GetParam());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<std::vector<testing::GoldenCase>> cases =
      testing::LoadGoldenCases(GetParam());
  ASSERT_TRUE(cases.ok()) << cases.status();
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (size_t i = t; i < cases->size() * 2; ++i) {
          const testing::GoldenCase& c = (*cases)[i % cases->size()];
          absl::StatusOr<std::vector<int32_t>> ids =
              (*tokenizer)->Encode(c.text, true);
          if (!ids.ok() || *ids != c.ids_with_special) ++mismatches;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Byte-level tokenizers without a normalizer lose nothing: decode(encode(x))
// is x for any text, here random mixes of the golden texts' characters.
TEST_P(GoldenTokenizerTest, ByteLevelRoundTripsRandomText) {
  if (GetParam() != "llama3-bpe" && GetParam() != "gpt2-bytelevel") {
    GTEST_SKIP() << "normalizes or strips: no identity round trip";
  }
  absl::StatusOr<std::string> dir = testing::GoldenTokenizersDir();
  if (!dir.ok()) GTEST_SKIP() << "golden tokenizers absent: " << dir.status();
  absl::StatusOr<std::unique_ptr<HfTokenizer>> tokenizer =
      testing::LoadGoldenTokenizer(GetParam());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<std::vector<testing::GoldenCase>> cases =
      testing::LoadGoldenCases(GetParam());
  ASSERT_TRUE(cases.ok()) << cases.status();
  std::vector<std::string> chars;  // every character of the golden texts
  for (const testing::GoldenCase& c : *cases) {
    for (size_t pos = 0; pos < c.text.size();) {
      const size_t n = utf8::SequenceLength(c.text[pos]);
      chars.push_back(c.text.substr(pos, n));
      pos += n;
    }
  }
  const uint32_t seed = std::random_device()();
  std::cout << "seed " << seed << "\n";
  std::mt19937 rng(seed);
  for (int round = 0; round < 200; ++round) {
    std::string text;
    const int length = std::uniform_int_distribution<int>(0, 200)(rng);
    for (int i = 0; i < length; ++i) {
      text += chars[std::uniform_int_distribution<size_t>(
          0, chars.size() - 1)(rng)];
    }
    absl::StatusOr<std::vector<int32_t>> ids =
        (*tokenizer)->Encode(text, false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    absl::StatusOr<std::string> back = (*tokenizer)->Decode(*ids, false);
    ASSERT_TRUE(back.ok()) << back.status();
    ASSERT_EQ(absl::CEscape(*back), absl::CEscape(text)) << "seed " << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(AllGolden, GoldenTokenizerTest,
                         ::testing::ValuesIn(testing::GoldenTokenizerNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return testing::GoldenParamName(info.param);
                         });

}  // namespace
}  // namespace radixkv::model
