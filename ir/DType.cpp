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
  case DType::F8E4M3:
  case DType::F8E5M2:
    return 1;
  }
  return 0;
}

std::string_view dtypeName(DType t) {
  switch (t) {
  case DType::F32:
    return "f32";
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::F64:
    return "f64";
  case DType::I64:
    return "i64";
  case DType::I32:
    return "i32";
  case DType::I16:
    return "i16";
  case DType::I8:
    return "i8";
  case DType::U8:
    return "u8";
  case DType::U16:
    return "u16";
  case DType::U32:
    return "u32";
  case DType::U64:
    return "u64";
  case DType::Bool:
    return "bool";
  case DType::F8E4M3:
    return "f8e4m3";
  case DType::F8E5M2:
    return "f8e5m2";
  }
  return "?";
}

namespace {
/// Significand bits of a float type (integers below 2^bits are exact), and for
/// integers their value bits.
int precisionBits(DType t) {
  switch (t) {
  case DType::F64:
    return 53;
  case DType::F32:
    return 24;
  case DType::F16:
    return 11;
  case DType::BF16:
    return 8;
  case DType::Bool:
    return 1;
  default:
    return static_cast<int>(dtypeSize(t) * 8) - (isSignedInt(t) ? 1 : 0);
  }
}
} // namespace

bool castIsExact(DType from, DType to) {
  if (from == to || from == DType::Bool)
    return true;
  if (isFloat8(from)) // every float8 value is an FP16 and a BF16 value
    return isFloat(to);
  if (isFloat8(to))
    return false;
  if (isFloat(from)) // float -> float widening only (F16 and BF16 do not contain each other)
    return isFloat(to) && (to == DType::F64 || (to == DType::F32 && from != DType::F64));
  if (isFloat(to))
    return precisionBits(from) <= precisionBits(to);
  if (to == DType::Bool)
    return false;
  // int -> int: the range of `from` fits in `to`.
  if (isUnsignedInt(from))
    return precisionBits(from) <= precisionBits(to);
  return isSignedInt(to) && precisionBits(from) <= precisionBits(to);
}

std::optional<DType> parseDType(std::string_view name) {
  for (DType t : kAllDTypes)
    if (dtypeName(t) == name)
      return t;
  return std::nullopt;
}

} // namespace dlc::ir
