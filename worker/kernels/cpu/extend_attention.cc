#include "worker/kernels/cpu/extend_attention.h"

#include <algorithm>
#include <cstring>
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

// Query rows per task: a block of query tokens times the GQA group, about
// this many rows so the tile loads are amortized over many rows (BLOCK_M of
// background.md §3.4).
constexpr int kRowsPerTask = 64;

[[noreturn]] void Fail(const char* what) {
  cpu_attention::FailArgs("ExtendAttention", what);
}

void CheckIndptr(absl::Span<const int32_t> indptr, const char* name) {
  if (indptr.empty() || indptr[0] != 0) Fail(name);
  for (size_t b = 1; b < indptr.size(); ++b) {
    if (indptr[b] < indptr[b - 1]) Fail(name);
  }
}

void Validate(const KvPool& pool, const ExtendAttentionArgs& a) {
  CheckIndptr(a.qo_indptr, "qo_indptr must start at 0 and not decrease");
  CheckIndptr(a.kv_indptr, "kv_indptr must start at 0 and not decrease");
  if (a.qo_indptr.size() != a.kv_indptr.size()) {
    Fail("qo_indptr and kv_indptr sizes differ");
  }
  cpu_attention::CheckKvIndicesAndHeads(pool.geometry(), a.kv_indptr,
                                        a.kv_indices, a.num_q_heads,
                                        "ExtendAttention");
  if (a.window_left < -1) Fail("window_left < -1");
  if (a.qo_indptr.back() > 0 && (a.q == nullptr || a.k_extend == nullptr ||
                                 a.v_extend == nullptr || a.out == nullptr)) {
    Fail("q, k_extend, v_extend or out is null");
  }
}

struct Task {
  int32_t seq;
  int32_t kv_head;
  int32_t q_begin;  // query tokens [q_begin, q_end) of the sequence
  int32_t q_end;
};

