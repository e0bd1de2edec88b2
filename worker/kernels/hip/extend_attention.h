// Internal interface of the extend-attention kernel files: the kernels'
// parameter block and one launcher per kernel family, called by the dispatch
// in extend_attention.hip. Included only by the extend_attention*.hip files
// (nvcc or hipcc, after hip_compat.h).
//
//   extend_attention_simt.hip        ExtendPortableKernel (both vendors)
//   extend_attention_mma_sm80.hip    ExtendMmaKernel, mma.sync (NVIDIA)
//   extend_attention_wgmma_sm90.hip  ExtendWgmmaWsKernel, wgmma (NVIDIA sm_90a)
//   extend_attention_mfma.hip        ExtendMfmaKernel, MFMA (AMD gfx90a/94x)
//
// Every launcher takes the head_dim and dtype from the ExtendLaunch, sets the
// grid-dependent fields of ExtendParams itself and returns the runtime's
// error code (0 = launched).
#ifndef RADIXKV_WORKER_KERNELS_HIP_EXTEND_ATTENTION_H_
#define RADIXKV_WORKER_KERNELS_HIP_EXTEND_ATTENTION_H_

#include <stdint.h>

#include <type_traits>

#include "worker/kernels/hip/gpu_kernel_launch.h"
#include "worker/kernels/hip/hip_compat.h"
#include "worker/kv_cache_layout.h"

namespace radixkv::worker::gpu::extend {

// Kernel arguments. Pointers are device pointers to 16-bit elements (bf16 or
// fp16 bits); shapes as in internal::ExtendLaunch.
struct ExtendParams {
  KvCacheGeometry g;
  const uint16_t* k_cache;
  const uint16_t* v_cache;
  const uint16_t* q;
  const uint16_t* k_ext;
  const uint16_t* v_ext;
  const int32_t* qo_indptr;
  const int32_t* kv_indptr;
  const int64_t* kv_indices;
  int32_t num_q_heads;
  int32_t group;        // query heads per KV head
  float scale_log2;     // sm_scale * log2(e)
  int32_t window_left;  // -1 = full causal; w >= 0: key position >= row
                        // position - w (positions: prefix 0.., new Lp + i)
  uint16_t* out;
  float* lse;
  int32_t num_m_blocks;  // query-row blocks of the longest extend (grid x)
  // wgmma kernels: V descriptor leading / stride byte offsets (host-set).
  uint32_t v_desc_lbo;
  uint32_t v_desc_sbo;
};

// Returned by a launcher that has no kernel for this build or shape (nothing
// was launched; the dispatch falls back to the next family).
inline constexpr int kNotLaunched = -1;

// Calls launch(std::integral_constant<int, D>, std::bool_constant<kBf16>)
// for the launch's head_dim (64, 128 or 256) and dtype (bf16, else fp16) and
// returns its result; hipErrorInvalidValue for any other head_dim.
template <typename Launch>
int WithHeadDimAndDtype(const internal::ExtendLaunch& a, Launch&& launch) {
  const bool bf16 = a.dtype == DType::kBF16;
  switch (a.geometry.head_dim) {
    case 64:
      return bf16
                 ? launch(std::integral_constant<int, 64>{}, std::true_type{})
                 : launch(std::integral_constant<int, 64>{}, std::false_type{});
    case 128:
      return bf16 ? launch(std::integral_constant<int, 128>{}, std::true_type{})
                  : launch(std::integral_constant<int, 128>{},
                           std::false_type{});
    case 256:
      return bf16 ? launch(std::integral_constant<int, 256>{}, std::true_type{})
                  : launch(std::integral_constant<int, 256>{},
                           std::false_type{});
    default:
      return static_cast<int>(hipErrorInvalidValue);
  }
}

// SIMT kernel, one warp per query row: every head_dim, both vendors.
int LaunchPortable(ExtendParams p, const internal::ExtendLaunch& a);

#if defined(RADIXKV_GPU_NVIDIA)
// mma.sync kernel (sm_80+): every head_dim; 8 warps for head_dim <= 128
// (4 with RADIXKV_EXTEND_WARPS=4), 4 for 256.
int LaunchMma(ExtendParams p, const internal::ExtendLaunch& a);

// Warp-specialized wgmma kernel: head_dim 64 / 128 when the build holds an
// sm_90a binary of it, else kNotLaunched.
int LaunchWgmma(ExtendParams p, const internal::ExtendLaunch& a);

// Benchmark-only work-item form of the wgmma kernel, one block per SM
// (extend_attention_wgmma_persistent_sm90.hip; not in the serving library):
// same contract as LaunchWgmma.
int LaunchWgmmaPersistent(ExtendParams p, const internal::ExtendLaunch& a);
#endif

#if defined(RADIXKV_GPU_AMD)
// MFMA kernel: every head_dim; the caller checks that the device has MFMA.
int LaunchMfma(ExtendParams p, const internal::ExtendLaunch& a);
#endif

}  // namespace radixkv::worker::gpu::extend

#endif  // RADIXKV_WORKER_KERNELS_HIP_EXTEND_ATTENTION_H_
