// Paged decode attention on the CPU (vLLM PagedAttention; background.md §4):
// one query token per sequence against its whole context in the paged KV pool.
//   v1 (partition_size == 0): one online-softmax pass over the context.
//   v2 (partition_size > 0): split-KV; the context is cut into partitions of
//      partition_size tokens, each producing (m_p, l_p, O_p), then combined
//      with w_p = l_p exp(m_p - M) / L (worker/kernels/attention_combine.h).
// Softmax in the base-2 domain: sm_scale * log2(e) folded into Q once, exp2
// everywhere (background.md §4.4); fp32 accumulation.
// GQA by KV head (background.md §4.5): a task owns (sequence, kv head[,
// partition]) and each K/V tile is converted to fp32 once and reused by all
// query heads of the group; query head h uses kv head h / (Hq / Hkv).
#ifndef RADIXKV_WORKER_KERNELS_CPU_DECODE_ATTENTION_H_
#define RADIXKV_WORKER_KERNELS_CPU_DECODE_ATTENTION_H_

#include <cstdint>

#include "absl/types/span.h"
#include "worker/kernels/cpu/cpu_thread_pool.h"
#include "worker/kv_pool.h"

namespace radixkv::worker {

// Arguments of DecodeAttention. B = kv_indptr.size() - 1 sequences,
// Hq = num_q_heads, D = pool head_dim. Activations fp32, contiguous.
struct DecodeAttentionArgs {
  const float* q = nullptr;              // [B, Hq, D]
  absl::Span<const int32_t> kv_indptr;   // [B+1] context tokens per sequence
  absl::Span<const int64_t> kv_indices;  // [kv_indptr[B]] all context slots,
                                         // incl. the current token (written)
  int32_t num_q_heads = 0;     // Hq, a positive multiple of num_kv_heads
  float sm_scale = 0.0f;       // softmax scale, natural units (e.g. 1/sqrt(D))
  int32_t partition_size = 0;  // tokens; 0 = v1, > 0 = v2 split-KV
  // Sliding window (ExtendAttentionArgs::window_left): -1 = the whole
  // context; w >= 0: the query (the last context token, position len - 1)
  // sees the last w + 1 tokens only; pages before them are never read.
  int32_t window_left = -1;
  float* out = nullptr;  // [B, Hq, D], every element written
  float* lse = nullptr;  // optional [B, Hq], natural log
};

// Computes out (and lse) for each sequence. A sequence with 0 context tokens
// gets out = 0 and lse = -inf. Preconditions (checked, abort on violation):
// kv_indptr starts at 0 and is non-decreasing, kv_indices.size() >=
// kv_indptr[B], slots in [0, capacity_slots), num_q_heads a positive multiple
// of num_kv_heads, partition_size >= 0, window_left >= -1.
// threads: optional, parallel over (sequence, kv head) for v1 and
// (sequence, kv head, partition) for v2.
void DecodeAttention(const KvPool& pool, int layer,
                     const DecodeAttentionArgs& args, CpuThreadPool* threads);

// Adaptive partition size for DecodeAttention on `num_threads` threads
// (docs/background.md §4.6, §5.3). v1 already has batch * num_kv_heads
// independent tasks; split-KV only pays off when those are fewer than about two
// per thread and the context is long. Returns 0 (v1) in that case, otherwise a
// multiple of 64 tokens, at least 256, that cuts max_seq_len into enough
// partitions for two tasks per thread.
int32_t ChooseDecodePartitionSize(int64_t batch, int32_t num_kv_heads,
                                  int64_t max_seq_len, int num_threads);

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_KERNELS_CPU_DECODE_ATTENTION_H_
