// ModelExecutor: the interface between the continuous-batching scheduler and
// a backend that runs a LLaMA-family model over the paged KV pool (CPU now,
// GPU later). The scheduler builds a ForwardBatch from the cache service's
// lease (kv_indices, copy ops) and its own slot assignments (out_cache_loc);
// the executor runs the copies, writes the new tokens' K/V into the pool and
// returns logits. See shared/notes/design-brief.md "One request" steps 3-4 and
// the SGLang extend semantics in seed part 3.
#ifndef RADIXKV_WORKER_MODEL_EXECUTOR_H_
#define RADIXKV_WORKER_MODEL_EXECUTOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "worker/kernels/cpu/copy_blocks.h"
#include "worker/model/model_config.h"

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

// A backend that owns model weights and a paged KV pool and runs forwards.
// Not thread-safe: one Forward at a time (the scheduler's step loop).
class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;

  // Architecture of the loaded model.
  virtual const ModelConfig& config() const = 0;

  // Runs one step. `logits` is resized and filled with fp32 logits, row-major
  // [B, vocab] (or [num_tokens, vocab] with return_all_logits).
  // Errors: INVALID_ARGUMENT for inconsistent metadata (indptr sizes or
  // monotonicity, out-of-range slots, positions, token ids, decode batches
  // with a sequence of != 1 new token, bad copy ops); nothing is written to
  // the pool in that case. INTERNAL for backend failures.
  virtual absl::Status Forward(const ForwardBatch& batch,
                               std::vector<float>* logits) = 0;

  // Number of token slots in the KV pool (num_pages * page_size).
  virtual int64_t capacity_slots() const = 0;

  // Tokens per page of the KV pool.
  virtual int32_t page_size() const = 0;

  // Human-readable device name, e.g. "cpu" or "cuda:0".
  virtual std::string device() const = 0;
};

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_MODEL_EXECUTOR_H_
