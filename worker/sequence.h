// Sequence: one request inside the worker's scheduler, from its arrival to
// its end (waiting, running, preempted and waiting again). Owned by the
// scheduler thread once taken from the inbox.
#ifndef RADIXKV_WORKER_SEQUENCE_H_
#define RADIXKV_WORKER_SEQUENCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "model/tokenizer/incremental_detokenizer.h"
#include "worker/model_executor.h"
#include "worker/request_stream.h"
#include "worker/sampler.h"

namespace radixkv::worker {

// The n samples of one request (GenerateRequest.n > 1), shared by its
// sequences: the request ends when the last one does.
struct SampleGroup {
  // Samples not ended yet.
  int32_t live = 0;
  // The first failure of a sample: the request's final status.
  absl::Status status;
};

struct Sequence {
  std::string request_id;
  std::shared_ptr<RequestStream> stream;
  std::string cache_salt;
  int32_t priority = 0;
  bool disable_prefix_cache = false;
  bool return_text = false;
  SamplingParams sampling;
  std::unique_ptr<Sampler> sampler;
  // Present when text is returned or stop strings are set.
  std::unique_ptr<model::IncrementalDetokenizer> detokenizer;
  std::unique_ptr<StopChecker> stop_checker;

  // Prompt followed by generated tokens. The last generated token has no KV
  // yet (it is the input of the next step).
  std::vector<int32_t> tokens;
  int32_t prompt_len = 0;
  int32_t num_generated = 0;

  // The lease, while admitted.
  bool has_lease = false;
  uint64_t lease_id = 0;
  int64_t lease_epoch = 0;
  // Tokens given to Acquire (the lease's prompt); Commit needs at least this
  // many written tokens.
  int64_t acquired_len = 0;
  // Slot of every position of the lease: [acquired_len + reserve + grown].
  std::vector<int64_t> kv_indices;
  // Copy ops received but not yet executed by a forward.
  std::vector<PageCopy> pending_copies;
  // Positions [0, num_computed) have their KV in the pool.
  int64_t num_computed = 0;
  // The computed prompt was inserted into the tree with a keep_lease Commit
  // (or that was tried) since the last admission.
  bool prefill_committed = false;
  uint64_t admission_order = 0;

  // Usage.cached_tokens: prefix reused at the first admission.
  bool admitted_once = false;
  int32_t cached_tokens = 0;

  absl::Time arrival;
  absl::Time last_token_time;

  // Parallel sampling. A request with n > 1 is one sequence, the parent
  // (num_samples = n), until its prompt is computed up to the last token;
  // the scheduler then forks its lease (CacheService.Fork) into n children
  // (num_samples = 1, sample_index 0..n-1) that share the prompt's pages,
  // and each child computes the last prompt token into its own copy of the
  // shared partial page and draws its first token from its own logits.
  int32_t num_samples = 1;
  int32_t sample_index = 0;
  // Null for n = 1.
  std::shared_ptr<SampleGroup> group;

  // Prompt logprobs (sampling.prompt_logprobs >= 0): entry i is for prompt
  // token i + 1, filled as the prefill chunks are computed ([prompt_len -
  // 1] while pending) and sent once, with sample 0's first token. A parent
  // hands them to its child of sample index 0.
  std::vector<SampledToken> prompt_logprobs;
  bool prompt_logprobs_sent = false;

  // Prompt logprobs still to compute: every prompt position must then be
  // computed, so Acquire matches no cached prefix.
  bool wants_prompt_logprobs() const {
    return sampling.prompt_logprobs >= 0 && !prompt_logprobs_sent;
  }
  // Acquire may reuse a cached prefix.
  bool reuses_prefix() const {
    return !disable_prefix_cache && !wants_prompt_logprobs();
  }

  bool in_prefill() const { return num_computed < acquired_len; }
  // Positions this sequence computes before its next fork or token: a parent
  // stops before the last prompt token.
  int64_t compute_end() const {
    return num_samples > 1 ? prompt_len - 1
                           : static_cast<int64_t>(tokens.size());
  }
  // Total positions whose KV this request can ever need: the last generated
  // token is never computed.
  int64_t max_slots_needed() const {
    return static_cast<int64_t>(prompt_len) + sampling.max_new_tokens - 1;
  }
  // Tokens still to compute if it started over now (prompt and generated
  // tokens without KV, plus the tokens it may still generate): a waiting
  // sequence's share of WorkerLoad.outstanding_tokens.
  int64_t outstanding_tokens_from_scratch() const {
    return static_cast<int64_t>(tokens.size()) +
           static_cast<int64_t>(num_samples) * sampling.max_new_tokens -
           num_generated;
  }
};

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_SEQUENCE_H_
