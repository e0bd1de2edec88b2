#include "router/openai/openai_request.h"

#include <string>

#include "gtest/gtest.h"
#include "router/openai/openai_error.h"

namespace radixkv::router::openai {
namespace {

void ExpectBadParam(const absl::StatusOr<OpenAiRequest>& r,
                    const std::string& param, const std::string& substring) {
  ASSERT_FALSE(r.ok()) << param;
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  const OpenAiError e = ToOpenAiError(r.status());
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(e.param, param) << r.status();
  EXPECT_NE(e.message.find(substring), std::string::npos) << r.status();
}

TEST(OpenAiRequestTest, CompletionWithEverySupportedParameter) {
  absl::StatusOr<OpenAiRequest> r = ParseCompletionRequest(R"({
    "model": "m", "prompt": "Hello", "max_tokens": 7, "temperature": 0.5,
    "top_p": 0.9, "seed": 42, "stop": ["\n", "END"], "n": 1,
    "stream": true, "stream_options": {"include_usage": true},
    "user": "u1", "top_k": 40, "min_p": 0, "repetition_penalty": 1,
    "presence_penalty": 0, "frequency_penalty": 0, "ignore_eos": true,
    "priority": 3, "cache_salt": "tenant-a", "logprobs": null,
    "echo": false, "best_of": 1, "logit_bias": {}})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "m");
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(*r->prompts[0].text, "Hello");
  const auto& s = r->base.sampling();
  EXPECT_EQ(s.max_new_tokens(), 7);
  EXPECT_FLOAT_EQ(s.temperature(), 0.5f);
  EXPECT_FLOAT_EQ(s.top_p(), 0.9f);
  EXPECT_EQ(s.seed(), 42u);
  ASSERT_EQ(s.stop_size(), 2);
  EXPECT_EQ(s.stop(1), "END");
  EXPECT_EQ(s.top_k(), 40);
  EXPECT_TRUE(s.ignore_eos());
  EXPECT_EQ(r->base.priority(), -3) << "vLLM: lower is earlier";
  EXPECT_EQ(r->base.cache_salt(), "tenant-a");
  EXPECT_EQ(r->base.model(), "m");
  EXPECT_TRUE(r->base.return_text());
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
}

TEST(OpenAiRequestTest, CompletionDefaultsAreOpenAis) {
  absl::StatusOr<OpenAiRequest> r =
      ParseCompletionRequest(R"({"model": "m", "prompt": "x"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->base.sampling().max_new_tokens(), kDefaultCompletionMaxTokens);
  EXPECT_FLOAT_EQ(r->base.sampling().temperature(), 1.0f);
  EXPECT_FALSE(r->stream);
  // seed 0 still fixes the generator (0 means unset inside radixkv).
  r = ParseCompletionRequest(R"({"model": "m", "prompt": "x", "seed": 0})");
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->base.sampling().seed(), 0u);
  r = ParseCompletionRequest(R"({"model": "m", "prompt": "x", "top_k": -1})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->base.sampling().top_k(), 0);
}

TEST(OpenAiRequestTest, EveryPromptForm) {
  absl::StatusOr<OpenAiRequest> r =
      ParseCompletionRequest(R"({"model": "m", "prompt": ["a", "b"]})");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->prompts.size(), 2u);
  EXPECT_EQ(*r->prompts[1].text, "b");
  r = ParseCompletionRequest(R"({"model": "m", "prompt": [1, 2, 3]})");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->prompts.size(), 1u);
  EXPECT_EQ(r->prompts[0].ids, std::vector<int32_t>({1, 2, 3}));
  r = ParseCompletionRequest(R"({"model": "m", "prompt": [[1], [2, 3]]})");
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->prompts.size(), 2u);
  EXPECT_EQ(r->prompts[1].ids, std::vector<int32_t>({2, 3}));
}

