// Device kernels of the GPU model backend (worker/gpu/gpu_model_executor.h)
// other than attention and the GEMMs: embedding gather, RMSNorm, fused
// bias + RoPE + reshape_and_cache, SiLU-and-multiply, a generic paged
// attention for shapes the tensor-core kernels of worker/kernels/hip do not
// cover (fp32 pools, head_dim 32), page copies for any dtype, and sampling.
//
// Written once in HIP C++ (worker/kernels/hip/hip_compat.h maps it to CUDA
// for nvcc). This header has no GPU runtime includes: every pointer is a
// DEVICE pointer, `stream` is a hipStream_t / cudaStream_t as void*, and each
// launcher returns the runtime's error code of the enqueue (0 = success);
// ModelKernelErrorString turns it into text.
//
// Element types: `act` = the activation/KV dtype of the executor (kF32,
// kBF16 or kF16), `weight` = the dtype weights are stored in on the device
// (same set). Residual stream, GEMM outputs and logits are fp32.
#ifndef RADIXKV_WORKER_GPU_MODEL_KERNELS_H_
#define RADIXKV_WORKER_GPU_MODEL_KERNELS_H_

#include <stddef.h>
#include <stdint.h>

#include "worker/kv_cache_layout.h"
#include "worker/numeric_types.h"

