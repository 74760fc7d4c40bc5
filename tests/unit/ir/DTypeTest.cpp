#include "dlc/ir/Tensor.h"

#include <cmath>
#include <gtest/gtest.h>
#include <random>

using namespace dlc::ir;

TEST(DType, NamesRoundTrip) {
  for (DType t : kAllDTypes) {
    auto parsed = parseDType(dtypeName(t));
    ASSERT_TRUE(parsed.has_value()) << dtypeName(t);
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_FALSE(parseDType("f33").has_value());
  EXPECT_EQ(dtypeSize(DType::BF16), 2u);
  EXPECT_EQ(dtypeSize(DType::Bool), 1u);
}

TEST(DType, HalfRoundTripsEveryBitPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = halfToFloat(static_cast<uint16_t>(h));
    uint16_t back = floatToHalf(f);
    if (std::isnan(f))
      EXPECT_TRUE(std::isnan(halfToFloat(back))) << h;
    else
      EXPECT_EQ(back, h) << "half bits " << h;
  }
}

// The compiler's _Float16 conversion (libgcc, round to nearest even) is an independent oracle.
TEST(DType, FloatToHalfMatchesCompiler) {
  std::mt19937 rng(7);
  auto check = [](float f) {
    _Float16 ref = static_cast<_Float16>(f);
    uint16_t bits;
    std::memcpy(&bits, &ref, 2);
    if (std::isnan(f))
      EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(f))));
    else
      EXPECT_EQ(floatToHalf(f), bits) << "f=" << f;
  };
  for (float f : {0.0f, -0.0f, 1.0f, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 5.96e-8f, 2.98e-8f,
                  2.99e-8f, 6.1e-5f, INFINITY, -INFINITY, NAN})
    check(f);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    check(f);
  }
}

TEST(DType, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(floatToBF16(1.0f), 0x3F80);
  EXPECT_EQ(floatToBF16(bitsFloat(0x3F808000u)), 0x3F80); // tie -> even
  EXPECT_EQ(floatToBF16(bitsFloat(0x3F818000u)), 0x3F82); // tie -> even (up)
  EXPECT_EQ(floatToBF16(bitsFloat(0x3F808001u)), 0x3F81);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBF16(NAN))));
  EXPECT_EQ(bf16ToFloat(floatToBF16(-2.5f)), -2.5f);
}

