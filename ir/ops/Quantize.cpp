//===- Quantize.cpp - Conversions between element types ---------------------===//
//
// Cast, and ONNX's quantization ops, element-wise in the Elementwise family, per tensor or per
// axis, to and from u8/i8 (with a zero point) and float8 e4m3fn/e5m2 (without, as
// quantization tools write them: its zero point is 0): the importer gives a per-axis scale and zero
// point the shape that broadcasts along the axis. MulAdd is FP32's fused multiply-add, one
// rounding, as ONNX Runtime's QLinearAdd kernel requantizes with it. matMulNBitsWeights dequantizes
// the packed weights of MatMulNBits (Linalg.cpp) for its reference and for the importer.
//===----------------------------------------------------------------------===//
#include "OpUtils.h"
#include "dlc/ir/OpHelpers.h"

#include <cmath>

namespace dlc::ir {
namespace {
using namespace ops;

/// The quantized types: integers with a zero point, float8 without one.
bool quantizedType(DType t) {
  return t == DType::U8 || t == DType::I8 || isFloat8(t);
}

/// The scale and zero point broadcast to operand 0's shape (per tensor, or along an
/// axis as the importer reshapes them).
llvm::Error scaleBroadcastsToInput(const Node &n) {
  auto s = broadcastOperands(n);
  if (!s)
    return s.takeError();
  if (*s != n.operand(0)->shape())
    return errorf("the scale and zero point do not broadcast to the input {0}",
                  shapeStr(n.operand(0)->shape()));
  return ok();
}

llvm::Error verifyQuantizeLinear(const Node &n) {
  auto to = parseDType(n.attrString("to"));
  if (!to || !quantizedType(*to))
    return errorf("attribute 'to' must be u8, i8, f8e4m3 or f8e5m2, got \"{0}\"",
                  n.attrString("to"));
  if (auto e = requireType(n, 0, kFloat))
    return e;
  if (auto e = requireType(n, 1, kFloat))
    return e;
  if (const Value *zp = n.operand(2)) {
    if (isFloat8(*to))
      return errorf("a float8 result has no zero point");
    if (zp->dtype() != *to)
      return errorf("the zero point is {0}, the result {1}", dtypeName(zp->dtype()),
                    dtypeName(*to));
  }
  return scaleBroadcastsToInput(n);
}

InferResult inferQuantizeLinear(const Node &n) {
  return TypeList{{*parseDType(n.attrString("to")), n.operand(0)->shape()}};
}

/// saturate(round_half_even(x / scale) + zero_point), or x * scale with `multiply` (a
/// requantization: the scale is ONNX Runtime's multiplier), in FP32 as ONNX Runtime
/// computes it; NaN gives the lowest value. To float8: x / scale, rounded to nearest
/// even and saturated as the float8 result stores it (Half.h: floatToF8).
llvm::Error refQuantizeLinear(const Node &n, const Inputs &in, Outputs &out) {
  const bool multiply = n.attrInt("multiply") != 0;
  if (isFloat8(out[0].dtype())) {
    auto x = in[0]->toVector<float>(), s = in[1]->toVector<float>();
    BroadcastIndex is(in[1]->shape(), out[0].shape());
    for (size_t i = 0; i < x.size(); ++i) {
      const float sc = s[static_cast<size_t>(is(static_cast<int64_t>(i)))];
      x[i] = multiply ? x[i] * sc : x[i] / sc;
    }
    out[0] = Tensor::fromVector(out[0].type(), x);
    return ok();
  }
  const bool u8 = out[0].dtype() == DType::U8;
  const float lo = u8 ? 0.0f : -128.0f, hi = u8 ? 255.0f : 127.0f;
  const Shape &os = out[0].shape();
  auto x = in[0]->toVector<float>(), s = in[1]->toVector<float>();
  std::vector<float> zp = in.size() > 2 && in[2] ? in[2]->toVector<float>() : std::vector<float>{};
  BroadcastIndex is(in[1]->shape(), os), iz(zp.empty() ? os : in[2]->shape(), os);
  std::vector<float> q(x.size());
  for (size_t i = 0; i < q.size(); ++i) {
    const size_t j = static_cast<size_t>(is(static_cast<int64_t>(i)));
    const float z = zp.empty() ? 0.0f : zp[static_cast<size_t>(iz(static_cast<int64_t>(i)))];
    const float v = std::nearbyint(multiply ? x[i] * s[j] : x[i] / s[j]) + z;
    q[i] = v >= lo ? (v <= hi ? v : hi) : lo;
  }
  out[0] = Tensor::fromVector(out[0].type(), q);
  return ok();
}

llvm::Error verifyDequantizeLinear(const Node &n) {
  const DType t = n.operand(0)->dtype();
  if (!quantizedType(t) && t != DType::I32)
    return errorf("operand 0 must be u8, i8, i32, f8e4m3 or f8e5m2, got {0}", dtypeName(t));
  if (auto e = requireType(n, 1, kFloat))
    return e;
  if (n.operand(2) && isFloat8(t))
    return errorf("a float8 operand has no zero point");
  if (n.operand(2))
    if (auto e = requireSameType(n, 0, 2))
      return e;
  return scaleBroadcastsToInput(n);
}

InferResult inferDequantizeLinear(const Node &n) {
  return TypeList{{n.operand(1)->dtype(), n.operand(0)->shape()}};
}

/// (x - zero_point) in integers, times the scale in FP32, rounded once to the result;
/// a float8 x's value times the scale.
llvm::Error refDequantizeLinear(const Node &, const Inputs &in, Outputs &out) {
  const Shape &os = out[0].shape();
  if (isFloat8(in[0]->dtype())) {
    auto x = in[0]->toVector<float>(), s = in[1]->toVector<float>();
    BroadcastIndex is(in[1]->shape(), os);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] *= s[static_cast<size_t>(is(static_cast<int64_t>(i)))];
    out[0] = Tensor::fromVector(out[0].type(), x);
    return ok();
  }
  auto x = in[0]->toVector<int64_t>();
  auto s = in[1]->toVector<float>();
  std::vector<int64_t> zp =
      in.size() > 2 && in[2] ? in[2]->toVector<int64_t>() : std::vector<int64_t>{};
  BroadcastIndex is(in[1]->shape(), os), iz(zp.empty() ? os : in[2]->shape(), os);
  std::vector<float> y(x.size());
  for (size_t i = 0; i < y.size(); ++i) {
    const size_t j = static_cast<size_t>(is(static_cast<int64_t>(i)));
    const int64_t z = zp.empty() ? 0 : zp[static_cast<size_t>(iz(static_cast<int64_t>(i)))];
    y[i] = static_cast<float>(x[i] - z) * s[j];
  }
  out[0] = Tensor::fromVector(out[0].type(), y);
  return ok();
}

llvm::Error verifyCast(const Node &n) {
  if (!parseDType(n.attrString("to")))
    return errorf("attribute 'to' is not an element type: \"{0}\"", n.attrString("to"));
  return ok();
}

InferResult inferCast(const Node &n) {
  return TypeList{{*parseDType(n.attrString("to")), n.operand(0)->shape()}};
}

llvm::Error refCast(const Node &, const Inputs &in, Outputs &out) {
  DType from = in[0]->dtype(), to = out[0].dtype();
  int64_t n = in[0]->numElements();
  void *dst = out[0].mutableRaw();
  // Convert through the widest type that represents the source exactly.
  for (int64_t i = 0; i < n; ++i) {
    if (isFloat(from) || isFloat8(from)) {
      double v = loadElement<double>(from, in[0]->raw(), i);
      if (isReducedFloat(to) || isFloat8(to)) // round once, from float32 when the source is
        storeElement<float>(to, dst, i, static_cast<float>(v));
      else
        storeElement<double>(to, dst, i, v);
    } else if (isUnsignedInt(from) || from == DType::Bool) {
      storeElement<uint64_t>(to, dst, i, loadElement<uint64_t>(from, in[0]->raw(), i));
    } else {
      storeElement<int64_t>(to, dst, i, loadElement<int64_t>(from, in[0]->raw(), i));
    }
  }
  return ok();
}

llvm::Error verifyMulAdd(const Node &n) {
  for (unsigned i = 0; i < 3; ++i)
    if (n.operand(i)->dtype() != DType::F32)
      return errorf("operand {0} must be f32, got {1}", i, dtypeName(n.operand(i)->dtype()));
  return ok();
}

InferResult inferMulAdd(const Node &n) {
  auto s = broadcastOperands(n);
  if (!s)
    return s.takeError();
  return TypeList{{DType::F32, *s}};
}

/// a * b + c with one rounding (std::fma is exact before it).
llvm::Error refMulAdd(const Node &, const Inputs &in, Outputs &out) {
  const Shape &os = out[0].shape();
  auto a = in[0]->toVector<float>(), b = in[1]->toVector<float>(), c = in[2]->toVector<float>();
  BroadcastIndex ia(in[0]->shape(), os), ib(in[1]->shape(), os), ic(in[2]->shape(), os);
  std::vector<float> r(out[0].numElements());
  for (size_t i = 0; i < r.size(); ++i)
    r[i] = std::fma(a[ia(i)], b[ib(i)], c[ic(i)]);
  out[0] = Tensor::fromVector(out[0].type(), r);
  return ok();
}

} // namespace

