// Combine of split-KV partial attention results (paged decode v2), shared by
// the CPU kernels and the HIP kernels.
//
// docs/background.md §4.3 (FlashInfer's merge_state, vLLM's
// merge_attn_states): partition p of a sequence's context produced, for one
// query head,
//   m_p  the max logit over its tokens,
//   l_p  = sum_t exp(S_t - m_p),
//   O_p  = sum_t exp(S_t - m_p) V_t / l_p      (normalized partial output).
// With M = max_p m_p, L = sum_p l_p exp(m_p - M), the exact global output is
//   O = sum_p w_p O_p,   w_p = l_p exp(m_p - M) / L.
//
// Units: logits here are in the BASE-2 domain, i.e. S_t = q.k_t * sm_scale *
// log2(e), and every exp above is exp2 (background.md §4.4: log2(e) is
// folded into the scale once on the host). The natural-log LSE of
// the full row is (M + log2 L) * ln 2.
//
// Empty partitions (no tokens) are encoded as m_p = -inf, l_p = 0 and get
// weight 0; if every partition is empty (seq_len 0) the output is 0 and the
// LSE is -inf. No NaN is produced for finite inputs.
//
// Header-only; usable from host C++ and HIP/CUDA device code. A GPU kernel
// typically calls CombineMax / CombineExpSum / CombineWeight per (seq, head)
// and spreads the head_dim loop over its threads; CombinePartitions is the
// serial reference form used by the CPU backend.
#ifndef RADIXKV_WORKER_KERNELS_ATTENTION_COMBINE_H_
#define RADIXKV_WORKER_KERNELS_ATTENTION_COMBINE_H_

#include <math.h>
#include <stdint.h>

#include "worker/numeric_types.h"  // RADIXKV_HOST_DEVICE

namespace radixkv::worker {

// log2(e): multiply sm_scale by this to get base-2 logits (background.md §4.4).
inline constexpr float kLog2e = 1.4426950408889634f;
// ln(2): base-2 log-sum-exp times this is the natural log-sum-exp.
inline constexpr float kLn2 = 0.6931471805599453f;

// M = max_p max_logits[p * stride] over num_partitions entries (base-2
// domain); -inf when num_partitions == 0 or every partition is empty.
RADIXKV_HOST_DEVICE inline float CombineMax(const float* max_logits,
                                            int32_t num_partitions,
                                            int64_t stride = 1) {
  float m = -INFINITY;
  for (int32_t p = 0; p < num_partitions; ++p) {
    m = fmaxf(m, max_logits[p * stride]);
  }
  return m;
}

// Rescaled partition weight before normalization: l_p * 2^(m_p - M).
// 0 for an empty partition (l_p == 0 or m_p == -inf), also when M == -inf.
RADIXKV_HOST_DEVICE inline float CombineRescaledSum(float max_logit,
                                                    float exp_sum,
                                                    float global_max) {
  if (!(exp_sum > 0.0f) || max_logit == -INFINITY) return 0.0f;
  return exp_sum * exp2f(max_logit - global_max);
}

// L = sum_p l_p * 2^(m_p - M) over num_partitions entries (strided).
RADIXKV_HOST_DEVICE inline float CombineExpSum(const float* max_logits,
                                               const float* exp_sums,
                                               int32_t num_partitions,
                                               float global_max,
                                               int64_t stride = 1) {
  float l = 0.0f;
  for (int32_t p = 0; p < num_partitions; ++p) {
    l += CombineRescaledSum(max_logits[p * stride], exp_sums[p * stride],
                            global_max);
  }
  return l;
}

// w_p = l_p * 2^(m_p - M) / L (background.md §4.3); 0 when L == 0.
RADIXKV_HOST_DEVICE inline float CombineWeight(float max_logit, float exp_sum,
                                               float global_max,
                                               float global_exp_sum) {
  if (!(global_exp_sum > 0.0f)) return 0.0f;
  return CombineRescaledSum(max_logit, exp_sum, global_max) / global_exp_sum;
}

// Natural-log LSE of the full row from base-2 (M, L): (M + log2 L) * ln 2;
// -inf when L == 0 (empty row).
RADIXKV_HOST_DEVICE inline float CombineLse(float global_max,
                                            float global_exp_sum) {
  if (!(global_exp_sum > 0.0f)) return -INFINITY;
  return (global_max + log2f(global_exp_sum)) * kLn2;
}

// Serial combine of one (sequence, query head).
//   num_partitions  P >= 0
//   head_dim        D >= 1
//   max_logits      [P] fp32, base-2 domain, element p at max_logits[p*stride]
//   exp_sums        [P] fp32, same indexing
//   partial_out     [P, D] fp32, normalized O_p, row p at partial_out +
//                   p * out_stride (out_stride >= D elements)
//   out             [D] fp32, written completely (zeros if the row is empty)
//   lse             optional (nullptr = skip): natural-log LSE, -inf if empty
RADIXKV_HOST_DEVICE inline void CombinePartitions(
    int32_t num_partitions, int32_t head_dim, const float* max_logits,
    const float* exp_sums, const float* partial_out, float* out, float* lse,
    int64_t stride = 1, int64_t out_stride = -1) {
  if (out_stride < 0) out_stride = head_dim;
  const float m = CombineMax(max_logits, num_partitions, stride);
  const float l =
      CombineExpSum(max_logits, exp_sums, num_partitions, m, stride);
  for (int32_t d = 0; d < head_dim; ++d) out[d] = 0.0f;
  for (int32_t p = 0; p < num_partitions; ++p) {
    const float w =
        CombineWeight(max_logits[p * stride], exp_sums[p * stride], m, l);
    if (w == 0.0f) continue;  // empty partition: its O_p is never read
    const float* o_p = partial_out + p * out_stride;
    for (int32_t d = 0; d < head_dim; ++d) out[d] += w * o_p[d];
  }
  if (lse != nullptr) *lse = CombineLse(m, l);
}

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_KERNELS_ATTENTION_COMBINE_H_