// Float8 (e4m3fn, e5m2) against values worked out by hand from the formats (and seen
// from ONNX Runtime's QuantizeLinear with saturate=1): ties to even, subnormals,
// saturation of finite values and infinities, NaN.
TEST(DType, Float8RoundsToNearestEvenAndSaturates) {
  struct Case {
    float f;
    uint8_t e4m3, e5m2;
  };
  const Case cases[] = {
      {0.0f, 0x00, 0x00},      {-0.0f, 0x80, 0x80},
      {1.0f, 0x38, 0x3C},      {1.0625f, 0x38, 0x3C}, // e4m3: the tie 1 + 1/16 goes to the even 1.0
      {1.1875f, 0x3A, 0x3D}, // e4m3: 1.125 | 1.25 tie -> 1.25 (mantissa 2); e5m2: 1.25
      {-1.1875f, 0xBA, 0xBD},  {448.0f, 0x7E, 0x5F}, // e4m3's largest; e5m2: 1.75 * 2^8
      {464.0f, 0x7E, 0x5F},                          // e4m3: beyond the largest, saturated
      {480.0f, 0x7E, 0x60},                          // e5m2: 448 | 512 tie -> 512 (mantissa 0)
      {1e9f, 0x7E, 0x7B},                            // both saturate: 448, 57344
      {-INFINITY, 0xFE, 0xFB},                       // infinities saturate too (saturate=1)
      {0x1p-9f, 0x01, 0x18},                         // e4m3's smallest subnormal
      {0x1p-10f, 0x00, 0x14},                        // e4m3: 0 | 2^-9 tie -> 0
      {0x3p-10f, 0x02, 0x1A},                        // e4m3: 2^-9 | 2^-8 tie -> 2^-8 (subnormal 2)
      {0x1p-6f, 0x08, 0x24},                         // e4m3's smallest normal
      {0x1p-16f, 0x00, 0x01},                        // e5m2's smallest subnormal; e4m3: 0
      {0x1p-17f, 0x00, 0x00},                        // e5m2: the tie 0 | 2^-16 -> 0
      {0x3p-17f, 0x00, 0x02},                        // e5m2: 2^-16 | 2^-15 tie -> 2^-15
      {57344.0f, 0x7E, 0x7B},                        // e5m2's largest
      {61440.0f, 0x7E, 0x7B},                        // e5m2: beyond, saturated
  };
  for (const Case &c : cases) {
    EXPECT_EQ(floatToF8(c.f, false), c.e4m3) << "e4m3 " << c.f;
    EXPECT_EQ(floatToF8(c.f, true), c.e5m2) << "e5m2 " << c.f;
  }
  EXPECT_TRUE(std::isnan(f8ToFloat(floatToF8(NAN, false), false)));
  EXPECT_TRUE(std::isnan(f8ToFloat(floatToF8(NAN, true), true)));
  EXPECT_EQ(f8ToFloat(0x7E, false), 448.0f);
  EXPECT_EQ(f8ToFloat(0x01, false), 0x1p-9f);
  EXPECT_TRUE(std::isnan(f8ToFloat(0xFF, false)));
  EXPECT_EQ(f8ToFloat(0xFB, true), -57344.0f);
  EXPECT_EQ(f8ToFloat(0x7C, true), INFINITY); // e5m2 has infinities
  EXPECT_TRUE(std::isnan(f8ToFloat(0x7D, true)));
  // Every value converts back to its bits; FP16 holds them all (castIsExact).
  for (unsigned b = 0; b < 256; ++b)
    for (bool e5m2 : {false, true}) {
      const float f = f8ToFloat(static_cast<uint8_t>(b), e5m2);
      if (std::isnan(f) || std::isinf(f))
        continue;
      EXPECT_EQ(floatToF8(f, e5m2), b) << b << (e5m2 ? " e5m2" : " e4m3");
      EXPECT_EQ(halfToFloat(floatToHalf(f)), f);
    }
  EXPECT_TRUE(castIsExact(DType::F8E4M3, DType::F16));
  EXPECT_TRUE(castIsExact(DType::F8E5M2, DType::BF16));
  EXPECT_FALSE(castIsExact(DType::F16, DType::F8E4M3));
  EXPECT_FALSE(isFloat(DType::F8E4M3)); // storage only: no arithmetic op takes it
}

TEST(Tensor, ConversionsSaturateAndRound) {
  Tensor t = Tensor::fromVector<double>(TensorType(DType::I8, {4}), {300.0, -300.0, NAN, -1.7});
  EXPECT_EQ(t.getInt(0), 127);
  EXPECT_EQ(t.getInt(1), -128);
  EXPECT_EQ(t.getInt(2), 0);
  EXPECT_EQ(t.getInt(3), -1);
  Tensor h = Tensor::fromVector<float>(TensorType(DType::F16, {1}), {0.1f});
  EXPECT_FLOAT_EQ(h.getDouble(0), halfToFloat(floatToHalf(0.1f)));
  Tensor u = Tensor::fromVector<uint64_t>(TensorType(DType::U64, {1}), {~uint64_t{0}});
  EXPECT_EQ(u.toVector<uint64_t>()[0], ~uint64_t{0});
}

TEST(Tensor, CopyOnWrite) {
  Tensor a = Tensor::fromVector<float>(TensorType(DType::F32, {2}), {1, 2});
  Tensor b = a;
  b.mutableData<float>()[0] = 5;
  EXPECT_EQ(a.data<float>()[0], 1);
  EXPECT_EQ(b.data<float>()[0], 5);
}

TEST(TensorType, CheckedElementCountDetectsOverflow) {
  EXPECT_EQ(TensorType(DType::F32, {2, 3}).checkedNumElements(), 6);
  EXPECT_FALSE(TensorType(DType::F32, {int64_t{1} << 40, int64_t{1} << 40}).checkedNumElements());
  EXPECT_FALSE(TensorType(DType::F32, {-1}).checkedNumElements());
  EXPECT_EQ(TensorType(DType::F32, {}).checkedNumElements(), 1);
}
