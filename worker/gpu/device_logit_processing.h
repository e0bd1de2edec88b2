// The host side of the device logit processors (logit_kernels.h) for
// GpuModelExecutor::ForwardSample: per step it builds, from each row's
// SequenceSampling, the penalties and a CSR of the row's distinct history
// tokens (token id, count in the output, in the prompt), uploads them with
// one copy, then enqueues penalties -> LaunchSample (temperature, top-k,
// top-p, min_p) -> logprobs on the logits the forward left on the device,
// and copies back only the B tokens and B x (1 + k) logprobs.
//
// These kernels run eagerly after the forward (a decode step replays its
// graph, which produces the logits only): the CSR's size changes every
// step, and keying graphs by it would multiply them.
#ifndef RADIXKV_WORKER_GPU_DEVICE_LOGIT_PROCESSING_H_
#define RADIXKV_WORKER_GPU_DEVICE_LOGIT_PROCESSING_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "worker/gpu/logit_kernels.h"
#include "worker/gpu/logprob_buffers.h"
#include "worker/gpu/model_kernels.h"
#include "worker/model_executor.h"

namespace radixkv::worker::gpu {

class DeviceMemory;

// True when the penalties or logprobs of `sampling` need the processors
// (min_p alone runs in LaunchSample).
bool NeedsDeviceProcessors(absl::Span<const SequenceSampling> sampling);

class DeviceLogitProcessing {
 public:
  // Buffers for max_batch rows and max_seen distinct history tokens in all
  // (device block added to *bytes). Errors: RESOURCE_EXHAUSTED, INTERNAL.
  absl::Status Allocate(int32_t max_batch, int64_t max_seen,
                        DeviceMemory* memory, int64_t* bytes);

  // Fills the pinned block for `sampling` (validated, B <= max_batch) over
  // a vocabulary of `vocab`. False when the rows' distinct history tokens
  // exceed max_seen (the caller samples on the host instead).
  bool Prepare(absl::Span<const SequenceSampling> sampling, int32_t vocab);

  // Uploads the prepared block and enqueues, on `stream`, penalties on
  // logits (device fp32 [B, vocab], in place), the sampling kernel with the
  // step's DeviceSamplingParams `params` (device [B]) into `tokens` (device
  // [B]), and the logprobs; then downloads tokens and logprobs and waits.
  // Errors: INTERNAL (runtime or kernel failure).
  absl::Status Run(float* logits, int32_t vocab,
                   const DeviceSamplingParams* params, int32_t* tokens,
                   void* stream);

  // The step's tokens ([B], as Run downloaded them; -1 for rows that
  // need no token) and, for rows with logprobs > 0, their SampledToken.
  void Finish(absl::Span<const SequenceSampling> sampling,
              std::vector<int32_t>* token_ids) const;

 private:
  int32_t max_batch_ = 0;
  int64_t max_seen_ = 0;
  // Pinned host mirror and device block: indptr int32 [max_batch + 1],
  // penalties [max_batch], logprob params [max_batch], seen [max_seen].
  char* host_ = nullptr;
  char* dev_ = nullptr;
  size_t penalties_off_ = 0, logprob_off_ = 0, seen_off_ = 0;
  // Outputs: logprobs [B, 1 + top_stride] and ids, the B tokens.
  LogprobBuffers logprobs_;
  int32_t* tokens_host_ = nullptr;
  // The prepared step.
  int32_t rows_ = 0;
  int32_t top_stride_ = 0;
  int64_t nnz_ = 0;
  bool penalties_ = false;
};

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_DEVICE_LOGIT_PROCESSING_H_