std::vector<float> matMulNBitsWeights(const Tensor &b, const Tensor &scales,
                                      const Tensor *zeroPoints, int64_t K, int64_t N, int64_t bits,
                                      int64_t block) {
  const int64_t blocks = (K + block - 1) / block, blob = block * bits / 8,
                zpBytes = (blocks * bits + 7) / 8, mask = (int64_t{1} << bits) - 1;
  const auto *q = static_cast<const uint8_t *>(b.raw());
  const auto *z = zeroPoints ? static_cast<const uint8_t *>(zeroPoints->raw()) : nullptr;
  const std::vector<float> scale = scales.toVector<float>();
  // (Bits at offset `bit` of a packed row.)
  auto field = [&](const uint8_t *row, int64_t bit) {
    return static_cast<int64_t>(row[bit / 8] >> (bit % 8)) & mask;
  };
  std::vector<float> w(static_cast<size_t>(K * N));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t kb = 0; kb < blocks; ++kb) {
      const int64_t zero = z ? field(z + n * zpBytes, kb * bits) : int64_t{1} << (bits - 1);
      const float s = scale[static_cast<size_t>(n * blocks + kb)];
      const uint8_t *row = q + (n * blocks + kb) * blob;
      for (int64_t i = 0; i < block && kb * block + i < K; ++i)
        w[static_cast<size_t>((kb * block + i) * N + n)] =
            static_cast<float>(field(row, i * bits) - zero) * s;
    }
  return w;
}

