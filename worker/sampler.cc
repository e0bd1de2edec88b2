#include "worker/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "worker/logit_processors.h"

namespace radixkv::worker {

absl::Status ValidateSamplingParams(const SamplingParams& params,
                                    int32_t max_new_tokens_limit) {
  if (!std::isfinite(params.temperature) || params.temperature < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature must be >= 0, got ", params.temperature));
  }
  if (params.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k must be >= 0, got ", params.top_k));
  }
  if (!(params.top_p > 0 && params.top_p <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_p must be in (0, 1], got ", params.top_p));
  }
  if (params.max_new_tokens < 1 ||
      params.max_new_tokens > max_new_tokens_limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be in [1, ", max_new_tokens_limit,
                     "], got ", params.max_new_tokens));
  }
  for (const std::string& s : params.stop_strings) {
    if (s.empty()) return absl::InvalidArgumentError("empty stop string");
  }
  if (!(params.repetition_penalty > 0 && params.repetition_penalty <= 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty must be in (0, 2], got ",
                     params.repetition_penalty));
  }
  if (!(std::abs(params.frequency_penalty) <= 2) ||
      !(std::abs(params.presence_penalty) <= 2)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frequency_penalty and presence_penalty must be in [-2, 2], got ",
        params.frequency_penalty, " and ", params.presence_penalty));
  }
  if (!(params.min_p >= 0 && params.min_p <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_p must be in [0, 1], got ", params.min_p));
  }
  if (params.logprobs < 0 || params.logprobs > 20) {
    return absl::InvalidArgumentError(
        absl::StrCat("logprobs must be in [0, 20], got ", params.logprobs));
  }
  if (params.prompt_logprobs < -1 || params.prompt_logprobs > 20) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt_logprobs must be in [0, 20] (-1 = off), got ",
                     params.prompt_logprobs));
  }
  return absl::OkStatus();
}

int32_t ArgMax(absl::Span<const float> logits) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(logits.size()); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed) {}

absl::StatusOr<int32_t> Sampler::Sample(absl::Span<const float> logits) {
  absl::StatusOr<SampledToken> sampled = SampleWithHistory(logits, {}, {});
  if (!sampled.ok()) return sampled.status();
  return sampled->token;
}

absl::StatusOr<SampledToken> Sampler::SampleWithHistory(
    absl::Span<const float> logits, absl::Span<const int32_t> prompt,
    absl::Span<const int32_t> output) {
  if (logits.empty()) return absl::InvalidArgumentError("empty logits");
  for (float x : logits) {
    if (std::isnan(x)) return absl::InvalidArgumentError("NaN in logits");
  }
  x_.assign(logits.begin(), logits.end());
  Penalties penalties;
  penalties.repetition = params_.repetition_penalty;
  penalties.frequency = params_.frequency_penalty;
  penalties.presence = params_.presence_penalty;
  ApplyPenalties(penalties, prompt, output, &x_);
  // top_k == 1 is greedy whatever the temperature.
  const bool greedy = params_.temperature == 0.0f || params_.top_k == 1;
  const double temperature = greedy ? 1.0 : params_.temperature;
  SampledToken out;
  if (greedy) {
    out.token = 0;
    for (int32_t i = 1; i < static_cast<int32_t>(x_.size()); ++i) {
      if (x_[i] > x_[out.token]) out.token = i;
    }
  } else {
    const std::vector<int32_t> kept = KeptCandidates(
        x_, temperature, params_.top_k, params_.top_p, params_.min_p, &probs_);
    double sum = 0;
    for (double p : probs_) sum += p;
    // One 53-bit uniform in [0, 1).
    const double u =
        static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0);
    const double target = u * sum;
    double acc = 0;
    out.token = kept.back();
    for (size_t i = 0; i < kept.size(); ++i) {
      acc += probs_[i];
      if (target < acc) {
        out.token = kept[i];
        break;
      }
    }
  }
  if (params_.logprobs > 0) {
    const std::vector<double> logprobs = LogSoftmax(x_, temperature);
    out.logprob = logprobs[out.token];
    out.top = TopLogprobs(logprobs, params_.logprobs);
  }
  return out;
}

StopChecker::StopChecker(std::vector<std::string> stop_strings)
    : stop_strings_(std::move(stop_strings)) {
  stop_strings_.erase(
      std::remove_if(stop_strings_.begin(), stop_strings_.end(),
                     [](const std::string& s) { return s.empty(); }),
      stop_strings_.end());
}

StopChecker::Result StopChecker::Append(absl::string_view delta) {
  Result r;
  if (stopped_) {
    r.stopped = true;
    return r;
  }
  pending_.append(delta.data(), delta.size());
  // Earliest complete match.
  size_t match = std::string::npos;
  for (const std::string& s : stop_strings_) {
    match = std::min(match, pending_.find(s));
  }
  if (match != std::string::npos) {
    r.emit = pending_.substr(0, match);
    r.stopped = true;
    stopped_ = true;
    pending_.clear();
    return r;
  }
  // Hold back the longest suffix that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& s : stop_strings_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (absl::string_view(pending_).substr(pending_.size() - len) ==
          absl::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  r.emit = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return r;
}

std::string StopChecker::Flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace radixkv::worker
