// Test and benchmark support for the GPU kernels (device test and benchmark
// binaries only, never the serving path): RAII device buffers, runtime error
// checks, and a reproducible hash fill so that pools of any size (tens of GB)
// get fresh random contents on the device while the host reference recomputes
// any element from its offset without copying the pool back.
//
// Value of element i of a tensor filled with `seed`: a uniform float in
// [-1, 1) from SplitMix64(seed, i), rounded to the storage dtype.
#ifndef RADIXKV_WORKER_KERNELS_HIP_GPU_TEST_POOL_H_
#define RADIXKV_WORKER_KERNELS_HIP_GPU_TEST_POOL_H_

#include <cstdio>
#include <cstdlib>

#include "worker/kernels/hip/hip_compat.h"
// clang-format off
#include "worker/numeric_types.h"
// clang-format on

#define RADIXKV_CHECK_HIP(expr)                                          \
  do {                                                                   \
    const hipError_t radixkv_err_ = (expr);                              \
    if (radixkv_err_ != hipSuccess) {                                    \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, \
                   #expr, hipGetErrorString(radixkv_err_));              \
      std::exit(2);                                                      \
    }                                                                    \
  } while (0)

namespace radixkv::worker::gpu::testing {

RADIXKV_HOST_DEVICE inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Uniform in [-1, 1) (24 random bits).
RADIXKV_HOST_DEVICE inline float HashUniform(uint64_t seed, uint64_t i) {
  const uint64_t h = SplitMix64(seed * 0x2545f4914f6cdd1dull + i);
  return static_cast<float>(h >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

RADIXKV_HOST_DEVICE inline uint16_t ToBits(float x, bool bf16) {
  return bf16 ? FloatToBf16(x).bits : FloatToFp16(x).bits;
}

RADIXKV_HOST_DEVICE inline float FromBits(uint16_t bits, bool bf16) {
  return bf16 ? Bf16ToFloat(bf16_t{bits}) : Fp16ToFloat(fp16_t{bits});
}

// The stored value of element i of a tensor hash-filled with `seed`.
RADIXKV_HOST_DEVICE inline float HashElem(uint64_t seed, uint64_t i,
                                          bool bf16) {
  return FromBits(ToBits(HashUniform(seed, i), bf16), bf16);
}

#if defined(__CUDACC__) || defined(__HIPCC__)
__global__ void HashFillKernel(uint16_t* p, int64_t n, uint64_t seed,
                               bool bf16) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    p[i] = ToBits(HashUniform(seed, static_cast<uint64_t>(i)), bf16);
  }
}

inline void HashFill(void* p, int64_t n, uint64_t seed, bool bf16) {
  hipLaunchKernelGGL(HashFillKernel, dim3(132 * 16), dim3(256), 0, nullptr,
                     static_cast<uint16_t*>(p), n, seed, bf16);
  RADIXKV_CHECK_HIP(hipGetLastError());
}
#endif

// Owning device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0) RADIXKV_CHECK_HIP(hipMalloc(&ptr_, bytes));
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) (void)hipFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_ != nullptr) (void)hipFree(ptr_);
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace radixkv::worker::gpu::testing

#endif  // RADIXKV_WORKER_KERNELS_HIP_GPU_TEST_POOL_H_
