#include "worker/kernels/cpu/decode_attention.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "worker/kernels/attention_combine.h"
#include "worker/kernels/cpu/attention_tile.h"
#include "worker/kv_cache_layout.h"
#include "worker/numeric_types.h"

namespace radixkv::worker {
namespace {

using cpu_attention::AttendTileAnyD;
using cpu_attention::GatherRows;
using cpu_attention::kTileTokens;
using cpu_attention::RowStates;

[[noreturn]] void Fail(const char* what) {
  cpu_attention::FailArgs("DecodeAttention", what);
}

void Validate(const KvPool& pool, const DecodeAttentionArgs& a) {
  if (a.kv_indptr.empty() || a.kv_indptr[0] != 0) Fail("kv_indptr[0] != 0");
  for (size_t b = 1; b < a.kv_indptr.size(); ++b) {
    if (a.kv_indptr[b] < a.kv_indptr[b - 1]) Fail("kv_indptr decreasing");
  }
  cpu_attention::CheckKvIndicesAndHeads(pool.geometry(), a.kv_indptr,
                                        a.kv_indices, a.num_q_heads,
                                        "DecodeAttention");
  if (a.partition_size < 0) Fail("partition_size < 0");
  if (a.window_left < -1) Fail("window_left < -1");
  if (a.kv_indptr.size() > 1 && (a.q == nullptr || a.out == nullptr)) {
    Fail("q or out is null");
  }
}

// Attends the G query heads of kv head `kv_head` of sequence b to the context
// tokens [begin, end) of that sequence; leaves (m, l, acc) in s.st.
template <typename T>
void AttendRange(const KvCacheGeometry& g, const T* k_cache, const T* v_cache,
                 const DecodeAttentionArgs& a, int64_t b, int32_t kv_head,
                 int32_t group, float scale_log2, int64_t begin, int64_t end,
                 const cpu_attention::TaskBuffers& s) {
  const int32_t D = g.head_dim;
  const float* q =
      a.q + (b * a.num_q_heads + static_cast<int64_t>(kv_head) * group) * D;
  for (int64_t i = 0; i < static_cast<int64_t>(group) * D; ++i) {
    s.q[i] = q[i] * scale_log2;
  }
  s.st.Reset(group, D);
  const int64_t* slots = a.kv_indices.data() + a.kv_indptr[b];
  for (int64_t t0 = begin; t0 < end; t0 += kTileTokens) {
    const int n = static_cast<int>(std::min<int64_t>(kTileTokens, end - t0));
    GatherRows(g, k_cache, /*is_v=*/false, slots + t0, n, end - t0, kv_head,
               s.k);
    GatherRows(g, v_cache, /*is_v=*/true, slots + t0, n, end - t0, kv_head,
               s.v);
    AttendTileAnyD(s.q, group, D, s.k, s.v, n, /*visible=*/nullptr, s.st,
                   s.scores);
  }
}

// First context token sequence b's query sees: the current token is the last
// one (position len - 1), and a window keeps [len - 1 - window_left, len).
int64_t WindowBegin(const DecodeAttentionArgs& a, int64_t b) {
  const int64_t len = a.kv_indptr[b + 1] - a.kv_indptr[b];
  if (a.window_left < 0) return 0;
  return std::max<int64_t>(0, len - 1 - a.window_left);
}

template <typename T>
void DecodeTyped(const KvPool& pool, int layer, const DecodeAttentionArgs& a,
                 CpuThreadPool* threads) {
  const KvCacheGeometry& g = pool.geometry();
  const T* k_cache = static_cast<const T*>(pool.k_data(layer));
  const T* v_cache = static_cast<const T*>(pool.v_data(layer));
  const int64_t B = static_cast<int64_t>(a.kv_indptr.size()) - 1;
  const int32_t Hkv = g.num_kv_heads, D = g.head_dim;
  const int32_t Hq = a.num_q_heads;
  const int32_t group = Hq / Hkv;
  const float scale_log2 = a.sm_scale * kLog2e;

  if (a.partition_size == 0) {
    // v1: one task per (sequence, kv head), one pass over the context.
    ParallelFor(threads, B * Hkv, [&](int64_t task) {
      const int64_t b = task / Hkv;
      const int32_t h = static_cast<int32_t>(task % Hkv);
      const cpu_attention::TaskBuffers s =
          cpu_attention::AcquireTaskBuffers(group, D);
      const int64_t len = a.kv_indptr[b + 1] - a.kv_indptr[b];
      AttendRange(g, k_cache, v_cache, a, b, h, group, scale_log2,
                  WindowBegin(a, b), len, s);
      const int64_t row0 = b * Hq + static_cast<int64_t>(h) * group;
      cpu_attention::WriteRows(s.st, group, D, a.out + row0 * D, D,
                               a.lse != nullptr ? a.lse + row0 : nullptr, 1);
    });
    return;
  }

  // v2 (background.md §4.2): split-KV over the visible tokens [w, len) (w =
  // WindowBegin: 0 without a window, so out-of-window pages get no
  // partition). Partition p of sequence b covers [w + p * ps,
  // min(w + (p + 1) * ps, len)); it writes max_logits / exp_sums / tmp_out
  // [B, Hq, P] (+ [D]) with P = max partitions over the batch.
  const int64_t ps = a.partition_size;
  int64_t P = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = a.kv_indptr[b + 1] - a.kv_indptr[b];
    P = std::max(P, (len - WindowBegin(a, b) + ps - 1) / ps);
  }
  std::vector<float> max_logits(B * Hq * P), exp_sums(B * Hq * P);
  std::vector<float> tmp_out(B * Hq * P * D);
  ParallelFor(threads, B * Hkv * P, [&](int64_t task) {
    const int64_t p = task % P;
    const int64_t b = task / P / Hkv;
    const int32_t h = static_cast<int32_t>(task / P % Hkv);
    const int64_t len = a.kv_indptr[b + 1] - a.kv_indptr[b];
    const int64_t begin = WindowBegin(a, b) + p * ps;
    if (begin >= len) return;  // this sequence has fewer partitions
    const cpu_attention::TaskBuffers s =
        cpu_attention::AcquireTaskBuffers(group, D);
    AttendRange(g, k_cache, v_cache, a, b, h, group, scale_log2, begin,
                std::min(len, begin + ps), s);
    for (int32_t r = 0; r < group; ++r) {
      const int64_t idx =
          (b * Hq + static_cast<int64_t>(h) * group + r) * P + p;
      max_logits[idx] = s.st.m[r];
      exp_sums[idx] = s.st.l[r];
      // Normalized partial output O_p = acc / l_p (background.md §4.2).
      const float inv = s.st.l[r] > 0.0f ? 1.0f / s.st.l[r] : 0.0f;
      float* o = tmp_out.data() + idx * D;
      const float* acc = s.st.acc + static_cast<int64_t>(r) * D;
      for (int32_t d = 0; d < D; ++d) o[d] = acc[d] * inv;
    }
  });
  // Combine per (sequence, q head): w_p = l_p 2^(m_p - M) / L.
  ParallelFor(threads, B, [&](int64_t b) {
    const int64_t len = a.kv_indptr[b + 1] - a.kv_indptr[b] - WindowBegin(a, b);
    const int32_t num_partitions = static_cast<int32_t>((len + ps - 1) / ps);
    for (int32_t hq = 0; hq < Hq; ++hq) {
      const int64_t row = b * Hq + hq;
      CombinePartitions(num_partitions, D, max_logits.data() + row * P,
                        exp_sums.data() + row * P, tmp_out.data() + row * P * D,
                        a.out + row * D,
                        a.lse != nullptr ? a.lse + row : nullptr);
    }
  });
}

}  // namespace

int32_t ChooseDecodePartitionSize(int64_t batch, int32_t num_kv_heads,
                                  int64_t max_seq_len, int num_threads) {
  constexpr int64_t kMinPartition = 256, kAlign = 64;
  const int64_t tasks = std::max<int64_t>(1, batch * num_kv_heads);
  const int64_t wanted = 2 * std::max(1, num_threads);
  if (tasks >= wanted || max_seq_len <= 2 * kMinPartition) return 0;
  const int64_t splits = (wanted + tasks - 1) / tasks;
  int64_t ps = (max_seq_len + splits - 1) / splits;
  ps = (ps + kAlign - 1) / kAlign * kAlign;
  return static_cast<int32_t>(std::max(kMinPartition, ps));
}

void DecodeAttention(const KvPool& pool, int layer,
                     const DecodeAttentionArgs& args, CpuThreadPool* threads) {
  Validate(pool, args);
  cpu_attention::DispatchKvDType(pool.dtype(),
                                 [&]<typename T>(std::type_identity<T>) {
                                   DecodeTyped<T>(pool, layer, args, threads);
                                 });
}

}  // namespace radixkv::worker
