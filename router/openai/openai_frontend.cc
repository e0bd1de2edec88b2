#include "router/openai/openai_frontend.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "proto/generate_request_checks.h"
#include "router/openai/chat_prompt.h"
#include "router/openai/openai_error.h"
#include "router/openai/openai_responder.h"

namespace radixkv::router::openai {
namespace {

using Json = nlohmann::ordered_json;
using process::HttpExchange;

constexpr char kJson[] = "application/json";

std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

absl::StatusOr<Json> ParseBody(const std::string& body) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("the request body must be a JSON object");
  }
  return j;
}

// The model entry of `model`; NOT_FOUND naming it when the router cannot
// tokenize for it.
absl::StatusOr<std::shared_ptr<const ModelCatalog::Entry>> FindModel(
    const RouterService& router, const std::string& model) {
  if (model.empty()) return BadParam("model", "model is required");
  std::shared_ptr<const ModelCatalog::Entry> entry = router.FindModel(model);
  if (entry == nullptr || entry->tokenizer == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "model '", model.substr(0, 256), "' has no tokenizer on this router"));
  }
  return entry;
}

}  // namespace

OpenAiFrontend::OpenAiFrontend(RouterService* router, const ApiKeys* keys)
    : router_(router), keys_(keys) {}

void OpenAiFrontend::ReplyError(const std::shared_ptr<HttpExchange>& exchange,
                                const absl::Status& status,
                                absl::Time arrival) const {
  const OpenAiError e = ToOpenAiError(status);
  router_->CountRefused("openai", StatusCodeLabel(status.code()), arrival);
  exchange->Reply(e.http_status, kJson, ErrorBody(e));
}

void OpenAiFrontend::Handle(std::shared_ptr<HttpExchange> exchange) {
  const absl::Time arrival = absl::Now();
  const std::string& path = exchange->path();
  if (path == "/health") {
    exchange->Reply(
        serving_ ? 200 : 503, kJson,
        serving_ ? R"({"status":"ok"})" : R"({"status":"draining"})");
    return;
  }
  const bool get = exchange->method() == "GET";
  const bool post = exchange->method() == "POST";
  const bool known = path == "/v1/models" || path == "/v1/completions" ||
                     path == "/v1/chat/completions" || path == "/tokenize" ||
                     path == "/detokenize";
  if (!known) {
    exchange->Reply(404, kJson,
                    ErrorBody(ToOpenAiError(absl::NotFoundError(
                        absl::StrCat("no endpoint ", path)))));
    return;
  }
  if (keys_ != nullptr) {
    if (absl::Status s = keys_->Check(exchange->header("Authorization"));
        !s.ok()) {
      return ReplyError(exchange, s, arrival);
    }
  }
  if ((path == "/v1/models") != get || (path != "/v1/models") != post) {
    exchange->Reply(
        405, kJson,
        ErrorBody(
            {405, absl::StrCat(exchange->method(), " is not allowed on ", path),
             "invalid_request_error", "", ""}));
    return;
  }
  if (path == "/v1/models") {
    exchange->Reply(200, kJson,
                    ModelListBody(router_->ServedModels(),
                                  absl::ToUnixSeconds(router_->start_time())));
  } else if (path == "/v1/completions") {
    HandleCompletion(std::move(exchange), Endpoint::kCompletions);
  } else if (path == "/v1/chat/completions") {
    HandleCompletion(std::move(exchange), Endpoint::kChat);
  } else if (path == "/tokenize") {
    HandleTokenize(exchange);
  } else {
    HandleDetokenize(exchange);
  }
}

absl::Status OpenAiFrontend::PrepareChat(OpenAiRequest* r) const {
  absl::StatusOr<std::shared_ptr<const ModelCatalog::Entry>> entry =
      FindModel(*router_, r->model);
  if (!entry.ok()) return entry.status();
  absl::StatusOr<std::vector<int32_t>> ids = RenderChatTokens(**entry, *r);
  if (!ids.ok()) return ids.status();
  const int64_t context = (*entry)->max_position_embeddings;
  if (r->base.sampling().max_new_tokens() == 0) {
    const int64_t room = context - static_cast<int64_t>(ids->size());
    if (room < 1) {
      return BadParam("messages",
                      absl::StrCat("the conversation has ", ids->size(),
                                   " tokens, the model's context ", context));
    }
    r->base.mutable_sampling()->set_max_new_tokens(static_cast<int32_t>(
        std::min<int64_t>(room, radixkv::v1::kMaxNewTokens)));
  }
  r->base.mutable_token_ids()->mutable_ids()->Assign(ids->begin(), ids->end());
  return absl::OkStatus();
}

