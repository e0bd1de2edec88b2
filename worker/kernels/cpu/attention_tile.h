// Internal to worker/kernels/cpu: the tile loop shared by ExtendAttention and
// DecodeAttention. Not part of the kernel API; include only from this folder.
//
// A task owns one KV head and R query rows (the GQA group's query heads, times
// a block of query tokens for extend). For every tile of up to kTileTokens
// keys it gathers K and V of that head from the pool ONCE, converting to fp32,
// and all R rows consume it: the KV read per head is paid once for the whole
// GQA group (docs/background.md §4.5).
//
// Softmax is online (flash-attention style running max m, running sum l,
// unnormalized accumulator) in the base-2 domain: the caller folds
// sm_scale * log2(e) into Q once, and every exponential is exp2
// (docs/background.md §4.4). A final (m, l, acc) triple is exactly a split-KV
// partition's (m_p, l_p, l_p * O_p) of docs/background.md §4.2.
#ifndef RADIXKV_WORKER_KERNELS_CPU_ATTENTION_TILE_H_
#define RADIXKV_WORKER_KERNELS_CPU_ATTENTION_TILE_H_

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "absl/types/span.h"
#include "worker/kernels/attention_combine.h"
#include "worker/kv_cache_layout.h"
#include "worker/numeric_types.h"

namespace radixkv::worker::cpu_attention {

// Keys per tile: K and V tiles of 64 x 128 fp32 are 32 KiB each (L1/L2).
inline constexpr int kTileTokens = 64;

// 2^x for x in the softmax range (x <= 0; -inf gives 2^-126 ~ 1e-38, which
// only ever multiplies zeros). Branch-free so loops over it vectorize: round
// to nearest integer n, 2^(x-n) by a degree-7 polynomial on [-0.5, 0.5],
// scale by building the exponent bits. Max relative error ~1e-7 (fp32 ulp).
inline float Exp2(float x) {
  x = x < -126.0f ? -126.0f : x;
  x = x > 127.0f ? 127.0f : x;
  const float n = (x + 12582912.0f) - 12582912.0f;  // round via 1.5 * 2^23
  const float f = x - n;
  float p = 1.5252733804059840e-5f;
  p = p * f + 1.5403530393381606e-4f;
  p = p * f + 1.3333558146428443e-3f;
  p = p * f + 9.6181291076284772e-3f;
  p = p * f + 5.5504108664821580e-2f;
  p = p * f + 2.4022650695910071e-1f;
  p = p * f + 6.9314718055994531e-1f;
  p = p * f + 1.0f;
  const int32_t e = static_cast<int32_t>(n) + 127;
  return p * std::bit_cast<float>(static_cast<uint32_t>(e) << 23);
}

// Converts n contiguous stored elements to fp32.
inline void ConvertRow(const float* __restrict src, float* __restrict dst,
                       int n) {
  std::memcpy(dst, src, sizeof(float) * n);
}

inline void ConvertRow(const bf16_t* __restrict src, float* __restrict dst,
                       int n) {
  const uint16_t* bits = reinterpret_cast<const uint16_t*>(src);
#pragma omp simd
  for (int i = 0; i < n; ++i) {
    dst[i] = std::bit_cast<float>(static_cast<uint32_t>(bits[i]) << 16);
  }
}

inline void ConvertRow(const fp16_t* __restrict src, float* __restrict dst,
                       int n) {
  int i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < n; ++i) dst[i] = Fp16ToFloat(src[i]);
}

// Rows ahead of the one being converted whose lines are prefetched: enough
// misses in flight to cover memory latency without flooding the fill buffers.
inline constexpr int kPrefetchRowsAhead = 8;

