// Wavefront-level attention building blocks on AMD matrix cores (MFMA,
// CDNA2 gfx90a and CDNA3 gfx94x, wave64): the AMD counterpart of
// attention_mma.h (the Hygon DCU's MMAC instruction has the same shape).
// Used by ExtendMfmaKernel in extend_attention_mfma.hip; docs/kernel-notes.md
// "AMD / Hygon path".
//
// Instruction: v_mfma_f32_16x16x16f16 (`__builtin_amdgcn_mfma_f32_16x16x16f16`,
// gfx908+) and v_mfma_f32_16x16x16bf16_1k
// (`__builtin_amdgcn_mfma_f32_16x16x16bf16_1k`, gfx90a+): D[16x16] = A[16x16]
// B[16x16] + C, 16-bit operands, fp32 accumulators, one wavefront of 64
// lanes. Lane layout (AMD Matrix Instruction Calculator,
// github.com/ROCm/amd_matrix_instruction_calculator, `--register-layout` of
// both instructions; AMD "Instinct MI200 ISA", section 7 "Matrix Arithmetic
// Instructions"; the same K_L = K / (64 / M) = 4 formula is used by CK and
// Triton's AMD backend):
//   A[i][k]: lane i + 16 * (k / 4), item k % 4   (4 16-bit values per lane)
//   B[k][j]: lane j + 16 * (k / 4), item k % 4
//   C[i][j], D[i][j]: lane j + 16 * (i / 4), item i % 4   (4 floats per lane)
// The functions below are that table, inverted (lane, item) -> (row, col),
// and the tile algorithm's index math built on it. They are constexpr and
// host-callable so that attention_mfma_test.cc runs the kernel's tile
// algorithm through exactly these functions on the CPU, with an emulated
// wavefront executing the instruction as the table above documents. That
// test checks our index math against our reading of the ISA; nothing here
// has run on AMD hardware.
//
// Tile algorithm (transposed, so no cross-lane shuffles between the two
// products): one wavefront owns 16 query rows.
//   S^T[key][row] = K[key][dim] * Q^T[dim][row]     A = K tile (LDS),
//                                                    B = Q^T (registers)
//   O^T[dim][row] += V^T[dim][key] * P^T[key][row]   A = V^T tile (LDS),
//                                                    B = P^T (registers)
// S^T's accumulator layout (lane j + 16 (key / 4), item key % 4, j = row) is
// exactly B's operand layout for P^T (lane row + 16 (key / 4), item key % 4):
// P goes from the softmax into the second MFMA without moving between lanes
// (static_assert below). Every fragment a lane holds belongs to query row
// LaneRow(lane) = lane % 16: the online-softmax state (m, l) is per lane, row
// reductions combine the 4 lanes lane % 16 + {0, 16, 32, 48} (xor 16, 32).
// Logits are in the base-2 domain: s * sm_scale * log2(e), exp2.
//
// LDS tiles: K as [kN keys][D + 4] (row-major, 8-byte padding: the 16 rows of
// one A read start 2 banks apart), V transposed as [D][kN + 4] so that the
// V^T operand (4 consecutive keys of one dim) is one 8-byte read, like K's.
#ifndef RADIXKV_WORKER_KERNELS_HIP_ATTENTION_MFMA_H_
#define RADIXKV_WORKER_KERNELS_HIP_ATTENTION_MFMA_H_

#if defined(__CUDACC__) || defined(__HIPCC__)
#include "worker/kernels/hip/hip_compat.h"
#endif

#include <stdint.h>

#include "worker/kernels/attention_combine.h"  // CombineLse
#include "worker/numeric_types.h"              // RADIXKV_HOST_DEVICE

// RADIXKV_HAS_MFMA: 1 in device passes for targets with the bf16_1k MFMA
// (gfx90a, gfx94x); 0 everywhere else (gfx906 has no MFMA, the NVIDIA and
// host passes never see the builtins).
#if defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || \
    defined(__gfx942__)
#define RADIXKV_HAS_MFMA 1
#else
#define RADIXKV_HAS_MFMA 0
#endif

