#include "worker/gpu/profiler_range.h"

#include "worker/gpu/gpu_runtime_compat.h"
#include "worker/gpu/gpu_status.h"

namespace radixkv::worker::gpu {

absl::Status StartProfilerRange() {
  return RuntimeError(hipProfilerStart(), "profiler start");
}

absl::Status StopProfilerRange() {
  return RuntimeError(hipProfilerStop(), "profiler stop");
}

}  // namespace radixkv::worker::gpu
