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

Json EchoedPromptLogprobsJson(
    int32_t first_token_id,
    const google::protobuf::RepeatedPtrField<radixkv::v1::TokenLogprobs>&
        prompt_logprobs,
    int32_t top, const TokenText& token_text, int64_t* text_offset) {
  const std::string first = token_text(first_token_id);
  Json all{{"tokens", Json::array({first})},
           {"token_logprobs", Json::array({nullptr})},
           {"top_logprobs", Json::array({nullptr})},
           {"text_offset", Json::array({*text_offset})}};
  *text_offset += static_cast<int64_t>(first.size());
  AppendLogprobs(Endpoint::kCompletions,
                 LogprobsJson(Endpoint::kCompletions, prompt_logprobs, top,
                              token_text, text_offset),
                 &all);
  return all;
}

std::optional<int64_t> VllmPromptTokenRank(const radixkv::v1::TokenLogprobs& e,
                                           int32_t top) {
  const int32_t id = e.sampled().token_id();
  for (int i = 0; i < e.top_size(); ++i) {
    if (e.top(i).token_id() != id) continue;
    if (i < top) return i + 1;
    // The list holds the most likely tokens, most likely first: when a less
    // likely one ends it, every token at least as likely as this one is in
    // it.
    const double logprob = e.top(i).logprob();
    if (e.top(e.top_size() - 1).logprob() >= logprob) return std::nullopt;
    int64_t at_least_as_likely = 0;
    for (const radixkv::v1::TokenLogprob& t : e.top()) {
      if (t.logprob() >= logprob) ++at_least_as_likely;
    }
    return at_least_as_likely;
  }
  return std::nullopt;
}

Json VllmPromptLogprobsJson(const google::protobuf::RepeatedPtrField<
                                radixkv::v1::TokenLogprobs>& prompt_logprobs,
                            int32_t top, const TokenText& token_text) {
  auto entry = [&](int32_t id, double logprob, std::optional<int64_t> rank) {
    return Json{{"logprob", logprob},
                {"rank", rank.has_value() ? Json(*rank) : Json(nullptr)},
                {"decoded_token", token_text(id)}};
  };
  Json list = Json::array({nullptr});
  for (const radixkv::v1::TokenLogprobs& e : prompt_logprobs) {
    Json position = Json::object();
    const int32_t id = e.sampled().token_id();
    position[std::to_string(id)] =
        entry(id, e.sampled().logprob(), VllmPromptTokenRank(e, top));
    for (int i = 0; i < std::min(top, e.top_size()); ++i) {
      const std::string key = std::to_string(e.top(i).token_id());
      if (position.contains(key)) continue;
      position[key] = entry(e.top(i).token_id(), e.top(i).logprob(), i + 1);
    }
    list.push_back(std::move(position));
  }
  return list;
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
