// OutputProcessor: what one sampled token does to its request: the finish
// reason it causes (a stop token id, EOS, a stop string, max_new_tokens),
// the text delta it adds (incremental detokenization, text held back while
// it may start a stop string, released or cut at the end), and the
// GenerateEvent streamed for it. Also the final event of a request that
// ends without a token and the check of the executor's sampled ids.
#ifndef RADIXKV_WORKER_OUTPUT_PROCESSOR_H_
#define RADIXKV_WORKER_OUTPUT_PROCESSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "radixkv/v1/common.pb.h"
#include "worker/model_executor.h"
#include "worker/request_stream.h"
#include "worker/sequence.h"

namespace radixkv::worker {

class OutputProcessor {
 public:
  // `eos_token_ids`: the ids that end a request with EOS (unless
  // ignore_eos), as MergeEosTokenIds gives them.
  explicit OutputProcessor(std::vector<int32_t> eos_token_ids)
      : eos_token_ids_(std::move(eos_token_ids)) {}

  // Appends the sampled `token` (in [0, vocab_size)) to `seq` (tokens,
  // num_generated, its detokenizer and stop checker) and returns its event:
  // the token id, the text delta when seq->return_text, usage, elapsed_s at
  // `now`, and finished with the finish reason when the token ends the
  // request. A stop string cuts the text before it (the token id is still
  // sent); at any other end the held-back text is flushed.
  GenerateEvent AppendToken(Sequence* seq, int32_t token, absl::Time now) const;

 private:
  // STOP for a stop token id, EOS for an EOS id (unless ignore_eos), else
  // UNSPECIFIED.
  v1::FinishReason TokenFinishReason(const Sequence& seq, int32_t token) const;
  // The text delta of `token`; sets *reason to STOP when a stop string
  // matched and no reason was set.
  std::string TextDelta(Sequence* seq, int32_t token,
                        v1::FinishReason* reason) const;

  const std::vector<int32_t> eos_token_ids_;
};

// The ids a model stops on: config.json's eos_token_id (`model_config`)
// followed by those of the tokenizer's folder (generation_config.json, else
// config.json, then tokenizer_config.json's eos_token:
// model::TokenizerFiles::eos_token_ids) not already listed. Llama 3
// Instruct stops on several (<|end_of_text|>, <|eom_id|>, <|eot_id|>).
std::vector<int32_t> MergeEosTokenIds(
    absl::Span<const int32_t> model_config,
    absl::Span<const int32_t> tokenizer_files);

// The final event of a request that ends without a token: finished,
// `status` (non-OK), `reason` (ABORT for aborts, UNSPECIFIED for failures),
// usage so far and elapsed_s at `now`.
GenerateEvent EndEvent(const Sequence& seq, absl::Status status,
                       v1::FinishReason reason, absl::Time now);

// The proto form of a sampled token's logprobs (GenerateResponse.logprobs).
v1::TokenLogprobs ToTokenLogprobs(const SampledToken& sampled);

// Moves `seq`'s computed prompt logprobs into `event` (the event of its
// first token) when they are pending, and marks them sent.
void TakePromptLogprobs(Sequence* seq, GenerateEvent* event);

// OK when the executor returned one id per sequence and every id that was
// needed is in [0, vocab_size) or kSamplingFailedToken; INTERNAL otherwise
// ("executor returned N tokens for M sequences", "executor sampled token T
// outside the vocabulary of V").
absl::Status CheckSampledTokens(absl::Span<const int32_t> token_ids,
                                absl::Span<const SequenceSampling> sampling,
                                int32_t vocab_size);

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_OUTPUT_PROCESSOR_H_
