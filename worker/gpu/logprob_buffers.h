// The outputs of the logprobs kernel (logit_kernels.h LaunchLogprobs) for
// up to max_rows rows, on the device and in pinned host memory, shared by
// the sampled tokens' logprobs (device_logit_processing.h) and the prompt
// logprobs (device_prompt_logprobs.h): values fp32 [rows, 1 + top_stride]
// and ids int32 [rows, top_stride], top_stride <= kMaxTopLogprobs.
#ifndef RADIXKV_WORKER_GPU_LOGPROB_BUFFERS_H_
#define RADIXKV_WORKER_GPU_LOGPROB_BUFFERS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "worker/sampler.h"

namespace radixkv::worker::gpu {

class DeviceMemory;

class LogprobBuffers {
 public:
  // Device and pinned buffers for max_rows rows (device bytes added to
  // *bytes). Errors: RESOURCE_EXHAUSTED, INTERNAL.
  absl::Status Allocate(int32_t max_rows, DeviceMemory* memory, int64_t* bytes);

  // The kernel's outputs on the device.
  float* values_dev() const { return values_dev_; }
  int32_t* ids_dev() const { return ids_dev_; }

  // Enqueues the copies of `rows` rows of stride top_stride to the pinned
  // buffers on `stream` (no synchronization). Errors: INTERNAL.
  absl::Status Download(int32_t rows, int32_t top_stride, void* stream) const;

  // After the download completed: row r as `token`'s logprob and its first
  // num_top alternatives (fewer where the kernel wrote id -1).
  void Read(int32_t r, int32_t top_stride, int32_t token, int32_t num_top,
            SampledToken* out) const;

 private:
  float* values_dev_ = nullptr;
  int32_t* ids_dev_ = nullptr;
  float* values_host_ = nullptr;
  int32_t* ids_host_ = nullptr;
};

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_LOGPROB_BUFFERS_H_
