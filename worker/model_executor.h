// ModelExecutor: the interface between the continuous-batching scheduler and
// a backend that runs a LLaMA-family model over the paged KV pool (CPU:
// worker/cpu/cpu_model_executor.h, GPU: worker/gpu/gpu_model_executor.h). The
// scheduler builds a ForwardBatch from the cache service's
// lease (kv_indices, copy ops) and its own slot assignments (out_cache_loc);
// the executor runs the copies, writes the new tokens' K/V into the pool and
// returns logits (Forward) or the sampled next tokens (ForwardSample). See
// docs/architecture.md "One request" steps 3-4 and the extend semantics of
// docs/background.md §3.
#ifndef RADIXKV_WORKER_MODEL_EXECUTOR_H_
#define RADIXKV_WORKER_MODEL_EXECUTOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "model/model_config.h"
#include "worker/kernels/cpu/copy_blocks.h"
#include "worker/sampler.h"

namespace radixkv::worker {

// One forward step over a ragged batch of B sequences.
//
// Extend (prefill / chunked prefill / prefix reuse), is_decode == false:
//   sequence b computes qo_indptr[b+1]-qo_indptr[b] new tokens on top of a
//   cached prefix of kv_indptr[b+1]-kv_indptr[b] tokens whose slots are
//   kv_indices[kv_indptr[b] .. kv_indptr[b+1]) (prefix only, new tokens NOT
//   included). A prefix of 0 tokens is a plain prefill.
// Decode, is_decode == true:
//   every sequence has exactly one new token (qo_indptr = 0,1,...,B) and
//   kv_indices cover the whole context INCLUDING the new token's slot (which
//   equals out_cache_loc[b]).
// In both modes the new tokens' K/V are written to out_cache_loc before
// attention reads them, and copy_ops (cache-service copy-on-write of partial
// pages) are executed before anything else.
struct ForwardBatch {
  // [num_tokens] token ids computed this step, concatenated per sequence.
  std::vector<int32_t> input_ids;
  // [num_tokens] absolute position of each token in its sequence (RoPE).
  std::vector<int32_t> positions;
  // [B+1] prefix sums of new tokens per sequence.
  std::vector<int32_t> qo_indptr;
  // [B+1] cached prefix per sequence (extend) or whole context including the
  // current token (decode), as prefix sums into kv_indices.
  std::vector<int32_t> kv_indptr;
  // [kv_indptr[B]] pool slots (slot = page * page_size + offset).
  std::vector<int64_t> kv_indices;
  // [num_tokens] pool slot that receives each new token's K/V.
  std::vector<int64_t> out_cache_loc;
  // Every sequence has exactly one new token; see above.
  bool is_decode = false;
  // Executed (in order) before the forward.
  std::vector<PageCopy> copy_ops;
  // false: logits [B, vocab] for the last token of each sequence;
  // true: logits [num_tokens, vocab] for every new token.
  bool return_all_logits = false;
};

// How ForwardSample picks the next token of one sequence of the batch (the
// token after its last new token).
//
// Seeds reproduce per backend: the host path (the default ForwardSample)
// draws from the request's std::mt19937_64 stream (Sampler), device backends
// from a counter-based stream keyed by (seed, step). Both are deterministic
// for a given seed and independent of batch composition, but the same seed
// gives different tokens on the two backends when temperature > 0. Greedy
// (temperature 0) is the argmax with the lowest id on ties everywhere.
struct SequenceSampling {
  // false: this sequence needs no token this step (a prefill chunk that does
  // not finish its prompt); nothing is drawn, no random number is consumed
  // and token_ids[b] is -1.
  bool needs_token = true;
  // As SamplingParams (worker/sampler.h): 0 = greedy.
  float temperature = 0.0f;
  // 0 = off.
  int32_t top_k = 0;
  // 1 = off.
  float top_p = 1.0f;
  // The request's seed.
  uint64_t seed = 0;
  // Index of this token in the request's output (0 = first generated token);
  // the counter of device random streams.
  uint64_t step = 0;
  // Logit processors (worker/logit_processors.h; SamplingParams): 1, 0, 0,
  // 0 = off.
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  float min_p = 0.0f;
  // Top alternatives with the sampled token's logprob, [0, 20]; 0 = none.
  int32_t logprobs = 0;
  // The request's token history for the penalties: its prompt and the
  // tokens it generated so far (valid during the call).
  absl::Span<const int32_t> prompt;
  absl::Span<const int32_t> output;
  // Receives the sampled token with its logprobs when logprobs > 0 (not
  // null then; untouched otherwise).
  SampledToken* sampled = nullptr;
  // Prompt logprobs (SamplingParams.prompt_logprobs): -1 = off; else the
  // top alternatives returned, [0, 20]. The first prompt_targets.size()
  // new tokens of this sequence predict prompt tokens: new token i is
  // followed by prompt token prompt_targets[i] (>= 0), and
  // prompt_logprobs_out[i] receives that token's logprob and the
  // prompt_logprobs most likely tokens of the log-softmax of the row's
  // logits as the model gives them (no processor, temperature 1).
  // Independent of needs_token: every prefill chunk has such rows.
  int32_t prompt_logprobs = -1;
  absl::Span<const int32_t> prompt_targets;
  // [prompt_targets.size()]; not null when prompt_targets is not empty.
  SampledToken* prompt_logprobs_out = nullptr;
  // The request's host sampler (same parameters, stream seeded with `seed`,
  // advanced once per sampled token): the default ForwardSample draws from
  // it, so the host path gives exactly the tokens of Forward + Sampler.
  // Device backends ignore it. nullptr: the default implementation draws
  // from a fresh Sampler seeded with a mix of (seed, step).
  Sampler* host_sampler = nullptr;
};

// token_ids value of a ForwardSample row that needed a token but could not be
// sampled (its logits are not finite): the scheduler fails that request alone.
inline constexpr int32_t kSamplingFailedToken = -2;

// A backend that owns model weights and a paged KV pool and runs forwards.
// Not thread-safe: one Forward at a time (the scheduler's step loop).
class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;

