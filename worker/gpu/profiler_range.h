// The range a profiler started with "profile from start off" records
// (Nsight Compute's --profile-from-start off; rocprof's equivalent on AMD):
// benchmarks bracket the one step they want profiled, so the profiler
// skips warm-up, graph capture and everything else. No GPU runtime
// includes.
#ifndef RADIXKV_WORKER_GPU_PROFILER_RANGE_H_
#define RADIXKV_WORKER_GPU_PROFILER_RANGE_H_

#include "absl/status/status.h"

namespace radixkv::worker::gpu {

// cudaProfilerStart / hipProfilerStart. INTERNAL on a runtime error.
absl::Status StartProfilerRange();
// cudaProfilerStop / hipProfilerStop. INTERNAL on a runtime error.
absl::Status StopProfilerRange();

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_PROFILER_RANGE_H_