// Gathers one kv head's K (is_v false) or V (is_v true) rows for n tokens at
// pool slots `slots` into out [n][head_dim] fp32. Layout handled through the
// pool's one address function (worker/kv_cache_layout.h, background.md §1.5).
// slots[0 .. available) are valid (available >= n): rows up to
// kPrefetchRowsAhead past the tile are prefetched while converting, so the
// scattered page reads of the next tile are already in flight.
template <typename T>
void GatherRows(const KvCacheGeometry& g, const T* cache, bool is_v,
                const int64_t* slots, int n, int64_t available, int32_t kv_head,
                float* out) {
  const int32_t D = g.head_dim;
  constexpr int kLine = 64;
  if (g.layout != KvLayout::kVllm) {
    const int row_bytes = D * static_cast<int>(sizeof(T));
    for (int t = 0; t < n; ++t) {
      if (t + kPrefetchRowsAhead < available) {
        const char* p = reinterpret_cast<const char*>(
            cache + g.KOffset(slots[t + kPrefetchRowsAhead], kv_head, 0));
        for (int off = 0; off < row_bytes; off += kLine) {
          __builtin_prefetch(p + off);
        }
      }
      ConvertRow(cache + g.KOffset(slots[t], kv_head, 0), out + t * D, D);
    }
  } else if (!is_v) {  // K [.., D/x, page_size, x]: runs of x dims
    const int32_t x = g.vllm_x();
    const int64_t run_stride = static_cast<int64_t>(g.page_size) * x;
    for (int t = 0; t < n; ++t) {
      if (t + kPrefetchRowsAhead < available) {
        const T* ahead =
            cache + g.KOffset(slots[t + kPrefetchRowsAhead], kv_head, 0);
        for (int32_t c = 0; c < D; c += x) {
          __builtin_prefetch(ahead + (c / x) * run_stride);
        }
      }
      const T* base = cache + g.KOffset(slots[t], kv_head, 0);
      for (int32_t c = 0; c < D; c += x) {
        ConvertRow(base + (c / x) * run_stride, out + t * D + c, x);
      }
    }
  } else {  // V [.., D, page_size]: dims page_size apart
    // Tokens on consecutive slots of one page (the usual case) are
    // contiguous for every dim: read each dim's run and transpose it.
    const int32_t B = g.page_size;
    int t = 0;
    while (t < n) {
      const int64_t slot = slots[t];
      const int32_t off = static_cast<int32_t>(slot % B);
      int run = 1;
      while (t + run < n && off + run < B && slots[t + run] == slot + run) {
        ++run;
      }
      const T* base = cache + g.VOffset(slot, kv_head, 0);
      float* o = out + static_cast<int64_t>(t) * D;
      for (int32_t d = 0; d < D; ++d) {
        const T* src = base + static_cast<int64_t>(d) * B;
        for (int i = 0; i < run; ++i) o[i * D + d] = ToFloat(src[i]);
      }
      t += run;
    }
  }
}

// Running softmax state of R query rows of width D.
struct RowStates {
  float* m;    // [R] running max, base-2 logits; -inf before any key
  float* l;    // [R] running sum of 2^(s - m)
  float* acc;  // [R][D] running sum of 2^(s - m) * v

  void Reset(int rows, int head_dim) const {
    std::fill(m, m + rows, -INFINITY);
    std::fill(l, l + rows, 0.0f);
    std::fill(acc, acc + static_cast<int64_t>(rows) * head_dim, 0.0f);
  }
};

// Scratch of one task (R query rows, one K/V tile), carved from a per-thread
// arena that is reused across tasks and calls: no allocation per task once
// warm. A thread runs one task at a time, so one arena per thread suffices.
struct TaskBuffers {
  float* q;       // [R][D] scaled query rows
  float* k;       // [kTileTokens][D] fp32 K tile
  float* v;       // [kTileTokens][D] fp32 V tile
  float* scores;  // [R][kTileTokens]
  int* visible;   // [R] causal mask counts of the diagonal tile
  int* first;     // [R] first visible key of a tile cut by a sliding window
  RowStates st;   // m [R], l [R], acc [R][D]
};

inline TaskBuffers AcquireTaskBuffers(int rows, int head_dim) {
  thread_local std::vector<float> arena;
  thread_local std::vector<int> visible;
  thread_local std::vector<int> first;
  auto round = [](int64_t n) { return (n + 15) / 16 * 16; };  // 64-byte runs
  const int64_t rd = round(int64_t{rows} * head_dim);
  const int64_t td = round(int64_t{kTileTokens} * head_dim);
  const int64_t r1 = round(rows);
  const int64_t rt = round(int64_t{rows} * kTileTokens);
  const int64_t total = 2 * rd + 2 * td + rt + 2 * r1 + 16;
  if (static_cast<int64_t>(arena.size()) < total) arena.resize(total);
  if (static_cast<int>(visible.size()) < rows) visible.resize(rows);
  if (static_cast<int>(first.size()) < rows) first.resize(rows);
  float* p = arena.data();
  p += (16 - (reinterpret_cast<uintptr_t>(p) / sizeof(float)) % 16) % 16;
  TaskBuffers b;
  b.q = p;
  b.k = b.q + rd;
  b.v = b.k + td;
  b.scores = b.v + td;
  b.st.acc = b.scores + rt;
  b.st.m = b.st.acc + rd;
  b.st.l = b.st.m + r1;
  b.visible = visible.data();
  b.first = first.data();
  return b;
}