namespace radixkv::worker::gpu::mfma {

inline constexpr int kWaveLanes = 64;  // MFMA operands span a wave64
inline constexpr int kTile = 16;       // M = N = K of the 16x16x16 forms
inline constexpr int kItems = 4;       // 16-bit A/B items, fp32 C/D items

// ---------------------------------------------- ISA lane layout (the table)
// lane in [0, 64), item in [0, 4).

// A[row][k]: row and k held by (lane, item).
RADIXKV_HOST_DEVICE constexpr int AFragRow(int lane) { return lane % 16; }
RADIXKV_HOST_DEVICE constexpr int AFragK(int lane, int item) {
  return 4 * (lane / 16) + item;
}
// B[k][col]: k and col held by (lane, item).
RADIXKV_HOST_DEVICE constexpr int BFragK(int lane, int item) {
  return 4 * (lane / 16) + item;
}
RADIXKV_HOST_DEVICE constexpr int BFragCol(int lane) { return lane % 16; }
// C/D[row][col]: row and col held by (lane, item).
RADIXKV_HOST_DEVICE constexpr int CFragRow(int lane, int item) {
  return 4 * (lane / 16) + item;
}
RADIXKV_HOST_DEVICE constexpr int CFragCol(int lane) { return lane % 16; }

// ------------------------------------------ the tile algorithm's index math
// Offsets are within one 16-row / 16-key / 16-dim step.

// Query row (0..15 within the wavefront's rows) of every fragment of `lane`.
RADIXKV_HOST_DEVICE constexpr int LaneRow(int lane) { return BFragCol(lane); }
// Q^T operand (B of S^T): dim of item `item`; the row is LaneRow.
RADIXKV_HOST_DEVICE constexpr int QDim(int lane, int item) {
  return BFragK(lane, item);
}
// K operand (A of S^T): key and dim of item `item`.
RADIXKV_HOST_DEVICE constexpr int KKey(int lane) { return AFragRow(lane); }
RADIXKV_HOST_DEVICE constexpr int KDim(int lane, int item) {
  return AFragK(lane, item);
}
// Score accumulator (C of S^T): key of item `item`; the row is
// CFragCol(lane) == LaneRow(lane).
RADIXKV_HOST_DEVICE constexpr int ScoreKey(int lane, int item) {
  return CFragRow(lane, item);
}
// P^T operand (B of O^T): key of item `item`; the row is LaneRow.
RADIXKV_HOST_DEVICE constexpr int PKey(int lane, int item) {
  return BFragK(lane, item);
}
// V^T operand (A of O^T): key of item `item` and the lane's dim.
RADIXKV_HOST_DEVICE constexpr int VKey(int lane, int item) {
  return AFragK(lane, item);
}
RADIXKV_HOST_DEVICE constexpr int VDim(int lane) { return AFragRow(lane); }
// Output accumulator (C of O^T): dim of item `item`; the row is LaneRow.
RADIXKV_HOST_DEVICE constexpr int OutDim(int lane, int item) {
  return CFragRow(lane, item);
}

// True if, for every lane and item, the score accumulator holds the (row,
// key) that the P^T operand needs: P feeds the second MFMA in place.
RADIXKV_HOST_DEVICE constexpr bool ScoresAreThePOperand() {
  for (int lane = 0; lane < kWaveLanes; ++lane) {
    if (CFragCol(lane) != LaneRow(lane)) return false;
    for (int item = 0; item < kItems; ++item) {
      if (ScoreKey(lane, item) != PKey(lane, item)) return false;
    }
  }
  return true;
}
static_assert(ScoresAreThePOperand(),
              "S^T accumulator layout must equal the P^T operand layout");
static_assert(OutDim(17, 0) == 4 && QDim(63, 3) == 15 && KKey(31) == 15,
              "fragment table spot checks");

// Lanes that share a query row: lane % 16 + 16 * g, g in [0, 4). Row
// reductions are butterflies over xor 16 and xor 32.
inline constexpr int kRowLaneXor0 = 16;
inline constexpr int kRowLaneXor1 = 32;

// LDS tile shapes (16-bit elements): K [kN][KTileStride], V^T
// [D][VtTileStride]. Rows are 8-byte aligned; MFMA operand reads are one
// 8-byte read (4 consecutive dims of K, 4 consecutive keys of V^T).
template <int D>
RADIXKV_HOST_DEVICE constexpr int KTileStride() {
  return D + 4;
}
template <int kN>
RADIXKV_HOST_DEVICE constexpr int VtTileStride() {
  return kN + 4;
}
template <int D>
RADIXKV_HOST_DEVICE constexpr int KTileOffset(int key, int dim) {
  return key * KTileStride<D>() + dim;
}
template <int kN>
RADIXKV_HOST_DEVICE constexpr int VtTileOffset(int key, int dim) {
  return dim * VtTileStride<kN>() + key;
}

// Causal visibility of key `key` to extend row `row` (both 0-based): prefix
// keys (prefix, key < lp) are all visible; extend keys need key <= row. This
// is the shifted causal mask j <= i + (Lk - Lq) with the concatenated key
// index j = lp + key and Lk - Lq = lp.
RADIXKV_HOST_DEVICE constexpr bool KeyVisible(bool prefix, int key, int lp,
                                              int row) {
  return prefix ? key < lp : key <= row;
}

// Sliding window (ExtendParams::window_left, -1 = none): the key's absolute
// position (prefix key j is j, extend key j is lp + j) is at least the
// row's position lp + row minus window_left.
RADIXKV_HOST_DEVICE constexpr bool KeyInWindow(bool prefix, int key, int lp,
                                               int row, int window_left) {
  return window_left < 0 || (prefix ? key : lp + key) >= lp + row - window_left;
}

// The K/V tiles of kN keys a block of query rows [m0, m0 + block_m) reads:
// prefix tiles from first_prefix, then extend tiles from first_extend up to
// the block's causal end; a sliding window drops the tiles wholly left of
// the block's first row's window (their pages are never read).
struct BlockTiles {
  int32_t first_prefix, prefix_tiles, first_extend, extend_tiles;

