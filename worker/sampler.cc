#include "worker/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

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
  if (logits.empty()) return absl::InvalidArgumentError("empty logits");
  for (float x : logits) {
    if (std::isnan(x)) return absl::InvalidArgumentError("NaN in logits");
  }
  const int32_t vocab = static_cast<int32_t>(logits.size());
  // top_k == 1 is greedy whatever the temperature.
  if (params_.temperature == 0.0f || params_.top_k == 1) {
    return ArgMax(logits);
  }
  // Candidates sorted by logit, descending; ties by id (stable).
  order_.resize(vocab);
  std::iota(order_.begin(), order_.end(), 0);
  int32_t keep = vocab;
  if (params_.top_k > 0 && params_.top_k < vocab) keep = params_.top_k;
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (keep < vocab) {
    std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(),
                      by_logit);
  } else {
    std::sort(order_.begin(), order_.end(), by_logit);
  }
  // Softmax of logits / temperature over the kept candidates.
  const double inv_t = 1.0 / static_cast<double>(params_.temperature);
  const double max_scaled = static_cast<double>(logits[order_[0]]) * inv_t;
  probs_.resize(keep);
  double sum = 0;
  for (int32_t i = 0; i < keep; ++i) {
    probs_[i] =
        std::exp(static_cast<double>(logits[order_[i]]) * inv_t - max_scaled);
    sum += probs_[i];
  }
  // Top-p: keep token i while the mass before it is < top_p.
  if (params_.top_p < 1.0f) {
    double before = 0;
    int32_t n = 0;
    while (n < keep && (n == 0 || before < params_.top_p)) {
      before += probs_[n] / sum;
      ++n;
    }
    keep = n;
    sum = 0;
    for (int32_t i = 0; i < keep; ++i) sum += probs_[i];
  }
  // One 53-bit uniform in [0, 1).
  const double u =
      static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0);
  const double target = u * sum;
  double acc = 0;
  for (int32_t i = 0; i < keep; ++i) {
    acc += probs_[i];
    if (target < acc) return order_[i];
  }
  return order_[keep - 1];
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
