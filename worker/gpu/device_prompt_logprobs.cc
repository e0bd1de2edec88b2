#include "worker/gpu/device_prompt_logprobs.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/gpu/device_memory.h"
#include "worker/gpu/gpu_forward.h"
#include "worker/gpu/gpu_status.h"

namespace radixkv::worker::gpu {

absl::Status DevicePromptLogprobs::Allocate(int32_t max_rows,
                                            DeviceMemory* memory,
                                            int64_t* bytes) {
  max_rows_ = max_rows;
  tokens_off_ = AlignUp16(sizeof(int32_t) * max_rows);
  params_off_ = tokens_off_ + AlignUp16(sizeof(int32_t) * max_rows);
  block_bytes_ = params_off_ + sizeof(DeviceLogprobParams) * max_rows;
  void* p = nullptr;
  RADIXKV_RETURN_IF_ERROR(memory->Alloc(block_bytes_, &p, bytes));
  dev_ = static_cast<char*>(p);
  RADIXKV_RETURN_IF_ERROR(
      memory->AllocPinned(block_bytes_, &p, "pinned prompt logprob rows"));
  host_ = static_cast<char*>(p);
  return logprobs_.Allocate(max_rows, memory, bytes);
}

absl::Status DevicePromptLogprobs::Run(
    const GpuForward& f, const ForwardBatch& batch,
    absl::Span<const SequenceSampling> sampling) {
  const int32_t vocab = f.config->vocab_size;
  std::vector<Target> targets;
  for (size_t b = 0; b < sampling.size(); ++b) {
    const SequenceSampling& s = sampling[b];
    for (size_t i = 0; i < s.prompt_targets.size(); ++i) {
      const int32_t token = s.prompt_targets[i];
      if (token < 0 || token >= vocab) {
        return absl::InvalidArgumentError(absl::StrCat(
            "prompt logprob target ", token, " outside [0, ", vocab, ")"));
      }
      targets.push_back({batch.qo_indptr[b] + static_cast<int32_t>(i), token,
                         s.prompt_logprobs, s.prompt_logprobs_out + i});
    }
  }
  const absl::Span<const Target> all(targets);
  for (size_t r0 = 0; r0 < all.size(); r0 += max_rows_) {
    RADIXKV_RETURN_IF_ERROR(RunChunk(f, all.subspan(r0, max_rows_)));
  }
  return absl::OkStatus();
}

absl::Status DevicePromptLogprobs::RunChunk(const GpuForward& f,
                                            absl::Span<const Target> chunk) {
  const int32_t n = static_cast<int32_t>(chunk.size());
  auto* rows = reinterpret_cast<int32_t*>(host_);
  auto* tokens = reinterpret_cast<int32_t*>(host_ + tokens_off_);
  auto* params = reinterpret_cast<DeviceLogprobParams*>(host_ + params_off_);
  int32_t top_stride = 0;
  for (int32_t r = 0; r < n; ++r) {
    rows[r] = chunk[r].row;
    tokens[r] = chunk[r].token;
    params[r] = {1.0f, chunk[r].num_top};
    top_stride = std::max(top_stride, chunk[r].num_top);
  }
  hipStream_t s = static_cast<hipStream_t>(f.stream);
  RADIXKV_RETURN_IF_ERROR(RuntimeError(
      hipMemcpyAsync(dev_, host_, block_bytes_, hipMemcpyHostToDevice, s),
      "prompt logprob rows upload"));
  RADIXKV_RETURN_IF_ERROR(
      EnqueueLmHead(f, reinterpret_cast<const int32_t*>(dev_), n));
  RADIXKV_RETURN_IF_ERROR(KernelError(
      LaunchLogprobs(
          f.workspace->logits, n, f.config->vocab_size,
          reinterpret_cast<const DeviceLogprobParams*>(dev_ + params_off_),
          reinterpret_cast<const int32_t*>(dev_ + tokens_off_), top_stride,
          logprobs_.values_dev(), logprobs_.ids_dev(), s),
      "prompt logprobs"));
  RADIXKV_RETURN_IF_ERROR(logprobs_.Download(n, top_stride, s));
  RADIXKV_RETURN_IF_ERROR(RuntimeError(hipStreamSynchronize(s), "step"));
  for (int32_t r = 0; r < n; ++r) {
    logprobs_.Read(r, top_stride, chunk[r].token, chunk[r].num_top,
                   chunk[r].out);
  }
  return absl::OkStatus();
}

}  // namespace radixkv::worker::gpu
