//===- QLinearHandlers.cpp - com.microsoft quantized element-wise ops -----===//
//
// ONNX Runtime's QLinearAdd, QLinearMul, QLinearConcat and QLinearGlobalAveragePool
// (u8 or i8, per-tensor scales), built from the IR's integer and FP32 element-wise ops
// in the order ONNX Runtime's x86-64 CPU kernels (MLAS) compute them, so that the
// results agree bit for bit:
//  - QLinearAdd: ratios rA = sA / sC and rB = sB / sC, the zero points folded into
//    one constant F = zC - fma(rX, zX, rY * zY), and y = sat(round_half_even(
//    fma(x, rX, fma(y, rY, F)))) on the raw values, with X the operand that varies
//    along the innermost broadcast dimension (A unless A alone is constant along it):
//    MLAS's AVX2 kernel as the Linux build contracts it;
//  - QLinearMul: the exact int32 product (a - zA)(b - zB), times sA * sB / sC in
//    FP32, plus zC, rounded half to even, saturated;
//  - QLinearConcat: each input dequantized ((x - zX) * sX) and quantized at the
//    output's scale (a division, rounding half to even), a copy where the scale and
//    zero point are the output's;
//  - QLinearGlobalAveragePool: the exact int32 sum minus zX * N, times sX / (sY * N)
//    in FP32, rounded half to even, plus zY, saturated.
// The quantized results are QuantizeLinear with `multiply` (x * scale, rounded, plus
// the zero point, saturated).
//===----------------------------------------------------------------------===//
#include "Common.h"