// Folds one tile of n keys into the R rows' states; generic head_dim (the
// common ones take AttendTileBlocked below).
//   q        [R][D] query rows, already scaled by sm_scale * log2(e)
//   k, v     [n][D] fp32 tile
//   visible  optional [R]: row r sees keys [0, visible[r]) of the tile (the
//            causal mask of the diagonal tile); nullptr = all n visible.
//   first    optional [R]: row r sees no key before first[r] (a sliding
//            window's left edge inside the tile); nullptr = 0.
inline void AttendTileGeneric(const float* __restrict q, int rows, int D,
                              const float* __restrict k,
                              const float* __restrict v, int n,
                              const int* visible, const RowStates& st,
                              const int* first) {
  alignas(64) float s[kTileTokens];
  for (int r = 0; r < rows; ++r) {
    const int nv = visible != nullptr ? std::min(visible[r], n) : n;
    const int t0 = first != nullptr ? std::max(first[r], 0) : 0;
    if (nv <= t0) continue;
    const float* __restrict qr = q + static_cast<int64_t>(r) * D;
    float tile_max = -INFINITY;
    for (int t = t0; t < nv; ++t) {
      const float* __restrict kt = k + static_cast<int64_t>(t) * D;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int d = 0; d < D; ++d) dot += qr[d] * kt[d];
      s[t] = dot;
      tile_max = std::max(tile_max, dot);
    }
    const float m_old = st.m[r];
    const float m_new = std::max(m_old, tile_max);
    const float alpha = Exp2(m_old - m_new);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int t = t0; t < nv; ++t) {
      s[t] = Exp2(s[t] - m_new);
      sum += s[t];
    }
    st.m[r] = m_new;
    st.l[r] = st.l[r] * alpha + sum;
    float* __restrict a = st.acc + static_cast<int64_t>(r) * D;
#pragma omp simd
    for (int d = 0; d < D; ++d) a[d] *= alpha;
    for (int t = t0; t < nv; ++t) {
      const float p = s[t];
      const float* __restrict vt = v + static_cast<int64_t>(t) * D;
#pragma omp simd
      for (int d = 0; d < D; ++d) a[d] += p * vt[d];
    }
  }
}

// ---------------------------------------------------------------------------
// Register-blocked tile for head dims that are multiples of 16 (64, 80, 128,
// ...). GCC vector extensions (8 x fp32 = one AVX2 register; lowered to
// narrower vectors elsewhere) so the blocking is explicit:
//   scores: 2 query rows x 4 keys per block, 8 independent FMA chains over D
//           (one chain per dot product is FMA-latency bound);
//   P @ V:  up to 4 rows x 16 dims per block kept in registers across the
//           tile's keys; each V load feeds every row of the block.
using v8f = float __attribute__((vector_size(32)));
using v4f = float __attribute__((vector_size(16)));

inline v8f Load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void Store8(float* p, v8f v) { std::memcpy(p, &v, sizeof(v)); }

inline float HSum8(v8f v) {
  const v4f lo = __builtin_shufflevector(v, v, 0, 1, 2, 3);
  const v4f hi = __builtin_shufflevector(v, v, 4, 5, 6, 7);
  const v4f a = lo + hi;
  const v4f b = a + __builtin_shufflevector(a, a, 2, 3, 0, 1);
  return b[0] + b[1];
}