  RADIXKV_HOST_DEVICE BlockTiles(int32_t lp, int32_t le, int32_t m0,
                                 int32_t block_m, int32_t kn,
                                 int32_t window_left) {
    const int32_t lo = window_left >= 0 ? lp + m0 - window_left : 0;
    const int32_t all_prefix = (lp + kn - 1) / kn;
    first_prefix = lo <= 0 ? 0 : lo >= lp ? all_prefix : lo / kn;
    first_extend = lo <= lp ? 0 : (lo - lp) / kn;
    prefix_tiles = all_prefix - first_prefix;
    const int32_t extend_end = le < m0 + block_m ? le : m0 + block_m;
    extend_tiles = (extend_end + kn - 1) / kn - first_extend;
  }
  RADIXKV_HOST_DEVICE int32_t num_tiles() const {
    return prefix_tiles + extend_tiles;
  }
  RADIXKV_HOST_DEVICE bool prefix(int32_t it) const {
    return it < prefix_tiles;
  }
  // First key index (within its stage) of tile `it`.
  RADIXKV_HOST_DEVICE int32_t key0(int32_t it, int32_t kn) const {
    return it < prefix_tiles ? (first_prefix + it) * kn
                             : (first_extend + it - prefix_tiles) * kn;
  }
};

// Reference max of the online softmax (base 2): a row that has seen only
// masked keys keeps m = -inf and uses 0 so that exp2(-inf - 0) = 0.
RADIXKV_HOST_DEVICE constexpr float SoftmaxReference(float m_new) {
  return m_new == -__builtin_inff() ? 0.0f : m_new;
}

// True if a device whose gcnArchName is `name` (e.g. "gfx90a:sramecc+:xnack-")
// has the MFMA instructions used here: gfx90a (MI200) and gfx94x (MI300).
// gfx908 (MI100) lacks the bf16_1k form; gfx906 and the consumer parts have
// no MFMA. Hygon DCUs report gfx9 names of their own and take the portable
// kernels until their MMAC form is added (docs/kernel-notes.md).
RADIXKV_HOST_DEVICE constexpr bool GcnArchHasMfma(const char* name) {
  if (name == nullptr) return false;
  auto starts = [name](const char* prefix) {
    int i = 0;
    for (; prefix[i] != '\0'; ++i) {
      if (name[i] != prefix[i]) return false;
    }
    return true;
  };
  return starts("gfx90a") || starts("gfx940") || starts("gfx941") ||
         starts("gfx942");
}

// ------------------------------------------------------ the wavefront tile
// WaveAttention is written once against an `Ops` policy of static members:
//   Frag, Acc                  4 x 16-bit and 4 x fp32 vectors (subscriptable)
//   int LaneId()               0..63
//   float ShflXor(float v, int lane_mask)      whole wavefront
//   Frag Load(const uint16_t* p)  4 consecutive elements, 8-byte aligned
//   template <bool kBf16> Acc Mfma(Frag a, Frag b, Acc c)   c + A B, 16x16x16
//   float Exp2(float)
//   template <bool kBf16> uint16_t ToElem(float)   round to nearest even
// DeviceOps (below) maps them onto gfx90a/gfx94x; attention_mfma_test.cc runs
// this same source on the CPU with Ops that execute 64 lanes in lockstep and
// emulate the MFMA from the ISA's lane table.

// State of one wavefront's 16 query rows: Q^T fragments, the O^T
// accumulators and the row's online-softmax state (lane holds row
// LaneRow(lane); m is the full row max, l the lane's partial row sum until
// Finish()). Every lane of the wavefront must call each method (MFMA and
// shuffles need the whole wavefront).
template <int D, int kN, bool kBf16, class Ops>
struct WaveAttention {
  static_assert(D % 16 == 0 && kN % 16 == 0, "tile shape");
  static constexpr int kDSteps = D / 16;   // k-steps of S^T, m-tiles of O^T
  static constexpr int kKSteps = kN / 16;  // m-tiles of S^T, k-steps of O^T
  using Frag = typename Ops::Frag;
  using Acc = typename Ops::Acc;

