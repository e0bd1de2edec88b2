// Device logit processors of the GPU model backend: the penalties
// (repetition as Hugging Face's RepetitionPenaltyLogitsProcessor, frequency
// and presence as OpenAI's / vllm/model_executor/layers/utils.py
// apply_penalties; definitions in proto/radixkv/v1/common.proto) and the
// logprobs, so a batch that asks for them samples on the device
// (worker/gpu/gpu_model_executor.h). Temperature, top-k, top-p and min_p are
// applied by LaunchSample (model_kernels.h), in the CPU sampler's order
// (worker/logit_processors.h): penalties, temperature, top-k, top-p, min_p.
//
// HIP C++ (worker/kernels/hip/hip_compat.h maps it to CUDA). Every pointer
// is a DEVICE pointer, `stream` a hipStream_t / cudaStream_t as void*; each
// launcher returns the runtime's error code of the enqueue (0 = success).
#ifndef RADIXKV_WORKER_GPU_LOGIT_KERNELS_H_
#define RADIXKV_WORKER_GPU_LOGIT_KERNELS_H_

#include <stdint.h>

namespace radixkv::worker::gpu {

// Most top alternatives a row may ask for (SamplingParams.logprobs).
inline constexpr int32_t kMaxTopLogprobs = 20;

// Penalties of one row; 1, 0, 0 = off.
struct DevicePenalties {
  float repetition = 1.0f;
  float frequency = 0.0f;
  float presence = 0.0f;
};

// One distinct token id of a row's history: `output_count` occurrences in
// the generated tokens, `in_prompt` 1 when the prompt holds it.
struct DeviceSeenToken {
  int32_t id = 0;
  int32_t output_count = 0;
  int32_t in_prompt = 0;
};

// Applies the penalties to logits (fp32 [rows, vocab], in place), one block
// per row: row r's distinct seen tokens are seen[seen_indptr[r] ..
// seen_indptr[r + 1]) (CSR, ids in [0, vocab), each id at most once per
// row). A seen token's logit is divided by `repetition` when positive, else
// multiplied by it; then, when output_count c > 0, it loses frequency x c +
// presence. Computed in float64 and rounded once to fp32 (the CPU sampler
// works in float64 throughout).
int LaunchApplyPenalties(float* logits, int32_t rows, int32_t vocab,
                         const DevicePenalties* penalties,
                         const int32_t* seen_indptr,
                         const DeviceSeenToken* seen, void* stream);

// Per row of the logprobs kernel: the temperature the sampler used (1 when
// the row was greedy) and the number of top alternatives in [0, 20].
struct DeviceLogprobParams {
  float temperature = 1.0f;
  int32_t num_top = 0;
};

// Logprobs of the distribution the sampler drew from, before top-k / top-p
// / min_p truncation (vLLM's default): the log-softmax of logits[r, :] /
// temperature, computed in fp32 with the maximum subtracted before the sum
// of exponentials (lse = m + log(sum exp(x / t - m))); its error against a
// float64 reference is a few fp32 ulps of |logit / temperature| (the device
// test bounds it by 1e-4). One block per row; logits fp32 [rows, vocab]
// (already penalized), tokens [rows] the sampled ids.
// Outputs, row stride `top_stride` (>= every num_top, <= 20):
//   values [rows, 1 + top_stride]: values[r][0] = logprob of tokens[r],
//     values[r][1 + j] = the j-th largest logprob (j < num_top);
//   top_ids [rows, top_stride]: its token id (lower id first on ties).
// A row whose token is negative (sampling failed, NaN logits) gets NaN
// values and ids -1.
int LaunchLogprobs(const float* logits, int32_t rows, int32_t vocab,
                   const DeviceLogprobParams* params, const int32_t* tokens,
                   int32_t top_stride, float* values, int32_t* top_ids,
                   void* stream);

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_LOGIT_KERNELS_H_
