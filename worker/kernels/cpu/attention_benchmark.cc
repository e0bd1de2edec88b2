// CPU kernel throughput (docs/perf.md): paged decode as GB/s of KV
// read, extend attention as GFLOP/s, against a large memcpy as the machine's
// memory-bandwidth ceiling. Shapes are Llama-3-8B-like per layer: Hq 32,
// Hkv 8 (GQA group 4), head_dim 128, page_size 16, bshd.
//
//   bazel run -c opt //worker/kernels/cpu:attention_benchmark
//
// Counters: GB/s = 1e9 bytes per second, GFLOP/s = 1e9 FLOP per second.
// Decode bytes = sum(seq_len) * Hkv * D * 2 (K and V) * elem_bytes.
// Extend FLOPs = 4 * D * Hq * sum(Le * Lp + Le * (Le + 1) / 2).
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "worker/kernels/cpu/cpu_thread_pool.h"
#include "worker/kernels/cpu/decode_attention.h"
#include "worker/kernels/cpu/extend_attention.h"
#include "worker/kv_cache_layout.h"
#include "worker/kv_pool.h"
#include "worker/numeric_types.h"

namespace radixkv::worker {
namespace {

constexpr int kHq = 32, kHkv = 8, kD = 128, kPageSize = 16;

std::vector<float> Random(int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// A pool holding `tokens` slots with random contents in the given dtype, and
// slots from a shuffled page order (a realistic, non-contiguous block table).
struct Fixture {
  std::unique_ptr<KvPool> pool;
  std::vector<int64_t> slots;

  Fixture(int64_t tokens, DType dtype, KvLayout layout, std::mt19937_64& rng) {
    const int64_t pages = (tokens + kPageSize - 1) / kPageSize + 1;
    pool = *KvPool::Create(
        1, KvCacheGeometry{pages, kPageSize, kHkv, kD, 0, layout}, dtype);
    const int64_t bytes = pool->geometry().BytesPerLayer();
    // Random bit patterns of plausible magnitude: fill with converted values.
    std::vector<float> vals = Random(4096, rng);
    for (void* base : {pool->k_data(0), pool->v_data(0)}) {
      char* p = static_cast<char*>(base);
      for (int64_t off = 0; off < bytes; off += 4) {
        const float x = vals[(off / 4) % vals.size()];
        if (dtype == DType::kF32) {
          std::memcpy(p + off, &x, 4);
        } else if (dtype == DType::kBF16) {
          const bf16_t h[2] = {FloatToBf16(x), FloatToBf16(-x)};
          std::memcpy(p + off, h, 4);
        } else {
          const fp16_t h[2] = {FloatToFp16(x), FloatToFp16(-x)};
          std::memcpy(p + off, h, 4);
        }
      }
    }
    std::vector<int64_t> page_order(pages);
    for (int64_t i = 0; i < pages; ++i) page_order[i] = i;
    std::shuffle(page_order.begin(), page_order.end(), rng);
    for (int64_t t = 0; t < tokens; ++t) {
      slots.push_back(page_order[t / kPageSize] * kPageSize + t % kPageSize);
    }
  }
};

// Ceiling: memcpy of 256 MiB. Reports bytes copied/s and read+write bytes/s.
void BM_Memcpy(benchmark::State& state) {
  const size_t n = size_t{256} << 20;
  std::vector<char> src(n, 1), dst(n, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.counters["copy_GB/s"] = benchmark::Counter(
      n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["rw_GB/s"] = benchmark::Counter(
      2 * n / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond)->UseRealTime();

// Args: dtype, batch, seq_len, partition_size (0 = v1), threads, layout.
void BM_Decode(benchmark::State& state) {
  const DType dtype = static_cast<DType>(state.range(0));
  const int batch = static_cast<int>(state.range(1));
  const int seq_len = static_cast<int>(state.range(2));
  const int partition = static_cast<int>(state.range(3));
  const int num_threads = static_cast<int>(state.range(4));
  const KvLayout layout = static_cast<KvLayout>(state.range(5));
  std::mt19937_64 rng(1);
  Fixture f(int64_t{batch} * seq_len, dtype, layout, rng);
  std::vector<int32_t> kv_indptr{0};
  for (int b = 0; b < batch; ++b)
    kv_indptr.push_back(kv_indptr.back() + seq_len);
  const std::vector<float> q = Random(int64_t{batch} * kHq * kD, rng);
  std::vector<float> out(q.size()), lse(int64_t{batch} * kHq);
  CpuThreadPool threads(num_threads);
  DecodeAttentionArgs args;
  args.q = q.data();
  args.kv_indptr = kv_indptr;
  args.kv_indices = f.slots;
  args.num_q_heads = kHq;
  args.sm_scale = 1.0f / 11.3137085f;
  args.partition_size = partition;
  args.out = out.data();
  args.lse = lse.data();
  for (auto _ : state) {
    DecodeAttention(*f.pool, 0, args, &threads);
    benchmark::DoNotOptimize(out.data());
  }
  const double bytes =
      double{1} * batch * seq_len * kHkv * kD * 2 * DTypeBytes(dtype);
  state.counters["KV_GB/s"] = benchmark::Counter(
      bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(DTypeName(dtype)) + " " + KvLayoutName(layout) +
                 (partition ? " v2" : " v1"));
}

void DecodeArgs(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    for (int dtype : {0, 1, 2}) b->Args({dtype, 8, 2048, 0, threads, 0});
    b->Args({1, 8, 2048, 512, threads, 0});    // v2, bf16
    b->Args({1, 1, 16384, 0, threads, 0});     // long context, v1
    b->Args({1, 1, 16384, 1024, threads, 0});  // long context, v2
  }
  b->Args({1, 8, 2048, 0, 1, 1});  // bhsd
  b->Args({1, 8, 2048, 0, 1, 2});  // vllm
}
BENCHMARK(BM_Decode)
    ->Apply(DecodeArgs)
    ->ArgNames({"dtype", "batch", "len", "part", "threads", "layout"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Args: dtype, batch, prefix_len, extend_len, threads.
void BM_Extend(benchmark::State& state) {
  const DType dtype = static_cast<DType>(state.range(0));
  const int batch = static_cast<int>(state.range(1));
  const int lp = static_cast<int>(state.range(2));
  const int le = static_cast<int>(state.range(3));
  const int num_threads = static_cast<int>(state.range(4));
  std::mt19937_64 rng(2);
  Fixture f(int64_t{batch} * std::max(lp, 1), dtype, KvLayout::kBSHD, rng);
  std::vector<int32_t> qo_indptr{0}, kv_indptr{0};
  for (int b = 0; b < batch; ++b) {
    qo_indptr.push_back(qo_indptr.back() + le);
    kv_indptr.push_back(kv_indptr.back() + lp);
  }
  const int64_t total_q = int64_t{batch} * le;
  const std::vector<float> q = Random(total_q * kHq * kD, rng);
  const std::vector<float> k = Random(total_q * kHkv * kD, rng);
  const std::vector<float> v = Random(total_q * kHkv * kD, rng);
  std::vector<float> out(q.size()), lse(total_q * kHq);
  CpuThreadPool threads(num_threads);
  ExtendAttentionArgs args;
  args.q = q.data();
  args.k_extend = k.data();
  args.v_extend = v.data();
  args.qo_indptr = qo_indptr;
  args.kv_indptr = kv_indptr;
  args.kv_indices = f.slots;
  args.num_q_heads = kHq;
  args.sm_scale = 1.0f / 11.3137085f;
  args.out = out.data();
  args.lse = lse.data();
  for (auto _ : state) {
    ExtendAttention(*f.pool, 0, args, &threads);
    benchmark::DoNotOptimize(out.data());
  }
  const double flops =
      4.0 * kD * kHq * batch * (double{le} * lp + double{le} * (le + 1) / 2);
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(DTypeName(dtype));
}

void ExtendArgs(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    b->Args({1, 1, 0, 512, threads});     // plain prefill
    b->Args({1, 2, 1024, 256, threads});  // prefix reuse, bf16
    b->Args({0, 2, 1024, 256, threads});  // prefix reuse, fp32
  }
}
BENCHMARK(BM_Extend)
    ->Apply(ExtendArgs)
    ->ArgNames({"dtype", "batch", "prefix", "extend", "threads"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace radixkv::worker

BENCHMARK_MAIN();