  Frag q[kDSteps];
  Acc o[kDSteps];
  float m;
  float l;

  // Q rows: `q_row` points at this lane's row (D elements) or is null (row
  // past the end: zeros).
  RADIXKV_HOST_DEVICE void Init(const uint16_t* q_row) {
    const int lane = Ops::LaneId();
#pragma unroll
    for (int d = 0; d < kDSteps; ++d) {
      q[d] = q_row != nullptr ? Ops::Load(q_row + 16 * d + QDim(lane, 0))
                              : Frag{0, 0, 0, 0};
      o[d] = Acc{0.0f, 0.0f, 0.0f, 0.0f};
    }
    m = -INFINITY;
    l = 0.0f;
  }

  // One K/V tile: kN keys from key index `key0` of the prefix (`prefix`,
  // keys >= lp masked) or of the extend part (causal mask against the
  // lane's row wave_row0 + LaneRow(lane); an extend tile entirely above the
  // wavefront's 16 rows is skipped: wave-uniform). k_tile is [kN][KTileStride],
  // vt_tile [D][VtTileStride]; scale_log2 = sm_scale * log2(e).
  // window_left >= 0: a sliding window (KeyInWindow); a tile wholly left of
  // every row's window is skipped (wave-uniform), a cut one masked.
  RADIXKV_HOST_DEVICE void Tile(const uint16_t* k_tile, const uint16_t* vt_tile,
                                bool prefix, int32_t key0, int32_t lp,
                                int32_t wave_row0, float scale_log2,
                                int32_t window_left = -1) {
    if (!prefix && key0 > wave_row0 + 15) return;  // early exit
    const int32_t pos0 = prefix ? key0 : lp + key0;
    const int32_t edge0 = lp + wave_row0 - window_left;
    if (window_left >= 0 && pos0 + kN - 1 < edge0) return;  // left of window
    Acc s[kKSteps];
    Scores(s, k_tile);
    const bool cut = window_left >= 0 && pos0 < edge0 + 15;
    const bool need_mask =
        cut || (prefix ? key0 + kN > lp : key0 + kN - 1 > wave_row0);
    const int lane = Ops::LaneId();
    const int32_t row = wave_row0 + LaneRow(lane);
#pragma unroll
    for (int j = 0; j < kKSteps; ++j) {
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        const int32_t key = key0 + 16 * j + ScoreKey(lane, i);
        const bool ok = !need_mask || (KeyVisible(prefix, key, lp, row) &&
                                       KeyInWindow(prefix, key, lp, row,
                                                   window_left));
        s[j][i] = ok ? s[j][i] * scale_log2 : -INFINITY;
      }
    }
    Accumulate(s, vt_tile);
  }

  // s = S^T (raw dot products) for the kN keys of a [kN][KTileStride] tile.
  RADIXKV_HOST_DEVICE void Scores(Acc s[kKSteps],
                                  const uint16_t* k_tile) const {
    const int lane = Ops::LaneId();
#pragma unroll
    for (int j = 0; j < kKSteps; ++j) {
      s[j] = Acc{0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int d = 0; d < kDSteps; ++d) {
        const Frag a =
            Ops::Load(k_tile + KTileOffset<D>(16 * j + KKey(lane),
                                              16 * d + KDim(lane, 0)));
        s[j] = Ops::template Mfma<kBf16>(a, q[d], s[j]);
      }
    }
  }

  // Online-softmax update with base-2 logits `s` (scaled, masked entries
  // -inf), then O^T += V^T P^T for the kN keys of a [D][VtTileStride] tile.
  RADIXKV_HOST_DEVICE void Accumulate(Acc s[kKSteps], const uint16_t* vt_tile) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kKSteps; ++j) {
#pragma unroll
      for (int i = 0; i < kItems; ++i) mx = fmaxf(mx, s[j][i]);
    }
    mx = fmaxf(mx, Ops::ShflXor(mx, kRowLaneXor0));
    mx = fmaxf(mx, Ops::ShflXor(mx, kRowLaneXor1));
    const float m_new = fmaxf(m, mx);
    const float m_ref = SoftmaxReference(m_new);
    const float alpha = Ops::Exp2(m - m_ref);
    float sum = 0.0f;
    Frag p[kKSteps];
