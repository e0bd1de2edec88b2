#include "router/openai/openai_logprobs.h"

#include <algorithm>

namespace radixkv::router::openai {
namespace {

using Json = nlohmann::ordered_json;

Json Bytes(const std::string& text) {
  Json bytes = Json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

Json ChatEntry(const std::string& token, double logprob) {
  return Json{{"token", token}, {"logprob", logprob}, {"bytes", Bytes(token)}};
}

}  // namespace

Json LogprobsJson(
    Endpoint endpoint,
    const google::protobuf::RepeatedPtrField<radixkv::v1::TokenLogprobs>&
        entries,
    int32_t top, const TokenText& token_text, int64_t* text_offset) {
  if (endpoint == Endpoint::kChat) {
    Json content = Json::array();
    for (const radixkv::v1::TokenLogprobs& e : entries) {
      Json entry =
          ChatEntry(token_text(e.sampled().token_id()), e.sampled().logprob());
      Json alternatives = Json::array();
      for (int i = 0; i < std::min(top, e.top_size()); ++i) {
        alternatives.push_back(
            ChatEntry(token_text(e.top(i).token_id()), e.top(i).logprob()));
      }
      entry["top_logprobs"] = std::move(alternatives);
      content.push_back(std::move(entry));
    }
    return Json{{"content", std::move(content)}};
  }
  Json tokens = Json::array(), token_logprobs = Json::array(),
       top_logprobs = Json::array(), offsets = Json::array();
  for (const radixkv::v1::TokenLogprobs& e : entries) {
    const std::string text = token_text(e.sampled().token_id());
    tokens.push_back(text);
    token_logprobs.push_back(e.sampled().logprob());
    Json alternatives = Json::object();
    for (int i = 0; i < std::min(top, e.top_size()); ++i) {
      alternatives[token_text(e.top(i).token_id())] = e.top(i).logprob();
    }
    top_logprobs.push_back(std::move(alternatives));
    offsets.push_back(*text_offset);
    *text_offset += static_cast<int64_t>(text.size());
  }
  return Json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top_logprobs)},
              {"text_offset", std::move(offsets)}};
}

void AppendLogprobs(Endpoint endpoint, const Json& more, Json* all) {
  if (all->is_null()) {
    *all = more;
    return;
  }
  for (const auto& [key, value] : more.items()) {
    if (endpoint == Endpoint::kChat && key != "content") continue;
    Json& list = (*all)[key];
    for (const Json& v : value) list.push_back(v);
  }
}

}  // namespace radixkv::router::openai
