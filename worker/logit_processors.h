// The logit processors of one sampling step, in vLLM's order
// (vllm/model_executor/layers/utils.py apply_penalties, then
// vllm/model_executor/layers/sampler.py): repetition penalty (Hugging
// Face's RepetitionPenaltyLogitsProcessor), frequency and presence penalties
// (OpenAI's definitions), temperature, the log-softmax the logprobs are
// taken from, and the truncations top-k, top-p, min-p. Definitions in
// proto/radixkv/v1/common.proto (SamplingParams). All in float64; pure.
#ifndef RADIXKV_WORKER_LOGIT_PROCESSORS_H_
#define RADIXKV_WORKER_LOGIT_PROCESSORS_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace radixkv::worker {

// The penalties of one request; neutral values leave logits unchanged.
struct Penalties {
  // 1 = off; > 0.
  double repetition = 1;
  // 0 = off.
  double frequency = 0;
  double presence = 0;

  bool active() const {
    return repetition != 1 || frequency != 0 || presence != 0;
  }
};

// Applies `penalties` to `logits` ([vocab], in place): every token id of
// `prompt` or `output` (ids outside [0, vocab) are ignored) has its logit
// divided by repetition when positive, multiplied by it otherwise; then
// each token occurring c > 0 times in `output` loses frequency x c +
// presence.
void ApplyPenalties(const Penalties& penalties,
                    absl::Span<const int32_t> prompt,
                    absl::Span<const int32_t> output,
                    std::vector<double>* logits);

// log-softmax of logits / temperature ([vocab], float64, max-subtracted).
// temperature > 0.
std::vector<double> LogSoftmax(absl::Span<const double> logits,
                               double temperature);

// The `k` entries of `logprobs` with the largest values, largest first,
// lower id first on ties, as (token id, logprob). k is clamped to the vocab.
std::vector<std::pair<int32_t, double>> TopLogprobs(
    absl::Span<const double> logprobs, int32_t k);

// Token ids sorted by logit, descending, lower id first on ties, truncated
// to the tokens sampling may draw: the top_k first (0 = all), then the
// smallest prefix whose probability mass (softmax of logits / temperature)
// reaches top_p (token i is kept while the mass before it is < top_p; the
// first token is always kept), then those whose probability is at least
// min_p x the largest probability (min_p 0 = off). `probs` receives the
// unnormalized probabilities exp(logit / temperature - max) of the kept
// tokens, in the same order. temperature > 0, logits non-empty.
std::vector<int32_t> KeptCandidates(absl::Span<const double> logits,
                                    double temperature, int32_t top_k,
                                    double top_p, double min_p,
                                    std::vector<double>* probs);

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_LOGIT_PROCESSORS_H_
