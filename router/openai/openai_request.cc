#include "router/openai/openai_request.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/generate_request_checks.h"
#include "router/openai/openai_error.h"

namespace radixkv::router::openai {
namespace {

using Json = nlohmann::ordered_json;

// A user's seed 0 must still fix the generator; 0 means "unset" in
// SamplingParams.seed, so it maps to this constant.
constexpr uint64_t kSeedZero = 0x9e3779b97f4a7c15ULL;

absl::Status NotSupported(absl::string_view param, absl::string_view why) {
  return BadParam(param, absl::StrCat(param, ": ", why));
}

absl::StatusOr<int64_t> Int(const Json& v, absl::string_view param, int64_t lo,
                            int64_t hi) {
  if (!v.is_number_integer()) {
    return BadParam(param, absl::StrCat(param, " must be an integer"));
  }
  // Unsigned values beyond int64 are out of range too.
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return BadParam(param,
                    absl::StrCat(param, " must be in [", lo, ", ", hi, "]"));
  }
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) {
    return BadParam(param,
                    absl::StrCat(param, " must be in [", lo, ", ", hi, "]"));
  }
  return x;
}

absl::StatusOr<double> Number(const Json& v, absl::string_view param, double lo,
                              double hi) {
  if (!v.is_number()) {
    return BadParam(param, absl::StrCat(param, " must be a number"));
  }
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    return BadParam(param,
                    absl::StrCat(param, " must be in [", lo, ", ", hi, "]"));
  }
  return x;
}

absl::StatusOr<bool> Bool(const Json& v, absl::string_view param) {
  if (!v.is_boolean()) {
    return BadParam(param, absl::StrCat(param, " must be a boolean"));
  }
  return v.get<bool>();
}

absl::StatusOr<std::string> String(const Json& v, absl::string_view param) {
  if (!v.is_string()) {
    return BadParam(param, absl::StrCat(param, " must be a string"));
  }
  return v.get<std::string>();
}

#define RADIXKV_ASSIGN(lhs, expr)                           \
  do {                                                      \
    auto radixkv_value = (expr);                            \
    if (!radixkv_value.ok()) return radixkv_value.status(); \
    lhs = *std::move(radixkv_value);                        \
  } while (0)

// A value that must be the neutral one until the feature exists.
absl::Status RequireNeutral(const Json& v, absl::string_view param,
                            double neutral) {
  if (v.is_null()) return absl::OkStatus();
  if (!v.is_number() || v.get<double>() != neutral) {
    return NotSupported(param,
                        absl::StrCat("values other than ", neutral,
                                     " are not supported by this server"));
  }
  return absl::OkStatus();
}

absl::Status ParseStop(const Json& v, radixkv::v1::SamplingParams* s) {
  if (v.is_null()) return absl::OkStatus();
  std::vector<std::string> stops;
  if (v.is_string()) {
    stops.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    for (const Json& e : v) {
      if (!e.is_string())
        return BadParam("stop", "stop entries must be strings");
      stops.push_back(e.get<std::string>());
    }
  } else {
    return BadParam("stop", "stop must be a string or a list of strings");
  }
  if (stops.size() > static_cast<size_t>(radixkv::v1::kMaxStopStrings)) {
    return BadParam("stop",
                    absl::StrCat("at most ", radixkv::v1::kMaxStopStrings,
                                 " stop strings"));
  }
  for (const std::string& stop : stops) {
    if (stop.empty() || stop.size() > radixkv::v1::kMaxStopStringBytes) {
      return BadParam("stop",
                      absl::StrCat("stop strings must have 1 to ",
                                   radixkv::v1::kMaxStopStringBytes, " bytes"));
    }
    s->add_stop(stop);
  }
  return absl::OkStatus();
}

