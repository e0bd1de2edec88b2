// reshape_and_cache and copy_blocks on the GPU, for every pool layout (bshd,
// bhsd, vLLM split-x K / transposed V), 64-bit element offsets throughout.
//
// Both kernels are pure data movement of 16-bit elements (bf16 and fp16 move
// identically). The unit of work is a 16-byte chunk of 8 consecutive head_dim
// elements of one (token, kv head): it is contiguous in K for all three
// layouts (vLLM's x = 16 / sizeof(elem) = 8) and in V for bshd/bhsd; vLLM's V
// is transposed ([page, head, dim, page_size]), so its chunk is written as 8
// strided 2-byte stores (VDimStride() elements apart).
//
// Addresses come only from KvCacheGeometry::KOffset/VOffset
// (worker/kv_cache_layout.h).
// hip_compat.h first: numeric_types.h's device branch uses the GPU runtime's
// __float_as_uint / __uint_as_float, which hipcc declares only after the HIP
// headers are included.
#include "worker/kernels/hip/hip_compat.h"
// clang-format off
#include "worker/kernels/hip/gpu_kernel_launch.h"
#include "worker/kv_cache_layout.h"
// clang-format on

namespace radixkv::worker::gpu {
namespace {

constexpr int kChunkElems = 8;  // 16 bytes of 16-bit elements
constexpr int kThreads = 256;

__device__ __forceinline__ void StoreV(uint16_t* v_cache,
                                       const KvCacheGeometry& g, int64_t slot,
                                       int32_t head, int32_t d0, uint4 chunk) {
  const int64_t off = g.VOffset(slot, head, d0);
  if (g.layout != KvLayout::kVllm) {
    *reinterpret_cast<uint4*>(v_cache + off) = chunk;
    return;
  }
  const int64_t stride = g.VDimStride();
  const uint32_t w[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
#pragma unroll
  for (int i = 0; i < kChunkElems; ++i) {
    v_cache[off + i * stride] =
        static_cast<uint16_t>(w[i / 2] >> (16 * (i % 2)));
  }
}

// Grid-stride over (token, kv_head, chunk), chunk fastest so that both the
// [num_tokens, Hkv, D] source and a bshd destination are read/written in
// coalesced 16-byte accesses. Tokens with a negative slot are skipped
// (padding).
__global__ void __launch_bounds__(kThreads)
    ReshapeAndCacheKernel(KvCacheGeometry g, uint16_t* __restrict__ k_cache,
                          uint16_t* __restrict__ v_cache,
                          const uint16_t* __restrict__ k,
                          const uint16_t* __restrict__ v,
                          const int64_t* __restrict__ out_cache_loc,
                          int32_t num_tokens) {
  const int32_t chunks_per_head = g.head_dim / kChunkElems;
  const int64_t chunks_per_token =
      static_cast<int64_t>(g.num_kv_heads) * chunks_per_head;
  const int64_t total = chunks_per_token * num_tokens;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t token = i / chunks_per_token;
    const int32_t rem = static_cast<int32_t>(i - token * chunks_per_token);
    const int32_t head = rem / chunks_per_head;
    const int32_t d0 = (rem - head * chunks_per_head) * kChunkElems;
    const int64_t slot = out_cache_loc[token];
    if (slot < 0) continue;
    const int64_t src = i * kChunkElems;  // [token, head, d0] contiguous
    const uint4 kc = *reinterpret_cast<const uint4*>(k + src);
    const uint4 vc = *reinterpret_cast<const uint4*>(v + src);
    *reinterpret_cast<uint4*>(k_cache + g.KOffset(slot, head, d0)) = kc;
    StoreV(v_cache, g, slot, head, d0, vc);
  }
}

// grid = (x: chunk blocks over one page, y: op, z: layer). Each thread moves
// kCopyUnroll 16-byte chunks of K and the matching chunks of V for (token,
// head, d0) of one op in one layer, all loads issued before the stores (more
// bytes in flight per thread). Ops in one launch must be independent
// (gpu_attention.cc batches dependent ops into separate launches).
constexpr int kCopyUnroll = 4;

__global__ void __launch_bounds__(kThreads)
    CopyBlocksKernel(KvCacheGeometry g,
                     const internal::DeviceKvLayer* __restrict__ layers,
                     const internal::DevicePageCopy* __restrict__ ops) {
  const internal::DevicePageCopy op = ops[blockIdx.y];
  const internal::DeviceKvLayer layer = layers[blockIdx.z];
  const int32_t chunks_per_head = g.head_dim / kChunkElems;
  const int32_t chunks_per_token = g.num_kv_heads * chunks_per_head;
  const int32_t total = chunks_per_token * op.num_tokens;
  uint16_t* k_cache = static_cast<uint16_t*>(layer.k);
  uint16_t* v_cache = static_cast<uint16_t*>(layer.v);
  const int64_t src_base = op.src_page * g.page_size;
  // Source and destination share the in-page offset, and the page is the
  // outermost dimension of every layout, so dst = src + one constant per op
  // (KOffset/VOffset evaluated once here instead of per chunk).
  const int64_t k_shift =
      g.KOffset(op.dst_page * g.page_size, 0, 0) - g.KOffset(src_base, 0, 0);
  const int64_t v_shift =
      g.VOffset(op.dst_page * g.page_size, 0, 0) - g.VOffset(src_base, 0, 0);
  const bool v_strided = g.layout == KvLayout::kVllm;
  const int64_t v_stride = g.VDimStride();
  const int32_t stride = gridDim.x * blockDim.x;
  for (int32_t i0 = blockIdx.x * blockDim.x + threadIdx.x; i0 < total;
       i0 += stride * kCopyUnroll) {
    uint4 kc[kCopyUnroll], vc[kCopyUnroll];
    int64_t ko[kCopyUnroll], vo[kCopyUnroll];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) {
      const int32_t i = i0 + u * stride;
      if (i >= total) break;
      const int32_t token = i / chunks_per_token;
      const int32_t rem = i - token * chunks_per_token;
      const int32_t head = rem / chunks_per_head;
      const int32_t d0 = (rem - head * chunks_per_head) * kChunkElems;
      ko[u] = g.KOffset(src_base + token, head, d0);
      vo[u] = v_strided ? g.VOffset(src_base + token, head, d0) : ko[u];
      kc[u] = *reinterpret_cast<const uint4*>(k_cache + ko[u]);
      if (!v_strided) {
        vc[u] = *reinterpret_cast<const uint4*>(v_cache + vo[u]);
      } else {
        uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
        for (int e = 0; e < kChunkElems; ++e) {
          w[e / 2] |= static_cast<uint32_t>(v_cache[vo[u] + e * v_stride])
                      << (16 * (e % 2));
        }
        vc[u] = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) {
      const int32_t i = i0 + u * stride;
      if (i >= total) break;
      *reinterpret_cast<uint4*>(k_cache + ko[u] + k_shift) = kc[u];
      if (!v_strided) {
        *reinterpret_cast<uint4*>(v_cache + vo[u] + v_shift) = vc[u];
      } else {
        const uint32_t w[4] = {vc[u].x, vc[u].y, vc[u].z, vc[u].w};
#pragma unroll
        for (int e = 0; e < kChunkElems; ++e) {
          v_cache[vo[u] + v_shift + e * v_stride] =
              static_cast<uint16_t>(w[e / 2] >> (16 * (e % 2)));
        }
      }
    }
  }
}

}  // namespace

namespace internal {

int LaunchReshapeAndCache(const ReshapeAndCacheLaunch& a) {
  if (a.num_tokens == 0) return 0;
  const int64_t total = static_cast<int64_t>(a.num_tokens) *
                        a.geometry.num_kv_heads *
                        (a.geometry.head_dim / kChunkElems);
  const int64_t blocks64 = (total + kThreads - 1) / kThreads;
  const int blocks =
      static_cast<int>(blocks64 < 65535 * 8 ? blocks64 : 65535 * 8);
  hipStream_t stream = static_cast<hipStream_t>(a.stream);
  hipLaunchKernelGGL(
      ReshapeAndCacheKernel, dim3(blocks), dim3(kThreads), 0, stream,
      a.geometry, static_cast<uint16_t*>(a.k_cache),
      static_cast<uint16_t*>(a.v_cache), static_cast<const uint16_t*>(a.k),
      static_cast<const uint16_t*>(a.v), a.out_cache_loc, a.num_tokens);
  return static_cast<int>(hipGetLastError());
}

int LaunchCopyBlocks(const CopyBlocksLaunch& a) {
  if (a.num_ops == 0 || a.num_layers == 0) return 0;
  const int64_t per_page = static_cast<int64_t>(a.geometry.page_size) *
                           a.geometry.num_kv_heads *
                           (a.geometry.head_dim / kChunkElems);
  int64_t blocks_x =
      (per_page + kThreads * kCopyUnroll - 1) / (kThreads * kCopyUnroll);
  if (blocks_x > 1024) blocks_x = 1024;
  hipStream_t stream = static_cast<hipStream_t>(a.stream);
  // gridDim.y is limited to 65535: launch ops in slices.
  for (int32_t first = 0; first < a.num_ops; first += 65535) {
    const int32_t n = a.num_ops - first < 65535 ? a.num_ops - first : 65535;
    for (int32_t l0 = 0; l0 < a.num_layers; l0 += 65535) {
      const int32_t nl = a.num_layers - l0 < 65535 ? a.num_layers - l0 : 65535;
      hipLaunchKernelGGL(
          CopyBlocksKernel, dim3(static_cast<unsigned>(blocks_x), n, nl),
          dim3(kThreads), 0, stream, a.geometry, a.layers + l0, a.ops + first);
      const hipError_t err = hipGetLastError();
      if (err != hipSuccess) return static_cast<int>(err);
    }
  }
  return 0;
}

int CopyToDeviceAsync(void* dst, const void* src, size_t bytes, void* stream) {
  return static_cast<int>(hipMemcpyAsync(dst, src, bytes, hipMemcpyHostToDevice,
                                         static_cast<hipStream_t>(stream)));
}

const char* ErrorString(int error) {
  return hipGetErrorString(static_cast<hipError_t>(error));
}

int DeviceMultiprocessorCount() {
  int device = 0;
  if (hipGetDevice(&device) != hipSuccess) return 0;
  int count = 0;
  if (hipDeviceGetAttribute(&count, hipDeviceAttributeMultiprocessorCount,
                            device) != hipSuccess) {
    return 0;
  }
  return count;
}

}  // namespace internal
}  // namespace radixkv::worker::gpu
