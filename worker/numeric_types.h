// Element types of the paged KV pool and their conversions to and from fp32.
//
// Header-only and usable from host C++ and from HIP/CUDA device code
// (nvcc/hipcc): no Abseil, no std containers, only RADIXKV_HOST_DEVICE inline
// functions. The pool stores K/V in one of three dtypes; every kernel
// converts to fp32 on load and accumulates in fp32.
//
// Rounding: fp32 -> bf16 and fp32 -> fp16 round to nearest, ties to even
// (IEEE 754 default); NaN stays NaN, overflow becomes +-inf, fp16 subnormals
// are produced and read exactly.
#ifndef RADIXKV_WORKER_NUMERIC_TYPES_H_
#define RADIXKV_WORKER_NUMERIC_TYPES_H_

#include <stdint.h>
#include <string.h>

// Marks a function callable from both host and device code. Empty for a plain
// host compiler; `__host__ __device__` under nvcc or hipcc.
#ifndef RADIXKV_HOST_DEVICE
#if defined(__CUDACC__) || defined(__HIPCC__)
#define RADIXKV_HOST_DEVICE __host__ __device__
#else
#define RADIXKV_HOST_DEVICE
#endif
#endif

namespace radixkv::worker {

// Storage dtype of the KV pool. Activations handed to kernels are always fp32.
enum class DType : int {
  kF32 = 0,   // IEEE binary32, 4 bytes
  kBF16 = 1,  // bfloat16 (8-bit exponent, 7-bit mantissa), 2 bytes
  kF16 = 2,   // IEEE binary16 (5-bit exponent, 10-bit mantissa), 2 bytes
};

// Size in bytes of one element of `dtype` (4, 2 or 2).
RADIXKV_HOST_DEVICE inline constexpr int32_t DTypeBytes(DType dtype) {
  return dtype == DType::kF32 ? 4 : 2;
}

// Human-readable name: "f32", "bf16", "f16".
RADIXKV_HOST_DEVICE inline constexpr const char* DTypeName(DType dtype) {
  return dtype == DType::kF32 ? "f32"
                              : (dtype == DType::kBF16 ? "bf16" : "f16");
}

// bfloat16 storage: the upper 16 bits of an IEEE binary32.
struct bf16_t {
  uint16_t bits;
};

// IEEE binary16 storage.
struct fp16_t {
  uint16_t bits;
};

// Bit pattern of a float and back (no aliasing UB on host or device).
RADIXKV_HOST_DEVICE inline uint32_t FloatToBits(float f) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

RADIXKV_HOST_DEVICE inline float BitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// bf16 -> fp32: exact (shift into the high half).
RADIXKV_HOST_DEVICE inline float Bf16ToFloat(bf16_t x) {
  return BitsToFloat(static_cast<uint32_t>(x.bits) << 16);
}

// fp32 -> bf16, round to nearest even; NaN is kept quiet NaN.
RADIXKV_HOST_DEVICE inline bf16_t FloatToBf16(float f) {
  uint32_t u = FloatToBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign, force quiet bit.
    return bf16_t{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  }
  const uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return bf16_t{static_cast<uint16_t>((u + rounding_bias) >> 16)};
}

// fp16 -> fp32: exact, including subnormals, infinities and NaN.
RADIXKV_HOST_DEVICE inline float Fp16ToFloat(fp16_t x) {
  const uint32_t sign = static_cast<uint32_t>(x.bits & 0x8000u) << 16;
  const uint32_t exp = (x.bits >> 10) & 0x1fu;
  const uint32_t mant = x.bits & 0x3ffu;
  if (exp == 0x1fu) {  // inf / NaN
    return BitsToFloat(sign | 0x7f800000u | (mant << 13));
  }
  if (exp == 0) {
    // Zero or subnormal: value = mant * 2^-24, exactly representable in fp32.
    const float magnitude = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return BitsToFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

// fp32 -> fp16, round to nearest even; overflow -> +-inf; results below the
// smallest subnormal round to +-0; NaN -> quiet NaN.
RADIXKV_HOST_DEVICE inline fp16_t FloatToFp16(float f) {
  const uint32_t u = FloatToBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return fp16_t{static_cast<uint16_t>(sign | 0x7e00u)};
  if (abs >= 0x477ff000u) {
    // >= 65520 (halfway between 65504 and 65536) rounds to inf; also inf.
    return fp16_t{static_cast<uint16_t>(sign | 0x7c00u)};
  }
  if (abs < 0x38800000u) {
    // Below 2^-14: subnormal half (or zero). value / 2^-24 rounded to even.
    // abs < 2^-25 -> 0 (2^-25 exactly ties to even 0).
    if (abs <= 0x33000000u) return fp16_t{sign};
    const uint32_t exp = abs >> 23;                       // 102..112
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;  // 24-bit
    const uint32_t shift = 126u - exp;                    // 14..24
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return fp16_t{static_cast<uint16_t>(sign | half)};
  }
  // Normal: rebias exponent 127 -> 15 and round the 13 dropped bits to even.
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry to inf
  return fp16_t{static_cast<uint16_t>(sign | h)};
}

// Generic conversions used by templated kernels: ToFloat(T) / FromFloat<T>.
RADIXKV_HOST_DEVICE inline float ToFloat(float x) { return x; }
RADIXKV_HOST_DEVICE inline float ToFloat(bf16_t x) { return Bf16ToFloat(x); }
RADIXKV_HOST_DEVICE inline float ToFloat(fp16_t x) { return Fp16ToFloat(x); }

template <typename T>
RADIXKV_HOST_DEVICE inline T FromFloat(float x);
template <>
RADIXKV_HOST_DEVICE inline float FromFloat<float>(float x) {
  return x;
}
template <>
RADIXKV_HOST_DEVICE inline bf16_t FromFloat<bf16_t>(float x) {
  return FloatToBf16(x);
}
template <>
RADIXKV_HOST_DEVICE inline fp16_t FromFloat<fp16_t>(float x) {
  return FloatToFp16(x);
}

}  // namespace radixkv::worker

#endif  // RADIXKV_WORKER_NUMERIC_TYPES_H_
