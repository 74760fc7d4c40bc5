//===- Half.h - FP16 and BF16 conversions on the host -----------*- C++ -*-===//
//
// Round to nearest even, NaN kept quiet; header-only so that the compiler (IR
// constants, the reference interpreter) and the runtime (emu GEMMs) share them.
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

} // namespace dlc