TEST(OpenAiRequestTest, CompletionRefusalsNameTheParameter) {
  const std::string m = R"("model": "m", "prompt": "x")";
  auto parse = [&](const std::string& extra) {
    return ParseCompletionRequest("{" + m + ", " + extra + "}");
  };
  ExpectBadParam(parse(R"("n": 65)"), "n", "[1, 64]");
  ExpectBadParam(parse(R"("logprobs": 21)"), "logprobs", "[0, 20]");
  ExpectBadParam(parse(R"("echo": 1)"), "echo", "echo must be a boolean");
  ExpectBadParam(parse(R"("echo": true, "max_tokens": 0)"), "max_tokens",
                 "max_tokens 0 (echo the prompt without a completion) is not "
                 "supported by this server: max_tokens must be in [1, 65536]");
  ExpectBadParam(parse(R"("max_tokens": 0, "echo": true)"), "max_tokens",
                 "echo the prompt without a completion");
  ExpectBadParam(parse(R"("prompt_logprobs": 21)"), "prompt_logprobs",
                 "prompt_logprobs must be in [0, 20]");
  ExpectBadParam(parse(R"("prompt_logprobs": -1)"), "prompt_logprobs",
                 "prompt_logprobs must be in [0, 20]");
  ExpectBadParam(parse(R"("prompt_logprobs": "2")"), "prompt_logprobs",
                 "prompt_logprobs must be an integer");
  ExpectBadParam(parse(R"("prompt_logprobs": 1.5)"), "prompt_logprobs",
                 "prompt_logprobs must be an integer");
  ExpectBadParam(parse(R"("prompt_logprobs": true)"), "prompt_logprobs",
                 "prompt_logprobs must be an integer");
  ExpectBadParam(parse(R"("stream": true, "prompt_logprobs": 1)"),
                 "prompt_logprobs",
                 "prompt_logprobs are not available when stream is true");
  ExpectBadParam(parse(R"("suffix": "s")"), "suffix", "suffix");
  ExpectBadParam(parse(R"("best_of": 3)"), "best_of", "best_of");
  ExpectBadParam(parse(R"("logit_bias": {"5": 10})"), "logit_bias", "not");
  ExpectBadParam(parse(R"("presence_penalty": 2.5)"), "presence_penalty",
                 "[-2, 2]");
  ExpectBadParam(parse(R"("frequency_penalty": -3)"), "frequency_penalty",
                 "[-2, 2]");
  ExpectBadParam(parse(R"("repetition_penalty": 0)"), "repetition_penalty",
                 "(0, 2]");
  ExpectBadParam(parse(R"("min_p": 1.5)"), "min_p", "[0, 1]");
  ExpectBadParam(parse(R"("frobnicate": 1)"), "frobnicate", "unrecognized");
  ExpectBadParam(parse(R"("max_tokens": 0)"), "max_tokens", "[1, 65536]");
  ExpectBadParam(parse(R"("temperature": -1)"), "temperature", "[0, 100]");
  ExpectBadParam(parse(R"("top_p": 0)"), "top_p", "(0, 1]");
  ExpectBadParam(parse(R"("stop": [1])"), "stop", "strings");
  ExpectBadParam(parse(R"("stop": [""])"), "stop", "1 to 256 bytes");
  ExpectBadParam(parse(R"("stream_options": {"include_usage": true})"),
                 "stream_options", "only allowed when stream is true");
  ExpectBadParam(parse(R"("priority": 5000)"), "priority", "[-1000, 1000]");
  ExpectBadParam(ParseCompletionRequest(R"({"prompt": "x"})"), "model",
                 "required");
  ExpectBadParam(ParseCompletionRequest(R"({"model": "m"})"), "prompt",
                 "required");
  ExpectBadParam(ParseCompletionRequest(R"({"model": "m", "prompt": ""})"),
                 "prompt", "empty");
  ExpectBadParam(ParseCompletionRequest(R"({"model": "m", "prompt": [-1]})"),
                 "prompt", "[0, 2147483647]");
  EXPECT_EQ(ParseCompletionRequest("[1]").status().message(),
            "the request body must be a JSON object");
  EXPECT_EQ(ParseCompletionRequest("{").status().message(),
            "the request body is not valid JSON");
}