void defineConversionOps(OpTable &t) {
  using FP = Fp16Policy;
  t.def(OpKind::Cast)
      .cudaExpr("$0")
      .operands(1)
      .attr("to", AttrKind::String)
      .fusible(Fusibility::elementwise())
      .fp16(FP::Convert)
      .layout(LayoutRule::agnostic())
      .verify(verifyCast)
      .infer(inferCast)
      .reference(refCast);
  t.def(OpKind::QuantizeLinear)
      .cudaExpr("dlc::quantize_($0, $1, $2?, ${to}, ${multiply})")
      .operands(2, 3)
      .attr("to", AttrKind::String, "u8")
      .attr("multiply", AttrKind::Int, int64_t{0})
      .fusible(Fusibility::elementwise())
      .fp16(FP::Deny) // the scale in FP32, as the file gives it
      .fp32Operands(0b110)
      .layout(LayoutRule::agnostic())
      .verify(verifyQuantizeLinear)
      .infer(inferQuantizeLinear)
      .reference(refQuantizeLinear);
  t.def(OpKind::DequantizeLinear)
      .cudaExpr("dlc::dequantize_($0, $1, $2?)")
      .operands(2, 3)
      .fusible(Fusibility::elementwise())
      .fp16(FP::Deny)
      .fp32Operands(0b110)
      .layout(LayoutRule::agnostic())
      .verify(verifyDequantizeLinear)
      .infer(inferDequantizeLinear)
      .reference(refDequantizeLinear);
  t.def(OpKind::MulAdd)
      .cudaExpr("fmaf($0, $1, $2)")
      .operands(3)
      .fusible(Fusibility::elementwise())
      .fp16(FP::Deny)      // one FP32 rounding is its point
      .fp32Operands(0b010) // (operand 1: a requantization's multiplier, FP32 too)
      .layout(LayoutRule::agnostic())
      .verify(verifyMulAdd)
      .infer(inferMulAdd)
      .reference(refMulAdd);
}

} // namespace dlc::ir
