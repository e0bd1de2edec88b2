// Test support: small valid ForwardBatch values for the batch-validation tests
// of the CPU (worker/cpu) and GPU (worker/gpu) executors.
#ifndef RADIXKV_WORKER_FORWARD_BATCH_EXAMPLES_H_
#define RADIXKV_WORKER_FORWARD_BATCH_EXAMPLES_H_

#include "worker/model_executor.h"

namespace radixkv::worker::testing {

// A valid decode batch of two sequences with 3 and 2 context tokens (current
// token included): token ids 5 and 6 at positions 2 and 1, context slots
// {0, 1, 2} (page 0 for page_size 16) and {16, 17} (page 1), the last of each
// being the new token's out_cache_loc. Valid for vocab_size > 6 and a pool of
// more than 17 slots.
inline ForwardBatch TwoSequenceDecodeBatch() {
  ForwardBatch b;
  b.is_decode = true;
  b.input_ids = {5, 6};
  b.positions = {2, 1};
  b.qo_indptr = {0, 1, 2};
  b.kv_indices = {0, 1, 2, 16, 17};
  b.kv_indptr = {0, 3, 5};
  b.out_cache_loc = {2, 17};
  return b;
}

}  // namespace radixkv::worker::testing

#endif  // RADIXKV_WORKER_FORWARD_BATCH_EXAMPLES_H_
