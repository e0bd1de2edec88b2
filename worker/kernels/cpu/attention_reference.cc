#include "worker/kernels/cpu/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "worker/kv_cache_layout.h"
#include "worker/numeric_types.h"

namespace radixkv::worker::testing {

void ReferenceAttention(const std::vector<double>& q,
                        const std::vector<double>& k,
                        const std::vector<double>& v, int lq, int lk, int hq,
                        int hkv, int d, double scale, std::vector<double>* out,
                        std::vector<double>* lse, int window_left) {
  out->assign(static_cast<size_t>(lq) * hq * d, 0.0);
  lse->assign(static_cast<size_t>(lq) * hq,
              -std::numeric_limits<double>::infinity());
  const int group = hq / hkv;
  std::vector<double> s(lk);
  for (int i = 0; i < lq; ++i) {
    const int last = std::min(lk - 1, i + (lk - lq));  // mask j <= i + lk - lq
    // j > p - W with W = window_left + 1 (transformers'
    // sliding_window_overlay: kv_idx > q_idx - sliding_window).
    const int first =
        window_left < 0 ? 0 : std::max(0, i + (lk - lq) - window_left);
    for (int h = 0; h < hq; ++h) {
      const int kvh = h / group;
      const double* qi = &q[(static_cast<size_t>(i) * hq + h) * d];
      double m = -std::numeric_limits<double>::infinity();
      for (int j = first; j <= last; ++j) {
        const double* kj = &k[(static_cast<size_t>(j) * hkv + kvh) * d];
        double dot = 0;
        for (int e = 0; e < d; ++e) dot += qi[e] * kj[e];
        s[j] = dot * scale;
        m = std::max(m, s[j]);
      }
      if (last < first) continue;
      double l = 0;
      for (int j = first; j <= last; ++j) l += std::exp(s[j] - m);
      double* o = &(*out)[(static_cast<size_t>(i) * hq + h) * d];
      for (int j = first; j <= last; ++j) {
        const double p = std::exp(s[j] - m) / l;
        const double* vj = &v[(static_cast<size_t>(j) * hkv + kvh) * d];
        for (int e = 0; e < d; ++e) o[e] += p * vj[e];
      }
      (*lse)[static_cast<size_t>(i) * hq + h] = m + std::log(l);
    }
  }
}

uint64_t TestSeed(const char* test_name) {
  uint64_t seed;
  if (const char* env = std::getenv("RADIXKV_TEST_SEED")) {
    seed = std::strtoull(env, nullptr, 10);
  } else {
    std::random_device rd;
    seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }
  std::printf("[seed] %s: RADIXKV_TEST_SEED=%llu\n", test_name,
              static_cast<unsigned long long>(seed));
  std::fflush(stdout);
  return seed;
}

namespace {

float NonZeroUniform(std::mt19937_64& rng, float scale) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  for (;;) {
    const float x = dist(rng);
    if (x != 0.0f) return x;
  }
}

template <typename T>
void FillTyped(KvPool& pool, int layer, std::mt19937_64& rng) {
  const int64_t n = pool.geometry().ElementsPerLayer();
  T* k = static_cast<T*>(pool.k_data(layer));
  T* v = static_cast<T*>(pool.v_data(layer));
  for (int64_t i = 0; i < n; ++i) k[i] = FromFloat<T>(NonZeroUniform(rng, 1));
  for (int64_t i = 0; i < n; ++i) v[i] = FromFloat<T>(NonZeroUniform(rng, 1));
}

template <typename T>
double Read(const void* base, int64_t offset) {
  return ToFloat(static_cast<const T*>(base)[offset]);
}

double ReadAny(const KvPool& pool, const void* base, int64_t offset) {
  switch (pool.dtype()) {
    case DType::kF32:
      return Read<float>(base, offset);
    case DType::kBF16:
      return Read<bf16_t>(base, offset);
    case DType::kF16:
      return Read<fp16_t>(base, offset);
  }
  return 0;
}

}  // namespace

void FillPoolRandom(KvPool& pool, int layer, std::mt19937_64& rng) {
  switch (pool.dtype()) {
    case DType::kF32:
      return FillTyped<float>(pool, layer, rng);
    case DType::kBF16:
      return FillTyped<bf16_t>(pool, layer, rng);
    case DType::kF16:
      return FillTyped<fp16_t>(pool, layer, rng);
  }
}

double PoolK(const KvPool& pool, int layer, int64_t slot, int32_t kv_head,
             int32_t dim) {
  return ReadAny(pool, pool.k_data(layer),
                 pool.geometry().KOffset(slot, kv_head, dim));
}

double PoolV(const KvPool& pool, int layer, int64_t slot, int32_t kv_head,
             int32_t dim) {
  return ReadAny(pool, pool.v_data(layer),
                 pool.geometry().VOffset(slot, kv_head, dim));
}

std::vector<float> RandomFloats(int64_t n, float scale, std::mt19937_64& rng) {
  std::vector<float> out(n);
  for (float& x : out) x = NonZeroUniform(rng, scale);
  return out;
}

std::vector<int64_t> PermutedSlots(const KvPool& pool,
                                   const std::vector<int>& lengths,
                                   std::mt19937_64& rng) {
  const KvCacheGeometry& g = pool.geometry();
  std::vector<int64_t> pages(g.num_pages);
  for (int64_t p = 0; p < g.num_pages; ++p) pages[p] = p;
  std::shuffle(pages.begin(), pages.end(), rng);
  std::vector<int64_t> slots;
  size_t next_page = 0;
  for (int len : lengths) {
    for (int t = 0; t < len; ++t) {
      if (t % g.page_size == 0) {
        if (next_page >= pages.size()) {
          std::fprintf(stderr, "PermutedSlots: pool too small\n");
          std::abort();
        }
        ++next_page;
      }
      slots.push_back(pages[next_page - 1] * g.page_size + t % g.page_size);
    }
  }
  return slots;
}

}  // namespace radixkv::worker::testing
