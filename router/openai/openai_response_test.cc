#include "router/openai/openai_response.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "router/openai/openai_error.h"
#include "router/openai/openai_logprobs.h"
#include "router/openai/token_logprobs_for_test.h"

namespace radixkv::router::openai {
namespace {

using Json = nlohmann::ordered_json;

radixkv::v1::Usage MakeUsage(int prompt, int cached, int completion) {
  radixkv::v1::Usage u;
  u.set_prompt_tokens(prompt);
  u.set_cached_tokens(cached);
  u.set_completion_tokens(completion);
  return u;
}

Json EventJson(const std::string& event) {
  EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n") << event;
  return Json::parse(event.substr(6, event.size() - 8));
}

TEST(OpenAiResponseTest, CompletionBodyInOpenAisShape) {
  const ResponseHeader h{Endpoint::kCompletions, "cmpl-1", 1700000000, "m"};
  const std::string body =
      ResponseBody(h, {{"Hello", "length"}, {"Bye", "stop"}},
                   {MakeUsage(5, 3, 16), MakeUsage(6, 0, 2)});
  EXPECT_EQ(
      body,
      R"({"id":"cmpl-1","object":"text_completion","created":1700000000,)"
      R"("model":"m","choices":[{"index":0,"text":"Hello","logprobs":null,)"
      R"("finish_reason":"length"},{"index":1,"text":"Bye","logprobs":null,)"
      R"("finish_reason":"stop"}],"usage":{"prompt_tokens":11,)"
      R"("completion_tokens":18,"total_tokens":29,)"
      R"("prompt_tokens_details":{"cached_tokens":3}}})");
}

TEST(OpenAiResponseTest, ChatBodyAndChunks) {
  const ResponseHeader h{Endpoint::kChat, "chatcmpl-1", 7, "m"};
  const Json body = Json::parse(ResponseBody(h, {{"Hi!", "stop"}}, {}));
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hi!");
  Json first = EventJson(ChunkEvent(h, 0, "", true, std::nullopt, false));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"],
            Json::parse(R"({"role":"assistant","content":""})"));
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(first.contains("usage"));
  Json delta = EventJson(ChunkEvent(h, 0, "Hi", false, std::nullopt, true));
  EXPECT_EQ(delta["choices"][0]["delta"], Json::parse(R"({"content":"Hi"})"));
  EXPECT_TRUE(delta["usage"].is_null());
  Json last = EventJson(ChunkEvent(h, 0, "", false, "length", false));
  EXPECT_EQ(last["choices"][0]["delta"], Json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  Json usage = EventJson(UsageEvent(h, {MakeUsage(4, 2, 1)}));
  EXPECT_EQ(usage["choices"], Json::array());
  EXPECT_EQ(usage["usage"]["total_tokens"], 5);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
}

TEST(OpenAiResponseTest, FinishReasonsAndIds) {
  EXPECT_EQ(FinishReasonName(radixkv::v1::FINISH_REASON_EOS, true), "stop");
  EXPECT_EQ(FinishReasonName(radixkv::v1::FINISH_REASON_STOP, true), "stop");
  EXPECT_EQ(FinishReasonName(radixkv::v1::FINISH_REASON_LENGTH, true),
            "length");
  EXPECT_EQ(FinishReasonName(radixkv::v1::FINISH_REASON_LENGTH, false),
            std::nullopt);
  EXPECT_EQ(NewResponseId(Endpoint::kChat).rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(NewResponseId(Endpoint::kCompletions).size(), 5u + 32u);
  EXPECT_NE(NewResponseId(Endpoint::kChat), NewResponseId(Endpoint::kChat));
}

TEST(OpenAiResponseTest, ErrorsCarryTheStatusAndParam) {
  OpenAiError e = ToOpenAiError(BadParam("top_p", "top_p must be in (0, 1]"));
  EXPECT_EQ(e.http_status, 400);
  EXPECT_EQ(ErrorBody(e),
            R"({"error":{"message":"top_p must be in (0, 1]",)"
            R"("type":"invalid_request_error","param":"top_p","code":null}})");
  EXPECT_EQ(ToOpenAiError(absl::UnauthenticatedError("x")).http_status, 401);
  EXPECT_EQ(ToOpenAiError(absl::UnauthenticatedError("x")).code,
            "invalid_api_key");
  EXPECT_EQ(ToOpenAiError(absl::NotFoundError("x")).http_status, 404);
  EXPECT_EQ(ToOpenAiError(absl::ResourceExhaustedError("x")).http_status, 429);
  EXPECT_EQ(ToOpenAiError(absl::UnavailableError("x")).http_status, 503);
  EXPECT_EQ(ToOpenAiError(absl::InternalError("x")).http_status, 500);
  // A stray byte in an echoed message does not break the JSON.
  EXPECT_NE(ErrorBody(ToOpenAiError(absl::InvalidArgumentError("\xff"))), "");
}

TEST(OpenAiResponseTest, ModelList) {
  EXPECT_EQ(ModelListBody({"a", "b"}, 3),
            R"({"object":"list","data":[{"id":"a","object":"model",)"
            R"("created":3,"owned_by":"radixkv"},{"id":"b","object":"model",)"
            R"("created":3,"owned_by":"radixkv"}]})");
}

TEST(OpenAiResponseTest, LogprobsInTheFormatOfEachEndpoint) {
  google::protobuf::RepeatedPtrField<radixkv::v1::TokenLogprobs> entries;
  for (int32_t id : {7, 9}) {
    radixkv::v1::TokenLogprobs* e = entries.Add();
    e->mutable_sampled()->set_token_id(id);
    e->mutable_sampled()->set_logprob(-0.5);
    for (int32_t alt : {id, 3}) {
      radixkv::v1::TokenLogprob* t = e->add_top();
      t->set_token_id(alt);
      t->set_logprob(alt == id ? -0.5 : -1.25);
    }
  }
  const TokenText text = [](int32_t id) { return absl::StrCat("t", id); };
  int64_t offset = 4;
  const nlohmann::ordered_json completion =
      LogprobsJson(Endpoint::kCompletions, entries, 1, text, &offset);
  EXPECT_EQ(completion.dump(),
            R"({"tokens":["t7","t9"],"token_logprobs":[-0.5,-0.5],)"
            R"("top_logprobs":[{"t7":-0.5},{"t9":-0.5}],"text_offset":[4,6]})");
  EXPECT_EQ(offset, 8);
  const nlohmann::ordered_json chat =
      LogprobsJson(Endpoint::kChat, entries, 2, text, &offset);
  EXPECT_EQ(chat["content"][0].dump(),
            R"({"token":"t7","logprob":-0.5,"bytes":[116,55],)"
            R"("top_logprobs":[{"token":"t7","logprob":-0.5,"bytes":[116,55]},)"
            R"({"token":"t3","logprob":-1.25,"bytes":[116,51]}]})");
  nlohmann::ordered_json all;
  AppendLogprobs(Endpoint::kChat, chat, &all);
  AppendLogprobs(Endpoint::kChat, chat, &all);
  EXPECT_EQ(all["content"].size(), 4u);
}

TEST(OpenAiResponseTest, EchoedPromptLogprobsStartWithANullFirstToken) {
  google::protobuf::RepeatedPtrField<radixkv::v1::TokenLogprobs> prompt;
  *prompt.Add() = TokenLogprobsEntry(7, -2.5, {{3, -0.25}, {7, -2.5}});
  *prompt.Add() = TokenLogprobsEntry(9, -0.125, {{9, -0.125}, {4, -3.0}});
  const TokenText text = [](int32_t id) { return absl::StrCat("t", id); };
  int64_t offset = 0;
  const Json j = EchoedPromptLogprobsJson(1, prompt, 1, text, &offset);
  EXPECT_EQ(j.dump(),
            R"({"tokens":["t1","t7","t9"],"token_logprobs":[null,-2.5,-0.125],)"
            R"("top_logprobs":[null,{"t3":-0.25},{"t9":-0.125}],)"
            R"("text_offset":[0,2,4]})");
  EXPECT_EQ(offset, 6) << "the generated tokens continue from here";
  // A one-token prompt: its token alone.
  offset = 0;
  EXPECT_EQ(EchoedPromptLogprobsJson(5, {}, 2, text, &offset).dump(),
            R"({"tokens":["t5"],"token_logprobs":[null],"top_logprobs":[null],)"
            R"("text_offset":[0]})");
}

TEST(OpenAiResponseTest, VllmPromptLogprobsAndRanks) {
  google::protobuf::RepeatedPtrField<radixkv::v1::TokenLogprobs> prompt;
  // In the list: rank = position + 1, listed once, first.
  *prompt.Add() = TokenLogprobsEntry(7, -1.5, {{3, -0.25}, {7, -1.5}});
  // Not in the list: rank unknown (null).
  *prompt.Add() = TokenLogprobsEntry(9, -4.0, {{3, -0.5}, {4, -1.0}});
  const TokenText text = [](int32_t id) { return absl::StrCat("t", id); };
  EXPECT_EQ(VllmPromptLogprobsJson(prompt, 2, text).dump(),
            R"([null,)"
            R"({"7":{"logprob":-1.5,"rank":2,"decoded_token":"t7"},)"
            R"("3":{"logprob":-0.25,"rank":1,"decoded_token":"t3"}},)"
            R"({"9":{"logprob":-4.0,"rank":null,"decoded_token":"t9"},)"
            R"("3":{"logprob":-0.5,"rank":1,"decoded_token":"t3"},)"
            R"("4":{"logprob":-1.0,"rank":2,"decoded_token":"t4"}}])");
  // prompt_logprobs 0: the prompt token alone.
  EXPECT_EQ(VllmPromptLogprobsJson(prompt, 0, text).dump(),
            R"([null,{"7":{"logprob":-1.5,"rank":null,"decoded_token":"t7"}},)"
            R"({"9":{"logprob":-4.0,"rank":null,"decoded_token":"t9"}}])");
  // A one-token prompt.
  EXPECT_EQ(VllmPromptLogprobsJson({}, 3, text).dump(), "[null]");
  // Beyond the answered alternatives but in the worker's longer list
  // (echo asked for more): vLLM's count of tokens at least as likely, known
  // when a less likely token follows.
  const radixkv::v1::TokenLogprobs beyond =
      TokenLogprobsEntry(9, -1.0, {{3, -0.25}, {9, -1.0}, {4, -2.0}});
  EXPECT_EQ(VllmPromptTokenRank(beyond, 2), 2);
  EXPECT_EQ(VllmPromptTokenRank(beyond, 1), 2);
  EXPECT_EQ(VllmPromptTokenRank(beyond, 0), 2);
  // A tie with the list's last token: tokens past the list may tie too.
  EXPECT_EQ(
      VllmPromptTokenRank(
          TokenLogprobsEntry(9, -1.0, {{3, -0.25}, {9, -1.0}, {4, -1.0}}), 1),
      std::nullopt);
  // The last of the list: unknown past the answered ones, position + 1
  // within them.
  const radixkv::v1::TokenLogprobs last =
      TokenLogprobsEntry(4, -2.0, {{3, -0.25}, {4, -2.0}});
  EXPECT_EQ(VllmPromptTokenRank(last, 1), std::nullopt);
  EXPECT_EQ(VllmPromptTokenRank(last, 2), 2);
  EXPECT_EQ(VllmPromptTokenRank(TokenLogprobsEntry(8, -5.0, {{3, -0.25}}), 1),
            std::nullopt);
}

TEST(OpenAiResponseTest, PromptLogprobsWhereVllmPutsThem) {
  const Json plp = Json::parse(R"([null,{"7":{"logprob":-1.5,"rank":1,)"
                               R"("decoded_token":"t7"}}])");
  // Completions: in each choice, after finish_reason.
  Choice c{"Hi", "length", nullptr, plp};
  EXPECT_EQ(
      ResponseBody({Endpoint::kCompletions, "cmpl-1", 1, "m"}, {c}, {}),
      R"({"id":"cmpl-1","object":"text_completion","created":1,"model":"m",)"
      R"("choices":[{"index":0,"text":"Hi","logprobs":null,)"
      R"("finish_reason":"length","prompt_logprobs":[null,{"7":{)"
      R"("logprob":-1.5,"rank":1,"decoded_token":"t7"}}]}],)"
      R"("usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0,)"
      R"("prompt_tokens_details":{"cached_tokens":0}}})");
  // Chat: at the top level, after usage.
  const Json chat = Json::parse(ResponseBody(
      {Endpoint::kChat, "chatcmpl-1", 1, "m"}, {{"Hi", "stop"}}, {}, plp));
  EXPECT_EQ(chat["prompt_logprobs"], plp);
  EXPECT_EQ(chat.items().begin().key(), "id");
  EXPECT_EQ((--chat.end()).key(), "prompt_logprobs");
  EXPECT_FALSE(chat["choices"][0].contains("prompt_logprobs"));
  // Not asked: no field.
  EXPECT_FALSE(Json::parse(ResponseBody({Endpoint::kChat, "c", 1, "m"},
                                        {{"Hi", "stop"}}, {}))
                   .contains("prompt_logprobs"));
}

}  // namespace
}  // namespace radixkv::router::openai
