//===- QuantHandlers.cpp - ONNX quantization ops --------------------------===//
//
// QuantizeLinear and DequantizeLinear become the IR ops of those names, per tensor or
// per axis (the scale and zero point reshaped to broadcast along the axis). The
// integer products are exact int32 arithmetic:
//  - ConvInteger and MatMulInteger: Conv and MatMul on int32 operands, each minus its
//    zero point;
//  - QLinearConv and QLinearMatMul: the same sums (plus QLinearConv's int32 bias),
//    then requantized as ONNX Runtime does: float(sum) times the FP32 multiplier
//    x_scale * w_scale / y_scale, rounded half to even, plus y's zero point,
//    saturated (QuantizeLinear with `multiply`);
//  - DynamicQuantizeLinear: its scale and zero point from the input's range (0
//    included), as the ONNX reference computes them, then QuantizeLinear.
// com.microsoft MatMulNBits (2-, 4- and 8-bit weights in blocks of K) dequantizes its
// constant weights at import. Blocked quantization (opset 21's block_size) repeats
// each block's scale and zero point over its block. INT4 and UINT4 constants (4-bit
// QDQ weights) are read as i8 and u8. Float8 (e4m3fn, e5m2) QuantizeLinear and
// DequantizeLinear have a zero point of 0 (dropped) and saturate (saturate=1, the
// default, as FP8 quantization tools write). Outside: the 16-bit types, the FNUZ float8
// types, saturate=0.
//===----------------------------------------------------------------------===//
#include "Common.h"
#include "dlc/ir/OpHelpers.h"

