// GPU attention and KV-cache kernels (HIP C++, built for NVIDIA with nvcc and
// for AMD/Hygon with hipcc): the device-pointer counterpart of the CPU kernels
// in worker/kernels/cpu/ (same semantics, same index arrays, same address
// function worker/kv_cache_layout.h), for the GPU model backend.
//
// Conventions for every function here:
//   * All tensor pointers and index arrays are DEVICE pointers; scalar sizes
//     (batch size, max lengths) are host values the caller already knows.
//   * Q/K/V/O are bf16 or fp16 (`dtype`; DType::kF32 is rejected), stored
//     contiguous row-major; accumulation is fp32; LSE outputs are fp32,
//     natural log.
//   * Query head h uses kv head h / (num_q_heads / num_kv_heads) (GQA).
//   * `stream` is a hipStream_t / cudaStream_t passed as void* (nullptr = the
//     default stream) so that this header needs no GPU runtime headers.
//     Work is enqueued asynchronously; errors of the enqueue are returned,
//     errors during execution surface at the caller's next synchronization.
//   * Errors: INVALID_ARGUMENT for shapes/dtypes outside what the kernels
//     support (checked on the host before anything is enqueued; device index
//     arrays are NOT read on the host), INTERNAL for a runtime launch error.
//
// Supported: head_dim 64, 128, 256 (multiple of 8 elements); page_size any
// power of two (tested 1, 16, 32, 64); GQA group any num_q_heads /
// num_kv_heads >= 1 (1..16 in one block, larger groups in 16-head chunks);
// layouts bshd, bhsd, vllm; pools larger than 2^31 elements (64-bit offsets).
//
// Algorithms: vLLM's PagedAttention v1/v2 (paged decode, split-KV + combine,
// exp2 with log2(e) folded into the scale) with the KV head on the grid and a
// compile-time GQA group, an adaptive partition size with an environment
// override; SGLang's extend attention (prefix and extend stages, shifted
// causal mask, early exit). Design, measurements and the partition-size
// heuristic: docs/kernel-notes.md.
#ifndef RADIXKV_WORKER_KERNELS_HIP_GPU_ATTENTION_H_
#define RADIXKV_WORKER_KERNELS_HIP_GPU_ATTENTION_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/kernels/cpu/copy_blocks.h"  // PageCopy
#include "worker/kv_cache_layout.h"
#include "worker/numeric_types.h"

