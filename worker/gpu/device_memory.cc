#include "worker/gpu/device_memory.h"

#include "absl/strings/str_cat.h"
#include "worker/gpu/gpu_status.h"

namespace radixkv::worker::gpu {

DeviceMemory::~DeviceMemory() {
  for (void* p : device_) hipFree(p);
  for (void* p : pinned_) hipHostFree(p);
}

absl::Status DeviceMemory::Alloc(size_t bytes, void** out, int64_t* counter) {
  *out = nullptr;
  if (bytes == 0) return absl::OkStatus();
  bytes = (bytes + 255) / 256 * 256;
  RADIXKV_RETURN_IF_ERROR(RuntimeError(hipMalloc(out, bytes),
                                       absl::StrCat("hipMalloc(", bytes, ")")));
  device_.push_back(*out);
  if (counter != nullptr) *counter += static_cast<int64_t>(bytes);
  return absl::OkStatus();
}

absl::Status DeviceMemory::AllocPinned(size_t bytes, void** out,
                                       absl::string_view what) {
  *out = nullptr;
  RADIXKV_RETURN_IF_ERROR(RuntimeError(hipHostMalloc(out, bytes), what));
  pinned_.push_back(*out);
  return absl::OkStatus();
}

}  // namespace radixkv::worker::gpu
