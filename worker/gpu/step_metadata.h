// The host side of one GpuModelExecutor step: its shape (what the enqueued
// work depends on besides fixed device pointers, i.e. what a decode graph
// is keyed by) and the metadata it writes into the pinned block
// (gpu_workspace.h) before the one upload.
#ifndef RADIXKV_WORKER_GPU_STEP_METADATA_H_
#define RADIXKV_WORKER_GPU_STEP_METADATA_H_

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"
#include "worker/gpu/decode_graphs.h"
#include "worker/gpu/gpu_model_executor.h"
#include "worker/gpu/gpu_workspace.h"
#include "worker/model_executor.h"

namespace radixkv::worker::gpu {

// What the step leaves after the LM head.
enum class StepOutput : int {
  kLogits = 0,  // fp32 logits only
  kArgmax = 1,  // and the argmax token of each row
  kSample = 2,  // and a token sampled with the row's DeviceSamplingParams
};

struct StepShape {
  int32_t num_tokens = 0;  // tokens computed (decode: the padded batch)
  int32_t batch = 0;       // sequences (decode graph: the batch bucket)
  bool is_decode = false;
  int32_t max_seq_len = 0;     // decode: longest context, or its bucket
  int32_t max_extend_len = 0;  // extend: longest new-token run
  int32_t logit_rows = 0;      // rows through the final norm and LM head
  StepOutput output = StepOutput::kLogits;
};

struct StepPlan {
  StepShape shape;
  // A decode step within max_context_len with graphs on: runs through the
  // graph of graph_key, padded to its bucket.
  bool use_graph = false;
  DecodeGraphKey graph_key;
  // Logit rows returned to the caller: num_tokens for return_all_logits
  // (extend), else one per real sequence.
  int32_t output_rows = 0;
};

// The plan of a validated `batch` within the workspace under `options`
// (resolved: max_context_len > 0).
StepPlan PlanStep(const ForwardBatch& batch, StepOutput output,
                  const GpuModelExecutorOptions& options);

// Writes the metadata of `batch` for `shape` into the pinned block `host`
// laid out as `layout`, padding a decode batch to shape.batch with 0-length
// sequences (token 0 at position 0, no K/V write, its own logit row).
// params: [<= shape.batch] sampling of the real sequences (missing rows
// and padding get the greedy default). Returns the bytes to upload: the
// block up to the end of the step's kv_indices.
size_t FillStepMetadata(const ForwardBatch& batch, const StepShape& shape,
                        absl::Span<const GpuSamplingParams> params,
                        const StepMetadataLayout& layout, char* host);

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_STEP_METADATA_H_