namespace radixkv::worker::gpu {

// Implementation choice. kAuto: tensor-core kernels where the build has them
// (NVIDIA; on AMD the MFMA extend kernel on gfx90a/gfx94x devices), else
// portable. kPortable: the SIMT kernels (warp width from hip_compat.h) that
// AMD decode and AMD extend without MFMA use; selectable to cross-check.
enum class KernelPath : int { kAuto = 0, kPortable = 1 };

// One layer of the paged pool on the device: K and V tensors laid out as
// `geometry` says, elements of `dtype`.
struct GpuKvCache {
  KvCacheGeometry geometry;
  DType dtype = DType::kBF16;
  void* k = nullptr;
  void* v = nullptr;
};

// ------------------------------------------------------------------ decode

// Environment variable that overrides the decode partition size (tokens; 0
// forces v1).
inline constexpr char kDecodePartitionSizeEnv[] =
    "RADIXKV_DECODE_PARTITION_SIZE";

// Partition size for paged decode: 0 = v1 (one block per (kv head, seq)),
// otherwise v2 with that many tokens per partition (a multiple of 64).
// Heuristic, fitted to the H200 sweep in docs/kernel-notes.md ("Partition
// size"): v1 when the v1 grid (B x Hkv x ceil(group / 16) blocks) has >= 4
// blocks per multiprocessor; else the largest size in {2048, 1024, 512, 256}
// below max_seq_len whose grid has >= 1.5 blocks per multiprocessor; else
// 256 (or v1 when max_seq_len <= 256). `num_sms` <= 0 means query the current
// device (132 if that fails). The environment variable
// kDecodePartitionSizeEnv, if set to a non-negative integer, wins (rounded up
// to a multiple of 64; 0 = v1), like the Hygon port's PA_PARTITION_SIZE.
int32_t ChooseDecodePartitionSize(int32_t batch_size, int32_t num_kv_heads,
                                  int32_t num_q_heads, int32_t max_seq_len,
                                  int num_sms = 0);

// Bytes at the start of every v2 decode workspace that hold the arrival
// counters of the (opt-in) fused combine (int32, one per (sequence, kv head,
// head chunk) block column, kDecodeCounterBytes / 4 of them). The region sits
// at offset 0 whatever the batch and partition size, so one zero-fill keeps it
// valid for every later call (see GpuDecodeArgs::workspace).
inline constexpr size_t kDecodeCounterBytes = 16384;

// Device workspace (bytes) that Decode needs for a partition size from
// ChooseDecodePartitionSize (0 for v1): kDecodeCounterBytes of counters,
// then partial max, sum [B, Hq, P] and partial outputs [B, Hq, P,
// head_dim], fp32, P = ceil(max_seq_len / partition_size).
size_t DecodeWorkspaceBytes(int32_t batch_size, int32_t num_q_heads,
                            int32_t head_dim, int32_t max_seq_len,
                            int32_t partition_size);

struct GpuDecodeArgs {
  const void* q = nullptr;              // [B, Hq, D] dtype
  const int32_t* kv_indptr = nullptr;   // [B+1] context tokens per sequence
  const int64_t* kv_indices = nullptr;  // [kv_indptr[B]] slots, incl. the
                                        // current token (already cached)
  int32_t batch_size = 0;               // B
  int32_t max_seq_len = 0;      // >= every kv_indptr[b+1] - kv_indptr[b] (host)
  int32_t num_q_heads = 0;      // Hq, a positive multiple of num_kv_heads
  float sm_scale = 0.0f;        // natural units, e.g. 1/sqrt(D)
  int32_t partition_size = -1;  // -1 = ChooseDecodePartitionSize (over the
                                // visible tokens); 0 = v1; > 0 = v2
                                // (multiple of 64)
  // Sliding window, as DecodeAttentionArgs::window_left of the CPU kernel:
  // -1 = the whole context; w >= 0: only the last w + 1 tokens are read, and
  // v2 splits only those into partitions.
  int32_t window_left = -1;
  void* out = nullptr;   // [B, Hq, D] dtype, every element written
  float* lse = nullptr;  // optional [B, Hq]; -inf for empty sequences
  // DecodeWorkspaceBytes(...) bytes, 16-aligned. MUST BE ZERO-FILLED ONCE
  // before its first use (e.g. hipMemset after hipMalloc) and then used only
  // by Decode: its first kDecodeCounterBytes are the fused combine's arrival
  // counters, which every launch leaves at 0 again (the last partition block
  // of a (sequence, kv head) resets its counter). Calls that share a
  // workspace must be ordered (one stream), as for any scratch buffer.
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  KernelPath path = KernelPath::kAuto;
};

// Paged decode attention (vLLM's PagedAttention v1/v2): one query token per
// sequence against its whole cached context. A 0-length sequence gives
// out = 0, lse = -inf. v2 merges the partitions with a separate combine
// kernel. With RADIXKV_DECODE_FUSED_COMBINE=1 (opt-in; slower on the H200,
// see docs/kernel-notes.md) the partition kernel merges them itself: each block
// writes its (m, l, O) partial, fences, and increments its (sequence, kv
// head) counter; the block that arrives last combines and resets the counter
// (the "last block" reduction of the CUDA threadFenceReduction sample);
// grids with more than kDecodeCounterBytes / 4 block columns still use the
// separate kernel.
// Errors: INVALID_ARGUMENT (dtype, head_dim, heads, partition size not a
// multiple of 64, workspace too small, null pointers), INTERNAL (launch).
absl::Status Decode(const GpuKvCache& cache, const GpuDecodeArgs& args,
                    void* stream);

// ------------------------------------------------------------------ extend

struct GpuExtendArgs {
  const void* q = nullptr;              // [total_q, Hq, D] dtype
  const void* k_extend = nullptr;       // [total_q, Hkv, D] new tokens' K
  const void* v_extend = nullptr;       // [total_q, Hkv, D] new tokens' V
  const int32_t* qo_indptr = nullptr;   // [B+1] new tokens per sequence
  const int32_t* kv_indptr = nullptr;   // [B+1] cached prefix tokens per seq
  const int64_t* kv_indices = nullptr;  // prefix slots in the pool
  int32_t batch_size = 0;
  int32_t max_extend_len = 0;  // >= every qo_indptr[b+1] - qo_indptr[b]
  int32_t num_q_heads = 0;
  float sm_scale = 0.0f;
  // Sliding window, as ExtendAttentionArgs::window_left of the CPU kernel:
  // -1 = full causal attention; w >= 0: the query at absolute position p
  // sees keys at positions [p - w, p]; prefix tiles left of a block's window
  // are never loaded.
  int32_t window_left = -1;
  void* out = nullptr;   // [total_q, Hq, D] dtype
  float* lse = nullptr;  // optional [total_q, Hq]
  KernelPath path = KernelPath::kAuto;
};

// Extend attention (SGLang's extend semantics): new token i of a sequence
// sees all of its prefix and new tokens j <= i (within window_left).
// A window runs on the portable, mma.sync and MFMA kernels; the wgmma
// kernels take none, so a windowed launch on their path uses mma.sync. Prefix K/V are read from
// `cache`, the new tokens' K/V from k_extend/v_extend (ReshapeAndCache them
// separately).
absl::Status Extend(const GpuKvCache& cache, const GpuExtendArgs& args,
                    void* stream);

// ---------------------------------------------------------- cache movement

// Writes k, v ([num_tokens, Hkv, D] dtype, device) into the pool at slots
// out_cache_loc[num_tokens] (device). A negative slot skips its token.
// Slots are not range-checked on the host (they live on the device).
absl::Status ReshapeAndCache(const GpuKvCache& cache, const void* k,
                             const void* v, const int64_t* out_cache_loc,
                             int32_t num_tokens, void* stream);

// Bytes of device scratch CopyBlocks stages its ops and layer pointers in.
size_t CopyBlocksScratchBytes(size_t num_ops, size_t num_layers);

// Executes page copies (semantics of worker/kernels/cpu/copy_blocks.h) on
// every layer, K and V: layers[l] is layer l of the pool (host array of
// device pointers; all layers must have the same geometry and dtype). `ops`
// (host) are validated first (INVALID_ARGUMENT, nothing enqueued), then
// staged into `scratch` (device, CopyBlocksScratchBytes(ops.size(),
// layers.size()) bytes, 16-aligned; reuse it only after the stream passed
// this call) and executed in order: an op that touches a page an earlier op
// writes, or writes a page an earlier op reads, goes to a later launch.
absl::Status CopyBlocks(absl::Span<const GpuKvCache> layers,
                        absl::Span<const PageCopy> ops, void* scratch,
                        size_t scratch_bytes, void* stream);

// True if this build has matrix-core kernels: NVIDIA tensor cores (decode and
// extend), or AMD MFMA (extend only, used when the device is gfx90a/gfx94x).
bool HasMatrixCoreKernels();

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_KERNELS_HIP_GPU_ATTENTION_H_
