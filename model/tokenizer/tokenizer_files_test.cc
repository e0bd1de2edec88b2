#include "model/tokenizer/tokenizer_files.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer/hf_tokenizer.h"

namespace radixkv::model {
namespace {

using ::testing::ElementsAre;

// A tokenizer with "<s>" = 1, "</s>" = 2, "<|eot_id|>" = 3 as added tokens.
std::unique_ptr<HfTokenizer> SmallTokenizer() {
  absl::StatusOr<std::unique_ptr<HfTokenizer>> t = HfTokenizer::FromJson(R"({
    "added_tokens": [
      {"id": 1, "content": "<s>", "special": true},
      {"id": 2, "content": "</s>", "special": true},
      {"id": 3, "content": "<|eot_id|>", "special": true}],
    "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}
  })");
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

class TokenizerFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr ? tmp : "/tmp") + "/tokfiles.XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Write(const std::string& name, const std::string& content) {
    const std::filesystem::path path = std::filesystem::path(dir_) / name;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << content;
  }

  std::string dir_;
};

TEST_F(TokenizerFilesTest, EmptyFolderGivesNothing) {
  absl::StatusOr<TokenizerFiles> f = LoadTokenizerFiles(dir_, nullptr);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE(f->bos_token.has_value());
  EXPECT_TRUE(f->eos_token_ids.empty());
  EXPECT_TRUE(f->chat_templates.empty());
}

TEST_F(TokenizerFilesTest, StringTemplateAndEosListFromGenerationConfig) {
  Write("tokenizer_config.json", R"({
    "bos_token": "<s>", "eos_token": "<|eot_id|>", "pad_token": null,
    "add_bos_token": true, "add_eos_token": false,
    "chat_template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"
  })");
  Write("generation_config.json",
        R"({"bos_token_id": 1, "eos_token_id": [2, 5, 2]})");
  Write("config.json", R"({"eos_token_id": 9})");
  const std::unique_ptr<HfTokenizer> t = SmallTokenizer();
  absl::StatusOr<TokenizerFiles> f = LoadTokenizerFiles(dir_, t.get());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->bos_token, "<s>");
  EXPECT_EQ(f->eos_token, "<|eot_id|>");
  EXPECT_FALSE(f->pad_token.has_value());
  EXPECT_EQ(f->add_bos_token, true);
  EXPECT_EQ(f->add_eos_token, false);
  EXPECT_EQ(f->bos_token_id, 1);
  // generation_config first (config.json ignored), then eos_token's id.
  EXPECT_THAT(f->eos_token_ids, ElementsAre(2, 5, 3));
  ASSERT_EQ(f->chat_templates.size(), 1u);
  EXPECT_EQ(f->chat_templates[0].name, "default");
  EXPECT_EQ(
      f->chat_templates[0].text,
      "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}");
}

TEST_F(TokenizerFilesTest, ListTemplatesAddedTokenObjectsAndConfigEos) {
  Write("tokenizer_config.json", R"({
    "eos_token": {"__type": "AddedToken", "content": "</s>", "lstrip": false},
    "chat_template": [{"name": "tool_use", "template": "T"},
                      {"name": "default", "template": "D"}]
  })");
  Write("config.json", R"({"text_config": {"eos_token_id": 2}})");
  const std::unique_ptr<HfTokenizer> t = SmallTokenizer();
  absl::StatusOr<TokenizerFiles> f = LoadTokenizerFiles(dir_, t.get());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->eos_token, "</s>");
  EXPECT_THAT(f->eos_token_ids, ElementsAre(2));
  ASSERT_EQ(f->chat_templates.size(), 2u);
  EXPECT_EQ(f->chat_templates[0].name, "default");
  EXPECT_EQ(f->chat_templates[0].text, "D");
  EXPECT_EQ(f->chat_templates[1].name, "tool_use");
  ASSERT_NE(f->FindChatTemplate("tool_use"), nullptr);
  EXPECT_EQ(f->FindChatTemplate("tool_use")->text, "T");
  EXPECT_EQ(f->FindChatTemplate("rag"), nullptr);
}

TEST_F(TokenizerFilesTest, JinjaFileReplacesConfigTemplates) {
  Write("tokenizer_config.json", R"({
    "chat_template": [{"name": "tool_use", "template": "T"},
                      {"name": "default", "template": "D"}]
  })");
  Write("chat_template.jinja", "FILE {{ messages }}\n");
  Write("additional_chat_templates/rag.jinja", "RAG");
  Write("additional_chat_templates/notes.txt", "ignored");
  absl::StatusOr<TokenizerFiles> f = LoadTokenizerFiles(dir_, nullptr);
  ASSERT_TRUE(f.ok()) << f.status();
  ASSERT_EQ(f->chat_templates.size(), 2u);
  EXPECT_EQ(f->chat_templates[0].name, "default");
  EXPECT_EQ(f->chat_templates[0].text, "FILE {{ messages }}\n");
  EXPECT_EQ(f->chat_templates[1].name, "rag");
  EXPECT_EQ(f->chat_templates[1].text, "RAG");
  EXPECT_EQ(f->FindChatTemplate("tool_use"), nullptr);
}

TEST_F(TokenizerFilesTest, UnresolvedTokensGiveNoIds) {
  Write("tokenizer_config.json",
        R"({"bos_token": "<bos>", "eos_token": "<eos>"})");
  const std::unique_ptr<HfTokenizer> t = SmallTokenizer();
  absl::StatusOr<TokenizerFiles> f = LoadTokenizerFiles(dir_, t.get());
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE(f->bos_token_id.has_value());
  EXPECT_TRUE(f->eos_token_ids.empty());
}

TEST_F(TokenizerFilesTest, MalformedFilesAreInvalidArgument) {
  Write("tokenizer_config.json", "{not json");
  absl::StatusOr<TokenizerFiles> f = LoadTokenizerFiles(dir_, nullptr);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("tokenizer_config.json"),
            std::string::npos);

  Write("tokenizer_config.json", R"({"chat_template": 7})");
  f = LoadTokenizerFiles(dir_, nullptr);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("chat_template"), std::string::npos);

  Write("tokenizer_config.json", R"({"eos_token": 3})");
  f = LoadTokenizerFiles(dir_, nullptr);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("eos_token"), std::string::npos);

  Write("tokenizer_config.json", "{}");
  Write("generation_config.json", R"({"eos_token_id": ["x"]})");
  f = LoadTokenizerFiles(dir_, nullptr);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find("generation_config.json.eos_token_id"),
            std::string::npos);
}

TEST_F(TokenizerFilesTest, MissingFolderIsNotFound) {
  EXPECT_EQ(LoadTokenizerFiles(dir_ + "/absent", nullptr).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace radixkv::model