namespace dlc::frontend {
namespace {

using namespace ir;

/// The quantized element types dlc computes with.
bool quantizedType(DType t) {
  return t == DType::U8 || t == DType::I8;
}

/// A float8 QuantizeLinear's or DequantizeLinear's zero point: a constant 0, which the
/// IR op does without (null); any other is refused. ONNX's float8 conversions without
/// saturation (saturate=0: overflow to NaN or infinity) are refused too.
llvm::Expected<Value *> float8ZeroPoint(NodeImporter &ni, Value *zp, const char *what) {
  if (ni.attrInt("saturate", 1) == 0)
    return ni.unsupported("float8 without saturation (saturate=0)");
  if (!zp)
    return nullptr;
  const Tensor *z = ni.constInput(2);
  if (!z)
    return ni.error(std::string(what) + " of a float8 type must be a constant 0");
  for (int64_t i = 0; i < z->numElements(); ++i)
    if (z->getDouble(i) != 0.0)
      return ni.unsupported(std::string("a float8 ") + what + " other than 0");
  return nullptr;
}

/// A scale or zero point for `x` quantized along `axis`: a scalar or a one-element
/// tensor as it is, a 1-D tensor of x's size along the axis reshaped to broadcast
/// along it ([C] -> [C, 1, 1] for axis 1 of a rank-4 x).
llvm::Expected<Value *> alongAxis(NodeImporter &ni, Value *v, const Value *x, int64_t axis,
                                  const char *what) {
  if (!v || v->type().numElements() == 1)
    return v;
  if (v->rank() != 1)
    return ni.error(std::string(what) + " must be a scalar or 1-D, got " + v->type().str() +
                    (v->rank() > 1 ? " (or, with block_size, of the input's rank)" : ""));
  const int64_t a = axis < 0 ? axis + x->rank() : axis;
  if (a < 0 || a >= x->rank())
    return ni.error("axis " + std::to_string(axis) + " is out of range for " + x->type().str());
  if (v->shape()[0] != x->shape()[static_cast<size_t>(a)])
    return ni.error(std::string(what) + " has " + std::to_string(v->shape()[0]) +
                    " values for axis " + std::to_string(a) + " of " + x->type().str());
  Shape s(static_cast<size_t>(x->rank() - a), 1);
  s[0] = v->shape()[0];
  if (s.size() == 1)
    return v;
  return ni.op(OpKind::Reshape, {v}, {{"shape", Attribute(s)}});
}

/// A blocked scale or zero point (opset 21's block_size B): `v` has x's shape except
/// ceil(d / B) along `axis`, one value per block of B elements; each value repeats over
/// its block ([.., nb, ..] -> [.., nb, 1, ..] -> [.., nb, B, ..] -> [.., nb * B, ..],
/// cut to d), so that the IR's element-wise QuantizeLinear and DequantizeLinear apply
/// it. A constant weight's (the usual case: LLM exports' 4-bit weights) folds at
/// compile time.
llvm::Expected<Value *> inBlocks(NodeImporter &ni, Value *v, const Value *x, int64_t axis,
                                 int64_t block, const char *what) {
  if (!v)
    return v;
  const int64_t r = x->rank(), a = axis < 0 ? axis + r : axis;
  if (block < 1)
    return ni.error("block_size must be positive, got " + std::to_string(block));
  if (a < 0 || a >= r)
    return ni.error("axis " + std::to_string(axis) + " is out of range for " + x->type().str());
  const Shape &xs = x->shape();
  // (A block as long as the dimension or longer is one block: b repeats it.)
  const int64_t d = xs[static_cast<size_t>(a)], nb = d / block + (d % block != 0),
                b = std::min(block, d);
  Shape want = xs;
  want[static_cast<size_t>(a)] = nb;
  if (v->shape() != want)
    return ni.error(std::string(what) + " must be " + shapeStr(want) + " for " + x->type().str() +
                    " in blocks of " + std::to_string(block) + " along axis " + std::to_string(a) +
                    ", got " + v->type().str());
  Shape split = want, spread = want;
  split.insert(split.begin() + a + 1, 1);
  spread.insert(spread.begin() + a + 1, b);
  Shape whole = want;
  whole[static_cast<size_t>(a)] = nb * b;
  DLC_TRY(u, ni.op(OpKind::Reshape, {v}, {{"shape", Attribute(split)}}));
  DLC_TRY(e, ni.op(OpKind::Expand, {u}, {{"shape", Attribute(spread)}}));
  DLC_TRY(f, ni.op(OpKind::Reshape, {e}, {{"shape", Attribute(whole)}}));
  if (nb * b == d)
    return f;
  return ni.op(OpKind::Slice, {f},
               {{"starts", Attribute(std::vector<int64_t>{0})},
                {"ends", Attribute(std::vector<int64_t>{d})},
                {"axes", Attribute(std::vector<int64_t>{a})}});
}

/// The scale or zero point of a QuantizeLinear or DequantizeLinear of `x`: per tensor,
/// per axis, or in blocks along the axis (block_size, opset 21).
llvm::Expected<Value *> quantParam(NodeImporter &ni, Value *v, const Value *x, const char *what) {
  const int64_t axis = ni.attrInt("axis", 1), block = ni.attrInt("block_size", 0);
  if (block != 0)
    return inBlocks(ni, v, x, axis, block, what);
  return alongAxis(ni, v, x, axis, what);
}

llvm::Expected<Value *> quantize(NodeImporter &ni, Value *x, Value *scale, Value *zp, DType to) {
  std::vector<Value *> ops{x, scale};
  if (zp)
    ops.push_back(zp);
  return ni.op(OpKind::QuantizeLinear, ops, {{"to", Attribute(std::string(dtypeName(to)))}});
}

/// QuantizeLinear: the result's type is the zero point's, else output_dtype (opset
/// 21), else u8.
llvm::Error importQuantizeLinear(NodeImporter &ni) {
  Value *x = ni.input(0), *zp = ni.input(2);
  if (zp && ni.importer().fourBit(zp))
    return ni.unsupported("quantizing to a 4-bit type (the zero point is INT4 or UINT4)");
  DType to = DType::U8;
  if (zp) {
    to = zp->dtype();
  } else if (int64_t od = ni.attrInt("output_dtype", 0); od != 0) {
    auto t = dtypeFromOnnx(static_cast<int32_t>(od));
    if (!t)
      return ni.unsupported("output_dtype " + std::to_string(od));
    to = *t;
  }
  if (!quantizedType(to) && !isFloat8(to))
    return ni.unsupported(std::string("quantizing to ") + std::string(dtypeName(to)) +
                          " (dlc quantizes to u8, i8, f8e4m3 and f8e5m2)");
  if (isFloat8(to)) {
    DLC_TRY(none, float8ZeroPoint(ni, zp, "y_zero_point"));
    zp = none;
  }
  DLC_TRY(s, quantParam(ni, ni.input(1), x, "y_scale"));
  DLC_TRY(z, quantParam(ni, zp, x, "y_zero_point"));
  return single(ni, quantize(ni, x, s, z, to));
}

llvm::Error importDequantizeLinear(NodeImporter &ni) {
  Value *x = ni.input(0), *zp = ni.input(2);
  if (!quantizedType(x->dtype()) && x->dtype() != DType::I32 && !isFloat8(x->dtype()))
    return ni.unsupported(std::string("dequantizing ") + std::string(dtypeName(x->dtype())) +
                          " (dlc dequantizes u8, i8, i32, f8e4m3 and f8e5m2)");
  if (isFloat8(x->dtype())) {
    DLC_TRY(none, float8ZeroPoint(ni, zp, "x_zero_point"));
    zp = none;
  }
  DLC_TRY(s, quantParam(ni, ni.input(1), x, "x_scale"));
  DLC_TRY(z, quantParam(ni, zp, x, "x_zero_point"));
  std::vector<Value *> ops{x, s};
  if (z)
    ops.push_back(z);
  return single(ni, ni.op(OpKind::DequantizeLinear, ops));
}

/// DynamicQuantizeLinear (u8): with x_min = min(0, min(x)) and x_max = max(0, max(x)),
/// scale = (x_max - x_min) / 255 (1 when that is 0), zero point =
/// round(saturate(0 - x_min / scale)), y = QuantizeLinear(x, scale, zero point). (In
/// FP32 under --fp16 too: the precision pass keeps what computes only a quantization
/// parameter in FP32.)
llvm::Error importDynamicQuantizeLinear(NodeImporter &ni) {
  Value *x = ni.input(0);
  if (x->dtype() != DType::F32)
    return ni.error(std::string("x must be f32, got ") + std::string(dtypeName(x->dtype())));
  std::vector<int64_t> all;
  for (int64_t d = 0; d < x->rank(); ++d)
    all.push_back(d);
  AttrMap reduce{{"axes", Attribute(all)}, {"keepdims", Attribute(int64_t{0})}};
  DLC_TRY(lo, ni.op(OpKind::ReduceMin, {x}, reduce));
  DLC_TRY(hi, ni.op(OpKind::ReduceMax, {x}, reduce));
  Value *zero = ni.scalar(DType::F32, 0.0);
  DLC_TRY(lo0, ni.op(OpKind::Min, {lo, zero}));
  DLC_TRY(hi0, ni.op(OpKind::Max, {hi, zero}));
  DLC_TRY(range, ni.op(OpKind::Sub, {hi0, lo0}));
  // (An input of zeros: scale 1 and zero point 0, as ONNX Runtime gives, not 0 / 0.)
  DLC_TRY(empty, ni.op(OpKind::Equal, {range, zero}));
  DLC_TRY(span, ni.op(OpKind::Where, {empty, ni.scalar(DType::F32, 255.0), range}));
  DLC_TRY(scale, ni.op(OpKind::Div, {span, ni.scalar(DType::F32, 255.0)}));
  DLC_TRY(ratio, ni.op(OpKind::Div, {lo0, scale}));
  DLC_TRY(neg, ni.op(OpKind::Neg, {ratio}));
  DLC_TRY(sat, ni.op(OpKind::Clip, {neg, zero, ni.scalar(DType::F32, 255.0)}));
  DLC_TRY(rounded, ni.op(OpKind::Round, {sat}));
  DLC_TRY(zp, ni.op(OpKind::Cast, {rounded}, {{"to", Attribute(std::string("u8"))}}));
  DLC_TRY(y, quantize(ni, x, scale, zp, DType::U8));
  ni.setOutput(0, y);
  if (ni.wantsOutput(1))
    ni.setOutput(1, scale);
  if (ni.wantsOutput(2))
    ni.setOutput(2, zp);
  return llvm::Error::success();
}

/// The int32 sums of a quantized convolution: Conv(x - x_zp, w - w_zp [, bias]), w's
/// zero point per output channel or one.
llvm::Expected<Value *> integerConv(NodeImporter &ni, Value *x, Value *xzp, Value *w, Value *wzp,
                                    Value *bias) {
  if (xzp && xzp->type().numElements() != 1)
    return ni.error("the input's zero point must be a scalar, got " + xzp->type().str());
  DLC_TRY(wz, alongAxis(ni, wzp, w, 0, "the weight's zero point"));
  DLC_TRY(xc, centered(ni, x, xzp));
  DLC_TRY(wc, centered(ni, w, wz));
  if (bias && bias->dtype() != DType::I32)
    return ni.error(std::string("the bias must be i32, got ") +
                    std::string(dtypeName(bias->dtype())));
  return buildConv(ni, xc, wc, bias);
}

/// The int32 products of a quantized MatMul: (a - a_zp) x (b - b_zp), a's zero point
/// per row or one, b's per column or one.
llvm::Expected<Value *> integerMatMul(NodeImporter &ni, Value *a, Value *azp, Value *b,
                                      Value *bzp) {
  Value *az = azp;
  if (azp && azp->type().numElements() != 1) {
    if (a->rank() < 2)
      return ni.error("a per-row zero point needs A of rank 2 or more, got " + a->type().str());
    DLC_TRY(r, alongAxis(ni, azp, a, a->rank() - 2, "a_zero_point"));
    az = r;
  }
  DLC_TRY(ac, centered(ni, a, az));
  DLC_TRY(bc, centered(ni, b, bzp));
  return ni.op(OpKind::MatMul, {ac, bc});
}

llvm::Error importConvInteger(NodeImporter &ni) {
  return single(
      ni, integerConv(ni, ni.input(0), ni.input(2), ni.input(1), ni.input(3), /*bias=*/nullptr));
}

llvm::Error importMatMulInteger(NodeImporter &ni) {
  return single(ni, integerMatMul(ni, ni.input(0), ni.input(2), ni.input(1), ni.input(3)));
}

/// float(sum) times a_scale * b_scale / y_scale, rounded, plus y's zero point:
/// ONNX Runtime's requantization (QuantizeLinear with `multiply`). `along`: b's
/// per-channel scale is reshaped to broadcast along this dim of the sums.
llvm::Expected<Value *> requantize(NodeImporter &ni, Value *sum, Value *aScale, Value *bScale,
                                   int64_t along, Value *yScale, Value *yzp) {
  if (!quantizedType(yzp->dtype()))
    return ni.unsupported(std::string("a quantized result of ") +
                          std::string(dtypeName(yzp->dtype())));
  DLC_TRY(bs, alongAxis(ni, bScale, sum, along, "the weight's scale"));
  DLC_TRY(ab, ni.op(OpKind::Mul, {aScale, bs}));
  DLC_TRY(multiplier, ni.op(OpKind::Div, {ab, yScale}));
  DLC_TRY(f, ni.op(OpKind::Cast, {sum}, {{"to", Attribute(std::string("f32"))}}));
  return ni.op(OpKind::QuantizeLinear, {f, multiplier, yzp},
               {{"to", Attribute(std::string(dtypeName(yzp->dtype())))},
                {"multiply", Attribute(int64_t{1})}});
}

/// QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B?).
llvm::Error importQLinearConv(NodeImporter &ni) {
  for (size_t i : {1, 4, 6})
    if (ni.input(i)->dtype() != DType::F32)
      return ni.error("input " + std::to_string(i) + " (a scale) must be f32");
  DLC_TRY(sum, integerConv(ni, ni.input(0), ni.input(2), ni.input(3), ni.input(5), ni.input(8)));
  return single(ni, requantize(ni, sum, ni.input(1), ni.input(4), 1, ni.input(6), ni.input(7)));
}

/// QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp).
llvm::Error importQLinearMatMul(NodeImporter &ni) {
  for (size_t i : {1, 4, 6})
    if (ni.input(i)->dtype() != DType::F32)
      return ni.error("input " + std::to_string(i) + " (a scale) must be f32");
  Value *a = ni.input(0);
  if (Value *as = ni.input(1); as->type().numElements() != 1)
    return ni.unsupported("a per-row a_scale");
  DLC_TRY(sum, integerMatMul(ni, a, ni.input(2), ni.input(3), ni.input(5)));
  return single(
      ni, requantize(ni, sum, ni.input(1), ni.input(4), sum->rank() - 1, ni.input(6), ni.input(7)));
}

/// com.microsoft MatMulNBits (weight-only quantized GEMM, as LLM exports write it):
/// Y = A x dequantize(B)^T (+ bias). B is [N, ceil(K / block_size), block_size * bits /
/// 8] of 2-, 4- or 8-bit values, low bits first; each block of K has its scale and
/// zero point (packed like B, 2^(bits-1) when absent): w = (q - zero point) * scale.
/// The weights are constants. With at most 32 / bits rows of A (the packed kernel reads
/// the weights once per 4 rows: at most 1 byte per weight in all, half an FP16
/// weight's 2) they stay packed: the IR's MatMulNBits. With more, they are dequantized
/// here into a [K, N] constant of A's type (in FP32, rounded once), and the product is
/// a MatMul.
llvm::Error importMatMulNBits(NodeImporter &ni) {
  Value *a = ni.input(0);
  const int64_t K = ni.attrInt("K", 0), N = ni.attrInt("N", 0), bits = ni.attrInt("bits", 4),
                block = ni.attrInt("block_size", 0);
  if (bits != 2 && bits != 4 && bits != 8)
    return ni.unsupported("MatMulNBits with bits = " + std::to_string(bits) + " (2, 4 and 8 are)");
  // (Bounded so that no size below wraps: B's own size then bounds K * N.)
  if (K <= 0 || N <= 0 || K > (int64_t{1} << 31) || N > (int64_t{1} << 31) || block < 16 ||
      block > (int64_t{1} << 16) || (block & (block - 1)) != 0)
    return ni.error("K and N must be in [1, 2^31] and block_size a power of 2 in [16, 65536], "
                    "got K " +
                    std::to_string(K) + ", N " + std::to_string(N) + ", block_size " +
                    std::to_string(block));
  if (ni.hasInput(4))
    return ni.unsupported("MatMulNBits with g_idx");
  if (a->rank() < 1 || a->shape().back() != K)
    return ni.error("A must end in K = " + std::to_string(K) + ", got " + a->type().str());
  const DType ft = a->dtype();
  if (ft != DType::F32 && ft != DType::F16)
    return ni.error(std::string("A must be f32 or f16, got ") + std::string(dtypeName(ft)));
  const Tensor *bq = ni.constInput(1), *sc = ni.constInput(2);
  const Tensor *zp = ni.hasInput(3) ? ni.constInput(3) : nullptr;
  if (!bq || !sc || (ni.hasInput(3) && !zp))
    return ni.unsupported("MatMulNBits whose B, scales or zero points are not initializers");
  const int64_t blocks = (K + block - 1) / block, blob = block * bits / 8,
                zpBytes = (blocks * bits + 7) / 8;
  if (bq->dtype() != DType::U8 || bq->shape() != Shape{N, blocks, blob})
    return ni.error("B must be u8[" + std::to_string(N) + "," + std::to_string(blocks) + "," +
                    std::to_string(blob) + "], got " + bq->type().str());
  if (sc->dtype() != ft || sc->numElements() != N * blocks)
    return ni.error("scales must be " + std::string(dtypeName(ft)) + " with " +
                    std::to_string(N * blocks) + " values, got " + sc->type().str());
  if (zp && (zp->dtype() != DType::U8 || zp->numElements() != N * zpBytes))
    return ni.unsupported("MatMulNBits zero points other than packed u8 [" +
                          std::to_string(N * zpBytes) + "], got " + zp->type().str());
  // Few rows (decoding: a GEMV, bound by reading the weights): the IR's MatMulNBits, the
  // weights packed in the package and dequantized by the kernel as it reads them.
  // Many (a prompt): the weights dequantized here, a MatMul on tensor cores.
  Value *y = nullptr;
  if (a->type().numElements() / K <= 32 / bits) {
    // (The scales and zero points flat, as the op takes them.)
    DLC_TRY(flatScales,
            ni.op(OpKind::Reshape, {ni.input(2)}, {{"shape", Attribute(Shape{N * blocks})}}));
    std::vector<Value *> ops{a, ni.input(1), flatScales};
    if (zp) {
      DLC_TRY(flatZp,
              ni.op(OpKind::Reshape, {ni.input(3)}, {{"shape", Attribute(Shape{N * zpBytes})}}));
      ops.push_back(flatZp);
    }
    DLC_TRY(r, ni.op(OpKind::MatMulNBits, ops,
                     {{"K", Attribute(K)},
                      {"N", Attribute(N)},
                      {"bits", Attribute(bits)},
                      {"block_size", Attribute(block)}}));
    y = r;
  } else {
    const std::vector<float> w = matMulNBitsWeights(*bq, *sc, zp, K, N, bits, block);
    Value *wv = ni.constant(Tensor::fromVector(TensorType(ft, {K, N}), w), "dequantized");
    DLC_TRY(r, ni.op(OpKind::MatMul, {a, wv}));
    y = r;
  }
  if (!ni.hasInput(5))
    return single(ni, y);
  return single(ni, ni.op(OpKind::Add, {y, ni.input(5)}));
}

} // namespace

llvm::Expected<Value *> centered(NodeImporter &ni, Value *v, Value *zp) {
  if (!quantizedType(v->dtype()))
    return ni.unsupported(std::string("integer products of ") + std::string(dtypeName(v->dtype())) +
                          " (u8 and i8 are)");
  AttrMap toI32{{"to", Attribute(std::string("i32"))}};
  DLC_TRY(wide, ni.op(OpKind::Cast, {v}, toI32));
  if (!zp)
    return wide;
  if (zp->dtype() != v->dtype())
    return ni.error(std::string("the zero point is ") + std::string(dtypeName(zp->dtype())) +
                    ", its operand " + std::string(dtypeName(v->dtype())));
  DLC_TRY(z, ni.op(OpKind::Cast, {zp}, toI32));
  return ni.op(OpKind::Sub, {wide, z});
}

void registerQuantHandlers(std::vector<HandlerEntry> &t) {
  t.push_back({"QuantizeLinear", 10, kMaxOpset, importQuantizeLinear, "", 2});
  t.push_back({"DequantizeLinear", 10, kMaxOpset, importDequantizeLinear, "", 2});
  t.push_back({"DynamicQuantizeLinear", 11, kMaxOpset, importDynamicQuantizeLinear, "", 1});
  t.push_back({"ConvInteger", 10, kMaxOpset, importConvInteger, "", 2});
  t.push_back({"MatMulInteger", 10, kMaxOpset, importMatMulInteger, "", 2});
  t.push_back({"QLinearConv", 10, kMaxOpset, importQLinearConv, "", 8});
  t.push_back({"QLinearMatMul", 10, kMaxOpset, importQLinearMatMul, "", 8});
  t.push_back(contribEntry("MatMulNBits", importMatMulNBits, 3));
}

} // namespace dlc::frontend
