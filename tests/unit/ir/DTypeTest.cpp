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