absl::Status OpenAiFrontend::PrepareEcho(
    const ModelCatalog::Entry* entry, const OpenAiRequest& r,
    std::vector<radixkv::v1::GenerateRequest>* requests,
    PromptAnswers* answers) {
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    const CompletionPrompt& p = r.prompts[i];
    if (!p.text.has_value()) {
      // A token prompt echoes as its decoded text, special tokens kept (as
      // vLLM detokenizes it for echo).
      absl::StatusOr<std::string> text =
          entry->tokenizer->Decode(p.ids, /*skip_special_tokens=*/false);
      if (!text.ok()) return BadParam("prompt", text.status().message());
      answers->echo_texts.push_back(*std::move(text));
      answers->first_token_ids.push_back(p.ids.front());
      continue;
    }
    answers->echo_texts.push_back(*p.text);
    int32_t first = 0;
    // The echoed logprobs start with the prompt's first token, which
    // GenerateResponse.prompt_logprobs leave out: the router tokenizes the
    // text (as GenerateCall would, BOS included) and forwards the ids. A
    // text over the limit stays text, which GenerateCall refuses.
    if (r.top_logprobs.has_value() &&
        static_cast<int64_t>(p.text->size()) <= entry->max_prompt_text_bytes) {
      absl::StatusOr<std::vector<int32_t>> ids =
          entry->tokenizer->Encode(*p.text, /*add_special_tokens=*/true);
      if (!ids.ok()) return ids.status();
      if (ids->empty()) return BadParam("prompt", "the prompt has no tokens");
      first = ids->front();
      (*requests)[i].mutable_token_ids()->mutable_ids()->Assign(ids->begin(),
                                                                ids->end());
    }
    answers->first_token_ids.push_back(first);
  }
  return absl::OkStatus();
}

void OpenAiFrontend::HandleCompletion(std::shared_ptr<HttpExchange> exchange,
                                      Endpoint endpoint) {
  const absl::Time arrival = absl::Now();
  if (!serving_) {
    return ReplyError(
        exchange, absl::UnavailableError("the router is draining"), arrival);
  }
  absl::StatusOr<OpenAiRequest> parsed =
      endpoint == Endpoint::kChat ? ParseChatRequest(exchange->body())
                                  : ParseCompletionRequest(exchange->body());
  if (parsed.ok() && endpoint == Endpoint::kChat) {
    if (absl::Status s = PrepareChat(&*parsed); !s.ok()) parsed = s;
  }
  if (!parsed.ok()) return ReplyError(exchange, parsed.status(), arrival);
  OpenAiRequest& r = *parsed;
  // A chat request is one prompt, already in base.
  std::vector<radixkv::v1::GenerateRequest> requests;
  if (endpoint == Endpoint::kChat) {
    requests.push_back(r.base);
  } else {
    for (const CompletionPrompt& p : r.prompts) {
      radixkv::v1::GenerateRequest g = r.base;
      if (p.text.has_value()) {
        g.set_text(*p.text);
      } else {
        g.mutable_token_ids()->mutable_ids()->Assign(p.ids.begin(),
                                                     p.ids.end());
      }
      requests.push_back(std::move(g));
    }
  }
  // Logprobs name their tokens, and echo detokenizes token prompts, with the
  // model's tokenizer.
  TokenText token_text;
  std::shared_ptr<const ModelCatalog::Entry> entry;
  const bool echo_token_prompt =
      r.echo && std::any_of(r.prompts.begin(), r.prompts.end(),
                            [](const CompletionPrompt& p) {
                              return !p.text.has_value();
                            });
  if (r.top_logprobs.has_value() || r.prompt_logprobs.has_value() ||
      echo_token_prompt) {
    absl::StatusOr<std::shared_ptr<const ModelCatalog::Entry>> found =
        FindModel(*router_, r.model);
    if (!found.ok()) return ReplyError(exchange, found.status(), arrival);
    entry = *std::move(found);
    token_text = [entry](int32_t id) {
      absl::StatusOr<std::string> text =
          entry->tokenizer->Decode(std::vector<int32_t>{id},
                                   /*skip_special_tokens=*/false);
      return text.ok() ? *text : std::string();
    };
  }
  PromptAnswers answers;
  answers.prompt_logprobs = r.prompt_logprobs;
  if (r.echo) {
    if (absl::Status s = PrepareEcho(entry.get(), r, &requests, &answers);
        !s.ok()) {
      return ReplyError(exchange, s, arrival);
    }
  }
  auto responder = std::make_shared<OpenAiResponder>(
      exchange,
      ResponseHeader{endpoint, NewResponseId(endpoint),
                     absl::ToUnixSeconds(absl::Now()), r.model},
      static_cast<int>(requests.size()), radixkv::v1::NumSamples(r.base),
      r.stream, r.include_usage, r.top_logprobs, std::move(token_text),
      std::move(answers));
  responder->Start();
  for (size_t i = 0; i < requests.size(); ++i) {
    absl::StatusOr<std::shared_ptr<GenerateCall>> call = router_->StartGenerate(
        requests[i], "openai", responder->sink(static_cast<int>(i)));
    if (!call.ok()) {
      responder->FailChoice(static_cast<int>(i), call.status());
      // The remaining choices are not started; the started ones abort.
      for (size_t j = i + 1; j < requests.size(); ++j) {
        responder->FailChoice(static_cast<int>(j), call.status());
      }
      return;
    }
    responder->SetCall(static_cast<int>(i), *std::move(call));
  }
}

