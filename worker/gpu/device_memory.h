// DeviceMemory: owns the GPU model backend's device and pinned host
// allocations for the executor's lifetime (nothing is allocated per step)
// and frees them together, device memory first.
#ifndef RADIXKV_WORKER_GPU_DEVICE_MEMORY_H_
#define RADIXKV_WORKER_GPU_DEVICE_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace radixkv::worker::gpu {

// `n` bytes rounded up to 16: the alignment of each region of a block that
// is uploaded with one copy (16-byte vector loads on the device).
constexpr size_t AlignUp16(size_t n) { return (n + 15) / 16 * 16; }

class DeviceMemory {
 public:
  DeviceMemory() = default;
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // Device memory of `bytes` rounded up to 256 at *out (nullptr for 0
  // bytes); the rounded size is added to *counter when counter is non-null.
  // Errors: RESOURCE_EXHAUSTED (out of device memory), INTERNAL.
  absl::Status Alloc(size_t bytes, void** out, int64_t* counter);

  // Alloc of `count` elements of T.
  template <typename T>
  absl::Status AllocT(size_t count, T** out, int64_t* counter) {
    void* p = nullptr;
    absl::Status s = Alloc(count * sizeof(T), &p, counter);
    *out = static_cast<T*>(p);
    return s;
  }

  // Page-locked host memory of exactly `bytes` at *out (for asynchronous
  // copies); `what` names it in errors (as Alloc's).
  absl::Status AllocPinned(size_t bytes, void** out, absl::string_view what);

 private:
  std::vector<void*> device_;
  std::vector<void*> pinned_;
};

}  // namespace radixkv::worker::gpu

#endif  // RADIXKV_WORKER_GPU_DEVICE_MEMORY_H_
