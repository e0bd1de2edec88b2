#include "worker/model_executor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "worker/logit_processors.h"
#include "worker/sampler.h"

namespace radixkv::worker {
namespace {

// SplitMix64 finalizer (Steele et al., "Fast splittable pseudorandom number
// generators", OOPSLA 2014): mixes (seed, step) into the seed of the fresh
// Sampler used when a row has no host sampler.
uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

absl::Status ValidatePromptTargets(const ForwardBatch& batch, size_t b,
                                   const SequenceSampling& s) {
  const size_t rows = batch.qo_indptr[b + 1] - batch.qo_indptr[b];
  const bool bad_targets =
      s.prompt_targets.size() > rows ||
      std::any_of(s.prompt_targets.begin(), s.prompt_targets.end(),
                  [](int32_t t) { return t < 0; });
  const bool needs_output =
      !s.prompt_targets.empty() &&
      (s.prompt_logprobs < 0 || s.prompt_logprobs_out == nullptr);
  if (s.prompt_logprobs < -1 || s.prompt_logprobs > 20 || bad_targets ||
      needs_output) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ForwardSample: sequence ", b, " has invalid prompt logprobs (",
        s.prompt_targets.size(), " targets for ", rows,
        " new tokens, prompt_logprobs ", s.prompt_logprobs,
        needs_output ? ", no output" : "", ")"));
  }
  return absl::OkStatus();
}

