// Prompt logprobs on the device for GpuModelExecutor::ForwardSample
// (SequenceSampling::prompt_targets): after a step's forward the residual
// stream still holds every new token's final hidden state, so for chunks
// of at most max_rows target rows this runs the final norm and LM head of
// those rows into the workspace's logits (fp32 [rows, vocab], the
// max_logit_rows bound of the workspace), the logprobs kernel with the
// prompt tokens as the "sampled" ids at temperature 1 (logit_kernels.h:
// fp32, maximum subtracted before the sum), and copies back only
// rows x (1 + k) logprobs and rows x k ids. The logits never leave the
// device.
#ifndef RADIXKV_WORKER_GPU_DEVICE_PROMPT_LOGPROBS_H_
#define RADIXKV_WORKER_GPU_DEVICE_PROMPT_LOGPROBS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/gpu/logit_kernels.h"
#include "worker/gpu/logprob_buffers.h"
#include "worker/model_executor.h"

namespace radixkv::worker::gpu {

class DeviceMemory;
struct GpuForward;

class DevicePromptLogprobs {
 public:
  // Buffers for chunks of max_rows rows (the workspace's logit rows);
  // device bytes added to *bytes. Errors: RESOURCE_EXHAUSTED, INTERNAL.
  absl::Status Allocate(int32_t max_rows, DeviceMemory* memory, int64_t* bytes);

  // After the forward of `batch` (validated; sampling validated by
  // ValidateSequenceSampling) on f's stream: fills every
  // prompt_logprobs_out of `sampling`. Overwrites the workspace's logits.
  // Errors: INVALID_ARGUMENT for a target outside [0, vocab); INTERNAL for
  // runtime or kernel failures.
  absl::Status Run(const GpuForward& f, const ForwardBatch& batch,
                   absl::Span<const SequenceSampling> sampling);

 private:
  // One target row: its residual row, the prompt token, where it goes.
  struct Target {
    int32_t row = 0;
    int32_t token = 0;
    int32_t num_top = 0;
    SampledToken* out = nullptr;
  };
  absl::Status RunChunk(const GpuForward& f, absl::Span<const Target> chunk);

  int32_t max_rows_ = 0;
  // Pinned host block and its device mirror: rows int32 [max_rows],
  // tokens int32 [max_rows], params DeviceLogprobParams [max_rows].
  char* host_ = nullptr;
  char* dev_ = nullptr;
  size_t tokens_off_ = 0, params_off_ = 0, block_bytes_ = 0;
  // Outputs of each chunk.
  LogprobBuffers logprobs_;
};

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_DEVICE_PROMPT_LOGPROBS_H_
