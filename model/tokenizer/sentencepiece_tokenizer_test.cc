#include "model/tokenizer/sentencepiece_tokenizer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/testing/shared_test_data.h"
#include "model/tokenizer/load_tokenizer.h"
#include "nlohmann/json.hpp"

namespace radixkv::model {
namespace {

using Json = nlohmann::json;

std::string Shared() {
  absl::StatusOr<std::string> s = testing::FindSharedDir();
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : "";
}

std::unique_ptr<SentencePieceTokenizer> Golden() {
  auto t = SentencePieceTokenizer::Load(Shared() +
                                        "/golden/tokenizer/tokenizer.model");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

TEST(SentencePieceTokenizerTest, SentencepiecesOwnGoldenCases) {
  auto t = Golden();
  ASSERT_NE(t, nullptr);
  absl::StatusOr<Json> golden = testing::ReadJsonFile(
      Shared() + "/golden/tokenizer/tokenizer_golden.json");
  ASSERT_TRUE(golden.ok()) << golden.status();
  int checked = 0;
  for (const Json& c : (*golden)["cases"]) {
    const std::string text = c["text"];
    auto ids = t->Encode(text, /*add_special_tokens=*/false);
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>()) << text;
    auto decoded = t->Decode(*ids, /*skip_special_tokens=*/true);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, c["decoded"].get<std::string>()) << text;
    ++checked;
  }
  EXPECT_EQ(checked, 6);  // every case of the file
}

// The same model as a Hugging Face tokenizer.json (golden
// llama2-spm-fast, made by transformers): both paths give the same ids,
// special tokens written in the text included.
TEST(SentencePieceTokenizerTest, AgreesWithTransformersOnTheSameModel) {
  auto t = Golden();
  ASSERT_NE(t, nullptr);
  absl::StatusOr<Json> cases = testing::ReadJsonFile(
      Shared() + "/golden/tokenizers/llama2-spm-fast/cases.json");
  ASSERT_TRUE(cases.ok()) << cases.status();
  int same = 0, total = 0;
  for (const Json& c : *cases) {
    const std::string text = c["text"];
    auto ids = t->Encode(text, /*add_special_tokens=*/true);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ++total;
    if (*ids == c["ids_with_special"].get<std::vector<int32_t>>()) {
      ++same;
    } else {
      ADD_FAILURE() << "differs: " << Json(text).dump();
    }
  }
  std::printf("sentencepiece vs transformers: %d of %d identical\n", same,
              total);
}

TEST(SentencePieceTokenizerTest, SpecialTokensInTextAndDecodeWithThem) {
  auto t = Golden();
  ASSERT_NE(t, nullptr);
  auto ids = t->Encode("<s>Hello</s>", /*add_special_tokens=*/false);
  ASSERT_TRUE(ids.ok());
  ASSERT_GE(ids->size(), 3u);
  EXPECT_EQ(ids->front(), 1);
  EXPECT_EQ(ids->back(), 2);
  auto with = t->Decode(*ids, /*skip_special_tokens=*/false);
  ASSERT_TRUE(with.ok());
  EXPECT_EQ(*with, "<s>Hello</s>");
  auto without = t->Decode(*ids, /*skip_special_tokens=*/true);
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(*without, "Hello");
  EXPECT_TRUE(t->IsSpecial(1));
  EXPECT_FALSE(t->IsSpecial(100));
  EXPECT_EQ(t->TokenToId("</s>"), 2);
  EXPECT_EQ(t->IdToToken(1), "<s>");
  EXPECT_EQ(t->TokenToId("no such piece"), std::nullopt);
  EXPECT_EQ(t->IdToToken(100000), std::nullopt);
  EXPECT_EQ(t->Decode({600}, true).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LoadTokenizerTest, PicksTheFileAsTransformersDoes) {
  auto json = LoadTokenizer(Shared() + "/golden/tokenizers/llama3-bpe");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_NE(json->path.find("tokenizer.json"), std::string::npos);
  EXPECT_FALSE(json->files.chat_templates.empty());
  auto sp = LoadTokenizer(Shared() + "/golden/models/llama-tiny-fp32");
  ASSERT_TRUE(sp.ok()) << sp.status();
  EXPECT_NE(sp->path.find("tokenizer.model"), std::string::npos);
  EXPECT_EQ(LoadTokenizer("/nonexistent").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace radixkv::model
