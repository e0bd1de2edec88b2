#include "model/chat/chat_template_testing.h"

#include "absl/time/civil_time.h"
#include "gtest/gtest.h"

namespace radixkv::model::chat::testing {

RenderOptions FixedClockOptions() {
  RenderOptions options;
  options.clock = [] {
    LocalDateTime t;
    t.time = absl::CivilSecond(2026, 12, 1, 10, 20, 30);
    t.microsecond = 123456;
    return t;
  };
  return options;
}

ChatTemplateInputs DefaultInputs() {
  ChatTemplateInputs in;
  in.messages = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "Be kind."},
      {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello!"}])");
  in.add_generation_prompt = true;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  return in;
}

absl::StatusOr<std::string> RenderSource(std::string_view source,
                                         const ChatTemplateInputs& inputs,
                                         RenderOptions options) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(std::string(source));
  if (!t.ok()) return t.status();
  return t->Render(inputs, options);
}

void ExpectRender(const RenderCase& c) {
  SCOPED_TRACE(c.source);
  absl::StatusOr<std::string> out = RenderSource(c.source);
  if (c.expected_text != nullptr) {
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(*out, c.expected_text);
  } else {
    ASSERT_FALSE(out.ok()) << "rendered: " << *out;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(out.status().message().find(c.expected_error), std::string::npos)
        << out.status();
  }
}

void ExpectRenders(absl::Span<const RenderCase> cases) {
  for (const RenderCase& c : cases) ExpectRender(c);
}

}  // namespace radixkv::model::chat::testing