// s[r * kTileTokens + t] = q_r . k_t for r < rows, t < n.
template <int kD, int kRows>
inline void ScoreRows(const float* __restrict q, const float* __restrict k,
                      int n, float* __restrict s) {
  int t = 0;
  for (; t + 4 <= n; t += 4) {
    v8f acc[kRows][4] = {};
    for (int c = 0; c < kD; c += 8) {
      v8f kv[4];
      for (int j = 0; j < 4; ++j) kv[j] = Load8(k + (t + j) * kD + c);
      for (int i = 0; i < kRows; ++i) {
        const v8f qv = Load8(q + i * kD + c);
        for (int j = 0; j < 4; ++j) acc[i][j] += qv * kv[j];
      }
    }
    for (int i = 0; i < kRows; ++i) {
      for (int j = 0; j < 4; ++j) s[i * kTileTokens + t + j] = HSum8(acc[i][j]);
    }
  }
  for (; t < n; ++t) {
    v8f acc[kRows][2] = {};
    for (int c = 0; c < kD; c += 16) {
      const v8f k0 = Load8(k + t * kD + c), k1 = Load8(k + t * kD + c + 8);
      for (int i = 0; i < kRows; ++i) {
        acc[i][0] += Load8(q + i * kD + c) * k0;
        acc[i][1] += Load8(q + i * kD + c + 8) * k1;
      }
    }
    for (int i = 0; i < kRows; ++i) {
      s[i * kTileTokens + t] = HSum8(acc[i][0] + acc[i][1]);
    }
  }
}

// acc_r = acc_r * alpha_r + sum_t p[r * kTileTokens + t] * v_t, r < kRows.
template <int kD, int kRows>
inline void AccumulatePv(const float* __restrict p, const float* __restrict v,
                         int n, const float* __restrict alpha,
                         float* __restrict acc) {
  for (int c = 0; c < kD; c += 16) {
    v8f o[kRows][2] = {};
    for (int t = 0; t < n; ++t) {
      const v8f v0 = Load8(v + t * kD + c), v1 = Load8(v + t * kD + c + 8);
      for (int i = 0; i < kRows; ++i) {
        const float w = p[i * kTileTokens + t];
        o[i][0] += w * v0;
        o[i][1] += w * v1;
      }
    }
    for (int i = 0; i < kRows; ++i) {
      float* a = acc + i * kD + c;
      Store8(a, Load8(a) * alpha[i] + o[i][0]);
      Store8(a + 8, Load8(a + 8) * alpha[i] + o[i][1]);
    }
  }
}

// Same contract as AttendTileGeneric, for kD % 16 == 0. Scores of masked keys
// are computed with the block and then given probability 0.
template <int kD>
void AttendTileBlocked(const float* __restrict q, int rows,
                       const float* __restrict k, const float* __restrict v,
                       int n, const int* visible, const RowStates& st,
                       float* __restrict s /*[rows][kTileTokens]*/,
                       const int* first) {
  static_assert(kD % 16 == 0);
  int r = 0;
  for (; r + 2 <= rows; r += 2) {
    ScoreRows<kD, 2>(q + r * kD, k, n, s + r * kTileTokens);
  }
  if (r < rows) ScoreRows<kD, 1>(q + r * kD, k, n, s + r * kTileTokens);

  alignas(64) float alpha[4];
  for (int r0 = 0; r0 < rows; r0 += 4) {
    const int rb = std::min(4, rows - r0);
    for (int i = 0; i < rb; ++i) {
      const int row = r0 + i;
      float* __restrict sr = s + row * kTileTokens;
      const int nv = visible != nullptr ? std::clamp(visible[row], 0, n) : n;
      const int t0 = first != nullptr ? std::clamp(first[row], 0, nv) : 0;
      float tile_max = -INFINITY;
      for (int t = t0; t < nv; ++t) tile_max = std::max(tile_max, sr[t]);
      const float m_old = st.m[row];
      const float m_new = std::max(m_old, tile_max);
      float sum = 0.0f;
      if (nv > t0) {
#pragma omp simd reduction(+ : sum)
        for (int t = t0; t < nv; ++t) {
          sr[t] = Exp2(sr[t] - m_new);
          sum += sr[t];
        }
      }
      for (int t = 0; t < t0; ++t) sr[t] = 0.0f;
      for (int t = nv; t < n; ++t) sr[t] = 0.0f;
      // No visible key yet (m_new = -inf): keep the state as it is.
      alpha[i] = nv > t0 ? Exp2(m_old - m_new) : 1.0f;
      st.m[row] = m_new;
      st.l[row] = st.l[row] * alpha[i] + sum;
    }
    const float* p = s + r0 * kTileTokens;
    float* acc = st.acc + static_cast<int64_t>(r0) * kD;
    switch (rb) {
      case 4:
        AccumulatePv<kD, 4>(p, v, n, alpha, acc);
        break;
      case 3:
        AccumulatePv<kD, 3>(p, v, n, alpha, acc);
        break;
      case 2:
        AccumulatePv<kD, 2>(p, v, n, alpha, acc);
        break;
      default:
        AccumulatePv<kD, 1>(p, v, n, alpha, acc);
        break;
    }
  }
}