TEST(OpenAiRequestTest, ChatMessagesAndTemplateVariables) {
  absl::StatusOr<OpenAiRequest> r = ParseChatRequest(R"({
    "model": "m",
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                   {"type": "text", "text": "there"}]},
      {"role": "assistant", "content": null}],
    "max_completion_tokens": 9, "max_tokens": 3,
    "chat_template_kwargs": {"enable_thinking": false},
    "response_format": {"type": "text"}, "store": false})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->messages.size(), 3u);
  EXPECT_EQ(r->messages[1]["content"], "Hi\nthere");
  EXPECT_TRUE(r->messages[2]["content"].is_null());
  EXPECT_EQ(r->base.sampling().max_new_tokens(), 9)
      << "max_completion_tokens wins";
  EXPECT_EQ(r->chat_template_kwargs["enable_thinking"], false);
  EXPECT_TRUE(r->add_generation_prompt);
  r = ParseChatRequest(
      R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->base.sampling().max_new_tokens(), 0)
      << "the rest of the context, decided after tokenization";
}

TEST(OpenAiRequestTest, SamplingControlsMapToTheGenerateRequest) {
  absl::StatusOr<OpenAiRequest> c = ParseCompletionRequest(
      R"({"model": "m", "prompt": "x", "n": 3, "logprobs": 0,
          "presence_penalty": 0.5, "frequency_penalty": -1,
          "repetition_penalty": 1.2, "min_p": 0.05})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->base.n(), 3);
  EXPECT_EQ(c->top_logprobs, 0);
  EXPECT_EQ(c->base.sampling().logprobs(), 1);  // at least one from the worker
  EXPECT_EQ(c->base.sampling().presence_penalty(), 0.5f);
  EXPECT_EQ(c->base.sampling().frequency_penalty(), -1.0f);
  EXPECT_EQ(c->base.sampling().repetition_penalty(), 1.2f);
  EXPECT_EQ(c->base.sampling().min_p(), 0.05f);
  absl::StatusOr<OpenAiRequest> chat = ParseChatRequest(
      R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
          "n": 2, "logprobs": true, "top_logprobs": 4})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->base.n(), 2);
  EXPECT_EQ(chat->top_logprobs, 4);
  EXPECT_EQ(chat->base.sampling().logprobs(), 4);
  chat = ParseChatRequest(
      R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
          "logprobs": false})");
  ASSERT_TRUE(chat.ok());
  EXPECT_FALSE(chat->top_logprobs.has_value());
  EXPECT_EQ(chat->base.sampling().logprobs(), 0);
}

