#include "worker/gpu/device_ceilings.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/gpu/gpu_blas.h"
#include "worker/gpu/gpu_status.h"
#include "worker/numeric_types.h"

namespace radixkv::worker::gpu {
namespace {

// Median milliseconds of `iters` timed calls of fn after `warmup` calls.
absl::StatusOr<double> MedianMs(hipStream_t s, int warmup, int iters,
                                const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  hipEvent_t start, stop;
  RADIXKV_RETURN_IF_ERROR(RuntimeError(hipEventCreate(&start), "event"));
  RADIXKV_RETURN_IF_ERROR(RuntimeError(hipEventCreate(&stop), "event"));
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    hipEventRecord(start, s);
    fn();
    hipEventRecord(stop, s);
    hipEventSynchronize(stop);
    float t = 0;
    hipEventElapsedTime(&t, start, stop);
    ms.push_back(t);
  }
  hipEventDestroy(start);
  hipEventDestroy(stop);
  RADIXKV_RETURN_IF_ERROR(RuntimeError(hipGetLastError(), "ceilings"));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Frees its device allocations.
struct Buffers {
  std::vector<void*> p;
  ~Buffers() {
    for (void* q : p) hipFree(q);
  }
  absl::StatusOr<void*> Alloc(size_t bytes) {
    void* q = nullptr;
    RADIXKV_RETURN_IF_ERROR(RuntimeError(hipMalloc(&q, bytes), "ceilings"));
    p.push_back(q);
    return q;
  }
};

// Fills `bytes` of device memory with a 16 MiB block of random bf16 in
// [-1, 1) (SplitMix64), repeated.
absl::Status RandomFill(void* dst, size_t bytes, uint64_t seed) {
  const size_t block = std::min<size_t>(bytes, size_t{16} << 20);
  std::vector<uint16_t> host(block / 2);
  uint64_t state = seed;
  for (uint16_t& v : host) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    v = FloatToBf16(static_cast<float>((z >> 11) * 0x1.0p-53 * 2 - 1)).bits;
  }
  char* d = static_cast<char*>(dst);
  RADIXKV_RETURN_IF_ERROR(RuntimeError(
      hipMemcpy(d, host.data(), block, hipMemcpyHostToDevice), "fill"));
  for (size_t off = block; off < bytes; off += block) {
    RADIXKV_RETURN_IF_ERROR(
        RuntimeError(hipMemcpy(d + off, d, std::min(block, bytes - off),
                               hipMemcpyDeviceToDevice),
                     "fill"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DeviceCeilings> MeasureDeviceCeilings(size_t copy_bytes) {
  DeviceCeilings out;
  struct Stream {
    hipStream_t s = nullptr;
    ~Stream() {
      if (s != nullptr) hipStreamDestroy(s);
    }
  } stream;
  RADIXKV_RETURN_IF_ERROR(RuntimeError(hipStreamCreate(&stream.s), "stream"));
  hipStream_t s = stream.s;
  {
    Buffers buf;
    absl::StatusOr<void*> a = buf.Alloc(copy_bytes);
    absl::StatusOr<void*> b = a.ok() ? buf.Alloc(copy_bytes) : a;
    if (!b.ok()) return b.status();
    RADIXKV_RETURN_IF_ERROR(RandomFill(*a, copy_bytes, 1));
    absl::StatusOr<double> ms = MedianMs(s, 3, 20, [&] {
      hipMemcpyAsync(*b, *a, copy_bytes, hipMemcpyDeviceToDevice, s);
    });
    if (!ms.ok()) return ms.status();
    out.copy_gbps = 2.0 * copy_bytes / (*ms * 1e-3) / 1e9;
  }
  {
    constexpr int n = 8192;
    const size_t bytes = size_t{2} * n * n;
    Buffers buf;
    absl::StatusOr<void*> a = buf.Alloc(bytes);
    absl::StatusOr<void*> b = a.ok() ? buf.Alloc(bytes) : a;
    absl::StatusOr<void*> c = b.ok() ? buf.Alloc(bytes) : b;
    if (!c.ok()) return c.status();
    RADIXKV_RETURN_IF_ERROR(RandomFill(*a, bytes, 2));
    RADIXKV_RETURN_IF_ERROR(RandomFill(*b, bytes, 3));
    BlasHandle h = nullptr;
    if (BlasCreate(&h) != kBlasSuccess) {
      return absl::InternalError("BLAS handle creation failed");
    }
    BlasSetStream(h, s);
    const float alpha = 1.0f, beta = 0.0f;
    BlasStatus gemm_status = kBlasSuccess;
    absl::StatusOr<double> ms = MedianMs(s, 3, 10, [&] {
      const BlasStatus st =
          BlasGemmEx(h, false, false, n, n, n, &alpha, *a, kBlasBF16, n, *b,
                     kBlasBF16, n, &beta, *c, kBlasBF16, n);
      if (st != kBlasSuccess) gemm_status = st;
    });
    BlasDestroy(h);
    if (!ms.ok()) return ms.status();
    if (gemm_status != kBlasSuccess) {
      return absl::InternalError(absl::StrCat(
          "ceiling GEMM failed (status ", static_cast<int>(gemm_status), ")"));
    }
    out.gemm_tflops = 2.0 * n * n * double(n) / (*ms * 1e-3) / 1e12;
  }
  return out;
}

}  // namespace radixkv::worker::gpu
