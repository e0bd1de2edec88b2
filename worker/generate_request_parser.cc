#include "worker/generate_request_parser.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/generate_request_checks.h"
#include "proto/prompt_text_limit.h"

namespace radixkv::worker {

namespace {

absl::Status CheckModel(const v1::GenerateRequest& request,
                        const std::string& model_name) {
  if (request.model().empty() || request.model() == model_name) {
    return absl::OkStatus();
  }
  // Echoed only when short: the status message travels in gRPC metadata
  // (8 KiB default limit on clients; a 100 kB name turned INVALID_ARGUMENT
  // into RESOURCE_EXHAUSTED).
  constexpr size_t kMaxEchoedModelBytes = 256;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model ",
                   request.model().size() <= kMaxEchoedModelBytes
                       ? absl::StrCat("'", request.model(), "'")
                       : absl::StrCat("of ", request.model().size(), " bytes"),
                   " (this worker serves '", model_name, "')"));
}

absl::StatusOr<SamplingParams> ParseSampling(
    const v1::SamplingParams& sp, const GenerateRequestLimits& limits) {
  SamplingParams sampling;
  sampling.temperature = sp.temperature();
  sampling.top_k = sp.top_k();
  sampling.top_p = sp.top_p() == 0.0f ? 1.0f : sp.top_p();
  sampling.max_new_tokens = sp.max_new_tokens();
  sampling.ignore_eos = sp.ignore_eos();
  sampling.seed = sp.seed();
  sampling.repetition_penalty =
      sp.repetition_penalty() == 0.0f ? 1.0f : sp.repetition_penalty();
  sampling.frequency_penalty = sp.frequency_penalty();
  sampling.presence_penalty = sp.presence_penalty();
  sampling.min_p = sp.min_p();
  sampling.logprobs = sp.logprobs();
  if (sp.has_prompt_logprobs()) {
    sampling.prompt_logprobs = sp.prompt_logprobs().top();
  }
  if (sp.top_k() > limits.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "top_k must be in [0, vocab_size=", limits.vocab_size, "]"));
  }
  for (int32_t id : sp.stop_token_ids()) {
    if (id < 0 || id >= limits.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stop token id ", id, " outside [0, ", limits.vocab_size, ")"));
    }
    sampling.stop_token_ids.push_back(id);
  }
  sampling.stop_strings.assign(sp.stop().begin(), sp.stop().end());
  if (absl::Status valid =
          ValidateSamplingParams(sampling, limits.max_new_tokens_limit);
      !valid.ok()) {
    return valid;
  }
  return sampling;
}

absl::StatusOr<std::vector<int32_t>> ParsePrompt(
    const v1::GenerateRequest& request, const GenerateRequestLimits& limits,
    const model::Tokenizer* tokenizer) {
  std::vector<int32_t> prompt;
  switch (request.prompt_case()) {
    case v1::GenerateRequest::kText: {
      if (request.text().empty()) {
        return absl::InvalidArgumentError("empty prompt");
      }
      if (tokenizer == nullptr) {
        return absl::InvalidArgumentError(
            "text prompts need a tokenizer; send token_ids");
      }
      const int64_t max_text_bytes =
          v1::MaxPromptTextBytes(limits.max_position_embeddings);
      if (static_cast<int64_t>(request.text().size()) > max_text_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "prompt text of ", request.text().size(),
            " bytes exceeds the limit of ", max_text_bytes, " bytes (",
            v1::kMaxPromptBytesPerPosition, " bytes x the model's context of ",
            limits.max_position_embeddings, " positions)"));
      }
      absl::StatusOr<std::vector<int32_t>> ids =
          tokenizer->Encode(request.text(), /*add_special_tokens=*/true);
      if (!ids.ok()) return ids.status();
      prompt = std::move(*ids);
      break;
    }
    case v1::GenerateRequest::kTokenIds:
      prompt.assign(request.token_ids().ids().begin(),
                    request.token_ids().ids().end());
      break;
    default:
      return absl::InvalidArgumentError("empty prompt (set text or token_ids)");
  }
  if (prompt.empty()) return absl::InvalidArgumentError("empty prompt");
  for (int32_t id : prompt) {
    if (id < 0 || id >= limits.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "prompt token id ", id, " outside [0, ", limits.vocab_size, ")"));
    }
  }
  return prompt;
}

// The context and the pool bound prompt + max_new_tokens; with n samples the
// pool holds the prompt's pages once and each sample's own pages (from the
// page of the last prompt token, which every sample recomputes).
absl::Status CheckFits(int64_t prompt_len, int32_t max_new_tokens,
                       int32_t num_samples,
                       const GenerateRequestLimits& limits) {
  const int64_t max_positions = limits.max_position_embeddings;
  if (prompt_len + max_new_tokens > max_positions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", prompt_len, " tokens) + max_new_tokens (", max_new_tokens,
        ") exceeds the model's context of ", max_positions));
  }
  // Slots the request can ever hold (the last generated token never gets
  // KV), in whole pages: more than the pool can never be served, so it is
  // rejected now instead of failing after streaming part of its output.
  const int64_t page_size = limits.page_size;
  const int64_t needed_slots = prompt_len + max_new_tokens - 1;
  int64_t needed_pages = (needed_slots + page_size - 1) / page_size;
  if (num_samples > 1) {
    const int64_t shared_pages = (prompt_len - 1) / page_size;
    const int64_t own_slots = needed_slots - shared_pages * page_size;
    needed_pages =
        shared_pages + num_samples * ((own_slots + page_size - 1) / page_size);
  }
  if (needed_pages * page_size > limits.capacity_slots) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "prompt (", prompt_len, " tokens) + max_new_tokens (", max_new_tokens,
        ")", num_samples > 1 ? absl::StrCat(" x n (", num_samples, ")") : "",
        " cannot fit the KV pool of ", limits.capacity_slots,
        " slots (page_size ", page_size, ") even when it is empty"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ParsedGenerateRequest> ParseGenerateRequest(
    const v1::GenerateRequest& request, const GenerateRequestLimits& limits,
    const model::Tokenizer* tokenizer) {
  if (absl::Status model = CheckModel(request, limits.model_name);
      !model.ok()) {
    return model;
  }
  if (absl::Status valid = v1::CheckModelIndependentFields(request);
      !valid.ok()) {
    return valid;
  }
  ParsedGenerateRequest parsed;
  absl::StatusOr<SamplingParams> sampling =
      ParseSampling(request.sampling(), limits);
  if (!sampling.ok()) return sampling.status();
  parsed.sampling = *std::move(sampling);
  if ((request.sampling().stop_size() > 0 || request.return_text()) &&
      tokenizer == nullptr) {
    return absl::InvalidArgumentError(
        "stop strings and return_text need a tokenizer; none is loaded");
  }
  absl::StatusOr<std::vector<int32_t>> prompt =
      ParsePrompt(request, limits, tokenizer);
  if (!prompt.ok()) return prompt.status();
  parsed.prompt = *std::move(prompt);
  if (absl::Status fits = CheckFits(static_cast<int64_t>(parsed.prompt.size()),
                                    parsed.sampling.max_new_tokens,
                                    v1::NumSamples(request), limits);
      !fits.ok()) {
    return fits;
  }
  parsed.cache_salt = request.cache_salt();
  parsed.priority = request.priority();
  parsed.disable_prefix_cache = request.disable_prefix_cache();
  parsed.return_text = request.return_text();
  parsed.num_samples = v1::NumSamples(request);
  return parsed;
}

}  // namespace radixkv::worker