// Fills the prompt logprobs of every row of `sampling` from `logits`, the
// [num_tokens, vocab] logits of `batch`.
absl::Status FillPromptLogprobs(const ForwardBatch& batch,
                                absl::Span<const SequenceSampling> sampling,
                                absl::Span<const float> logits, size_t vocab) {
  for (size_t b = 0; b < sampling.size(); ++b) {
    const SequenceSampling& s = sampling[b];
    for (size_t i = 0; i < s.prompt_targets.size(); ++i) {
      const size_t row = batch.qo_indptr[b] + i;
      absl::StatusOr<SampledToken> lp =
          RawLogprobs(logits.subspan(row * vocab, vocab), s.prompt_targets[i],
                      s.prompt_logprobs);
      if (!lp.ok()) return lp.status();
      s.prompt_logprobs_out[i] = *std::move(lp);
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool WantsPromptLogprobs(absl::Span<const SequenceSampling> sampling) {
  return std::any_of(
      sampling.begin(), sampling.end(),
      [](const SequenceSampling& s) { return !s.prompt_targets.empty(); });
}

absl::StatusOr<SampledToken> RawLogprobs(absl::Span<const float> row,
                                         int32_t target, int32_t k) {
  if (target < 0 || static_cast<size_t>(target) >= row.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt logprob target ", target, " outside [0, ", row.size(), ")"));
  }
  const std::vector<double> x(row.begin(), row.end());
  const std::vector<double> logprobs = LogSoftmax(x, 1.0);
  SampledToken out;
  out.token = target;
  out.logprob = logprobs[target];
  out.top = TopLogprobs(logprobs, k);
  return out;
}

absl::Status ValidateSequenceSampling(
    const ForwardBatch& batch, absl::Span<const SequenceSampling> sampling) {
  if (batch.return_all_logits) {
    return absl::InvalidArgumentError(
        "ForwardSample samples one token per sequence; return_all_logits "
        "must be false");
  }
  const size_t num_seqs =
      batch.qo_indptr.empty() ? 0 : batch.qo_indptr.size() - 1;
  if (sampling.size() != num_seqs) {
    return absl::InvalidArgumentError(
        absl::StrCat("ForwardSample: ", sampling.size(),
                     " sampling entries for ", num_seqs, " sequences"));
  }
  for (size_t b = 0; b < sampling.size(); ++b) {
    const SequenceSampling& s = sampling[b];
    if (!std::isfinite(s.temperature) || s.temperature < 0 || s.top_k < 0 ||
        !(s.top_p > 0 && s.top_p <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ForwardSample: sequence ", b, " has invalid sampling (temperature ",
          s.temperature, ", top_k ", s.top_k, ", top_p ", s.top_p, ")"));
    }
    if (absl::Status st = ValidatePromptTargets(batch, b, s); !st.ok()) {
      return st;
    }
    if (!(s.repetition_penalty > 0 && s.repetition_penalty <= 2) ||
        !(std::abs(s.frequency_penalty) <= 2) ||
        !(std::abs(s.presence_penalty) <= 2) ||
        !(s.min_p >= 0 && s.min_p <= 1) || s.logprobs < 0 || s.logprobs > 20 ||
        (s.logprobs > 0 && s.sampled == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ForwardSample: sequence ", b,
          " has invalid processors (repetition_penalty ", s.repetition_penalty,
          ", frequency_penalty ", s.frequency_penalty, ", presence_penalty ",
          s.presence_penalty, ", min_p ", s.min_p, ", logprobs ", s.logprobs,
          s.logprobs > 0 && s.sampled == nullptr ? " without an output" : "",
          ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ModelExecutor::ForwardSample(
    const ForwardBatch& batch, absl::Span<const SequenceSampling> sampling,
    std::vector<int32_t>* token_ids) {
  if (token_ids == nullptr) {
    return absl::InvalidArgumentError("token_ids is null");
  }
  if (absl::Status st = ValidateSequenceSampling(batch, sampling); !st.ok()) {
    return st;
  }
  // Prompt logprobs need every row's logits; sampling reads each
  // sequence's last row.
  const bool all_rows = WantsPromptLogprobs(sampling);
  std::vector<float> logits;
  if (all_rows) {
    ForwardBatch every_row = batch;
    every_row.return_all_logits = true;
    if (absl::Status st = Forward(every_row, &logits); !st.ok()) return st;
  } else if (absl::Status st = Forward(batch, &logits); !st.ok()) {
    return st;
  }
  const size_t vocab = static_cast<size_t>(config().vocab_size);
  const size_t rows = all_rows ? batch.input_ids.size() : sampling.size();
  if (logits.size() != rows * vocab) {
    return absl::InternalError(absl::StrCat("Forward returned ", logits.size(),
                                            " logits for ", rows,
                                            " rows x vocab ", vocab));
  }
  if (all_rows) {
    if (absl::Status st = FillPromptLogprobs(batch, sampling, logits, vocab);
        !st.ok()) {
      return st;
    }
  }
  token_ids->assign(sampling.size(), -1);
  for (size_t b = 0; b < sampling.size(); ++b) {
    const SequenceSampling& s = sampling[b];
    if (!s.needs_token) continue;
    const size_t r = all_rows ? batch.qo_indptr[b + 1] - 1 : b;
    const absl::Span<const float> row(logits.data() + r * vocab, vocab);
    absl::StatusOr<SampledToken> token;
    if (s.host_sampler != nullptr) {
      token = s.host_sampler->SampleWithHistory(row, s.prompt, s.output);
    } else {
      SamplingParams params;
      params.temperature = s.temperature;
      params.top_k = s.top_k;
      params.top_p = s.top_p;
      params.repetition_penalty = s.repetition_penalty;
      params.frequency_penalty = s.frequency_penalty;
      params.presence_penalty = s.presence_penalty;
      params.min_p = s.min_p;
      params.logprobs = s.logprobs;
      params.seed = SplitMix64(s.seed ^ SplitMix64(s.step));
      Sampler sampler(params);
      token = sampler.SampleWithHistory(row, s.prompt, s.output);
    }
    (*token_ids)[b] = token.ok() ? token->token : kSamplingFailedToken;
    if (token.ok() && s.logprobs > 0) *s.sampled = *std::move(token);
  }
  return absl::OkStatus();
}

}  // namespace radixkv::worker
