#include "worker/gpu/logprob_buffers.h"

#include "worker/gpu/device_memory.h"
#include "worker/gpu/gpu_status.h"
#include "worker/gpu/logit_kernels.h"

namespace radixkv::worker::gpu {

absl::Status LogprobBuffers::Allocate(int32_t max_rows, DeviceMemory* memory,
                                      int64_t* bytes) {
  const size_t values = static_cast<size_t>(max_rows) * (1 + kMaxTopLogprobs);
  const size_t ids = static_cast<size_t>(max_rows) * kMaxTopLogprobs;
  RADIXKV_RETURN_IF_ERROR(memory->AllocT(values, &values_dev_, bytes));
  RADIXKV_RETURN_IF_ERROR(memory->AllocT(ids, &ids_dev_, bytes));
  void* p = nullptr;
  RADIXKV_RETURN_IF_ERROR(
      memory->AllocPinned(values * sizeof(float), &p, "pinned logprobs"));
  values_host_ = static_cast<float*>(p);
  RADIXKV_RETURN_IF_ERROR(
      memory->AllocPinned(ids * sizeof(int32_t), &p, "pinned logprob ids"));
  ids_host_ = static_cast<int32_t*>(p);
  return absl::OkStatus();
}

absl::Status LogprobBuffers::Download(int32_t rows, int32_t top_stride,
                                      void* stream) const {
  hipStream_t s = static_cast<hipStream_t>(stream);
  RADIXKV_RETURN_IF_ERROR(
      RuntimeError(hipMemcpyAsync(values_host_, values_dev_,
                                  sizeof(float) * rows * (1 + top_stride),
                                  hipMemcpyDeviceToHost, s),
                   "logprobs download"));
  if (top_stride == 0) return absl::OkStatus();
  return RuntimeError(
      hipMemcpyAsync(ids_host_, ids_dev_, sizeof(int32_t) * rows * top_stride,
                     hipMemcpyDeviceToHost, s),
      "logprob ids download");
}

void LogprobBuffers::Read(int32_t r, int32_t top_stride, int32_t token,
                          int32_t num_top, SampledToken* out) const {
  const float* v = values_host_ + static_cast<size_t>(r) * (1 + top_stride);
  const int32_t* ids = ids_host_ + static_cast<size_t>(r) * top_stride;
  out->token = token;
  out->logprob = v[0];
  out->top.clear();
  for (int32_t j = 0; j < num_top && ids[j] >= 0; ++j) {
    out->top.emplace_back(ids[j], v[1 + j]);
  }
}

}  // namespace radixkv::worker::gpu
