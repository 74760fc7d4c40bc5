//===- DType.h - Element types of the IR ------------------------*- C++ -*-===//
#pragma once

#include "dlc/support/Half.h"

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace dlc::ir {

/// Element types, in the order of the package format's DType (and the C API's
/// dlc_dtype): new types go at the end of all three.
enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  F64,
  I64,
  I32,
  I16,
  I8,
  U8,
  U16,
  U32,
  U64,
  Bool,
  F8E4M3, ///< float8 e4m3fn: 4 exponent bits, 3 mantissa bits, no infinity, max 448
  F8E5M2, ///< float8 e5m2: 5 exponent bits, 2 mantissa bits, max 57344
};

inline constexpr DType kAllDTypes[] = {DType::F32,  DType::F16,    DType::BF16,  DType::F64,
                                       DType::I64,  DType::I32,    DType::I16,   DType::I8,
                                       DType::U8,   DType::U16,    DType::U32,   DType::U64,
                                       DType::Bool, DType::F8E4M3, DType::F8E5M2};

size_t dtypeSize(DType t);
/// Short name used by the textual IR: f32, f16, bf16, f64, i64, ..., bool.
std::string_view dtypeName(DType t);
std::optional<DType> parseDType(std::string_view name);

/// The float8 types: storage only, in QuantizeLinear, DequantizeLinear, Cast and the
/// ops that move values; they compute in FP32.
inline bool isFloat8(DType t) {
  return t == DType::F8E4M3 || t == DType::F8E5M2;
}
inline bool isFloat(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
}
inline bool isSignedInt(DType t) {
  return t == DType::I64 || t == DType::I32 || t == DType::I16 || t == DType::I8;
}
inline bool isUnsignedInt(DType t) {
  return t == DType::U8 || t == DType::U16 || t == DType::U32 || t == DType::U64;
}
inline bool isInt(DType t) {
  return isSignedInt(t) || isUnsignedInt(t);
}
inline bool isNumeric(DType t) {
  return isFloat(t) || isInt(t);
}
/// FP16 or BF16.
inline bool isReducedFloat(DType t) {
  return t == DType::F16 || t == DType::BF16;
}
/// The type a long sum of t-typed values accumulates in: FP32 for FP16/BF16, t itself
/// otherwise.
inline DType sumType(DType t) {
  return isReducedFloat(t) ? DType::F32 : t;
}
/// Whether every value of `from` converts to `to` and back unchanged.
bool castIsExact(DType from, DType to);

// 16-bit floating point conversions (dlc/support/Half.h: the runtime uses them too).
using dlc::bf16ToFloat;
using dlc::bitsFloat;
using dlc::f8ToFloat;
using dlc::floatBits;
using dlc::floatToBF16;
using dlc::floatToF8;
using dlc::floatToHalf;
using dlc::halfToFloat;

} // namespace dlc::ir
