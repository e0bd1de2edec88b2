// Extend attention on the CPU: prefill of new tokens on top of a cached
// prefix held in the paged KV pool (SGLang's extend_attention;
// docs/background.md §3).
//
// For sequence b with prefix length Lp = kv_indptr[b+1] - kv_indptr[b] and
// Le = qo_indptr[b+1] - qo_indptr[b] new tokens (Lk = Lp + Le, Lq = Le),
// query i in [0, Le) attends to key j of the concatenation [prefix ; new]
// iff j <= i + (Lk - Lq)  (the shifted causal mask, background.md §3.2):
// every prefix token and the new tokens j' <= i. Computed in two stages
// (background.md §3.4):
//   stage 1, prefix: K/V tiles gathered from the pool through
//            kv_indices[kv_indptr[b] ..), no mask (the whole Lq x Lp block is
//            visible);
//   stage 2, extend: K/V of the new tokens read from k_extend / v_extend,
//            causal mask j' <= i inside the diagonal tile and early exit: a
//            block of queries [i0, i1) stops at tile start >= i1.
// Online softmax in the base-2 domain (sm_scale * log2(e) folded into Q once,
// exp2 everywhere; background.md §4.4), fp32 accumulation.
//
// GQA by KV head (background.md §4.5): a task owns (sequence, kv head,
// block of queries); each K/V tile is converted to fp32 once and reused by
// all num_q_heads / num_kv_heads query heads of the group. Query head h uses
// kv head h / (num_q_heads / num_kv_heads).
#ifndef RADIXKV_WORKER_KERNELS_CPU_EXTEND_ATTENTION_H_
#define RADIXKV_WORKER_KERNELS_CPU_EXTEND_ATTENTION_H_

#include <cstdint>

#include "absl/types/span.h"
#include "worker/kernels/cpu/cpu_thread_pool.h"
#include "worker/kv_pool.h"

namespace radixkv::worker {

// Arguments of ExtendAttention. B = qo_indptr.size() - 1 sequences,
// total_q = qo_indptr[B], Hq = num_q_heads, Hkv = pool num_kv_heads,
// D = pool head_dim. All activations fp32, contiguous row-major.
struct ExtendAttentionArgs {
  const float* q = nullptr;              // [total_q, Hq, D]
  const float* k_extend = nullptr;       // [total_q, Hkv, D] the new tokens' K
  const float* v_extend = nullptr;       // [total_q, Hkv, D] the new tokens' V
  absl::Span<const int32_t> qo_indptr;   // [B+1] new tokens per sequence
  absl::Span<const int32_t> kv_indptr;   // [B+1] prefix tokens per sequence
  absl::Span<const int64_t> kv_indices;  // [kv_indptr[B]] prefix slots
  int32_t num_q_heads = 0;  // Hq, a multiple of Hkv (GQA group size Hq/Hkv)
  float sm_scale = 0.0f;    // softmax scale, natural units (e.g. 1/sqrt(D))
  // Sliding window (docs/architecture.md, "Sliding-window attention"): -1 =
  // full causal attention; w >= 0: the query at absolute position p (prefix
  // tokens are positions [0, Lp), new token i is Lp + i) sees only keys at
  // positions [p - w, p]. A Hugging Face sliding_window W is w = W - 1
  // (transformers masking_utils.sliding_window_overlay: kv_idx > q_idx - W;
  // vLLM's window_size = (W - 1, 0)). Prefix keys left of the block's window
  // are never read.
  int32_t window_left = -1;
  float* out = nullptr;  // [total_q, Hq, D], every element written
  float* lse = nullptr;  // optional [total_q, Hq]: natural-log LSE of
                         // scaled logits sm_scale*q.k over visible keys
};

// Computes out (and lse) for every new token of every sequence from the pool
// layer `layer` (prefix K/V, in the pool's dtype and layout) and the new
// tokens' fp32 K/V. Does not write the pool (call ReshapeAndCache for that).
// Preconditions (checked, abort on violation: these are programming errors):
// qo_indptr and kv_indptr have the same size >= 1, start at 0 and are
// non-decreasing; kv_indices.size() >= kv_indptr[B]; prefix slots lie in
// [0, capacity_slots); num_q_heads is a positive multiple of num_kv_heads;
// window_left >= -1.
// threads: optional, parallel over (sequence, kv head, query block).
void ExtendAttention(const KvPool& pool, int layer,
                     const ExtendAttentionArgs& args, CpuThreadPool* threads);

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_KERNELS_CPU_EXTEND_ATTENTION_H_
