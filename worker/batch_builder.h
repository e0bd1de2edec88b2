// The batch of one scheduler step, from the running sequences: which ones
// take part and how many tokens each computes (PlanBatch: one token per
// generating sequence, prefill chunks under the step's prefill budget), the
// ForwardBatch the executor runs (BuildForwardBatch: input_ids, positions,
// qo_indptr, kv_indptr, kv_indices, out_cache_loc, copy ops; semantics in
// worker/model_executor.h) and each row's sampling arguments
// (BuildSequenceSampling). Pure: reads the sequences, changes nothing
// (the executor later writes the prompt logprobs it is pointed to).
#ifndef RADIXKV_WORKER_BATCH_BUILDER_H_
#define RADIXKV_WORKER_BATCH_BUILDER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "worker/model_executor.h"
#include "worker/sequence.h"

namespace radixkv::worker {

// One sequence's part of a step.
struct BatchEntry {
  Sequence* seq = nullptr;
  // Tokens computed this step: positions [num_computed, num_computed +
  // chunk).
  int32_t chunk = 0;
  // Part of the prompt (else the one token of a generating sequence).
  bool prefill = false;
};

struct BatchPlan {
  // In the order of the running sequences.
  std::vector<BatchEntry> entries;
  // Generating sequences left out: their lease has no slot for the next
  // token yet (they wait for a Grow).
  int64_t stalled = 0;
  // Sum of the prefill chunks, tokens.
  int64_t prefill_tokens = 0;
};

// Every running sequence with tokens to compute and lease slots for them:
// a generating sequence computes its last token, a prefilling one the next
// chunk of its prompt, chunks taken in order from `prefill_budget` tokens
// (a sequence the budget no longer reaches waits).
BatchPlan PlanBatch(absl::Span<const std::unique_ptr<Sequence>> running,
                    int32_t prefill_budget);

// The forward of `entries` (non-empty): a decode batch when every chunk is
// one token (kv_indices then include the new token's slot), an extend batch
// otherwise (kv_indices cover the computed prefix only). Copy ops pending on
// the sequences come first, in entry order.
ForwardBatch BuildForwardBatch(absl::Span<const BatchEntry> entries);

// Per entry: whether a token is drawn (the chunk reaches the end of the
// sequence's tokens) and the request's sampling parameters, seed, step
// (tokens generated so far), host sampler and token history (prompt and
// output, views of Sequence::tokens). `sampled` is left null (the caller
// provides the logprob outputs); a prefill chunk of a request with pending
// prompt logprobs gets its prompt_targets (a view of Sequence::tokens) and
// prompt_logprobs_out (into Sequence::prompt_logprobs, which the executor
// fills).
std::vector<SequenceSampling> BuildSequenceSampling(
    absl::Span<const BatchEntry> entries);

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_BATCH_BUILDER_H_
