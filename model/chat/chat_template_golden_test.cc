// The outside oracle: shared/golden/tokenizers/{llama3-bpe, qwen2-bpe,
// llama2-spm-fast}/chat.json hold Hugging Face transformers 5.17's
// apply_chat_template(..., tokenize=False) renders of Llama 3.1, Qwen2.5 and
// Mistral Small 3.1's original templates (README.md there). Each must be
// reproduced byte for byte. The goldens were made on 2026-12-01, the date
// the Mistral template reads through strftime_now.
#include <string>

#include "absl/time/civil_time.h"
#include "gtest/gtest.h"
#include "model/chat/chat_template.h"
#include "model/testing/shared_test_data.h"
#include "nlohmann/json.hpp"

namespace radixkv::model::chat {
namespace {

using Json = nlohmann::ordered_json;

absl::StatusOr<Json> ReadOrderedJson(const std::string& path) {
  absl::StatusOr<std::string> bytes = model::testing::ReadFileBytes(path);
  if (!bytes.ok()) return bytes.status();
  Json j = Json::parse(*bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(path + ": bad JSON");
  return j;
}

RenderOptions GoldenDayOptions() {
  RenderOptions options;
  options.clock = [] {
    LocalDateTime t;
    t.time = absl::CivilSecond(2026, 12, 1, 12, 0, 0);
    return t;
  };
  return options;
}

class ChatTemplateGoldenTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ChatTemplateGoldenTest, RendersLikeTransformers) {
  absl::StatusOr<std::string> shared = model::testing::FindSharedDir();
  ASSERT_TRUE(shared.ok()) << shared.status();
  const std::string dir = *shared + "/golden/tokenizers/" + GetParam();
  absl::StatusOr<std::string> source =
      model::testing::ReadFileBytes(dir + "/chat_template.jinja");
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<Json> config = ReadOrderedJson(dir + "/tokenizer_config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  absl::StatusOr<Json> cases = ReadOrderedJson(dir + "/chat.json");
  ASSERT_TRUE(cases.ok()) << cases.status();
  absl::StatusOr<ChatTemplate> tmpl = ChatTemplate::Parse(*source);
  ASSERT_TRUE(tmpl.ok()) << tmpl.status();
  ASSERT_FALSE(cases->empty());
  for (const Json& c : *cases) {
    ChatTemplateInputs in;
    in.messages = c["messages"];
    in.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    if (config->contains("bos_token")) {
      in.bos_token = (*config)["bos_token"].get<std::string>();
    }
    if (config->contains("eos_token")) {
      in.eos_token = (*config)["eos_token"].get<std::string>();
    }
    absl::StatusOr<std::string> text = tmpl->Render(in, GoldenDayOptions());
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, c["text"].get<std::string>())
        << "messages " << c["messages"].dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, ChatTemplateGoldenTest,
                         ::testing::Values("llama3-bpe", "qwen2-bpe",
                                           "llama2-spm-fast"));

}  // namespace
}  // namespace radixkv::model::chat
