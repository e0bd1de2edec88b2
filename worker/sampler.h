// Token sampling for one request: greedy, temperature, top-k, top-p with a
// per-request seed; stop conditions (stop token ids, stop strings matched on
// the detokenized text).
#ifndef RADIXKV_WORKER_SAMPLER_H_
#define RADIXKV_WORKER_SAMPLER_H_

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace radixkv::worker {

// Sampling parameters of one request (mirrors radixkv.v1.SamplingParams).
struct SamplingParams {
  // 0 = greedy (argmax, lowest id on ties); > 0 divides the logits.
  float temperature = 0.0f;
  // Keep only the k most likely tokens; 0 = off.
  int32_t top_k = 0;
  // Nucleus: keep the smallest prefix of the sorted distribution whose mass
  // reaches top_p (token i is kept while the mass before it is < top_p; the
  // top token is always kept); 1 = off.
  float top_p = 1.0f;
  // Seed of this request's random stream. Equal seeds and equal logits give
  // equal tokens, independent of batch composition.
  uint64_t seed = 0;
  // Generation stops when one of these ids is sampled (the id is emitted).
  std::vector<int32_t> stop_token_ids;
  // Generation stops when the text contains one of these; the text is cut
  // before the match (see StopChecker).
  std::vector<std::string> stop_strings;
  // Maximum number of generated tokens, >= 1.
  int32_t max_new_tokens = 16;
  // Do not stop at the model's EOS ids.
  bool ignore_eos = false;
  // Logit processors (definitions in common.proto SamplingParams and
  // worker/logit_processors.h): 1 = off; > 0.
  float repetition_penalty = 1.0f;
  // 0 = off.
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  // 0 = off; in [0, 1].
  float min_p = 0.0f;
  // Top alternatives returned with each token's logprob, [0, 20]; 0 = no
  // logprobs.
  int32_t logprobs = 0;
  // Prompt logprobs: -1 = off; else the top alternatives returned with each
  // prompt token's logprob, [0, 20] (raw logits: no processor, temperature
  // 1; common.proto SamplingParams.prompt_logprobs).
  int32_t prompt_logprobs = -1;
};

// One sampled token and, when SamplingParams.logprobs > 0, its logprob and
// the top alternatives (log-softmax in float64 of the penalized logits over
// the temperature, 1 when greedy, before truncation).
struct SampledToken {
  int32_t token = -1;
  double logprob = 0;
  // (token id, logprob), most likely first; empty without logprobs.
  std::vector<std::pair<int32_t, double>> top;
};

// INVALID_ARGUMENT unless temperature >= 0 and finite, top_k >= 0,
// 0 < top_p <= 1, max_new_tokens in [1, max_new_tokens_limit], no empty stop
// string, repetition_penalty in (0, 2], frequency and presence penalties in
// [-2, 2], min_p in [0, 1], logprobs in [0, 20], prompt_logprobs in
// [-1, 20].
absl::Status ValidateSamplingParams(const SamplingParams& params,
                                    int32_t max_new_tokens_limit);

// Draws tokens from logits for one request. Order of the transforms as in
// vLLM's sampler (worker/logit_processors.h): penalties, temperature, then
// top-k, top-p, min-p, then a draw from the renormalized distribution (fp64).
// Each Sample() with temperature > 0 consumes exactly one 53-bit uniform
// from a std::mt19937_64 seeded with params.seed, so the stream is
// reproducible across runs and platforms.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // `logits`: [vocab] fp32 for the next position. Returns the token id.
  // INVALID_ARGUMENT for empty logits or NaN logits. No penalty history
  // (prompt and output empty).
  absl::StatusOr<int32_t> Sample(absl::Span<const float> logits);

  // As Sample, with the request's `prompt` and `output` so far for the
  // penalties, and the logprobs when params.logprobs > 0.
  absl::StatusOr<SampledToken> SampleWithHistory(
      absl::Span<const float> logits, absl::Span<const int32_t> prompt,
      absl::Span<const int32_t> output);

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  // Scratch, reused across calls.
  std::vector<double> x_;
  std::vector<double> probs_;
};

// Greedy choice: index of the largest logit (lowest index on ties).
int32_t ArgMax(absl::Span<const float> logits);

// Finds stop strings in streamed text. Feed every detokenized delta through
// Append(); it returns the part that is safe to show. Text that could be the
// start of a stop string is held back until it is disambiguated; once a stop
// string appears, the text before it is released and stopped() is true.
class StopChecker {
 public:
  explicit StopChecker(std::vector<std::string> stop_strings);

  struct Result {
    std::string emit;      // text to stream now
    bool stopped = false;  // a stop string matched (it is not in `emit`)
  };

  // Adds a delta of generated text. After a stop, returns {"", true}.
  Result Append(absl::string_view delta);

  // End of generation without a stop string: releases the held-back text.
  std::string Flush();

  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stop_strings_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_SAMPLER_H_
