// Device logit processors; see logit_kernels.h for the contracts. HIP C++
// through worker/kernels/hip/hip_compat.h (nvcc: -x cu).
#include "worker/kernels/hip/hip_compat.h"
// (separate block: keep the order)
#include <math.h>

#include "worker/gpu/logit_kernels.h"

namespace radixkv::worker::gpu {
namespace {

// A multiple of the warp size on both vendors (32 and 64 lanes).
constexpr int kThreads = 256;

int LastError() { return static_cast<int>(hipGetLastError()); }

__global__ void __launch_bounds__(kThreads)
    ApplyPenaltiesKernel(float* logits, int32_t vocab,
                         const DevicePenalties* penalties,
                         const int32_t* seen_indptr,
                         const DeviceSeenToken* seen) {
  const DevicePenalties p = penalties[blockIdx.x];
  float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const int32_t end = seen_indptr[blockIdx.x + 1];
  for (int32_t e = seen_indptr[blockIdx.x] + threadIdx.x; e < end;
       e += blockDim.x) {
    const DeviceSeenToken t = seen[e];
    if (t.id < 0 || t.id >= vocab) continue;
    double x = row[t.id];
    if (p.repetition != 1.0f) {
      const double rep = p.repetition;
      x = x > 0 ? x / rep : x * rep;
    }
    if (t.output_count > 0) {
      x -= static_cast<double>(p.frequency) * t.output_count +
           static_cast<double>(p.presence);
    }
    row[t.id] = static_cast<float>(x);
  }
}

// Sum / max over the block through shared memory; every thread gets it.
__device__ __forceinline__ float BlockSum(float v, float* s) {
  __syncthreads();
  s[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  return s[0];
}

__device__ __forceinline__ float BlockMax(float v, float* s) {
  __syncthreads();
  s[threadIdx.x] = v;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      s[threadIdx.x] = fmaxf(s[threadIdx.x], s[threadIdx.x + stride]);
    }
    __syncthreads();
  }
  return s[0];
}

// True when (v, i) comes before (w, j) in "largest value, then lower id".
__device__ __forceinline__ bool Before(float v, int32_t i, float w, int32_t j) {
  return j < 0 || (i >= 0 && (v > w || (v == w && i < j)));
}

// The first (value, id) after (prev_v, prev_i) in that order (prev_i < 0:
// the very first), over the block; every thread gets it.
__device__ __forceinline__ void BlockNext(const float* row, int32_t vocab,
                                          float prev_v, int32_t prev_i,
                                          float* sv, int32_t* si, float& v,
                                          int32_t& id) {
  v = -INFINITY;
  id = -1;
  for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float x = row[i];
    if (prev_i >= 0 && !Before(prev_v, prev_i, x, i)) continue;
    if (Before(x, i, v, id)) {
      v = x;
      id = i;
    }
  }
  __syncthreads();
  sv[threadIdx.x] = v;
  si[threadIdx.x] = id;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride &&
        Before(sv[threadIdx.x + stride], si[threadIdx.x + stride],
               sv[threadIdx.x], si[threadIdx.x])) {
      sv[threadIdx.x] = sv[threadIdx.x + stride];
      si[threadIdx.x] = si[threadIdx.x + stride];
    }
    __syncthreads();
  }
  v = sv[0];
  id = si[0];
}

__global__ void __launch_bounds__(kThreads)
    LogprobsKernel(const float* logits, int32_t vocab,
                   const DeviceLogprobParams* params, const int32_t* tokens,
                   int32_t top_stride, float* values, int32_t* top_ids) {
  __shared__ float sv[kThreads];
  __shared__ int32_t si[kThreads];
  const int32_t r = blockIdx.x;
  const float* row = logits + static_cast<int64_t>(r) * vocab;
  const DeviceLogprobParams p = params[r];
  float* out = values + static_cast<int64_t>(r) * (1 + top_stride);
  int32_t* ids = top_ids + static_cast<int64_t>(r) * top_stride;
  const int32_t token = tokens[r];
  const int32_t num_top = min(min(p.num_top, top_stride), vocab);
  if (token < 0 || token >= vocab) {
    for (int32_t j = threadIdx.x; j < 1 + top_stride; j += blockDim.x) {
      out[j] = NAN;
      if (j < top_stride) ids[j] = -1;
    }
    return;
  }
  const float inv_t = 1.0f / p.temperature;
  float m = -INFINITY;
  for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    m = fmaxf(m, row[i] * inv_t);
  }
  m = BlockMax(m, sv);
  float sum = 0.0f;
  for (int32_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    sum += expf(row[i] * inv_t - m);
  }
  sum = BlockSum(sum, sv);
  const float lse = m + logf(sum);
  if (threadIdx.x == 0) out[0] = row[token] * inv_t - lse;
  // Top alternatives: num_top passes, each the next in (value desc, id asc)
  // order; dividing by t > 0 keeps the order of the logits.
  float prev_v = 0.0f;
  int32_t prev_i = -1;
  for (int32_t j = 0; j < top_stride; ++j) {
    if (j >= num_top) {
      if (threadIdx.x == 0) {
        out[1 + j] = NAN;
        ids[j] = -1;
      }
      continue;
    }
    float v;
    int32_t id;
    BlockNext(row, vocab, prev_v, prev_i, sv, si, v, id);
    if (threadIdx.x == 0) {
      out[1 + j] = v * inv_t - lse;
      ids[j] = id;
    }
    prev_v = v;
    prev_i = id;
  }
}

}  // namespace

int LaunchApplyPenalties(float* logits, int32_t rows, int32_t vocab,
                         const DevicePenalties* penalties,
                         const int32_t* seen_indptr,
                         const DeviceSeenToken* seen, void* stream) {
  if (rows == 0) return 0;
  hipLaunchKernelGGL(ApplyPenaltiesKernel, dim3(rows), dim3(kThreads), 0,
                     static_cast<hipStream_t>(stream), logits, vocab, penalties,
                     seen_indptr, seen);
  return LastError();
}

int LaunchLogprobs(const float* logits, int32_t rows, int32_t vocab,
                   const DeviceLogprobParams* params, const int32_t* tokens,
                   int32_t top_stride, float* values, int32_t* top_ids,
                   void* stream) {
  if (rows == 0) return 0;
  if (top_stride < 0 || top_stride > kMaxTopLogprobs || vocab < 1) {
    return static_cast<int>(hipErrorInvalidValue);
  }
  hipLaunchKernelGGL(LogprobsKernel, dim3(rows), dim3(kThreads), 0,
                     static_cast<hipStream_t>(stream), logits, vocab, params,
                     tokens, top_stride, values, top_ids);
  return LastError();
}

}  // namespace radixkv::worker::gpu
