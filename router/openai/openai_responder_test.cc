#include "router/openai/openai_responder.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "process/http_server.h"
#include "router/openai/token_logprobs_for_test.h"

namespace radixkv::router::openai {
namespace {

using Json = nlohmann::ordered_json;
using radixkv::v1::GenerateResponse;

// One POST over loopback with "Connection: close"; the reply read to EOF.
struct HttpReply {
  int status = 0;
  std::string body;  // de-chunked
};

HttpReply Post(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  HttpReply reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return reply;
  }
  timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: h\r\nConnection: close\r\n"
      "Content-Length: 2\r\n\r\n{}";
  EXPECT_EQ(write(fd, request.data(), request.size()),
            static_cast<ssize_t>(request.size()));
  std::string raw;
  char buffer[4096];
  for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) {
    raw.append(buffer, n);
  }
  close(fd);
  const size_t head_end = raw.find("\r\n\r\n");
  if (head_end == std::string::npos || raw.size() < 12) return reply;
  absl::SimpleAtoi(raw.substr(9, 3), &reply.status);
  const std::string head = raw.substr(0, head_end);
  std::string body = raw.substr(head_end + 4);
  if (!absl::StrContains(absl::AsciiStrToLower(head),
                         "transfer-encoding: chunked")) {
    reply.body = std::move(body);
    return reply;
  }
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t line_end = body.find("\r\n", pos);
    if (line_end == std::string::npos) break;
    size_t size = 0;
    if (!absl::SimpleHexAtoi(body.substr(pos, line_end - pos), &size) ||
        size == 0) {
      break;
    }
    reply.body += body.substr(line_end + 2, size);
    pos = line_end + 2 + size + 2;
  }
  return reply;
}

// The JSON objects of a server-sent event stream, [DONE] left out.
std::vector<Json> Events(const std::string& body) {
  std::vector<Json> events;
  for (absl::string_view event : absl::StrSplit(body, "\n\n")) {
    if (!absl::ConsumePrefix(&event, "data: ") || event == "[DONE]") continue;
    events.push_back(Json::parse(event));
  }
  return events;
}

// One chunk of sample `sample` with one token `id` (logprob `logprob`, its
// own top entry) and text `text`, for a prompt of `prompt_tokens` tokens.
GenerateResponse Chunk(int sample, int32_t id, const std::string& text,
                       double logprob, bool finished, int prompt_tokens = 3) {
  GenerateResponse r;
  r.set_sample_index(sample);
  r.add_token_ids(id);
  r.set_text(text);
  *r.add_logprobs() = TokenLogprobsEntry(id, logprob, {{id, logprob}});
  r.set_finished(finished);
  if (finished) r.set_finish_reason(radixkv::v1::FINISH_REASON_LENGTH);
  r.mutable_usage()->set_prompt_tokens(prompt_tokens);
  r.mutable_usage()->set_completion_tokens(1);
  r.set_worker_id("w0");
  return r;
}

// GenerateResponse.prompt_logprobs of the 3-token prompt [1, 7, 9].
void AddPromptLogprobs(GenerateResponse* r) {
  *r->add_prompt_logprobs() =
      TokenLogprobsEntry(7, -2.5, {{3, -0.25}, {7, -2.5}});
  *r->add_prompt_logprobs() =
      TokenLogprobsEntry(9, -0.125, {{9, -0.125}, {4, -3.0}});
}

std::string TokenName(int32_t id) { return absl::StrCat("t", id); }

// Serves one request: a responder made by `make` gets `chunks` (prompt
// index, chunk) in order, then every prompt finishes with `status`.
HttpReply Serve(const std::function<std::shared_ptr<OpenAiResponder>(
                    std::shared_ptr<process::HttpExchange>)>& make,
                const std::vector<std::pair<int, GenerateResponse>>& chunks,
                int num_prompts = 1, absl::Status status = absl::OkStatus()) {
  auto server = process::HttpServer::Start(
      {}, [&](std::shared_ptr<process::HttpExchange> exchange) {
        std::shared_ptr<OpenAiResponder> responder = make(exchange);
        responder->Start();
        for (const auto& [index, chunk] : chunks) {
          responder->sink(index)->Write(chunk, [](bool) {});
        }
        for (int i = 0; i < num_prompts; ++i) {
          responder->sink(i)->Finish(status);
        }
      });
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return {};
  return Post((*server)->port());
}