#pragma unroll
    for (int j = 0; j < kKSteps; ++j) {
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        const float e = Ops::Exp2(s[j][i] - m_ref);
        sum += e;
        p[j][i] = static_cast<short>(Ops::template ToElem<kBf16>(e));
      }
    }
    l = l * alpha + sum;
    m = m_new;
    const int lane = Ops::LaneId();
#pragma unroll
    for (int d = 0; d < kDSteps; ++d) {
#pragma unroll
      for (int i = 0; i < kItems; ++i) o[d][i] *= alpha;
#pragma unroll
      for (int j = 0; j < kKSteps; ++j) {
        const Frag a =
            Ops::Load(vt_tile + VtTileOffset<kN>(16 * j + VKey(lane, 0),
                                                 16 * d + VDim(lane)));
        o[d] = Ops::template Mfma<kBf16>(a, p[j], o[d]);
      }
    }
  }

  // Reduces l over the 4 lanes of the row. Afterwards l is the full base-2
  // exp-sum of the row relative to m.
  RADIXKV_HOST_DEVICE void Finish() {
    l += Ops::ShflXor(l, kRowLaneXor0);
    l += Ops::ShflXor(l, kRowLaneXor1);
  }

  // After Finish(): writes the lane's D / 4 output elements of its row to
  // `out_row` (D elements, 8-byte aligned) and, from the first lane of the
  // row, the natural-log LSE to `lse` (may be null).
  RADIXKV_HOST_DEVICE void Store(uint16_t* out_row, float* lse) const {
    const int lane = Ops::LaneId();
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int d = 0; d < kDSteps; ++d) {
      uint32_t w[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const uint32_t lo = Ops::template ToElem<kBf16>(o[d][2 * i] * inv);
        const uint32_t hi = Ops::template ToElem<kBf16>(o[d][2 * i + 1] * inv);
        w[i] = lo | (hi << 16);
      }
      uint32_t* dst =
          reinterpret_cast<uint32_t*>(out_row + 16 * d + OutDim(lane, 0));
      dst[0] = w[0];
      dst[1] = w[1];
    }
    if (lane < 16 && lse != nullptr) *lse = CombineLse(m, l);
  }
};

}  // namespace radixkv::worker::gpu::mfma

// ------------------------------------------------------------- device code
#if defined(RADIXKV_GPU_AMD) && RADIXKV_HAS_MFMA

namespace radixkv::worker::gpu::mfma {

static_assert(kWarpSize == kWaveLanes, "MFMA tiles need wave64");

// WaveAttention's operations on gfx90a / gfx94x.
struct DeviceOps {
  using Frag = short __attribute__((ext_vector_type(4)));  // 4 x 16-bit
  using FragF16 = _Float16 __attribute__((ext_vector_type(4)));
  using Acc = float __attribute__((ext_vector_type(4)));  // 4 x fp32

  static __device__ __forceinline__ int LaneId() { return gpu::LaneId(); }

  static __device__ __forceinline__ float ShflXor(float v, int lane_mask) {
    return WarpShflXor(v, lane_mask);
  }

  static __device__ __forceinline__ Frag Load(const uint16_t* p) {
    return *reinterpret_cast<const Frag*>(p);
  }

  // c + a * b for one 16x16x16 tile (bf16 or fp16 operands, fp32
  // accumulate).
  template <bool kBf16>
  static __device__ __forceinline__ Acc Mfma(Frag a, Frag b, Acc c) {
    if constexpr (kBf16) {
      return __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, c, 0, 0, 0);
    } else {
      return __builtin_amdgcn_mfma_f32_16x16x16f16(
          __builtin_bit_cast(FragF16, a), __builtin_bit_cast(FragF16, b), c, 0,
          0, 0);
    }
  }

  static __device__ __forceinline__ float Exp2(float x) { return FastExp2(x); }

  template <bool kBf16>
  static __device__ __forceinline__ uint16_t ToElem(float f) {
    return kBf16 ? FloatToBf16Bits(f) : FloatToHalfBits(f);
  }
};

}  // namespace radixkv::worker::gpu::mfma

#endif  // RADIXKV_GPU_AMD && RADIXKV_HAS_MFMA
#endif  // RADIXKV_WORKER_KERNELS_HIP_ATTENTION_MFMA_H_
