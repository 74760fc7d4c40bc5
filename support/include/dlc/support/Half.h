//===- Half.h - FP16, BF16 and FP8 conversions on the host ------*- C++ -*-===//
//
// Round to nearest even, NaN kept quiet; header-only so that the compiler (IR
// constants, the reference interpreter) and the runtime (emu GEMMs) share them. The
// float8 conversions saturate as ONNX's (saturate=1) and ONNX Runtime's do; the kernel
// library's (dlc_device.cuh) compute the same bits another way, from the float's bits.
//===----------------------------------------------------------------------===//
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace dlc {

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
/// f rounded to TF32 (10-bit mantissa; to nearest, ties away: cvt.rna.tf32.f32).
inline float roundToTf32(float f);

inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float roundToTf32(float f) {
  uint32_t b = floatBits(f);
  return (b & 0x7f800000u) == 0x7f800000u ? f : bitsFloat((b + 0x1000u) & ~0x1fffu);
}

inline uint16_t floatToBF16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep it quiet and non-zero
    return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float bf16ToFloat(uint16_t b) {
  return bitsFloat(static_cast<uint32_t>(b) << 16);
}

inline uint16_t floatToHalf(float f) {
  uint32_t x = floatBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  if (absx >= 0x477ff000u) // rounds to >= 65520: overflow to inf
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (absx < 0x38800000u) { // result is subnormal or zero
    // Scale into the subnormal range with one float add; the FPU rounds to nearest even.
    float a = bitsFloat(absx) + 0.5f;
    return static_cast<uint16_t>(sign | (floatBits(a) - 0x3f000000u));
  }
  uint32_t mant_odd = (absx >> 13) & 1u;
  absx += 0xc8000fffu + mant_odd; // rebias exponent (-112 << 23) and round
  return static_cast<uint16_t>(sign | (absx >> 13));
}

inline float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31)
    return bitsFloat(sign | 0x7f800000u | (mant << 13));
  return bitsFloat(sign | ((exp + 112u) << 23) | (mant << 13));
}

/// f as float8 e4m3fn (`e5m2` false) or e5m2 bits: rounded to nearest even, finite
/// values beyond the largest (448, 57344) and infinities saturated to it with their
/// sign, NaN as 0x7f (with the sign). Computed in double from the value, not its bits.
inline uint8_t floatToF8(float f, bool e5m2) {
  const int mant = e5m2 ? 2 : 3, minExp = e5m2 ? -14 : -6; // the smallest normal's exponent
  const double maxFinite = e5m2 ? 57344.0 : 448.0;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  if (std::isnan(f))
    return static_cast<uint8_t>(sign | 0x7f);
  double a = std::fabs(static_cast<double>(f));
  if (a >= maxFinite)
    return static_cast<uint8_t>(sign | (e5m2 ? 0x7b : 0x7e));
  // The spacing of the float8 values around a: 2^(e - mant) for a in [2^e, 2^(e+1)),
  // 2^(minExp - mant) below the smallest normal.
  int e = a == 0.0 ? minExp : std::ilogb(a);
  if (e < minExp)
    e = minExp;
  const double q = std::ldexp(1.0, e - mant);
  a = std::nearbyint(a / q) * q; // exact: a / q has at most 53 bits
  if (a > maxFinite)
    a = maxFinite;
  if (a == 0.0)
    return sign;
  int ea = std::ilogb(a);
  if (ea < minExp) // subnormal: a multiple of the smallest
    return static_cast<uint8_t>(sign | static_cast<int>(a / std::ldexp(1.0, minExp - mant)));
  const int bias = e5m2 ? 15 : 7;
  const int m = static_cast<int>(std::ldexp(a, mant - ea)) - (1 << mant);
  return static_cast<uint8_t>(sign | ((ea + bias) << mant) | m);
}

/// The value of float8 bits (e4m3fn, or e5m2 with `e5m2`).
inline float f8ToFloat(uint8_t b, bool e5m2) {
  const int mant = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
  const int e = (b & 0x7f) >> mant, m = b & ((1 << mant) - 1);
  float v;
  if (!e5m2 && (b & 0x7f) == 0x7f)
    v = NAN;
  else if (e5m2 && e == 31)
    v = m ? NAN : INFINITY;
  else if (e == 0)
    v = std::ldexp(static_cast<float>(m), 1 - bias - mant);
  else
    v = std::ldexp(static_cast<float>((1 << mant) | m), e - bias - mant);
  return (b & 0x80) ? -v : v;
}

} // namespace dlc