TEST(OpenAiRequestTest, EchoAndPromptLogprobsAskTheWorkerForPromptLogprobs) {
  // echo alone: the prompt's text only, no prompt logprobs.
  absl::StatusOr<OpenAiRequest> r = ParseCompletionRequest(
      R"({"model": "m", "prompt": "x", "echo": true, "n": 2})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->echo);
  EXPECT_FALSE(r->base.sampling().has_prompt_logprobs());
  EXPECT_FALSE(r->prompt_logprobs.has_value());
  // echo with logprobs = k: k alternatives for the prompt tokens too.
  r = ParseCompletionRequest(
      R"({"model": "m", "prompt": "x", "echo": true, "logprobs": 3})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->base.sampling().prompt_logprobs().top(), 3);
  EXPECT_EQ(r->base.sampling().logprobs(), 3);
  EXPECT_FALSE(r->prompt_logprobs.has_value());
  r = ParseCompletionRequest(
      R"({"model": "m", "prompt": "x", "echo": true, "logprobs": 0})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->base.sampling().has_prompt_logprobs());
  EXPECT_EQ(r->base.sampling().prompt_logprobs().top(), 0);
  // Streamed echo with logprobs: the prompt's logprobs come in the first
  // chunk's logprobs object.
  r = ParseCompletionRequest(R"({"model": "m", "prompt": "x", "echo": true,
                                 "logprobs": 2, "stream": true})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->base.sampling().prompt_logprobs().top(), 2);
  // vLLM's prompt_logprobs, alone and with echo: the worker gives the
  // larger count.
  r = ParseCompletionRequest(
      R"({"model": "m", "prompt": "x", "prompt_logprobs": 7})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt_logprobs, 7);
  EXPECT_EQ(r->base.sampling().prompt_logprobs().top(), 7);
  EXPECT_EQ(r->base.sampling().logprobs(), 0);
  r = ParseCompletionRequest(R"({"model": "m", "prompt": "x", "echo": true,
                                 "logprobs": 5, "prompt_logprobs": 2})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt_logprobs, 2);
  EXPECT_EQ(r->top_logprobs, 5);
  EXPECT_EQ(r->base.sampling().prompt_logprobs().top(), 5);
  r = ParseCompletionRequest(
      R"({"model": "m", "prompt": "x", "prompt_logprobs": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->base.sampling().has_prompt_logprobs());
  // Streamed, 0 is accepted and answers nothing (as vLLM): not asked of the
  // worker, so the prompt still reuses cached KV.
  r = ParseCompletionRequest(R"({"model": "m", "prompt": "x",
                                 "prompt_logprobs": 0, "stream": true})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->prompt_logprobs.has_value());
  EXPECT_FALSE(r->base.sampling().has_prompt_logprobs());
  // Chat.
  absl::StatusOr<OpenAiRequest> chat = ParseChatRequest(
      R"({"model": "m", "messages": [{"role": "user", "content": "x"}],
          "prompt_logprobs": 0})");
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->prompt_logprobs, 0);
  EXPECT_TRUE(chat->base.sampling().has_prompt_logprobs());
  EXPECT_EQ(chat->base.sampling().prompt_logprobs().top(), 0);
}

TEST(OpenAiRequestTest, ChatRefusalsNameTheParameter) {
  const std::string m =
      R"("model": "m", "messages": [{"role": "user", "content": "x"}])";
  auto parse = [&](const std::string& extra) {
    return ParseChatRequest("{" + m + ", " + extra + "}");
  };
  ExpectBadParam(parse(R"("tools": [{"type": "function"}])"), "tools",
                 "not supported");
  ExpectBadParam(parse(R"("tool_choice": "auto")"), "tool_choice",
                 "not supported");
  ExpectBadParam(parse(R"("response_format": {"type": "json_schema"})"),
                 "response_format", "text");
  ExpectBadParam(parse(R"("logprobs": 3)"), "logprobs", "boolean");
  ExpectBadParam(parse(R"("top_logprobs": 3)"), "top_logprobs",
                 "only allowed when logprobs is true");
  ExpectBadParam(parse(R"("logprobs": true, "top_logprobs": 21)"),
                 "top_logprobs", "[0, 20]");
  ExpectBadParam(parse(R"("n": 0)"), "n", "[1, 64]");
  ExpectBadParam(parse(R"("prompt": "x")"), "prompt", "unrecognized");
  ExpectBadParam(parse(R"("echo": true)"), "echo", "unrecognized");
  ExpectBadParam(parse(R"("prompt_logprobs": 21)"), "prompt_logprobs",
                 "[0, 20]");
  ExpectBadParam(parse(R"("prompt_logprobs": [1])"), "prompt_logprobs",
                 "must be an integer");
  ExpectBadParam(parse(R"("prompt_logprobs": 2, "stream": true)"),
                 "prompt_logprobs", "not available when stream is true");
  ExpectBadParam(
      ParseChatRequest(
          R"({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "x"}}]}]})"),
      "messages[0].content[0].type", "image_url");
  ExpectBadParam(ParseChatRequest(R"({"model": "m", "messages": []})"),
                 "messages", "non-empty");
  ExpectBadParam(
      ParseChatRequest(R"({"model": "m", "messages": [{"content": "x"}]})"),
      "messages[0].role", "required");
  ExpectBadParam(ParseChatRequest(R"({"model": "m", "messages": [
          {"role": "assistant", "content": "", "tool_calls": []}]})"),
                 "messages[0].tool_calls", "not supported");
}

}  // namespace
}  // namespace radixkv::router::openai