namespace radixkv::worker::gpu {

// Text of a launcher's error code.
const char* ModelKernelErrorString(int error);

// x[t, :] = float(embed[ids[t], :]) for t < num_tokens.
// embed: [vocab, hidden] of `weight`; ids: [num_tokens] int32; x: fp32.
int LaunchEmbeddingGather(const void* embed, DType weight, const int32_t* ids,
                          int32_t num_tokens, int32_t hidden, float* x,
                          void* stream);

// HF LlamaRMSNorm: y[r, :] = act(w * (x[src, :] * rsqrt(mean(x[src]^2) +
// eps))) with src = row_index ? row_index[r] : r, fp32 statistics.
// x: fp32 [*, hidden]; w: fp32 [hidden]; y: [rows, hidden] of `act`.
// (The residual add of each block is fused into the GEMM epilogue instead:
// the o_proj and down_proj GEMMs accumulate into x with beta = 1.)
int LaunchRmsNorm(const float* x, const int32_t* row_index, const float* w,
                  float eps, int32_t rows, int32_t hidden, void* y, DType act,
                  void* stream);

// Per token t: adds the q/k/v bias (optional, fp32 [(Hq+2Hkv) D]) to the fp32
// GEMM output qkv [T, (Hq+2Hkv) D], rotates q and k by RoPE (rotate-half
// layout, dimension i pairs with i + D/2, angle = float(positions[t]) *
// inv_freq[i] in fp32, inv_freq fp32 [D/2] already llama3-smoothed), and
// writes q [T, Hq, D], k_out/v_out [T, Hkv, D] (optional; contiguous copies
// for the extend kernel) in `act`, and K/V into the pool layer (k_cache,
// v_cache with `geometry`, elements of `act`) at slot out_cache_loc[t]
// (skipped when negative): vLLM's reshape_and_cache (csrc/cache_kernels.cu)
// fused with RoPE.
struct RopeCacheLaunch {
  const float* qkv = nullptr;
  const float* bias = nullptr;
  const float* inv_freq = nullptr;
  const int32_t* positions = nullptr;
  const int64_t* out_cache_loc = nullptr;
  int32_t num_tokens = 0;
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  // Qwen3: per-head RMSNorm of q and k (weights [head_dim] fp32, eps) after
  // the bias and before the rotation; nullptr = none.
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float norm_eps = 0.0f;
  DType act = DType::kF32;
  void* q = nullptr;
  void* k_out = nullptr;
  void* v_out = nullptr;
  KvCacheGeometry geometry;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
};
int LaunchRopeAndCache(const RopeCacheLaunch& a, void* stream);

// Weight-streaming GEMM for decode-sized batches:
// c[m, n] = sum_k a[m, k] w[n, k] + beta c[m, n] for m < rows <= 16, with a
// [rows, k] and w [n, k] of `dtype` (kBF16 or kF16), c fp32, fp32
// accumulation. One warp per output column n reads w's row once with 16-byte
// loads (k a multiple of 8, a and w 16-byte aligned); memory bound on the
// weights, where a vendor GEMM at M <= 16 is not (docs/perf.md).
// Returns hipErrorInvalidValue for unsupported shapes / dtypes.
int LaunchSmallBatchGemm(const void* a, const void* w, float* c, int32_t rows,
                         int32_t n, int32_t k, float beta, DType dtype,
                         void* stream);

// Rows and bytes (rows x k x 2) of normalized activations the fused kernel
// below keeps in shared memory.
inline constexpr int32_t kFusedNormMaxRows = 4;
inline constexpr size_t kFusedNormMaxBytes = 48 * 1024;

// LaunchRmsNorm followed by LaunchSmallBatchGemm in one kernel:
// c[m, :] = RMSNorm(x[src(m), :]) w^T + beta c[m, :], src(m) = row_index ?
// row_index[m] : m, for m < rows. Each block normalizes the rows into shared
// memory (same arithmetic and reduction order as LaunchRmsNorm, so the same
// bits as the two kernels) and streams w. x: fp32 [*, k]; norm_weight fp32
// [k]; w: [n, k] of `dtype` (kBF16 or kF16), 16-byte aligned; c fp32 [rows,
// n]. hipErrorInvalidValue for rows > kFusedNormMaxRows, rows x k x 2 >
// kFusedNormMaxBytes, k not a multiple of 8 or an fp32 dtype.
int LaunchSmallBatchGemmRmsNorm(const float* x, const int32_t* row_index,
                                const float* norm_weight, float eps,
                                const void* w, float* c, int32_t rows,
                                int32_t n, int32_t k, float beta, DType dtype,
                                void* stream);

// x[t, :] += bias (fp32 [hidden]) for t < num_tokens; x fp32.
int LaunchAddBias(float* x, const float* bias, int32_t num_tokens,
                  int32_t hidden, void* stream);

// out[t, i] = act(silu(gu[t, i]) * gu[t, inter + i]); gu fp32 [T, 2 inter].
int LaunchSiluAndMul(const float* gate_up, int32_t num_tokens, int32_t inter,
                     void* out, DType act, void* stream);

// Generic paged attention (any head_dim <= 256 multiple of 32 / kWarpSize
// lanes, any dtype incl. fp32), one block of four warps per (query token,
// query head), each warp an online softmax in fp32 with exp2 over its share
// of the keys (as vLLM's PagedAttention kernels), merged at the end. Query
// token i of sequence b (new tokens qo_indptr[b]..qo_indptr[b+1]) attends to
// the prefix slots kv_indices[kv_indptr[b]..kv_indptr[b+1]) and, when
// `causal_extend`, to the new tokens' slots out_cache_loc[qo_indptr[b] ..
// qo_indptr[b] + i] (already written to the pool). Decode passes causal_extend
// = false and the whole context in kv_indices. q, out: [T, Hq, D] of `act`.
struct GenericAttentionLaunch {
  const void* q = nullptr;
  const int32_t* qo_indptr = nullptr;
  const int32_t* kv_indptr = nullptr;
  const int64_t* kv_indices = nullptr;
  const int64_t* out_cache_loc = nullptr;
  const int32_t* token_seq = nullptr;  // [T] sequence index of each token
  int32_t num_tokens = 0;
  int32_t num_q_heads = 0;
  float sm_scale = 0.0f;
  bool causal_extend = false;
  // Sliding window (ExtendAttentionArgs::window_left): -1 = none; w >= 0:
  // the token at position p attends keys at positions [p - w, p].
  int32_t window_left = -1;
  DType act = DType::kF32;
  KvCacheGeometry geometry;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  void* out = nullptr;
};
int LaunchGenericAttention(const GenericAttentionLaunch& a, void* stream);

// Copies the leading num_tokens positions of page src_page to dst_page in
// every layer, K and V (worker/kernels/cpu/copy_blocks.h semantics for one
// op). layer_k/layer_v: device arrays [num_layers] of device pool pointers.
int LaunchCopyPage(void* const* layer_k, void* const* layer_v,
                   int32_t num_layers, const KvCacheGeometry& geometry,
                   int64_t src_page, int64_t dst_page, int32_t num_tokens,
                   void* stream);

// Token id the sampling kernels write for a row whose logits contain a NaN
// (a diverged sequence): the same value and meaning as the host path's
// worker::kSamplingFailedToken (worker/model_executor.h), whose Sampler
// rejects such a row with "NaN in logits".
inline constexpr int32_t kDeviceSamplingFailedToken = -2;

// tokens[r] = argmax_v logits[r, v] (lowest index on ties); logits fp32
// [rows, vocab], vocab >= 1. A row containing a NaN gets
// kDeviceSamplingFailedToken; +-inf are ordinary values.
int LaunchArgmax(const float* logits, int32_t rows, int32_t vocab,
                 int32_t* tokens, void* stream);

// Per-row sampling parameters on the device (mirrors
// worker/sampler.h SamplingParams; temperature 0 = greedy).
struct DeviceSamplingParams {
  float temperature = 0.0f;
  int32_t top_k = 0;   // 0 = off
  float top_p = 1.0f;  // 1 = off
  float min_p = 0.0f;  // 0 = off
  uint64_t seed = 0;   // with `step`, keys the counter-based uniform draw
  uint64_t step = 0;
};

// Samples tokens[r] from logits[r, :] (fp32 [rows, vocab]): temperature,
// then top-k (keeps tokens whose logit >= the k-th largest; ties kept), then
// top-p (keeps tokens whose probability >= the smallest threshold whose kept
// mass reaches top_p), then min_p (keeps tokens whose probability is >= min_p
// x the largest; worker/logit_processors.h KeptCandidates), then one draw from
// the renormalized kept mass in vocab order with a uniform from hash(seed,
// step) (SplitMix64). Temperature 0 gives the argmax. A row containing a NaN
// gets kDeviceSamplingFailedToken. One block per row.
int LaunchSample(const float* logits, int32_t rows, int32_t vocab,
                 const DeviceSamplingParams* params, int32_t* tokens,
                 void* stream);

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_MODEL_KERNELS_H_
