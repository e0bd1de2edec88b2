#include "worker/numeric_types.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace radixkv::worker {
namespace {

// float64 reference of round-to-nearest-even onto a grid with `mant_bits`
// explicit mantissa bits and minimum normal exponent `min_exp`.
double RoundToGrid(double x, int mant_bits, int min_exp) {
  if (x == 0) return x;
  int e;
  std::frexp(x, &e);  // x = f * 2^e, 0.5 <= |f| < 1
  const int exp = std::max(e - 1, min_exp);
  const double ulp = std::ldexp(1.0, exp - mant_bits);
  return std::nearbyint(x / ulp) * ulp;  // default rounding mode: to even
}

TEST(NumericTypesTest, DTypeBytesAndNames) {
  EXPECT_EQ(DTypeBytes(DType::kF32), 4);
  EXPECT_EQ(DTypeBytes(DType::kBF16), 2);
  EXPECT_EQ(DTypeBytes(DType::kF16), 2);
  EXPECT_STREQ(DTypeName(DType::kBF16), "bf16");
}

TEST(NumericTypesTest, Bf16KnownValuesAndTiesToEven) {
  EXPECT_EQ(FloatToBf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(FloatToBf16(-2.0f).bits, 0xc000);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f).bits, 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(FloatToBf16(1.0f + 3 * 0x1p-8f).bits, 0x3f82);
  EXPECT_EQ(Bf16ToFloat(bf16_t{0x3f82}), 1.015625f);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(INFINITY)), INFINITY);
}

TEST(NumericTypesTest, Fp16KnownValues) {
  EXPECT_EQ(FloatToFp16(1.0f).bits, 0x3c00);
  EXPECT_EQ(FloatToFp16(-2.0f).bits, 0xc000);
  EXPECT_EQ(FloatToFp16(65504.0f).bits, 0x7bff);
  EXPECT_EQ(FloatToFp16(65520.0f).bits, 0x7c00);  // ties to even -> inf
  EXPECT_EQ(FloatToFp16(65519.0f).bits, 0x7bff);
  EXPECT_EQ(FloatToFp16(0x1p-24f).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToFp16(0x1p-25f).bits, 0x0000);  // tie to even 0
  EXPECT_EQ(FloatToFp16(0x1.8p-25f).bits, 0x0001);
  EXPECT_EQ(Fp16ToFloat(fp16_t{0x0001}), 0x1p-24f);
  EXPECT_EQ(Fp16ToFloat(fp16_t{0x7c00}), INFINITY);
  EXPECT_TRUE(std::isnan(Fp16ToFloat(FloatToFp16(std::nanf("")))));
}

// Every finite fp16 bit pattern survives fp16 -> fp32 -> fp16 exactly.
TEST(NumericTypesTest, Fp16RoundTripsAllPatterns) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const fp16_t h{static_cast<uint16_t>(b)};
    if ((b & 0x7c00) == 0x7c00 && (b & 0x3ff)) continue;  // NaN payloads
    ASSERT_EQ(FloatToFp16(Fp16ToFloat(h)).bits, h.bits) << b;
  }
}

// Random floats over a wide exponent range round exactly as float64 RNE onto
// the bf16 / fp16 grids.
TEST(NumericTypesTest, RandomValuesRoundToNearestEven) {
  std::mt19937_64 rng(20261129);
  std::uniform_real_distribution<double> mant(-2.0, 2.0);
  std::uniform_int_distribution<int> exp(-30, 20);
  for (int i = 0; i < 200000; ++i) {
    const float x = static_cast<float>(std::ldexp(mant(rng), exp(rng)));
    ASSERT_EQ(Bf16ToFloat(FloatToBf16(x)),
              static_cast<float>(RoundToGrid(x, 7, -126)))
        << x;
    const double r16 = RoundToGrid(x, 10, -14);
    const float expect16 = std::fabs(r16) >= 65520.0
                               ? std::copysign(INFINITY, x)
                               : static_cast<float>(r16);
    ASSERT_EQ(Fp16ToFloat(FloatToFp16(x)), expect16) << x;
  }
}

}  // namespace
}  // namespace radixkv::worker
