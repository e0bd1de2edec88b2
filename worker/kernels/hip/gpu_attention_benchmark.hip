// Benchmark of the GPU kernels against ceilings measured in the same run:
// device-to-device copy bandwidth (bytes read +
// written) and a large bf16 cuBLAS GEMM; then paged decode (page 16 and 1,
// partition-size sweep), extend attention (TFLOP/s), reshape_and_cache and
// copy_blocks (GB/s), each as a fraction of its ceiling.
//
// Method (METHOD.md): device events around each launch after warm-up, median
// of many runs, random (hash-filled, never zero) inputs, and decode inputs
// rotated over several disjoint page sets so the working set exceeds L2.
// Before each start event a ~40 us spin kernel is queued, so the GPU is busy
// while the host enqueues the timed call: the events then bracket the call's
// device time, not the host's launch latency (which serving hides by
// queueing ahead and by graphs). --launch-in-timing drops the spin kernel,
// which puts the first launch's host latency into the clock (a few us: it
// matters only for ~50 us calls like decode B=1 x 32768).
// Shapes: bf16, Hq 32, Hkv 8, head_dim 128, bshd pool, random page order.
// NVIDIA only (cuBLAS); Bazel target
// //worker/kernels/hip:gpu_attention_benchmark (the serving kernels plus the
// persistent wgmma extend kernel for A/B).
//
// Usage: gpu_attention_benchmark [--quick] [--only=decode|extend|cache]
//                                [--decode-batch=N] [--launch-in-timing]
//                                [--extend-batch=N] [--extend-rounds=R]
//                                [--extend-variants=default,persistent]
// Environment: RADIXKV_EXTEND_WARPS=4|8,
// RADIXKV_DECODE_PARTITION_SIZE (overrides the heuristic for the (auto) rows).
#include "worker/kernels/hip/hip_compat.h"
// clang-format off
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "worker/kernels/hip/gpu_attention.h"
#include "worker/kernels/hip/gpu_kernel_launch.h"
#include "worker/kernels/hip/gpu_test_pool.h"
// clang-format on

