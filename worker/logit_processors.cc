#include "worker/logit_processors.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/container/flat_hash_map.h"

namespace radixkv::worker {

void ApplyPenalties(const Penalties& penalties,
                    absl::Span<const int32_t> prompt,
                    absl::Span<const int32_t> output,
                    std::vector<double>* logits) {
  if (!penalties.active()) return;
  const int32_t vocab = static_cast<int32_t>(logits->size());
  auto in_vocab = [vocab](int32_t id) { return id >= 0 && id < vocab; };
  std::vector<double>& x = *logits;
  if (penalties.repetition != 1) {
    // Each distinct id once, as HF's gather/scatter does.
    std::vector<bool> seen(vocab, false);
    auto penalize = [&](int32_t id) {
      if (!in_vocab(id) || seen[id]) return;
      seen[id] = true;
      x[id] = x[id] > 0 ? x[id] / penalties.repetition
                        : x[id] * penalties.repetition;
    };
    for (int32_t id : prompt) penalize(id);
    for (int32_t id : output) penalize(id);
  }
  if (penalties.frequency != 0 || penalties.presence != 0) {
    absl::flat_hash_map<int32_t, int32_t> counts;
    for (int32_t id : output) {
      if (in_vocab(id)) ++counts[id];
    }
    for (const auto& [id, c] : counts) {
      x[id] -= penalties.frequency * c + penalties.presence;
    }
  }
}

std::vector<double> LogSoftmax(absl::Span<const double> logits,
                               double temperature) {
  std::vector<double> out(logits.size());
  if (logits.empty()) return out;
  const double inv_t = 1.0 / temperature;
  double max_scaled = -INFINITY;
  for (double v : logits) max_scaled = std::max(max_scaled, v * inv_t);
  double sum = 0;
  for (double v : logits) sum += std::exp(v * inv_t - max_scaled);
  const double lse = max_scaled + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] * inv_t - lse;
  return out;
}

std::vector<std::pair<int32_t, double>> TopLogprobs(
    absl::Span<const double> logprobs, int32_t k) {
  const int32_t vocab = static_cast<int32_t>(logprobs.size());
  k = std::clamp(k, 0, vocab);
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int32_t a, int32_t b) {
                      return logprobs[a] > logprobs[b] ||
                             (logprobs[a] == logprobs[b] && a < b);
                    });
  std::vector<std::pair<int32_t, double>> top(k);
  for (int32_t i = 0; i < k; ++i) top[i] = {ids[i], logprobs[ids[i]]};
  return top;
}

std::vector<int32_t> KeptCandidates(absl::Span<const double> logits,
                                    double temperature, int32_t top_k,
                                    double top_p, double min_p,
                                    std::vector<double>* probs) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  int32_t keep = vocab;
  if (top_k > 0 && top_k < vocab) keep = top_k;
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (keep < vocab) {
    std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                      by_logit);
  } else {
    std::sort(order.begin(), order.end(), by_logit);
  }
  const double inv_t = 1.0 / temperature;
  const double max_scaled = logits[order[0]] * inv_t;
  probs->resize(keep);
  double sum = 0;
  for (int32_t i = 0; i < keep; ++i) {
    (*probs)[i] = std::exp(logits[order[i]] * inv_t - max_scaled);
    sum += (*probs)[i];
  }
  if (top_p < 1) {
    double before = 0;
    int32_t n = 0;
    while (n < keep && (n == 0 || before < top_p)) {
      before += (*probs)[n] / sum;
      ++n;
    }
    keep = n;
  }
  if (min_p > 0) {
    // probs[0] is the largest (exp(0) = 1 before normalization); the
    // threshold is relative, so renormalizing after top-k/top-p changes
    // nothing.
    const double threshold = min_p * (*probs)[0];
    int32_t n = 1;
    while (n < keep && (*probs)[n] >= threshold) ++n;
    keep = n;
  }
  probs->resize(keep);
  order.resize(keep);
  return order;
}

}  // namespace radixkv::worker