namespace dlc::frontend {
namespace {

using namespace ir;

/// A quantized tensor operand: u8 or i8.
llvm::Error requireQuantized(NodeImporter &ni, const Value *v, const char *what) {
  if (v->dtype() != DType::U8 && v->dtype() != DType::I8)
    return ni.error(std::string(what) + " must be u8 or i8, got " + v->type().str());
  return llvm::Error::success();
}

/// A per-tensor scale: one f32 value.
llvm::Error requireScale(NodeImporter &ni, const Value *v, const char *what) {
  if (v->dtype() != DType::F32 || v->type().numElements() != 1)
    return ni.error(std::string(what) + " must be one f32 value, got " + v->type().str());
  return llvm::Error::success();
}

/// A zero point of `type`, one value ([] shape; absent: 0).
llvm::Expected<Value *> zeroPoint(NodeImporter &ni, Value *zp, DType type, const char *what) {
  if (!zp)
    return ni.constant(Tensor::fromVector(TensorType(type, {}), std::vector<int64_t>{0}));
  if (zp->dtype() != type || zp->type().numElements() != 1)
    return ni.error(std::string(what) + " must be one " + std::string(dtypeName(type)) +
                    " value, got " + zp->type().str());
  return ni.op(OpKind::Reshape, {zp}, {{"shape", Attribute(Shape{})}});
}

/// Input i, a per-tensor scale, as one value of shape [] (a [1] or [1, 1] scale must
/// not broadcast the result to its rank).
llvm::Expected<Value *> scaleInput(NodeImporter &ni, size_t i, const char *what) {
  Value *v = ni.input(i);
  if (auto e = requireScale(ni, v, what))
    return e;
  return ni.op(OpKind::Reshape, {v}, {{"shape", Attribute(Shape{})}});
}

llvm::Expected<Value *> cast(NodeImporter &ni, Value *v, const char *to) {
  return ni.op(OpKind::Cast, {v}, {{"to", Attribute(std::string(to))}});
}

/// The zero point as FP32.
llvm::Expected<Value *> zeroPointF32(NodeImporter &ni, Value *zp, DType type, const char *what) {
  DLC_TRY(z, zeroPoint(ni, zp, type, what));
  return cast(ni, z, "f32");
}

/// The inputs a QLinearAdd/QLinearMul needs (its zero points are optional): A and B of
/// one quantized type, three per-tensor scales.
llvm::Error checkBinary(NodeImporter &ni) {
  for (size_t i : {3, 4, 6})
    if (!ni.input(i))
      return ni.error("input " + std::to_string(i) + " is missing");
  Value *a = ni.input(0), *b = ni.input(3);
  if (auto e = requireQuantized(ni, a, "A"))
    return e;
  if (b->dtype() != a->dtype())
    return ni.error("A and B must have one type, got " + a->type().str() + " and " +
                    b->type().str());
  for (auto [i, what] : {std::pair{1, "A_scale"}, {4, "B_scale"}, {6, "C_scale"}})
    if (auto e = requireScale(ni, ni.input(static_cast<size_t>(i)), what))
      return e;
  return llvm::Error::success();
}

/// sat(round_half_even(v)) as `type`: QuantizeLinear of v times 1.
llvm::Expected<Value *> roundTo(NodeImporter &ni, Value *v, Value *scale, Value *zp, DType type) {
  std::vector<Value *> ops{v, scale};
  if (zp)
    ops.push_back(zp);
  return ni.op(
      OpKind::QuantizeLinear, ops,
      {{"to", Attribute(std::string(dtypeName(type)))}, {"multiply", Attribute(int64_t{1})}});
}

/// Whether `a` is constant along the innermost dimension of the broadcast of a and b
/// where the result varies (ONNX Runtime's "input 0 is a scalar" span), while b is
/// not.
bool constantInnermost(const Shape &a, const Shape &b) {
  const size_t r = std::max(a.size(), b.size());
  auto dim = [&](const Shape &s, size_t i) { // i counts from the innermost
    return i < s.size() ? s[s.size() - 1 - i] : int64_t{1};
  };
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = dim(a, i), db = dim(b, i);
    if (da == 1 && db == 1)
      continue;
    return da == 1 && db != 1;
  }
  return false;
}

/// QLinearAdd(A, A_scale, A_zp?, B, B_scale, B_zp?, C_scale, C_zp?).
llvm::Error importQLinearAdd(NodeImporter &ni) {
  if (auto e = checkBinary(ni))
    return e;
  Value *a = ni.input(0), *b = ni.input(3);
  const DType t = a->dtype();
  DLC_TRY(za, zeroPointF32(ni, ni.input(2), t, "A_zero_point"));
  DLC_TRY(zb, zeroPointF32(ni, ni.input(5), t, "B_zero_point"));
  DLC_TRY(zc, zeroPointF32(ni, ni.input(7), t, "C_zero_point"));
  DLC_TRY(sa, scaleInput(ni, 1, "A_scale"));
  DLC_TRY(sb, scaleInput(ni, 4, "B_scale"));
  DLC_TRY(sc, scaleInput(ni, 6, "C_scale"));
  DLC_TRY(ra, ni.op(OpKind::Div, {sa, sc}));
  DLC_TRY(rb, ni.op(OpKind::Div, {sb, sc}));
  // X varies along the innermost dimension: B where A alone is constant along it.
  const bool swap = constantInnermost(a->shape(), b->shape());
  Value *x = swap ? b : a, *y = swap ? a : b, *rx = swap ? rb : ra, *ry = swap ? ra : rb,
        *zx = swap ? zb : za, *zy = swap ? za : zb;
  DLC_TRY(ryzy, ni.op(OpKind::Mul, {ry, zy}));
  DLC_TRY(folded, ni.op(OpKind::MulAdd, {zx, rx, ryzy})); // (fma(rX, zX, .) exactly)
  DLC_TRY(fixed, ni.op(OpKind::Sub, {zc, folded}));
  DLC_TRY(xf, cast(ni, x, "f32"));
  DLC_TRY(yf, cast(ni, y, "f32"));
  DLC_TRY(inner, ni.op(OpKind::MulAdd, {yf, ry, fixed}));
  DLC_TRY(v, ni.op(OpKind::MulAdd, {xf, rx, inner}));
  return single(ni, roundTo(ni, v, ni.scalar(DType::F32, 1.0), nullptr, t));
}

/// QLinearMul(A, A_scale, A_zp?, B, B_scale, B_zp?, C_scale, C_zp?).
llvm::Error importQLinearMul(NodeImporter &ni) {
  if (auto e = checkBinary(ni))
    return e;
  const DType t = ni.input(0)->dtype();
  DLC_TRY(za, zeroPoint(ni, ni.input(2), t, "A_zero_point"));
  DLC_TRY(zb, zeroPoint(ni, ni.input(5), t, "B_zero_point"));
  DLC_TRY(ac, centered(ni, ni.input(0), za));
  DLC_TRY(bc, centered(ni, ni.input(3), zb));
  DLC_TRY(prod, ni.op(OpKind::Mul, {ac, bc}));
  DLC_TRY(pf, cast(ni, prod, "f32"));
  DLC_TRY(sa, scaleInput(ni, 1, "A_scale"));
  DLC_TRY(sb, scaleInput(ni, 4, "B_scale"));
  DLC_TRY(sc, scaleInput(ni, 6, "C_scale"));
  DLC_TRY(sab, ni.op(OpKind::Mul, {sa, sb}));
  DLC_TRY(ratio, ni.op(OpKind::Div, {sab, sc}));
  // (The product and the sum as MulAdd, each rounded once as by Mul and Add, but in
  // FP32 also under --fp16, as ONNX Runtime computes them.)
  DLC_TRY(scaled, ni.op(OpKind::MulAdd, {pf, ratio, ni.scalar(DType::F32, 0.0)}));
  DLC_TRY(zc, zeroPointF32(ni, ni.input(7), t, "C_zero_point"));
  DLC_TRY(v, ni.op(OpKind::MulAdd, {scaled, ni.scalar(DType::F32, 1.0), zc}));
  return single(ni, roundTo(ni, v, ni.scalar(DType::F32, 1.0), nullptr, t));
}

/// QLinearConcat(Y_scale, Y_zp, (X_i, X_i_scale, X_i_zp)...; axis).
llvm::Error importQLinearConcat(NodeImporter &ni) {
  const size_t n = ni.numInputs();
  if (n < 5 || (n - 2) % 3 != 0)
    return ni.error("QLinearConcat takes Y_scale, Y_zero_point and triples (X, X_scale, "
                    "X_zero_point), got " +
                    std::to_string(n) + " inputs");
  Value *yz = ni.input(1), *first = ni.input(2);
  if (!first)
    return ni.error("input 2 (the first X) is missing");
  if (auto e = requireQuantized(ni, first, "X"))
    return e;
  DLC_TRY(ysc, scaleInput(ni, 0, "Y_scale"));
  const DType t = first->dtype();
  DLC_TRY(yzp, zeroPoint(ni, yz, t, "Y_zero_point"));
  std::vector<Value *> parts;
  for (size_t i = 2; i < n; i += 3) {
    Value *x = ni.input(i), *xs = ni.input(i + 1), *xz = ni.input(i + 2);
    if (!x || !xs)
      return ni.error("input " + std::to_string(!x ? i : i + 1) + " is missing");
    if (x->dtype() != t)
      return ni.error("every X must be " + std::string(dtypeName(t)) + ", input " +
                      std::to_string(i) + " is " + x->type().str());
    DLC_TRY(xsc, scaleInput(ni, i + 1, "X_scale"));
    DLC_TRY(xzp, zeroPoint(ni, xz, t, "X_zero_point"));
    DLC_TRY(d, ni.op(OpKind::DequantizeLinear, {x, xsc, xzp}));
    DLC_TRY(q, ni.op(OpKind::QuantizeLinear, {d, ysc, yzp},
                     {{"to", Attribute(std::string(dtypeName(t)))}}));
    parts.push_back(q);
  }
  int64_t axis = ni.attrInt("axis", 0);
  const int64_t r = first->rank();
  if (axis < -r || axis >= r)
    return ni.error("axis " + std::to_string(axis) + " is out of range for rank " +
                    std::to_string(r));
  if (axis < 0)
    axis += r;
  return single(ni, ni.op(OpKind::Concat, parts, {{"axis", Attribute(axis)}}));
}

/// QLinearGlobalAveragePool(X, x_scale, x_zp, y_scale, y_zp; channels_last).
llvm::Error importQLinearGlobalAveragePool(NodeImporter &ni) {
  Value *x = ni.input(0);
  if (auto e = requireQuantized(ni, x, "X"))
    return e;
  if (x->rank() < 3)
    return ni.error("X must have rank 3 or more (N, C and spatial dimensions), got " +
                    x->type().str());
  DLC_TRY(xs, scaleInput(ni, 1, "x_scale"));
  DLC_TRY(ys, scaleInput(ni, 3, "y_scale"));
  const DType t = x->dtype();
  const bool last = ni.attrInt("channels_last", 0) != 0;
  std::vector<int64_t> axes;
  int64_t size = 1;
  for (int64_t d = last ? 1 : 2; d < x->rank() - (last ? 1 : 0); ++d) {
    axes.push_back(d);
    size *= x->shape()[static_cast<size_t>(d)];
  }
  // (The int32 sum, and it minus zX * N, must not wrap: N * 256 < 2^31.)
  if (size < 1 || size > (int64_t{1} << 23) - 1)
    return ni.error("the pooled size " + std::to_string(size) + " must be in [1, 2^23)");
  DLC_TRY(wide, cast(ni, x, "i32"));
  DLC_TRY(sum, ni.op(OpKind::ReduceSum, {wide}, {{"axes", Attribute(axes)}}));
  DLC_TRY(xz, zeroPoint(ni, ni.input(2), t, "x_zero_point"));
  DLC_TRY(xzw, cast(ni, xz, "i32"));
  DLC_TRY(bias, ni.op(OpKind::Mul, {xzw, ni.scalar(DType::I32, static_cast<double>(size))}));
  DLC_TRY(acc, ni.op(OpKind::Sub, {sum, bias}));
  DLC_TRY(accf, cast(ni, acc, "f32"));
  DLC_TRY(ysn, ni.op(OpKind::Mul, {ys, ni.scalar(DType::F32, static_cast<double>(size))}));
  DLC_TRY(scale, ni.op(OpKind::Div, {xs, ysn}));
  DLC_TRY(yz, zeroPoint(ni, ni.input(4), t, "y_zero_point"));
  return single(ni, roundTo(ni, accf, scale, yz, t));
}

} // namespace

void registerQLinearHandlers(std::vector<HandlerEntry> &t) {
  // (The zero points of Add and Mul are optional, between required inputs.)
  t.push_back(contribEntry("QLinearAdd", importQLinearAdd, 2));
  t.push_back(contribEntry("QLinearMul", importQLinearMul, 2));
  t.push_back(contribEntry("QLinearConcat", importQLinearConcat, 2));
  t.push_back(contribEntry("QLinearGlobalAveragePool", importQLinearGlobalAveragePool, 5));
}

} // namespace dlc::frontend