void OpenAiFrontend::HandleTokenize(
    const std::shared_ptr<HttpExchange>& exchange) {
  const absl::Time arrival = absl::Now();
  absl::StatusOr<Json> j = ParseBody(exchange->body());
  if (!j.ok()) return ReplyError(exchange, j.status(), arrival);
  const std::string model = j->value("model", "");
  absl::StatusOr<std::shared_ptr<const ModelCatalog::Entry>> entry =
      FindModel(*router_, model);
  if (!entry.ok()) return ReplyError(exchange, entry.status(), arrival);
  absl::StatusOr<std::vector<int32_t>> ids;
  if (j->contains("messages")) {
    // The chat request's own parser: the same rules as /v1/chat/completions.
    Json chat = Json{{"model", model}, {"messages", (*j)["messages"]}};
    if (j->contains("add_generation_prompt")) {
      chat["add_generation_prompt"] = (*j)["add_generation_prompt"];
    }
    if (j->contains("chat_template_kwargs")) {
      chat["chat_template_kwargs"] = (*j)["chat_template_kwargs"];
    }
    absl::StatusOr<OpenAiRequest> r = ParseChatRequest(Dump(chat));
    if (!r.ok()) return ReplyError(exchange, r.status(), arrival);
    ids = RenderChatTokens(**entry, *r);
  } else if (auto prompt = j->find("prompt");
             prompt != j->end() && prompt->is_string()) {
    const bool add_special = j->value("add_special_tokens", true);
    if (static_cast<int64_t>(prompt->get_ref<const std::string&>().size()) >
        (*entry)->max_prompt_text_bytes) {
      return ReplyError(exchange, BadParam("prompt", "prompt is too long"),
                        arrival);
    }
    ids = (*entry)->tokenizer->Encode(prompt->get<std::string>(), add_special);
  } else {
    return ReplyError(exchange,
                      BadParam("prompt",
                               "prompt (a string) or messages is "
                               "required"),
                      arrival);
  }
  if (!ids.ok()) return ReplyError(exchange, ids.status(), arrival);
  exchange->Reply(
      200, kJson,
      Dump(Json{{"count", ids->size()},
                {"max_model_len", (*entry)->max_position_embeddings},
                {"tokens", *ids}}));
}

void OpenAiFrontend::HandleDetokenize(
    const std::shared_ptr<HttpExchange>& exchange) {
  const absl::Time arrival = absl::Now();
  absl::StatusOr<Json> j = ParseBody(exchange->body());
  if (!j.ok()) return ReplyError(exchange, j.status(), arrival);
  absl::StatusOr<std::shared_ptr<const ModelCatalog::Entry>> entry =
      FindModel(*router_, j->value("model", ""));
  if (!entry.ok()) return ReplyError(exchange, entry.status(), arrival);
  auto tokens = j->find("tokens");
  std::vector<int32_t> ids;
  if (tokens == j->end() || !tokens->is_array()) {
    return ReplyError(exchange, BadParam("tokens", "tokens must be a list"),
                      arrival);
  }
  for (const Json& t : *tokens) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() >= (*entry)->tokenizer->vocab_size()) {
      return ReplyError(
          exchange,
          BadParam("tokens",
                   absl::StrCat("token ids must be in [0, ",
                                (*entry)->tokenizer->vocab_size(), ")")),
          arrival);
    }
    ids.push_back(t.get<int32_t>());
  }
  absl::StatusOr<std::string> text =
      (*entry)->tokenizer->Decode(ids, /*skip_special_tokens=*/false);
  if (!text.ok()) return ReplyError(exchange, text.status(), arrival);
  exchange->Reply(200, kJson, Dump(Json{{"prompt", *text}}));
}

}  // namespace radixkv::router::openai