// Dispatches on the common head dims (register-blocked, unrolled); any other
// head_dim takes the generic loop. `s` is scratch of rows * kTileTokens;
// `first` is AttendTileGeneric's optional sliding-window edge.
inline void AttendTileAnyD(const float* q, int rows, int head_dim,
                           const float* k, const float* v, int n,
                           const int* visible, const RowStates& st, float* s,
                           const int* first = nullptr) {
  switch (head_dim) {
    case 32:  // the demo model and the golden checkpoints
      return AttendTileBlocked<32>(q, rows, k, v, n, visible, st, s, first);
    case 48:
      return AttendTileBlocked<48>(q, rows, k, v, n, visible, st, s, first);
    case 64:
      return AttendTileBlocked<64>(q, rows, k, v, n, visible, st, s, first);
    case 80:
      return AttendTileBlocked<80>(q, rows, k, v, n, visible, st, s, first);
    case 96:
      return AttendTileBlocked<96>(q, rows, k, v, n, visible, st, s, first);
    case 128:
      return AttendTileBlocked<128>(q, rows, k, v, n, visible, st, s, first);
    case 256:
      return AttendTileBlocked<256>(q, rows, k, v, n, visible, st, s, first);
    default:
      return AttendTileGeneric(q, rows, head_dim, k, v, n, visible, st, first);
  }
}

// Writes row r's normalized output acc / l to out[r * out_stride ..] and its
// natural-log LSE (m + log2 l) * ln 2 to lse[r * lse_stride] (when lse is
// non-null). An empty row (l == 0) gets zeros and -inf.
inline void WriteRows(const RowStates& st, int rows, int head_dim, float* out,
                      int64_t out_stride, float* lse, int64_t lse_stride) {
  for (int r = 0; r < rows; ++r) {
    const float l = st.l[r];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const float* a = st.acc + static_cast<int64_t>(r) * head_dim;
    float* o = out + r * out_stride;
    for (int d = 0; d < head_dim; ++d) o[d] = a[d] * inv;
    if (lse != nullptr) lse[r * lse_stride] = CombineLse(st.m[r], l);
  }
}

// Prints "<kernel>: <what>" to stderr and aborts: the kernels' argument
// checks (a bad argument is a caller bug, not a runtime condition).
[[noreturn]] inline void FailArgs(const char* kernel, const char* what) {
  std::fprintf(stderr, "%s: %s\n", kernel, what);
  std::abort();
}

// The argument checks ExtendAttention and DecodeAttention share, on an
// already checked kv_indptr [B+1] (starts at 0, non-decreasing):
// kv_indices [>= kv_indptr[B]] holds slots in [0, g.capacity_slots()), and
// num_q_heads is a positive multiple of g.num_kv_heads (the GQA group).
// Aborts through FailArgs(kernel, ...) otherwise.
inline void CheckKvIndicesAndHeads(const KvCacheGeometry& g,
                                   absl::Span<const int32_t> kv_indptr,
                                   absl::Span<const int64_t> kv_indices,
                                   int32_t num_q_heads, const char* kernel) {
  const int64_t total = kv_indptr.back();
  if (static_cast<int64_t>(kv_indices.size()) < total) {
    FailArgs(kernel, "kv_indices shorter than kv_indptr[B]");
  }
  const int64_t capacity = g.capacity_slots();
  for (int64_t i = 0; i < total; ++i) {
    if (kv_indices[i] < 0 || kv_indices[i] >= capacity) {
      FailArgs(kernel, "kv_indices slot outside the pool");
    }
  }
  if (num_q_heads < 1 || num_q_heads % g.num_kv_heads != 0) {
    FailArgs(kernel, "num_q_heads not a positive multiple of num_kv_heads");
  }
}

// Calls typed(std::type_identity<T>{}) with T the pool's element type
// (float, bf16_t or fp16_t for DType kF32, kBF16, kF16).
template <typename F>
void DispatchKvDType(DType dtype, F&& typed) {
  switch (dtype) {
    case DType::kF32:
      return typed(std::type_identity<float>{});
    case DType::kBF16:
      return typed(std::type_identity<bf16_t>{});
    case DType::kF16:
      return typed(std::type_identity<fp16_t>{});
  }
}

}  // namespace radixkv::worker::cpu_attention

#endif  // RADIXKV_WORKER_KERNELS_CPU_ATTENTION_TILE_H_
