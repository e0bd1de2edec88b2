// The ForwardBatch rules of ModelExecutor::Forward (worker/model_executor.h)
// that do not depend on the backend, checked by both the CPU
// (CpuModelExecutor) and GPU (GpuModelExecutor) executors before they touch
// the pool.
#ifndef RADIXKV_WORKER_FORWARD_BATCH_VALIDATION_H_
#define RADIXKV_WORKER_FORWARD_BATCH_VALIDATION_H_

#include <cstdint>

#include "absl/status/status.h"
#include "worker/model_executor.h"

namespace radixkv::worker {

// Checks a ForwardBatch against a model of `vocab_size` tokens and a pool of
// `capacity_slots` slots: at least one new token; qo_indptr and kv_indptr
// [B+1] (B >= 1) start at 0, qo_indptr strictly increasing and ending at
// num_tokens, kv_indptr non-decreasing and ending at kv_indices.size();
// positions and out_cache_loc [num_tokens] as long as input_ids; in decode
// mode one new token per sequence whose slot is the sequence's last
// kv_indices entry; every kv_indices and out_cache_loc slot in
// [0, capacity_slots), every token id in [0, vocab_size), no negative
// position; every copy_ops page in [0, capacity_slots / page_size) and its
// num_tokens in [0, page_size]. Returns INVALID_ARGUMENT
// ("ForwardBatch: ...") naming the first violation; kv_indices is only
// indexed once kv_indptr is known to run non-decreasing from 0 to
// kv_indices.size().
absl::Status ValidateForwardBatch(const ForwardBatch& batch,
                                  int32_t vocab_size, int64_t capacity_slots,
                                  int32_t page_size);

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_FORWARD_BATCH_VALIDATION_H_