// The parameters both endpoints share. Returns false (in *handled) for a
// key it does not know.
absl::Status ParseCommon(const std::string& key, const Json& v,
                         OpenAiRequest* r, bool* handled) {
  radixkv::v1::SamplingParams* s = r->base.mutable_sampling();
  *handled = true;
  if (key == "model") {
    RADIXKV_ASSIGN(r->model, String(v, "model"));
  } else if (key == "max_tokens" || key == "max_completion_tokens") {
    if (v.is_null()) return absl::OkStatus();
    int64_t n = 0;
    RADIXKV_ASSIGN(n, Int(v, key, 1, radixkv::v1::kMaxNewTokens));
    s->set_max_new_tokens(static_cast<int32_t>(n));
  } else if (key == "temperature") {
    if (v.is_null()) return absl::OkStatus();
    double t = 0;
    RADIXKV_ASSIGN(t, Number(v, key, 0, radixkv::v1::kMaxTemperature));
    s->set_temperature(static_cast<float>(t));
  } else if (key == "top_p") {
    if (v.is_null()) return absl::OkStatus();
    double p = 0;
    RADIXKV_ASSIGN(p, Number(v, key, 0, 1));
    if (p == 0) return BadParam(key, "top_p must be in (0, 1]");
    s->set_top_p(static_cast<float>(p));
  } else if (key == "top_k") {
    if (v.is_null()) return absl::OkStatus();
    int64_t k = 0;
    RADIXKV_ASSIGN(k, Int(v, key, -1, std::numeric_limits<int32_t>::max()));
    s->set_top_k(k <= 0 ? 0 : static_cast<int32_t>(k));  // vLLM: -1 = off
  } else if (key == "seed") {
    if (v.is_null()) return absl::OkStatus();
    int64_t seed = 0;
    RADIXKV_ASSIGN(seed, Int(v, key, std::numeric_limits<int64_t>::min(),
                             std::numeric_limits<int64_t>::max()));
    s->set_seed(seed == 0 ? kSeedZero : static_cast<uint64_t>(seed));
  } else if (key == "stop") {
    return ParseStop(v, s);
  } else if (key == "n") {
    if (v.is_null()) return absl::OkStatus();
    int64_t n = 0;
    RADIXKV_ASSIGN(n, Int(v, key, 1, radixkv::v1::kMaxSamples));
    r->base.set_n(static_cast<int32_t>(n));
  } else if (key == "stream") {
    if (v.is_null()) return absl::OkStatus();
    RADIXKV_ASSIGN(r->stream, Bool(v, key));
  } else if (key == "stream_options") {
    if (v.is_null()) return absl::OkStatus();
    if (!v.is_object())
      return BadParam(key, "stream_options must be an object");
    for (const auto& [k, value] : v.items()) {
      if (k != "include_usage") {
        return NotSupported(absl::StrCat("stream_options.", k),
                            "not supported");
      }
      RADIXKV_ASSIGN(r->include_usage,
                     Bool(value, "stream_options.include_usage"));
    }
  } else if (key == "user") {
    // An end-user id for abuse monitoring: does not change the output.
    if (!v.is_null() && !v.is_string()) {
      return BadParam(key, "user must be a string");
    }
  } else if (key == "presence_penalty" || key == "frequency_penalty") {
    if (v.is_null()) return absl::OkStatus();
    double p = 0;
    RADIXKV_ASSIGN(p, Number(v, key, -radixkv::v1::kMaxAbsPenalty,
                             radixkv::v1::kMaxAbsPenalty));
    if (key == "presence_penalty") {
      s->set_presence_penalty(static_cast<float>(p));
    } else {
      s->set_frequency_penalty(static_cast<float>(p));
    }
  } else if (key == "min_p") {
    if (v.is_null()) return absl::OkStatus();
    double p = 0;
    RADIXKV_ASSIGN(p, Number(v, key, 0, 1));
    s->set_min_p(static_cast<float>(p));
  } else if (key == "repetition_penalty") {
    if (v.is_null()) return absl::OkStatus();
    double p = 0;
    RADIXKV_ASSIGN(p, Number(v, key, 0, radixkv::v1::kMaxRepetitionPenalty));
    if (p == 0) return BadParam(key, "repetition_penalty must be in (0, 2]");
    s->set_repetition_penalty(static_cast<float>(p));
  } else if (key == "logit_bias") {
    if (!v.is_null() && !(v.is_object() && v.empty())) {
      return NotSupported(key, "not supported by this server");
    }
  } else if (key == "ignore_eos") {
    if (v.is_null()) return absl::OkStatus();
    bool ignore = false;
    RADIXKV_ASSIGN(ignore, Bool(v, key));
    s->set_ignore_eos(ignore);
  } else if (key == "priority") {
    if (v.is_null()) return absl::OkStatus();
    int64_t p = 0;
    RADIXKV_ASSIGN(
        p, Int(v, key, -radixkv::v1::kMaxPriority, radixkv::v1::kMaxPriority));
    // vLLM: lower values are served earlier; radixkv: higher.
    r->base.set_priority(static_cast<int32_t>(-p));
  } else if (key == "cache_salt") {
    if (v.is_null()) return absl::OkStatus();
    std::string salt;
    RADIXKV_ASSIGN(salt, String(v, key));
    r->base.set_cache_salt(salt);
  } else if (key == "prompt_logprobs") {
    if (v.is_null()) return absl::OkStatus();
    int64_t k = 0;
    RADIXKV_ASSIGN(k, Int(v, key, 0, radixkv::v1::kMaxLogprobs));
    r->prompt_logprobs = static_cast<int32_t>(k);
  } else {
    *handled = false;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> TokenIds(const Json& v,
                                              absl::string_view param) {
  std::vector<int32_t> ids;
  for (const Json& e : v) {
    int64_t id = 0;
    RADIXKV_ASSIGN(id, Int(e, param, 0, std::numeric_limits<int32_t>::max()));
    ids.push_back(static_cast<int32_t>(id));
  }
  if (ids.empty()) return BadParam(param, absl::StrCat(param, " is empty"));
  return ids;
}

// prompt: a string, a list of strings, a list of ids or a list of id lists.
absl::Status ParsePrompt(const Json& v, OpenAiRequest* r) {
  auto add_text = [&](const Json& e) -> absl::Status {
    if (e.get_ref<const std::string&>().empty()) {
      return BadParam("prompt", "prompt must not be empty");
    }
    r->prompts.push_back({e.get<std::string>(), {}});
    return absl::OkStatus();
  };
  if (v.is_string()) return add_text(v);
  if (!v.is_array() || v.empty()) {
    return BadParam("prompt",
                    "prompt must be a string, a list of strings, a list of "
                    "token ids or a list of token id lists");
  }
  if (v.size() > static_cast<size_t>(kMaxPromptsPerRequest) &&
      !v[0].is_number()) {
    return BadParam("prompt", absl::StrCat("at most ", kMaxPromptsPerRequest,
                                           " prompts per request"));
  }
  if (v[0].is_number()) {
    CompletionPrompt p;
    RADIXKV_ASSIGN(p.ids, TokenIds(v, "prompt"));
    r->prompts.push_back(std::move(p));
    return absl::OkStatus();
  }
  for (const Json& e : v) {
    if (e.is_string()) {
      if (absl::Status s = add_text(e); !s.ok()) return s;
    } else if (e.is_array()) {
      CompletionPrompt p;
      RADIXKV_ASSIGN(p.ids, TokenIds(e, "prompt"));
      r->prompts.push_back(std::move(p));
    } else {
      return BadParam("prompt",
                      "prompt list entries must be strings or "
                      "token id lists");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Json> ParseObject(absl::string_view body) {
  Json j = Json::parse(body.begin(), body.end(), nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError("the request body is not valid JSON");
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError("the request body must be a JSON object");
  }
  return j;
}

absl::Status Finish(OpenAiRequest* r) {
  if (r->model.empty()) return BadParam("model", "model is required");
  r->base.set_model(r->model);
  r->base.set_return_text(true);
  return absl::OkStatus();
}

// The worker returns logprobs only with at least one alternative: ask for
// max(1, k) and answer with k. Prompt logprobs serve the echoed prompt's
// part of the logprobs object (k alternatives) and vLLM's prompt_logprobs
// (p): the worker gives the larger count, most likely first, and each
// answer keeps its own first entries.
absl::Status SetLogprobs(OpenAiRequest* r) {
  if (r->top_logprobs.has_value()) {
    r->base.mutable_sampling()->set_logprobs(std::max(1, *r->top_logprobs));
  }
  if (r->prompt_logprobs.has_value() && r->stream) {
    // vLLM's check_logprobs: prompt logprobs are not streamed; a streamed 0
    // is accepted and answers nothing.
    if (*r->prompt_logprobs > 0) {
      return BadParam("prompt_logprobs",
                      "prompt_logprobs are not available when stream is true");
    }
    r->prompt_logprobs.reset();
  }
  std::optional<int32_t> prompt;
  if (r->echo && r->top_logprobs.has_value()) prompt = *r->top_logprobs;
  if (r->prompt_logprobs.has_value()) {
    prompt = std::max(prompt.value_or(0), *r->prompt_logprobs);
  }
  if (prompt.has_value())
    r->base.mutable_sampling()->mutable_prompt_logprobs()->set_top(*prompt);
  return absl::OkStatus();
}

absl::Status Unrecognized(const std::string& key) {
  return BadParam(
      key, absl::StrCat("unrecognized request argument supplied: ", key));
}

// OpenAI's sampling defaults (temperature 1, top_p 1) instead of radixkv's
// greedy default.
OpenAiRequest WithDefaults() {
  OpenAiRequest r;
  r.base.mutable_sampling()->set_temperature(1.0f);
  return r;
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseCompletionRequest(absl::string_view body) {
  Json j;
  RADIXKV_ASSIGN(j, ParseObject(body));
  OpenAiRequest r = WithDefaults();
  r.base.mutable_sampling()->set_max_new_tokens(kDefaultCompletionMaxTokens);
  bool have_prompt = false;
  bool max_tokens_zero = false;
  for (const auto& [key, v] : j.items()) {
    bool handled = false;
    if (key == "max_completion_tokens") return Unrecognized(key);
    if (key == "max_tokens" && v.is_number_integer() && v.get<int64_t>() == 0) {
      // Decided below: refused with a reason that depends on echo.
      max_tokens_zero = true;
      continue;
    }
    if (absl::Status s = ParseCommon(key, v, &r, &handled); !s.ok()) return s;
    if (handled) continue;
    if (key == "prompt") {
      if (absl::Status s = ParsePrompt(v, &r); !s.ok()) return s;
      have_prompt = true;
    } else if (key == "echo") {
      if (v.is_null()) continue;
      RADIXKV_ASSIGN(r.echo, Bool(v, key));
    } else if (key == "suffix") {
      if (!v.is_null()) return NotSupported(key, "suffix is not supported");
    } else if (key == "best_of") {
      if (!v.is_null() && !(v.is_number_integer() && v.get<int64_t>() == 1)) {
        return NotSupported(key, "best_of > 1 is not supported");
      }
    } else if (key == "logprobs") {
      // The legacy completions API: the k most likely alternatives per
      // token (0: only the sampled token's logprob).
      if (v.is_null()) continue;
      int64_t k = 0;
      RADIXKV_ASSIGN(k, Int(v, key, 0, radixkv::v1::kMaxLogprobs));
      r.top_logprobs = static_cast<int32_t>(k);
    } else {
      return Unrecognized(key);
    }
  }
  if (max_tokens_zero) {
    // OpenAI's echo with max_tokens 0 answers the prompt alone (to score
    // it); a request here always generates at least one token.
    const std::string range = absl::StrCat("max_tokens must be in [1, ",
                                           radixkv::v1::kMaxNewTokens, "]");
    return BadParam("max_tokens",
                    r.echo ? absl::StrCat("max_tokens 0 (echo the prompt "
                                          "without a completion) is not "
                                          "supported by this server: ",
                                          range)
                           : range);
  }
  if (!have_prompt) return BadParam("prompt", "prompt is required");
  if (absl::Status s = SetLogprobs(&r); !s.ok()) return s;
  if (absl::Status s = Finish(&r); !s.ok()) return s;
  if (r.include_usage && !r.stream) {
    return BadParam("stream_options",
                    "stream_options is only allowed when stream is true");
  }
  return r;
}

namespace {

// One message: role and content (a string, null, or text parts, joined
// with "\n" into one string as vLLM does for templates written for string
// content).
absl::StatusOr<Json> ParseMessage(const Json& m, size_t i) {
  const std::string where = absl::StrCat("messages[", i, "]");
  if (!m.is_object()) return BadParam(where, where + " must be an object");
  Json out = Json::object();
  for (const auto& [key, v] : m.items()) {
    const std::string param = absl::StrCat(where, ".", key);
    if (key == "role") {
      if (!v.is_string() || v.get_ref<const std::string&>().empty()) {
        return BadParam(param, param + " must be a non-empty string");
      }
      out["role"] = v;
    } else if (key == "name") {
      if (!v.is_string()) return BadParam(param, param + " must be a string");
      out["name"] = v;
    } else if (key == "content") {
      if (v.is_null() || v.is_string()) {
        out["content"] = v;
        continue;
      }
      if (!v.is_array()) {
        return BadParam(param, param + " must be a string or a list of parts");
      }
      std::vector<std::string> texts;
      for (size_t p = 0; p < v.size(); ++p) {
        const Json& part = v[p];
        const std::string part_param = absl::StrCat(param, "[", p, "]");
        auto type = part.is_object() ? part.find("type") : part.end();
        if (!part.is_object() || type == part.end() || !type->is_string()) {
          return BadParam(part_param, part_param + " must have a string type");
        }
        if (*type != "text") {
          return NotSupported(
              absl::StrCat(part_param, ".type"),
              absl::StrCat("content parts of type '", type->get<std::string>(),
                           "' are not supported"));
        }
        auto text = part.find("text");
        if (text == part.end() || !text->is_string()) {
          return BadParam(part_param, part_param + ".text must be a string");
        }
        texts.push_back(text->get<std::string>());
      }
      out["content"] = absl::StrJoin(texts, "\n");
    } else {
      return NotSupported(param, "not supported by this server");
    }
  }
  if (!out.contains("role")) {
    return BadParam(where + ".role", where + ".role is required");
  }
  if (!out.contains("content")) out["content"] = nullptr;
  return out;
}

absl::Status ParseMessages(const Json& v, OpenAiRequest* r) {
  if (!v.is_array() || v.empty()) {
    return BadParam("messages", "messages must be a non-empty list");
  }
  r->messages = Json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    Json m;
    RADIXKV_ASSIGN(m, ParseMessage(v[i], i));
    r->messages.push_back(std::move(m));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseChatRequest(absl::string_view body) {
  Json j;
  RADIXKV_ASSIGN(j, ParseObject(body));
  OpenAiRequest r = WithDefaults();
  bool have_messages = false;
  int32_t max_completion_tokens = 0;
  bool chat_logprobs = false;
  std::optional<int32_t> top_logprobs;
  for (const auto& [key, v] : j.items()) {
    bool handled = false;
    if (absl::Status s = ParseCommon(key, v, &r, &handled); !s.ok()) return s;
    if (handled) {
      if (key == "max_completion_tokens") {
        max_completion_tokens = r.base.sampling().max_new_tokens();
      }
      continue;
    }
    if (key == "messages") {
      if (absl::Status s = ParseMessages(v, &r); !s.ok()) return s;
      have_messages = true;
    } else if (key == "logprobs") {
      if (v.is_null()) continue;
      RADIXKV_ASSIGN(chat_logprobs, Bool(v, key));
    } else if (key == "top_logprobs") {
      if (v.is_null()) continue;
      int64_t k = 0;
      RADIXKV_ASSIGN(k, Int(v, key, 0, radixkv::v1::kMaxLogprobs));
      top_logprobs = static_cast<int32_t>(k);
    } else if (key == "response_format") {
      if (!v.is_null() &&
          !(v.is_object() && v.size() == 1 && v.value("type", "") == "text")) {
        return NotSupported(key, "only {\"type\": \"text\"} is supported");
      }
    } else if (key == "chat_template_kwargs") {
      if (!v.is_null() && !v.is_object()) {
        return BadParam(key, "chat_template_kwargs must be an object");
      }
      if (v.is_object()) r.chat_template_kwargs = v;
    } else if (key == "documents") {
      if (!v.is_null() && !v.is_array()) {
        return BadParam(key, "documents must be a list");
      }
      if (v.is_array()) r.documents = v;
    } else if (key == "add_generation_prompt") {
      RADIXKV_ASSIGN(r.add_generation_prompt, Bool(v, key));
    } else if (key == "continue_final_message") {
      if (!v.is_null() && !(v.is_boolean() && !v.get<bool>())) {
        return NotSupported(key, "not supported by this server");
      }
    } else if (key == "store" || key == "metadata" || key == "service_tier") {
      // Bookkeeping of OpenAI's platform: no effect on the output.
    } else if (key == "tools" || key == "tool_choice" || key == "functions" ||
               key == "function_call" || key == "parallel_tool_calls" ||
               key == "modalities" || key == "audio" ||
               key == "reasoning_effort" || key == "prediction" ||
               key == "web_search_options") {
      if (!v.is_null())
        return NotSupported(key, "not supported by this server");
    } else {
      return Unrecognized(key);
    }
  }
  if (max_completion_tokens > 0) {
    r.base.mutable_sampling()->set_max_new_tokens(max_completion_tokens);
  }
  if (!have_messages) return BadParam("messages", "messages is required");
  if (top_logprobs.has_value() && !chat_logprobs) {
    return BadParam("top_logprobs",
                    "top_logprobs is only allowed when logprobs is true");
  }
  if (chat_logprobs) r.top_logprobs = top_logprobs.value_or(0);
  if (absl::Status s = SetLogprobs(&r); !s.ok()) return s;
  if (absl::Status s = Finish(&r); !s.ok()) return s;
  if (r.include_usage && !r.stream) {
    return BadParam("stream_options",
                    "stream_options is only allowed when stream is true");
  }
  return r;
}

#undef RADIXKV_ASSIGN

}  // namespace radixkv::router::openai
