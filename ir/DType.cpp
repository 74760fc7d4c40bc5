#include "dlc/ir/DType.h"

#include <cmath>

namespace dlc::ir {

size_t dtypeSize(DType t) {
  switch (t) {
  case DType::F64:
  case DType::I64:
  case DType::U64:
    return 8;
  case DType::F32:
  case DType::I32:
  case DType::U32:
    return 4;
  case DType::F16:
  case DType::BF16:
  case DType::I16:
  case DType::U16:
    return 2;
  case DType::I8:
  case DType::U8:
  case DType::Bool:
    return 1;
  }
  return 0;
}

std::string_view dtypeName(DType t) {
  switch (t) {
  case DType::F32: return "f32";
  case DType::F16: return "f16";
  case DType::BF16: return "bf16";
  case DType::F64: return "f64";
  case DType::I64: return "i64";
  case DType::I32: return "i32";
  case DType::I16: return "i16";
  case DType::I8: return "i8";
  case DType::U8: return "u8";
  case DType::U16: return "u16";
  case DType::U32: return "u32";
  case DType::U64: return "u64";
  case DType::Bool: return "bool";
  }
  return "?";
}

std::optional<DType> parseDType(std::string_view name) {
  for (DType t : kAllDTypes)
    if (dtypeName(t) == name)
      return t;
  return std::nullopt;
}

uint16_t floatToHalf(float f) {
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

float halfToFloat(uint16_t h) {
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

} // namespace dlc::ir
