#include "router/openai/openai_response.h"

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"

namespace radixkv::router::openai {
namespace {

using Json = nlohmann::ordered_json;

// Model text is UTF-8 by construction (the detokenizer holds partial
// characters back); `replace` keeps a stray byte from failing the dump.
std::string Dump(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json Base(const ResponseHeader& h, bool chunk) {
  const bool chat = h.endpoint == Endpoint::kChat;
  return Json{
      {"id", h.id},
      {"object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                      : "text_completion"},
      {"created", h.created},
      {"model", h.model}};
}

Json OrNull(const std::optional<std::string>& s) {
  return s.has_value() ? Json(*s) : Json(nullptr);
}

}  // namespace

std::string NewResponseId(Endpoint endpoint) {
  absl::BitGen gen;
  return absl::StrCat(
      endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-",
      absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16),
      absl::Hex(absl::Uniform<uint64_t>(gen), absl::kZeroPad16));
}

std::optional<std::string> FinishReasonName(radixkv::v1::FinishReason reason,
                                            bool finished) {
  if (!finished) return std::nullopt;
  switch (reason) {
    case radixkv::v1::FINISH_REASON_EOS:
    case radixkv::v1::FINISH_REASON_STOP:
      return "stop";
    case radixkv::v1::FINISH_REASON_LENGTH:
      return "length";
    default:
      return "abort";
  }
}

Json UsageJson(const std::vector<radixkv::v1::Usage>& usages) {
  int64_t prompt = 0, completion = 0, cached = 0;
  for (const radixkv::v1::Usage& u : usages) {
    prompt += u.prompt_tokens();
    completion += u.completion_tokens();
    cached += u.cached_tokens();
  }
  return Json{{"prompt_tokens", prompt},
              {"completion_tokens", completion},
              {"total_tokens", prompt + completion},
              {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

std::string ResponseBody(const ResponseHeader& header,
                         const std::vector<Choice>& choices,
                         const std::vector<radixkv::v1::Usage>& usages,
                         const std::optional<Json>& prompt_logprobs) {
  Json j = Base(header, /*chunk=*/false);
  Json list = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    Json c{{"index", i}};
    if (header.endpoint == Endpoint::kChat) {
      c["message"] = {{"role", "assistant"}, {"content", choices[i].text}};
    } else {
      c["text"] = choices[i].text;
    }
    c["logprobs"] = choices[i].logprobs;
    c["finish_reason"] = OrNull(choices[i].finish_reason);
    if (choices[i].prompt_logprobs.has_value()) {
      c["prompt_logprobs"] = *choices[i].prompt_logprobs;
    }
    list.push_back(std::move(c));
  }
  j["choices"] = std::move(list);
  j["usage"] = UsageJson(usages);
  if (prompt_logprobs.has_value()) j["prompt_logprobs"] = *prompt_logprobs;
  return Dump(j);
}

std::string ChunkEvent(const ResponseHeader& header, int index,
                       const std::string& text, bool first,
                       const std::optional<std::string>& finish_reason,
                       bool usage_null, const Json& logprobs) {
  Json j = Base(header, /*chunk=*/true);
  Json c{{"index", index}};
  if (header.endpoint == Endpoint::kChat) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && !finish_reason.has_value())) {
      delta["content"] = text;
    }
    c["delta"] = std::move(delta);
  } else {
    c["text"] = text;
  }
  c["logprobs"] = logprobs;
  c["finish_reason"] = OrNull(finish_reason);
  j["choices"] = Json::array({std::move(c)});
  if (usage_null) j["usage"] = nullptr;
  return absl::StrCat("data: ", Dump(j), "\n\n");
}

std::string UsageEvent(const ResponseHeader& header,
                       const std::vector<radixkv::v1::Usage>& usages) {
  Json j = Base(header, /*chunk=*/true);
  j["choices"] = Json::array();
  j["usage"] = UsageJson(usages);
  return absl::StrCat("data: ", Dump(j), "\n\n");
}

std::string ErrorEvent(const std::string& error_body) {
  return absl::StrCat("data: ", error_body, "\n\n", kDoneEvent);
}

std::string ModelListBody(const std::vector<std::string>& models,
                          int64_t created) {
  Json data = Json::array();
  for (const std::string& m : models) {
    data.push_back({{"id", m},
                    {"object", "model"},
                    {"created", created},
                    {"owned_by", "radixkv"}});
  }
  return Dump(Json{{"object", "list"}, {"data", std::move(data)}});
}

}  // namespace radixkv::router::openai