template <typename T>
void ExtendTyped(const KvPool& pool, int layer, const ExtendAttentionArgs& a,
                 CpuThreadPool* threads) {
  const KvCacheGeometry& g = pool.geometry();
  const T* k_cache = static_cast<const T*>(pool.k_data(layer));
  const T* v_cache = static_cast<const T*>(pool.v_data(layer));
  const int32_t B = static_cast<int32_t>(a.qo_indptr.size()) - 1;
  const int32_t Hkv = g.num_kv_heads, D = g.head_dim, Hq = a.num_q_heads;
  const int32_t group = Hq / Hkv;
  const float scale_log2 = a.sm_scale * kLog2e;
  const int32_t block_m = std::max(1, kRowsPerTask / group);

  // Tasks: (sequence, kv head, block of block_m query tokens).
  std::vector<Task> tasks;
  for (int32_t b = 0; b < B; ++b) {
    const int32_t le = a.qo_indptr[b + 1] - a.qo_indptr[b];
    for (int32_t i0 = 0; i0 < le; i0 += block_m) {
      for (int32_t h = 0; h < Hkv; ++h) {
        tasks.push_back(Task{b, h, i0, std::min(le, i0 + block_m)});
      }
    }
  }
  const int64_t kv_row = static_cast<int64_t>(Hkv) * D;  // k_extend row
  const int64_t q_row = static_cast<int64_t>(Hq) * D;

  ParallelFor(threads, static_cast<int64_t>(tasks.size()), [&](int64_t ti) {
    const Task& task = tasks[ti];
    const int32_t mb = task.q_end - task.q_begin;
    // Row r is query token q_begin + r / group, head kv_head * group + r %
    // group.
    const int32_t rows = mb * group;
    const int64_t qo_start = a.qo_indptr[task.seq];
    const int64_t lp = a.kv_indptr[task.seq + 1] - a.kv_indptr[task.seq];
    const cpu_attention::TaskBuffers buf =
        cpu_attention::AcquireTaskBuffers(rows, D);
    // Gather this block's query rows, scaled into the base-2 domain.
    for (int32_t i = 0; i < mb; ++i) {
      const float* src = a.q + (qo_start + task.q_begin + i) * q_row +
                         static_cast<int64_t>(task.kv_head) * group * D;
      float* dst = buf.q + static_cast<int64_t>(i) * group * D;
      for (int64_t e = 0; e < static_cast<int64_t>(group) * D; ++e) {
        dst[e] = src[e] * scale_log2;
      }
    }
    const RowStates& st = buf.st;
    st.Reset(rows, D);

    // Sliding window: query i (absolute position lp + i) sees keys from
    // lp + i - window_left on, so the block's first query bounds the keys
    // read at all: tiles start there and earlier pages are never gathered.
    const bool windowed = a.window_left >= 0;
    const int64_t window_lo =
        windowed ? lp + task.q_begin - a.window_left : int64_t{0};
    // Row r's first visible key relative to a tile starting at absolute key
    // j0; returns whether any row of the tile is cut by the window.
    auto set_first = [&](int64_t j0) {
      if (!windowed || lp + task.q_end - 1 - a.window_left <= j0) return false;
      for (int32_t r = 0; r < rows; ++r) {
        const int64_t i = lp + task.q_begin + r / group;
        buf.first[r] = static_cast<int>(
            std::clamp<int64_t>(i - a.window_left - j0, 0, kTileTokens));
      }
      return true;
    };

    // Stage 1 (background.md §3.4): prefix tiles from the pool, fully visible
    // up to the window's left edge.
    const int64_t* slots = a.kv_indices.data() + a.kv_indptr[task.seq];
    for (int64_t j0 = std::max<int64_t>(0, window_lo); j0 < lp;
         j0 += kTileTokens) {
      const int n = static_cast<int>(std::min<int64_t>(kTileTokens, lp - j0));
      GatherRows(g, k_cache, false, slots + j0, n, lp - j0, task.kv_head,
                 buf.k);
      GatherRows(g, v_cache, true, slots + j0, n, lp - j0, task.kv_head, buf.v);
      const bool cut = set_first(j0);
      AttendTileAnyD(buf.q, rows, D, buf.k, buf.v, n, nullptr, st, buf.scores,
                     cut ? buf.first : nullptr);
    }

    // Stage 2: the new tokens, causal j' <= i; early exit at q_end: tiles
    // starting at or after the block's last query are never loaded.
    const int32_t extend_end = task.q_end;
    const int32_t extend_begin =
        static_cast<int32_t>(std::max<int64_t>(0, window_lo - lp));
    for (int32_t j0 = extend_begin; j0 < extend_end; j0 += kTileTokens) {
      const int n = std::min(kTileTokens, extend_end - j0);
      for (int t = 0; t < n; ++t) {
        const int64_t src = (qo_start + j0 + t) * kv_row +
                            static_cast<int64_t>(task.kv_head) * D;
        std::memcpy(buf.k + static_cast<int64_t>(t) * D, a.k_extend + src,
                    sizeof(float) * D);
        std::memcpy(buf.v + static_cast<int64_t>(t) * D, a.v_extend + src,
                    sizeof(float) * D);
      }
      const bool diagonal = j0 + n - 1 > task.q_begin;
      if (diagonal) {
        for (int32_t r = 0; r < rows; ++r) {
          const int32_t i = task.q_begin + r / group;
          buf.visible[r] = std::clamp(i + 1 - j0, 0, n);
        }
      }
      const bool cut = set_first(lp + j0);
      AttendTileAnyD(buf.q, rows, D, buf.k, buf.v, n,
                     diagonal ? buf.visible : nullptr, st, buf.scores,
                     cut ? buf.first : nullptr);
    }

    for (int32_t i = 0; i < mb; ++i) {
      const int64_t token = qo_start + task.q_begin + i;
      const int64_t head0 = static_cast<int64_t>(task.kv_head) * group;
      const RowStates row_st{st.m + i * group, st.l + i * group,
                             st.acc + static_cast<int64_t>(i) * group * D};
      cpu_attention::WriteRows(
          row_st, group, D, a.out + token * q_row + head0 * D, D,
          a.lse != nullptr ? a.lse + token * Hq + head0 : nullptr, 1);
    }
  });
}

}  // namespace

void ExtendAttention(const KvPool& pool, int layer,
                     const ExtendAttentionArgs& args, CpuThreadPool* threads) {
  Validate(pool, args);
  cpu_attention::DispatchKvDType(pool.dtype(),
                                 [&]<typename T>(std::type_identity<T>) {
                                   ExtendTyped<T>(pool, layer, args, threads);
                                 });
}

}  // namespace radixkv::worker