  // Architecture of the loaded model.
  virtual const model::ModelConfig& config() const = 0;

  // Runs one step. `logits` is resized and filled with fp32 logits, row-major
  // [B, vocab] (or [num_tokens, vocab] with return_all_logits).
  // Errors: INVALID_ARGUMENT for inconsistent metadata (indptr sizes or
  // monotonicity, out-of-range slots, positions, token ids, decode batches
  // with a sequence of != 1 new token, bad copy ops); nothing is written to
  // the pool in that case. INTERNAL for backend failures.
  virtual absl::Status Forward(const ForwardBatch& batch,
                               std::vector<float>* logits) = 0;

  // Runs one step and samples the next token of every sequence:
  // `token_ids` is resized to B (sampling.size() must be B; -1 for rows with
  // needs_token == false, and kSamplingFailedToken for a row that needs a
  // token but whose logits cannot be sampled, e.g. all NaN: only that
  // sequence fails, the rest of the batch goes on). batch.return_all_logits
  // must be false. Only the token ids need to leave a device backend (no B x
  // vocab logits copy). The default implementation runs Forward and samples
  // each row on the host (SequenceSampling::host_sampler); device backends
  // override it. Errors: those of Forward; INVALID_ARGUMENT for a sampling size
  // other than B, return_all_logits, or invalid sampling values (temperature <
  // 0 or not finite, top_k < 0, top_p outside (0, 1], repetition_penalty
  // outside (0, 2], frequency or presence penalty outside [-2, 2], min_p
  // outside [0, 1], logprobs outside [0, 20] or without `sampled`,
  // prompt_targets longer than the sequence's new tokens, negative, or
  // without prompt_logprobs in [0, 20] and an output).
  // With prompt_targets, the logits of those rows are computed as well
  // (in chunks under a device backend's logit-row bound).
  virtual absl::Status ForwardSample(
      const ForwardBatch& batch, absl::Span<const SequenceSampling> sampling,
      std::vector<int32_t>* token_ids);

  // Number of token slots in the KV pool (num_pages * page_size).
  virtual int64_t capacity_slots() const = 0;

  // Tokens per page of the KV pool.
  virtual int32_t page_size() const = 0;

  // Human-readable device name, e.g. "cpu" or "cuda:0".
  virtual std::string device() const = 0;
};

// The ForwardSample argument rules shared by every backend (see
// ModelExecutor::ForwardSample): INVALID_ARGUMENT naming the first violation.
// Does not validate `batch` itself (Forward does).
absl::Status ValidateSequenceSampling(
    const ForwardBatch& batch, absl::Span<const SequenceSampling> sampling);

// True when a row of `sampling` has prompt_targets (its logits rows are
// needed beyond the last token of each sequence).
bool WantsPromptLogprobs(absl::Span<const SequenceSampling> sampling);

// The raw logprob of `target` and the `k` most likely tokens of `row`
// (fp32 [vocab] logits; log-softmax in float64, temperature 1; logits that
// are not finite give NaN logprobs, as the device kernel's).
// INVALID_ARGUMENT for a target outside [0, vocab).
absl::StatusOr<SampledToken> RawLogprobs(absl::Span<const float> row,
                                         int32_t target, int32_t k);

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_MODEL_EXECUTOR_H_
