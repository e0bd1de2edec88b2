// Ceilings of the current GPU measured in the calling process, for the
// roofline columns of the benchmarks (docs/perf.md): device-to-device copy
// bandwidth (bytes read + bytes written per second, cudaMemcpyAsync of a
// buffer several times the L2) and the dense bf16 GEMM rate (cuBLAS GemmEx,
// 8192^3, bf16 in and out, fp32 accumulation) on random data (zeros run
// faster than real data: docs/kernel-notes.md "Two numbers"). No GPU
// runtime includes.
#ifndef RADIXKV_WORKER_GPU_DEVICE_CEILINGS_H_
#define RADIXKV_WORKER_GPU_DEVICE_CEILINGS_H_

#include "absl/status/statusor.h"

namespace radixkv::worker::gpu {

struct DeviceCeilings {
  double copy_gbps = 0;    // GB/s (1e9 bytes), read + write
  double gemm_tflops = 0;  // TFLOP/s, 2 m n k per GEMM
};

// Medians of 20 timed copies of `copy_bytes` and 10 timed GEMMs (device
// events, after warm-up) on the current device; allocates 2 * copy_bytes
// plus 384 MiB for the call and frees them. INTERNAL / RESOURCE_EXHAUSTED on
// runtime or BLAS failure.
absl::StatusOr<DeviceCeilings> MeasureDeviceCeilings(
    size_t copy_bytes = size_t{2} << 30);

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_DEVICE_CEILINGS_H_
