// Status conversions of the GPU model backend's host code: GPU runtime
// errors and model-kernel launcher codes (model_kernels.h) to absl::Status,
// and the early return every step of Create and Run uses.
#ifndef RADIXKV_WORKER_GPU_GPU_STATUS_H_
#define RADIXKV_WORKER_GPU_GPU_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "worker/gpu/gpu_runtime_compat.h"
#include "worker/gpu/model_kernels.h"

// Returns the absl::Status of `expr` from the enclosing function unless OK.
#define RADIXKV_RETURN_IF_ERROR(expr)         \
  do {                                        \
    if (absl::Status _s = (expr); !_s.ok()) { \
      return _s;                              \
    }                                         \
  } while (0)

namespace radixkv::worker::gpu {

// OK for hipSuccess; RESOURCE_EXHAUSTED "what: <runtime text>" when the
// device is out of memory, INTERNAL otherwise.
inline absl::Status RuntimeError(hipError_t e, absl::string_view what) {
  if (e == hipSuccess) return absl::OkStatus();
  if (e == hipErrorOutOfMemory) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": ", hipGetErrorString(e)));
  }
  return absl::InternalError(absl::StrCat(what, ": ", hipGetErrorString(e)));
}

// OK for 0; INTERNAL "what: <text>" for a model-kernel launcher's error code.
inline absl::Status KernelError(int e, absl::string_view what) {
  if (e == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", ModelKernelErrorString(e)));
}

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_GPU_STATUS_H_