namespace radixkv::worker::gpu {
namespace {

using testing::DeviceBuffer;

constexpr int32_t kHq = 32, kHkv = 8, kD = 128;

bool g_quick = false;
// --only=decode|extend|cache: run one group (ceilings still measured).
std::string g_only;
// --decode-batch=N: only the decode shapes with batch size N.
int g_decode_batch = 0;
// --launch-in-timing: no spin kernel before the start event.
bool g_launch_in_timing = false;
// --extend-batch=N: only the extend shapes with batch size N.
int g_extend_batch = 0;
// --extend-variants=A,B,...: time each extend shape once per wgmma kernel
// (RADIXKV_WGMMA_VARIANT set before each measurement: `persistent` the
// work-item kernel, anything else the default), the list repeated
// --extend-rounds=R times, interleaved, for A/B in one process.
std::vector<std::string> g_extend_variants;
int g_extend_rounds = 1;

// Keeps the GPU busy for `cycles` SM clocks (one thread).
__global__ void SpinKernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// Median milliseconds of `iters` timed calls of fn(i) after `warmup` calls.
double MedianMs(const std::function<void(int)>& fn, int warmup = 5,
                int iters = 40) {
  if (g_quick) iters = 10;
  for (int i = 0; i < warmup; ++i) fn(i);
  RADIXKV_CHECK_HIP(hipDeviceSynchronize());
  hipEvent_t start, stop;
  RADIXKV_CHECK_HIP(hipEventCreate(&start));
  RADIXKV_CHECK_HIP(hipEventCreate(&stop));
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    if (!g_launch_in_timing) {
      SpinKernel<<<1, 1>>>(80000);  // ~40 us at the H200's ~1.98 GHz
    }
    RADIXKV_CHECK_HIP(hipEventRecord(start, nullptr));
    fn(warmup + i);
    RADIXKV_CHECK_HIP(hipEventRecord(stop, nullptr));
    RADIXKV_CHECK_HIP(hipEventSynchronize(stop));
    float t = 0.0f;
    RADIXKV_CHECK_HIP(hipEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  RADIXKV_CHECK_HIP(hipGetLastError());
  RADIXKV_CHECK_HIP(hipEventDestroy(start));
  RADIXKV_CHECK_HIP(hipEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Row {
  std::string kernel, shape, variant;
  double us = 0, rate = 0, fraction = 0;
  std::string unit;
};
std::vector<Row> g_rows;

void Report(const std::string& kernel, const std::string& shape,
            const std::string& variant, double ms, double rate,
            const char* unit, double ceiling) {
  Row r{kernel, shape, variant, ms * 1e3, rate, rate / ceiling, unit};
  std::printf("%-18s %-26s %-16s %10.1f us %9.1f %-7s %5.1f%%\n",
              kernel.c_str(), shape.c_str(), variant.c_str(), r.us, rate, unit,
              100.0 * r.fraction);
  std::fflush(stdout);
  g_rows.push_back(r);
}

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "kernel error: %s\n", s.ToString().c_str());
    std::exit(2);
  }
}

// ---------------------------------------------------------------- ceilings

double CopyCeilingGBs() {
  const size_t bytes = size_t{4} << 30;
  DeviceBuffer a(bytes), b(bytes);
  testing::HashFill(a.get(), bytes / 2, 1, true);
  const double ms = MedianMs([&](int) {
    RADIXKV_CHECK_HIP(hipMemcpyAsync(b.get(), a.get(), bytes,
                                     hipMemcpyDeviceToDevice, nullptr));
  });
  const double gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
  Report("ceiling d2d copy", "4 GiB", "cudaMemcpy", ms, gbs, "GB/s", gbs);
  return gbs;
}

double GemmCeilingTflops() {
  const int n = 8192;
  DeviceBuffer a(size_t{2} * n * n), b(size_t{2} * n * n), c(size_t{2} * n * n);
  testing::HashFill(a.get(), int64_t{n} * n, 2, true);
  testing::HashFill(b.get(), int64_t{n} * n, 3, true);
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) std::exit(3);
  const float alpha = 1.0f, beta = 0.0f;
  const double ms = MedianMs(
      [&](int) {
        cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.get(),
                     CUDA_R_16BF, n, b.get(), CUDA_R_16BF, n, &beta, c.get(),
                     CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      },
      3, 20);
  cublasDestroy(h);
  const double tflops = 2.0 * n * n * double(n) / (ms * 1e-3) / 1e12;
  Report("ceiling gemm", "8192^3 bf16", "cuBLAS", ms, tflops, "TFLOP/s",
         tflops);
  return tflops;
}

// ------------------------------------------------------------------- pools

struct BenchPool {
  GpuKvCache cache;
  DeviceBuffer k, v;
};

BenchPool MakePool(int64_t num_pages, int32_t page_size) {
  BenchPool p;
  KvCacheGeometry& g = p.cache.geometry;
  g.num_pages = num_pages;
  g.page_size = page_size;
  g.num_kv_heads = kHkv;
  g.head_dim = kD;
  g.elem_bytes = 2;
  g.layout = KvLayout::kBSHD;
  p.cache.dtype = DType::kBF16;
  const int64_t n = g.ElementsPerLayer();
  p.k = DeviceBuffer(n * 2);
  p.v = DeviceBuffer(n * 2);
  testing::HashFill(p.k.get(), n, 11, true);
  testing::HashFill(p.v.get(), n, 12, true);
  p.cache.k = p.k.get();
  p.cache.v = p.v.get();
  return p;
}

// Slots for `total` tokens of sequences of length `len`, pages in random
// order taken from a permutation of [0, num_pages).
std::vector<int64_t> PermutedSlots(int64_t total_tokens, int32_t len,
                                   int32_t page_size,
                                   const std::vector<int64_t>& perm,
                                   int64_t perm_offset) {
  std::vector<int64_t> slots;
  slots.reserve(total_tokens);
  const int32_t pages_per_seq = (len + page_size - 1) / page_size;
  int64_t page_cursor = perm_offset;
  for (int64_t s = 0; s < total_tokens / len; ++s) {
    for (int32_t t = 0; t < len; ++t) {
      slots.push_back(perm[page_cursor + t / page_size] * page_size +
                      t % page_size);
    }
    page_cursor += pages_per_seq;
  }
  return slots;
}

template <typename T>
DeviceBuffer Upload(const std::vector<T>& v) {
  DeviceBuffer b(std::max<size_t>(v.size() * sizeof(T), 16));
  RADIXKV_CHECK_HIP(hipMemcpy(b.get(), v.data(), v.size() * sizeof(T),
                              hipMemcpyHostToDevice));
  return b;
}

// ------------------------------------------------------------------ decode

// window > 0: a sliding window of that many tokens (window_left window - 1);
// the rate counts the K/V bytes actually read, the last `window` tokens.
void BenchDecode(int32_t batch, int32_t len, int32_t page_size, double copy_gbs,
                 std::mt19937_64& rng, int32_t window = 0) {
  if (g_decode_batch != 0 && batch != g_decode_batch) return;
  const int kSets = 4;  // rotated input sets, > L2 in total
  const int32_t pages_per_seq = (len + page_size - 1) / page_size;
  const int64_t pages_per_set = int64_t{pages_per_seq} * batch;
  BenchPool pool = MakePool(pages_per_set * kSets, page_size);
  std::vector<int64_t> perm(pages_per_set * kSets);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<DeviceBuffer> indices;
  for (int s = 0; s < kSets; ++s) {
    indices.push_back(Upload(PermutedSlots(int64_t{batch} * len, len, page_size,
                                           perm, s * pages_per_set)));
  }
  std::vector<int32_t> indptr(batch + 1);
  for (int32_t b = 0; b <= batch; ++b) indptr[b] = b * len;
  DeviceBuffer d_indptr = Upload(indptr);
  DeviceBuffer q(size_t{2} * batch * kHq * kD),
      out(size_t{2} * batch * kHq * kD);
  testing::HashFill(q.get(), int64_t{batch} * kHq * kD, 13, true);
  const int32_t read = window > 0 && window < len ? window : len;
  const double bytes = 2.0 * batch * read * kHkv * kD * 2 +  // K and V read
                       2.0 * 2 * batch * kHq * kD;           // q, out
  const std::string shape =
      "B=" + std::to_string(batch) + " x " + std::to_string(len) + " ps" +
      std::to_string(page_size) +
      (window > 0 ? " win" + std::to_string(window) : "");
  const int32_t auto_p = ChooseDecodePartitionSize(batch, kHkv, kHq, read);
  std::vector<std::pair<int32_t, KernelPath>> variants = {
      {0, KernelPath::kAuto},     {256, KernelPath::kAuto},
      {512, KernelPath::kAuto},   {1024, KernelPath::kAuto},
      {2048, KernelPath::kAuto},  {-1, KernelPath::kAuto},
      {-1, KernelPath::kPortable}};
  if (g_quick) variants = {{-1, KernelPath::kAuto}};
  if (window > 0) {
    variants = {{0, KernelPath::kAuto}, {256, KernelPath::kAuto},
                {-1, KernelPath::kAuto}};
  }
  for (auto [ps, path] : variants) {
    if (ps > 0 && ps >= read) continue;
    const int32_t eff = ps < 0 ? auto_p : ps;
    const size_t ws_bytes = DecodeWorkspaceBytes(batch, kHq, kD, len, eff);
    DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
    // Zero-filled once before first use (gpu_attention.h: the fused
    // combine's counters).
    RADIXKV_CHECK_HIP(hipMemset(ws.get(), 0, ws.bytes()));
    GpuDecodeArgs a;
    a.q = q.get();
    a.kv_indptr = d_indptr.as<int32_t>();
    a.batch_size = batch;
    a.max_seq_len = len;
    a.num_q_heads = kHq;
    a.sm_scale = 1.0f / std::sqrt(float(kD));
    a.partition_size = eff;
    a.window_left = window > 0 ? window - 1 : -1;
    a.out = out.get();
    a.workspace = ws.get();
    a.workspace_bytes = ws_bytes;
    a.path = path;
    const double ms = MedianMs([&](int i) {
      a.kv_indices = indices[i % kSets].as<int64_t>();
      Check(Decode(pool.cache, a, nullptr));
    });
    std::string variant =
        (path == KernelPath::kPortable ? "portable " : "") +
        (eff == 0 ? std::string("v1") : "v2 P=" + std::to_string(eff));
    if (ps < 0) variant += " (auto)";
    Report("decode", shape, variant, ms, bytes / (ms * 1e-3) / 1e9, "GB/s",
           copy_gbs);
  }
}

// ------------------------------------------------------------------ extend

void BenchExtend(int32_t batch, int32_t prefix, int32_t extend,
                 double gemm_tflops, std::mt19937_64& rng, bool portable) {
  if (g_extend_batch != 0 && batch != g_extend_batch) return;
  const int32_t page_size = 16;
  const int32_t pages_per_seq = (prefix + page_size - 1) / page_size;
  const int64_t num_pages =
      std::max<int64_t>(1, int64_t{pages_per_seq} * batch);
  BenchPool pool = MakePool(num_pages, page_size);
  std::vector<int64_t> perm(num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> qo(batch + 1), kvp(batch + 1);
  for (int32_t b = 0; b <= batch; ++b) {
    qo[b] = b * extend;
    kvp[b] = b * prefix;
  }
  std::vector<int64_t> slots =
      prefix > 0
          ? PermutedSlots(int64_t{batch} * prefix, prefix, page_size, perm, 0)
          : std::vector<int64_t>{0};
  DeviceBuffer d_qo = Upload(qo), d_kvp = Upload(kvp), d_kvi = Upload(slots);
  const int64_t total_q = int64_t{batch} * extend;
  DeviceBuffer q(2 * total_q * kHq * kD), k(2 * total_q * kHkv * kD),
      v(2 * total_q * kHkv * kD), out(2 * total_q * kHq * kD);
  testing::HashFill(q.get(), total_q * kHq * kD, 21, true);
  testing::HashFill(k.get(), total_q * kHkv * kD, 22, true);
  testing::HashFill(v.get(), total_q * kHkv * kD, 23, true);
  GpuExtendArgs a;
  a.q = q.get();
  a.k_extend = k.get();
  a.v_extend = v.get();
  a.qo_indptr = d_qo.as<int32_t>();
  a.kv_indptr = d_kvp.as<int32_t>();
  a.kv_indices = d_kvi.as<int64_t>();
  a.batch_size = batch;
  a.max_extend_len = extend;
  a.num_q_heads = kHq;
  a.sm_scale = 1.0f / std::sqrt(float(kD));
  a.out = out.get();
  a.path = portable ? KernelPath::kPortable : KernelPath::kAuto;
  const double flops =
      4.0 * kD * kHq * batch *
      (double(extend) * prefix + double(extend) * (extend + 1) / 2);
  const std::string shape = "B=" + std::to_string(batch) + " p" +
                            std::to_string(prefix) + "+e" +
                            std::to_string(extend);
  // Tensor-core family: wgmma on sm_90a unless RADIXKV_EXTEND_KERNEL=mma.
  const char* family = std::getenv("RADIXKV_EXTEND_KERNEL");
  const bool mma_sync = family != nullptr && std::string(family) == "mma";
  std::vector<std::string> variants = {""};
  if (!portable && !g_extend_variants.empty()) variants = g_extend_variants;
  const int rounds = variants.size() > 1 ? g_extend_rounds : 1;
  for (int round = 0; round < rounds; ++round) {
    for (const std::string& variant : variants) {
      if (!variant.empty()) setenv("RADIXKV_WGMMA_VARIANT", variant.c_str(), 1);
      const double ms =
          MedianMs([&](int) { Check(Extend(pool.cache, a, nullptr)); }, 3,
                   portable ? 5 : 30);
      std::string label =
          portable ? "portable" : (mma_sync ? "mma.sync" : "wgmma");
      if (!variant.empty()) label += "/" + variant;
      Report("extend causal", shape, label, ms, flops / (ms * 1e-3) / 1e12,
             "TFLOP/s", gemm_tflops);
    }
  }
}

// ---------------------------------------------------------- cache movement

void BenchReshapeAndCache(double copy_gbs, std::mt19937_64& rng) {
  const int32_t tokens = 1 << 17, page_size = 16;
  const int64_t num_pages = int64_t{tokens} / page_size * 4;
  BenchPool pool = MakePool(num_pages, page_size);
  std::vector<int64_t> perm(num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int64_t> loc =
      PermutedSlots(tokens, page_size, page_size, perm, 0);
  DeviceBuffer d_loc = Upload(loc);
  const size_t n = size_t{tokens} * kHkv * kD;
  DeviceBuffer k(2 * n), v(2 * n);
  testing::HashFill(k.get(), n, 31, true);
  testing::HashFill(v.get(), n, 32, true);
  const double ms = MedianMs([&](int) {
    Check(ReshapeAndCache(pool.cache, k.get(), v.get(), d_loc.as<int64_t>(),
                          tokens, nullptr));
  });
  const double bytes = 2.0 * 2 * n * 2 + tokens * 8.0;
  Report("reshape_and_cache", "131072 tok bshd ps16", "", ms,
         bytes / (ms * 1e-3) / 1e9, "GB/s", copy_gbs);
}

void BenchCopyBlocks(double copy_gbs, std::mt19937_64& rng) {
  const int32_t page_size = 16, layers = 8, ops_n = 4096;
  const int64_t num_pages = 4 * ops_n;
  std::vector<BenchPool> pools;
  std::vector<GpuKvCache> caches;
  for (int l = 0; l < layers; ++l) {
    pools.push_back(MakePool(num_pages, page_size));
    caches.push_back(pools.back().cache);
  }
  std::vector<int64_t> perm(num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<PageCopy> ops;
  for (int i = 0; i < ops_n; ++i)
    ops.push_back({perm[i], perm[ops_n + i], page_size});
  const size_t scratch_bytes = CopyBlocksScratchBytes(ops.size(), layers);
  DeviceBuffer scratch(scratch_bytes);
  const double ms = MedianMs([&](int) {
    Check(CopyBlocks(caches, ops, scratch.get(), scratch_bytes, nullptr));
  });
  const double bytes =
      2.0 * 2 * layers * double(ops_n) * page_size * kHkv * kD * 2;
  // The API call validates and stages the ops from pageable host memory,
  // which synchronizes with the stream: that host time is in this number.
  Report("copy_blocks", "4096 full pages x 8 layers", "API incl. staging", ms,
         bytes / (ms * 1e-3) / 1e9, "GB/s", copy_gbs);
  // The kernel alone, ops and layer pointers staged once.
  std::vector<internal::DeviceKvLayer> lp;
  for (const GpuKvCache& c : caches) lp.push_back({c.k, c.v});
  std::vector<internal::DevicePageCopy> dops;
  for (const PageCopy& op : ops) {
    dops.push_back({op.src_page, op.dst_page, op.num_tokens});
  }
  DeviceBuffer d_layers = Upload(lp), d_ops = Upload(dops);
  internal::CopyBlocksLaunch a{};
  a.geometry = caches[0].geometry;
  a.dtype = DType::kBF16;
  a.layers = d_layers.as<internal::DeviceKvLayer>();
  a.num_layers = layers;
  a.ops = d_ops.as<internal::DevicePageCopy>();
  a.num_ops = ops_n;
  const double kms = MedianMs([&](int) {
    if (internal::LaunchCopyBlocks(a) != 0) std::exit(2);
  });
  Report("copy_blocks", "4096 full pages x 8 layers", "kernel", kms,
         bytes / (kms * 1e-3) / 1e9, "GB/s", copy_gbs);
}

int Main() {
  std::mt19937_64 rng(12345);
  hipDeviceProp_t prop;
  RADIXKV_CHECK_HIP(hipGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MB\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20);
  std::printf("%-18s %-26s %-16s %13s %17s %6s\n", "kernel", "shape", "variant",
              "time", "rate", "ceil%");
  const double copy = CopyCeilingGBs();
  const double gemm =
      g_only.empty() || g_only == "extend" ? GemmCeilingTflops() : 1.0;
  for (int32_t ps : {16, 1}) {
    if (!g_only.empty() && g_only != "decode") break;
    BenchDecode(64, 4096, ps, copy, rng);
    // Sliding window 1024 at 4096 (Mistral-style): a quarter of the KV read;
    // its time against the full-attention row above is the window's gain.
    BenchDecode(64, 4096, ps, copy, rng, 1024);
    BenchDecode(256, 1024, ps, copy, rng);
    BenchDecode(1, 32768, ps, copy, rng);
  }
  if (g_only.empty() || g_only == "extend") {
    BenchExtend(8, 2048, 512, gemm, rng, false);
    BenchExtend(1, 0, 8192, gemm, rng, false);
    BenchExtend(32, 1024, 128, gemm, rng, false);
    if (!g_quick && g_only.empty()) BenchExtend(1, 0, 1024, gemm, rng, true);
  }
  if (g_only.empty() || g_only == "cache") {
    BenchReshapeAndCache(copy, rng);
    BenchCopyBlocks(copy, rng);
  }

  std::printf("\nSUMMARY (median of timed runs; ceilings measured above)\n");
  for (const Row& r : g_rows) {
    std::printf("%-18s %-26s %-22s %9.1f us %9.1f %-7s %5.1f%%\n",
                r.kernel.c_str(), r.shape.c_str(), r.variant.c_str(), r.us,
                r.rate, r.unit.c_str(), 100.0 * r.fraction);
  }
  return 0;
}

}  // namespace
}  // namespace radixkv::worker::gpu

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0)
      radixkv::worker::gpu::g_quick = true;
    if (std::strncmp(argv[i], "--decode-batch=", 15) == 0) {
      radixkv::worker::gpu::g_decode_batch = std::atoi(argv[i] + 15);
    }
    if (std::strcmp(argv[i], "--launch-in-timing") == 0)
      radixkv::worker::gpu::g_launch_in_timing = true;
    if (std::strncmp(argv[i], "--extend-batch=", 15) == 0) {
      radixkv::worker::gpu::g_extend_batch = std::atoi(argv[i] + 15);
    }
    if (std::strncmp(argv[i], "--extend-rounds=", 16) == 0) {
      radixkv::worker::gpu::g_extend_rounds = std::atoi(argv[i] + 16);
    }
    if (std::strncmp(argv[i], "--extend-variants=", 18) == 0) {
      std::string list = argv[i] + 18;
      size_t pos = 0;
      while (pos <= list.size()) {
        const size_t comma = std::min(list.find(',', pos), list.size());
        radixkv::worker::gpu::g_extend_variants.push_back(
            list.substr(pos, comma - pos));
        pos = comma + 1;
      }
    }
    if (std::strncmp(argv[i], "--only=", 7) == 0) {
      radixkv::worker::gpu::g_only = argv[i] + 7;
    }
  }
  return radixkv::worker::gpu::Main();
}
