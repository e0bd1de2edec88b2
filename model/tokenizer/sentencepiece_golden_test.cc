// The sentencepiece tokenizer on sentencepiece's own golden cases
// (shared/golden/tokenizer), and streaming its byte-fallback tokens through
// IncrementalDetokenizer.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/testing/shared_test_data.h"
#include "model/tokenizer/incremental_detokenizer.h"
#include "model/tokenizer/sentencepiece_tokenizer.h"
#include "model/tokenizer/utf8.h"
#include "nlohmann/json.hpp"

namespace radixkv::model {
namespace {

using Json = nlohmann::json;

// True if `s` is well-formed UTF-8 without U+FFFD.
bool IsCleanUtf8(const std::string& s) {
  return utf8::IsValid(s) && s.find("\xEF\xBF\xBD") == std::string::npos;
}

class TokenizerGoldenTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::string> shared = testing::FindSharedDir();
    ASSERT_TRUE(shared.ok()) << shared.status();
    absl::StatusOr<Json> golden = testing::ReadJsonFile(
        *shared + "/golden/tokenizer/tokenizer_golden.json");
    ASSERT_TRUE(golden.ok()) << golden.status();
    golden_ = *golden;
    absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> t =
        SentencePieceTokenizer::Load(*shared +
                                     "/golden/tokenizer/tokenizer.model");
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_ = std::move(*t);
  }

  Json golden_;
  std::unique_ptr<SentencePieceTokenizer> tokenizer_;
};

TEST_F(TokenizerGoldenTest, SpecialIdsAndVocab) {
  EXPECT_EQ(tokenizer_->vocab_size(), 512);
  EXPECT_EQ(tokenizer_->bos_id(), 1);
  EXPECT_EQ(tokenizer_->eos_id(), 2);
}

TEST_F(TokenizerGoldenTest, EncodeDecodeCasesExact) {
  ASSERT_EQ(golden_["cases"].size(), 6u);
  for (const Json& c : golden_["cases"]) {
    const std::string text = c["text"].get<std::string>();
    const std::vector<int32_t> ids = c["ids"].get<std::vector<int32_t>>();
    absl::StatusOr<std::vector<int32_t>> enc =
        tokenizer_->Encode(text, /*add_special_tokens=*/false);
    ASSERT_TRUE(enc.ok()) << enc.status();
    EXPECT_EQ(*enc, ids) << text;
    absl::StatusOr<std::string> dec = tokenizer_->Decode(ids, true);
    ASSERT_TRUE(dec.ok()) << dec.status();
    EXPECT_EQ(*dec, c["decoded"].get<std::string>()) << text;
  }
}

TEST_F(TokenizerGoldenTest, GenerationPromptsWithBos) {
  ASSERT_EQ(golden_["generation_prompts"].size(), 3u);
  for (const Json& p : golden_["generation_prompts"]) {
    absl::StatusOr<std::vector<int32_t>> enc =
        tokenizer_->Encode(p["text"].get<std::string>(),
                           /*add_special_tokens=*/true);
    ASSERT_TRUE(enc.ok()) << enc.status();
    EXPECT_EQ(*enc, p["ids_with_bos"].get<std::vector<int32_t>>());
    // Decoding drops the BOS control token.
    absl::StatusOr<std::string> dec = tokenizer_->Decode(*enc, true);
    ASSERT_TRUE(dec.ok());
    EXPECT_EQ(*dec, p["text"].get<std::string>());
  }
}

TEST_F(TokenizerGoldenTest, DecodeRejectsOutOfRangeIds) {
  EXPECT_EQ(tokenizer_->Decode({5, 512}, true).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tokenizer_->Decode({-1}, true).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Streaming every golden case token by token: deltas never split a UTF-8
// character (東京 is six byte-fallback tokens) and concatenate to the decode.
TEST_F(TokenizerGoldenTest, IncrementalDetokenizationNeverSplitsCharacters) {
  for (const Json& c : golden_["cases"]) {
    const std::vector<int32_t> ids = c["ids"].get<std::vector<int32_t>>();
    IncrementalDetokenizer detok =  // prompt = BOS only
        *IncrementalDetokenizer::Create(tokenizer_.get(), {1}, true);
    std::string streamed;
    int nonempty = 0;
    for (int32_t id : ids) {
      absl::StatusOr<std::string> delta = detok.Append(id);
      ASSERT_TRUE(delta.ok()) << delta.status();
      EXPECT_TRUE(IsCleanUtf8(*delta)) << "delta splits a character";
      nonempty += !delta->empty();
      streamed += *delta;
    }
    absl::StatusOr<std::string> rest = detok.Flush();
    ASSERT_TRUE(rest.ok());
    streamed += *rest;
    EXPECT_EQ(streamed, c["decoded"].get<std::string>());
    EXPECT_EQ(detok.text(), streamed);
    if (c["text"] == "naïve café — 東京") {
      // 17 tokens, but 東 and 京 each need three byte tokens before they show.
      EXPECT_LT(nonempty, static_cast<int>(ids.size()));
    }
  }
}

// With prompt context, the first generated word keeps its leading space, so
// prompt text + streamed text == decode(prompt + generated).
TEST_F(TokenizerGoldenTest, IncrementalDetokenizationKeepsLeadingSpace) {
  const Json& p = golden_["generation_prompts"][0];
  const std::vector<int32_t> all =
      p["ids_with_bos"].get<std::vector<int32_t>>();
  for (size_t split : {1u, 4u, 9u, 15u}) {
    std::vector<int32_t> prompt(all.begin(), all.begin() + split);
    IncrementalDetokenizer detok =
        *IncrementalDetokenizer::Create(tokenizer_.get(), prompt, true);
    std::string streamed;
    for (size_t i = split; i < all.size(); ++i) {
      absl::StatusOr<std::string> delta = detok.Append(all[i]);
      ASSERT_TRUE(delta.ok());
      streamed += *delta;
    }
    streamed += *detok.Flush();
    absl::StatusOr<std::string> prompt_text = tokenizer_->Decode(prompt, true);
    ASSERT_TRUE(prompt_text.ok());
    EXPECT_EQ(*prompt_text + streamed, p["text"].get<std::string>())
        << "split " << split;
  }
}

TEST(TokenizerTest, MissingModelIsNotFound) {
  EXPECT_EQ(SentencePieceTokenizer::Load("/nonexistent/tokenizer.model")
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace radixkv::model