const ResponseHeader kCompletion{Endpoint::kCompletions, "cmpl-1", 1, "m"};

// Echo with logprobs and n = 2: sample 1's first chunk comes before sample
// 0's (which carries the prompt logprobs) and is held until then; each
// choice starts with the prompt's text and tokens; vLLM's prompt_logprobs
// sit in each choice.
TEST(OpenAiResponderTest, EchoWithLogprobsAndPromptLogprobsForEachSample) {
  GenerateResponse first = Chunk(0, 20, " a", -0.5, false);
  AddPromptLogprobs(&first);
  const HttpReply reply = Serve(
      [](std::shared_ptr<process::HttpExchange> exchange) {
        PromptAnswers answers;
        answers.echo_texts = {"Hi"};
        answers.first_token_ids = {1};
        answers.prompt_logprobs = 1;
        return std::make_shared<OpenAiResponder>(
            exchange, kCompletion, 1, 2, /*stream=*/false,
            /*include_usage=*/false, /*top_logprobs=*/1, TokenName,
            std::move(answers));
      },
      {{0, Chunk(1, 30, " x", -1.0, false)},
       {0, first},
       {0, Chunk(1, 31, " y", -1.5, true)},
       {0, Chunk(0, 21, " b", -0.75, true)}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json body = Json::parse(reply.body);
  ASSERT_EQ(body["choices"].size(), 2u) << reply.body;
  const Json& c0 = body["choices"][0];
  EXPECT_EQ(c0["text"], "Hi a b");
  EXPECT_EQ(c0["logprobs"].dump(),
            R"({"tokens":["t1","t7","t9","t20","t21"],)"
            R"("token_logprobs":[null,-2.5,-0.125,-0.5,-0.75],)"
            R"("top_logprobs":[null,{"t3":-0.25},{"t9":-0.125},{"t20":-0.5},)"
            R"({"t21":-0.75}],"text_offset":[0,2,4,6,9]})");
  const std::string prompt_logprobs =
      R"([null,{"7":{"logprob":-2.5,"rank":null,"decoded_token":"t7"},)"
      R"("3":{"logprob":-0.25,"rank":1,"decoded_token":"t3"}},)"
      R"({"9":{"logprob":-0.125,"rank":1,"decoded_token":"t9"}}])";
  EXPECT_EQ(c0["prompt_logprobs"].dump(), prompt_logprobs);
  EXPECT_EQ(c0["finish_reason"], "length");
  const Json& c1 = body["choices"][1];
  EXPECT_EQ(c1["text"], "Hi x y");
  EXPECT_EQ(c1["logprobs"]["tokens"].dump(), R"(["t1","t7","t9","t30","t31"])");
  EXPECT_EQ(c1["logprobs"]["token_logprobs"][0], nullptr);
  EXPECT_EQ(c1["logprobs"]["top_logprobs"][0], nullptr);
  EXPECT_EQ(c1["logprobs"]["text_offset"].dump(), "[0,2,4,6,9]");
  EXPECT_EQ(c1["prompt_logprobs"].dump(), prompt_logprobs);
  // The prompt counts once.
  EXPECT_EQ(body["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(body["usage"]["completion_tokens"], 2);
}

// Streamed echo: the first chunk of each choice carries the prompt's text
// and (with logprobs) its tokens; later chunks only their own.
TEST(OpenAiResponderTest, StreamedEchoInTheFirstChunk) {
  GenerateResponse first = Chunk(0, 20, " a", -0.5, false);
  AddPromptLogprobs(&first);
  HttpReply reply = Serve(
      [](std::shared_ptr<process::HttpExchange> exchange) {
        PromptAnswers answers;
        answers.echo_texts = {"<s>Hi"};
        answers.first_token_ids = {1};
        return std::make_shared<OpenAiResponder>(
            exchange, kCompletion, 1, 1, /*stream=*/true,
            /*include_usage=*/false, /*top_logprobs=*/0, TokenName,
            std::move(answers));
      },
      {{0, first}, {0, Chunk(0, 21, " b", -0.75, true)}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  std::vector<Json> events = Events(reply.body);
  ASSERT_EQ(events.size(), 2u) << reply.body;
  EXPECT_EQ(events[0]["choices"][0]["text"], "<s>Hi a");
  EXPECT_EQ(events[0]["choices"][0]["logprobs"].dump(),
            R"({"tokens":["t1","t7","t9","t20"],)"
            R"("token_logprobs":[null,-2.5,-0.125,-0.5],)"
            R"("top_logprobs":[null,{},{},{}],"text_offset":[0,2,4,6]})");
  EXPECT_EQ(events[1]["choices"][0]["text"], " b");
  EXPECT_EQ(events[1]["choices"][0]["logprobs"].dump(),
            R"({"tokens":["t21"],"token_logprobs":[-0.75],)"
            R"("top_logprobs":[{}],"text_offset":[9]})");
  EXPECT_EQ(events[1]["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(events[0]["choices"][0].contains("prompt_logprobs"));

  // Echo without logprobs, two prompts: each choice starts with its own.
  reply = Serve(
      [](std::shared_ptr<process::HttpExchange> exchange) {
        PromptAnswers answers;
        answers.echo_texts = {"A", "B"};
        return std::make_shared<OpenAiResponder>(
            exchange, kCompletion, 2, 1, /*stream=*/true,
            /*include_usage=*/false, std::nullopt, nullptr, std::move(answers));
      },
      {{1, Chunk(0, 20, "b", -1, false)},
       {0, Chunk(0, 21, "a", -1, true)},
       {1, Chunk(0, 22, "c", -1, true)}},
      /*num_prompts=*/2);
  ASSERT_EQ(reply.status, 200) << reply.body;
  events = Events(reply.body);
  ASSERT_EQ(events.size(), 3u) << reply.body;
  EXPECT_EQ(events[0]["choices"][0]["index"], 1);
  EXPECT_EQ(events[0]["choices"][0]["text"], "Bb");
  EXPECT_TRUE(events[0]["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(events[1]["choices"][0]["index"], 0);
  EXPECT_EQ(events[1]["choices"][0]["text"], "Aa");
  EXPECT_EQ(events[2]["choices"][0]["text"], "c");
}

// Chat: vLLM's prompt_logprobs at the top level, once for all samples.
TEST(OpenAiResponderTest, ChatPromptLogprobsAtTheTopLevel) {
  GenerateResponse first = Chunk(0, 20, "Hey", -0.5, true);
  AddPromptLogprobs(&first);
  const HttpReply reply = Serve(
      [](std::shared_ptr<process::HttpExchange> exchange) {
        PromptAnswers answers;
        answers.prompt_logprobs = 0;
        return std::make_shared<OpenAiResponder>(
            exchange, ResponseHeader{Endpoint::kChat, "chatcmpl-1", 1, "m"}, 1,
            2, /*stream=*/false, /*include_usage=*/false, std::nullopt,
            TokenName, std::move(answers));
      },
      {{0, Chunk(1, 30, "Yo", -1.0, true)}, {0, first}});
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json body = Json::parse(reply.body);
  EXPECT_EQ(body["prompt_logprobs"].dump(),
            R"([null,{"7":{"logprob":-2.5,"rank":null,"decoded_token":"t7"}},)"
            R"({"9":{"logprob":-0.125,"rank":1,"decoded_token":"t9"}}])");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hey");
  EXPECT_EQ(body["choices"][1]["message"]["content"], "Yo");
  EXPECT_FALSE(body["choices"][0].contains("prompt_logprobs"));
}

// A worker that answers no prompt logprobs when asked: 500 naming the
// counts, never a response without them.
TEST(OpenAiResponderTest, MissingPromptLogprobsFailTheRequest) {
  const HttpReply reply = Serve(
      [](std::shared_ptr<process::HttpExchange> exchange) {
        PromptAnswers answers;
        answers.prompt_logprobs = 2;
        return std::make_shared<OpenAiResponder>(
            exchange, kCompletion, 1, 1, /*stream=*/false,
            /*include_usage=*/false, std::nullopt, TokenName,
            std::move(answers));
      },
      {{0, Chunk(0, 20, " a", -0.5, true)}});
  EXPECT_EQ(reply.status, 500) << reply.body;
  EXPECT_EQ(Json::parse(reply.body)["error"]["message"],
            "worker w0 answered 0 prompt logprobs for a prompt of 3 tokens "
            "(SamplingParams.prompt_logprobs asks for 2)");
}

}  // namespace
}  // namespace radixkv::router::openai
