// Extend (prefix-prefill) attention on the GPU: SGLang's extend semantics
// (python/sglang/srt/layers/attention/triton_ops/extend_attention.py), and
// the dispatch that picks one kernel family per launch.
//
// Sequence b has Lp = kv_indptr[b+1] - kv_indptr[b] cached prefix tokens (in
// the paged pool, slots kv_indices[kv_indptr[b] ..]) and Le = qo_indptr[b+1]
// - qo_indptr[b] new tokens whose q, k, v are contiguous rows of q / k_extend
// / v_extend. New token i sees every prefix token and new tokens j <= i: the
// causal mask j <= i + (Lk - Lq) over the concatenation, shifted by the
// prefix length.
//
// Tiling of the matrix-core kernels: a block owns BLOCK_M query rows of one
// query head.
//   Stage 1, prefix: tiles of kN keys over [0, Lp) with no mask (only the
//     last partial tile masks keys >= Lp);
//   Stage 2, extend: tiles over [0, extend_end) with extend_end = min(Le,
//     (m_block + 1) * BLOCK_M): tiles above the diagonal are never loaded
//     (early exit); only tiles that cross the diagonal apply the mask.
// Blocks are scheduled heaviest first (the last m-block of the longest
// extend runs first) to shorten the causal tail. Every K/V address of the
// pool is KvCacheGeometry::KOffset / VOffset (worker/kv_cache_layout.h); the
// online-softmax merge and the LSE use worker/kernels/attention_combine.h.
//
// Kernel families (extend_attention.h), chosen here:
//   NVIDIA, KernelPath::kMatrixCore: the wgmma kernel (sm_90a, head_dim 64 /
//     128) unless RADIXKV_EXTEND_KERNEL=mma or the build has no sm_90a
//     binary; otherwise mma.sync (every head_dim).
//   AMD, KernelPath::kMatrixCore: the MFMA kernel when the current device
//     has MFMA (gfx90a / gfx94x) unless RADIXKV_EXTEND_KERNEL=portable.
//   Everything else (KernelPath::kPortable, AMD without MFMA): the portable
//     SIMT kernel.
// RADIXKV_EXTEND_KERNEL is read once per process.
//
// Build definition RADIXKV_EXTEND_WITH_PERSISTENT (only the benchmark
// library :gpu_attention_persistent_ab sets it, together with linking
// extend_attention_wgmma_persistent_sm90.hip):
// RADIXKV_WGMMA_VARIANT=persistent, read at every launch so that the benchmark
// can interleave A/B runs in one process, takes the work-item wgmma kernel
// instead of the default.
#include "worker/kernels/hip/hip_compat.h"
// clang-format off
#include <atomic>
#include <cstdlib>
#include <string_view>

#include "worker/kernels/hip/extend_attention.h"
#include "worker/kernels/hip/gpu_kernel_launch.h"
#if defined(RADIXKV_GPU_AMD)
#include "worker/kernels/hip/attention_mfma.h"
#endif
// clang-format on

namespace radixkv::worker::gpu {
namespace {

using extend::ExtendParams;

bool ExtendKernelEnvIs(std::string_view family) {
  const char* env = std::getenv("RADIXKV_EXTEND_KERNEL");
  return env != nullptr && std::string_view(env) == family;
}

#if defined(RADIXKV_GPU_NVIDIA)
// False with RADIXKV_EXTEND_KERNEL=mma (mma.sync also on sm_90a).
bool WgmmaAllowed() {
  static const bool allowed = !ExtendKernelEnvIs("mma");
  return allowed;
}

// The launch on the tensor-core path: wgmma where it has a kernel, else
// mma.sync. The wgmma kernels take no sliding window: a windowed launch
// uses mma.sync.
int LaunchMatrixCore(const ExtendParams& p, const internal::ExtendLaunch& a) {
  const int head_dim = a.geometry.head_dim;
  if ((head_dim == 64 || head_dim == 128) && WgmmaAllowed() &&
      p.window_left < 0) {
#if defined(RADIXKV_EXTEND_WITH_PERSISTENT)
    const char* variant = std::getenv("RADIXKV_WGMMA_VARIANT");
    if (variant != nullptr && std::string_view(variant) == "persistent") {
      const int err = extend::LaunchWgmmaPersistent(p, a);
      if (err != extend::kNotLaunched) return err;
    }
#endif
    const int err = extend::LaunchWgmma(p, a);
    if (err != extend::kNotLaunched) return err;
  }
  return extend::LaunchMma(p, a);
}
#endif  // RADIXKV_GPU_NVIDIA

#if defined(RADIXKV_GPU_AMD)
// False with RADIXKV_EXTEND_KERNEL=portable (the SIMT kernel also on MFMA
// devices).
bool MfmaAllowed() {
  static const bool allowed = !ExtendKernelEnvIs("portable");
  return allowed;
}

// True if the current device has the MFMA instructions of the MFMA kernel
// (gcnArchName gfx90a / gfx94x; mfma::GcnArchHasMfma). Cached per device id;
// a failing query counts as "no MFMA" (portable kernel).
bool DeviceHasMfma() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int8_t> known[kMaxDevices] = {};  // 0 ?, 1 yes, 2 no
  int device = 0;
  if (hipGetDevice(&device) != hipSuccess || device < 0 ||
      device >= kMaxDevices) {
    (void)hipGetLastError();
    return false;
  }
  int8_t v = known[device].load(std::memory_order_relaxed);
  if (v == 0) {
    hipDeviceProp_t prop;
    const bool ok = hipGetDeviceProperties(&prop, device) == hipSuccess;
    if (!ok) (void)hipGetLastError();
    v = ok && mfma::GcnArchHasMfma(prop.gcnArchName) ? 1 : 2;
    known[device].store(v, std::memory_order_relaxed);
  }
  return v == 1;
}
#endif  // RADIXKV_GPU_AMD

ExtendParams MakeExtendParams(const internal::ExtendLaunch& a) {
  ExtendParams p;
  p.g = a.geometry;
  p.k_cache = static_cast<const uint16_t*>(a.k_cache);
  p.v_cache = static_cast<const uint16_t*>(a.v_cache);
  p.q = static_cast<const uint16_t*>(a.q);
  p.k_ext = static_cast<const uint16_t*>(a.k_extend);
  p.v_ext = static_cast<const uint16_t*>(a.v_extend);
  p.qo_indptr = a.qo_indptr;
  p.kv_indptr = a.kv_indptr;
  p.kv_indices = a.kv_indices;
  p.num_q_heads = a.num_q_heads;
  p.group = a.num_q_heads / a.geometry.num_kv_heads;
  p.scale_log2 = a.scale_log2;
  p.window_left = a.window_left;
  p.out = static_cast<uint16_t*>(a.out);
  p.lse = a.lse;
  p.num_m_blocks = 0;
  p.v_desc_lbo = 0;
  p.v_desc_sbo = 0;
  return p;
}

}  // namespace

namespace internal {

int LaunchExtend(const ExtendLaunch& a) {
  if (a.batch_size == 0 || a.max_extend_len == 0) return 0;
  const ExtendParams p = MakeExtendParams(a);
#if defined(RADIXKV_GPU_NVIDIA)
  if (a.path == KernelPath::kMatrixCore) return LaunchMatrixCore(p, a);
#endif
#if defined(RADIXKV_GPU_AMD)
  if (a.path == KernelPath::kMatrixCore && MfmaAllowed() && DeviceHasMfma()) {
    return extend::LaunchMfma(p, a);
  }
#endif
  return extend::LaunchPortable(p, a);
}

}  // namespace internal
}  // namespace radixkv::worker::gpu
