#include "proto/generate_request_checks.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace radixkv::v1 {

bool IsValidRequestId(std::string_view id) {
  if (id.empty() || id.size() > kMaxRequestIdBytes) return false;
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != ':' && c != '-') {
      return false;
    }
  }
  return true;
}

absl::Status CheckRequestId(std::string_view id) {
  if (IsValidRequestId(id)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "request_id must be 1..128 bytes of [A-Za-z0-9._:-]");
}

absl::Status CheckModelIndependentFields(const GenerateRequest& request) {
  if (!request.request_id().empty()) {
    if (absl::Status s = CheckRequestId(request.request_id()); !s.ok()) {
      return s;
    }
  }
  if (request.priority() < -kMaxPriority || request.priority() > kMaxPriority) {
    return absl::InvalidArgumentError(absl::StrCat(
        "priority must be in [-1000, 1000], got ", request.priority()));
  }
  if (request.cache_salt().size() > kMaxCacheSaltBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cache_salt must be <= 256 bytes, got ", request.cache_salt().size()));
  }
  switch (request.prompt_case()) {
    case GenerateRequest::kText:
      if (request.text().empty()) {
        return absl::InvalidArgumentError("empty prompt");
      }
      break;
    case GenerateRequest::kTokenIds:
      if (request.token_ids().ids().empty()) {
        return absl::InvalidArgumentError("empty prompt");
      }
      for (int32_t id : request.token_ids().ids()) {
        if (id < 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("prompt token id ", id, " is negative"));
        }
      }
      break;
    case GenerateRequest::PROMPT_NOT_SET:
      return absl::InvalidArgumentError("no prompt: set text or token_ids");
  }
  const SamplingParams& sp = request.sampling();
  if (!(sp.temperature() >= 0 && sp.temperature() <= kMaxTemperature)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "temperature must be in [0, 100], got ", sp.temperature()));
  }
  if (sp.top_k() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be >= 0, got ", sp.top_k()));
  }
  if (!(sp.top_p() >= 0 && sp.top_p() <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "top_p must be in (0, 1] (0 = unset = 1), got ", sp.top_p()));
  }
  if (sp.max_new_tokens() < 1 || sp.max_new_tokens() > kMaxNewTokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_new_tokens must be in [1, 65536], got ", sp.max_new_tokens()));
  }
  for (int32_t id : sp.stop_token_ids()) {
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop token id ", id, " is negative"));
    }
  }
  if (sp.stop_size() > kMaxStopStrings) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most 16 stop strings, got ", sp.stop_size()));
  }
  for (const std::string& s : sp.stop()) {
    if (s.empty()) return absl::InvalidArgumentError("empty stop string");
    if (s.size() > kMaxStopStringBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("stop strings must be <= 256 bytes, got ", s.size()));
    }
  }
  return CheckSamplingControls(request);
}

absl::Status CheckSamplingControls(const GenerateRequest& request) {
  if (request.n() < 0 || request.n() > kMaxSamples) {
    return absl::InvalidArgumentError(
        absl::StrCat("n must be in [1, 64], got ", request.n()));
  }
  const SamplingParams& sp = request.sampling();
  if (sp.logprobs() < 0 || sp.logprobs() > kMaxLogprobs) {
    return absl::InvalidArgumentError(
        absl::StrCat("logprobs must be in [0, 20], got ", sp.logprobs()));
  }
  if (sp.has_prompt_logprobs() && (sp.prompt_logprobs().top() < 0 ||
                                   sp.prompt_logprobs().top() > kMaxLogprobs)) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt_logprobs must be in [0, 20], got ",
                     sp.prompt_logprobs().top()));
  }
  // The negated comparisons also refuse NaN.
  if (!(sp.repetition_penalty() >= 0 &&
        sp.repetition_penalty() <= kMaxRepetitionPenalty)) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty must be in [0, 2] (0 = unset = 1), "
                     "got ",
                     sp.repetition_penalty()));
  }
  if (!(std::abs(sp.frequency_penalty()) <= kMaxAbsPenalty)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frequency_penalty must be in [-2, 2], got ", sp.frequency_penalty()));
  }
  if (!(std::abs(sp.presence_penalty()) <= kMaxAbsPenalty)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "presence_penalty must be in [-2, 2], got ", sp.presence_penalty()));
  }
  if (!(sp.min_p() >= 0 && sp.min_p() <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_p must be in [0, 1], got ", sp.min_p()));
  }
  return absl::OkStatus();
}

}  // namespace radixkv::v1
