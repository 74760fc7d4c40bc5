//===- FoldQdq.cpp - QDQ convolutions and MatMuls as integer arithmetic ------===//
//
// Explicit quantization (QDQ): a Conv or MatMul whose operands are DequantizeLinear of
// quantized tensors (B possibly transposed, and a MatMul's bias added after it: a
// Gemm's form after canonicalize) and whose result (through an optional Relu) feeds a
// QuantizeLinear computes in integers, as ONNX Runtime (its QDQ fusions into
// QLinearConv and QLinearMatMul) and TensorRT run such files:
//   Q(Conv(DQ(x, sx, zx), DQ(w, sw, zw), DQ(b32, sb)), sy, zy)
//     -> Q(float(Conv(x - zx, w - zw, b32)), sx * sw / sy, zy) {multiply = 1}
// with exact int32 sums, and the requantization ONNX Runtime applies: the product by
// the FP32 multiplier, rounded half to even, plus y's zero point, saturated. The
// input's scale is per tensor, the weight's per tensor or per output channel; the
// bias, where there is one, is int32 (its scale is sx * sw, as quantization tools
// write it). A Relu between the product and the QuantizeLinear stays, on the int32
// sums. The other DequantizeLinear users keep their float values.
//===----------------------------------------------------------------------===//
#include "dlc/ir/GradBuilder.h"
#include "dlc/passes/Pass.h"

#include <cmath>

namespace dlc::passes {
namespace {

using namespace ir;

bool quantized(DType t) {
  return t == DType::U8 || t == DType::I8;
}

/// v as DequantizeLinear(q, scale, zp?) of a u8/i8 tensor q, or null.
Node *dequantized(Value *v) {
  Node *d = definedBy(v, OpKind::DequantizeLinear);
  return d && quantized(d->operand(0)->dtype()) && d->operand(1)->dtype() == DType::F32 ? d
                                                                                        : nullptr;
}

bool oneValue(const Value *v) {
  return v && v->type().numElements() == 1;
}

/// Whether the scale (or zero point) of a weight varies only along dim 0, with
/// `channels` values, or is a single value.
bool perOutputChannel(const Value *v, int64_t channels) {
  if (oneValue(v))
    return true;
  const Shape &s = v->shape();
  if (s.empty() || s[0] != channels)
    return false;
  for (size_t i = 1; i < s.size(); ++i)
    if (s[i] != 1)
      return false;
  return true;
}

class FoldQdq : public Pass {
public:
  std::string_view name() const override { return "fold-qdq"; }

  bool run(Graph &g, PassContext &) override {
    bool changed = false;
    for (Node *q : g.nodesOf(OpKind::QuantizeLinear))
      changed |= fold(g, *q);
    return changed;
  }

private:
  static bool fold(Graph &g, Node &q) {
    Value *in = q.operand(0), *ys = q.operand(1), *yz = q.operand(2);
    if (!oneValue(ys) || ys->dtype() != DType::F32 || g.isOutput(in) || in->uses().size() != 1)
      return false;
    Node *relu = definedBy(in, OpKind::Relu);
    // (A Relu is moved onto the int32 sums, which needs a positive multiplier: the
    // scales as constants, positive as ONNX requires.)
    Value *product = relu ? relu->operand(0) : in;
    if (relu && (g.isOutput(product) || product->uses().size() != 1))
      return false;
    Node *p = product->definingNode();
    // A MatMul's bias (a Gemm's, after canonicalize): Add(MatMul, DQ(int32 bias)).
    Node *biasDq = nullptr;
    if (p && p->kind() == OpKind::Add) {
      Node *add = p;
      p = nullptr;
      for (unsigned k : {0u, 1u}) {
        Node *mm = definedBy(add->operand(k), OpKind::MatMul);
        Node *bd = definedBy(add->operand(1 - k), OpKind::DequantizeLinear);
        if (mm && bd && !g.isOutput(mm->result()) && mm->result()->uses().size() == 1 &&
            mm->result()->shape() == product->shape()) {
          p = mm;
          biasDq = bd;
          break;
        }
      }
    }
    if (!p || (p->kind() != OpKind::Conv && p->kind() != OpKind::MatMul) ||
        product->dtype() != DType::F32 ||
        (p->kind() == OpKind::Conv && p->attrInt("channels_last") != 0))
      return false;
    // B may be a DequantizeLinear transposed (a Gemm's transB, after canonicalize).
    Node *wt = p->kind() == OpKind::MatMul ? definedBy(p->operand(1), OpKind::Transpose) : nullptr;
    if (wt && !(wt->operand(0)->rank() == 2 && wt->attrInts("perm") == std::vector<int64_t>{1, 0}))
      wt = nullptr;
    Node *x = dequantized(p->operand(0)), *w = dequantized(wt ? wt->operand(0) : p->operand(1));
    if (!x || !w || !oneValue(x->operand(1)) ||
        (relu && !(positive(x->operand(1)) && positive(w->operand(1)) && positive(ys))))
      return false;
    const bool conv = p->kind() == OpKind::Conv;
    // The weight's scale: per tensor, or per output channel (a Conv's dim 0; a
    // MatMul's last dim, which broadcasts as it is).
    Value *ws = w->operand(1);
    const int64_t channels = conv ? p->operand(1)->shape()[0] : p->operand(1)->shape().back();
    // (Per channel: the importer's shape for the output-channel axis, [M, 1, ...] of the
    // weight's rank for a Conv, [N] for a MatMul's B of rank 2 or more; a scale along
    // any other axis cannot be taken out of the sums.)
    const Value *wq = w->operand(0);
    // (Transposed, B is [N, K], its per-channel scale [N, 1].)
    if (conv ? !(oneValue(ws) || (ws->rank() == wq->rank() && perOutputChannel(ws, channels)))
             : !(oneValue(ws) || (wt ? ws->shape() == Shape{channels, 1}
                                     : wq->rank() >= 2 && ws->shape() == Shape{channels})))
      return false;
    // The bias (a Conv's operand, a MatMul's Add): none, or the DequantizeLinear of
    // int32 sums [channels] with zero point 0.
    Value *bias = nullptr;
    if (Node *bd =
            conv && p->operand(2) ? definedBy(p->operand(2), OpKind::DequantizeLinear) : biasDq;
        bd || (conv && p->operand(2))) {
      if (!bd || bd->operand(0)->dtype() != DType::I32 ||
          bd->operand(0)->shape() != Shape{channels} ||
          (bd->operand(2) && !constantWhere(bd->operand(2), [](double e) { return e == 0; })))
        return false;
      // Its scale must be sx * sw, as quantization tools write it (ONNX Runtime adds
      // the int32 bias to the sums as it is): checked where the scales are constants.
      if (!biasScaleMatches(bd->operand(1), x->operand(1), ws, channels))
        return false;
      bias = bd->operand(0);
    }

    GradBuilder b(g);
    b.setNameSuffix(".int");
    b.setInsertionPoint(&q);
    b.begin(q, {}, {});
    auto centered = [&](Node *d) {
      Value *v = b.cast(d->operand(0), DType::I32);
      return d->operand(2) ? b.sub(v, b.cast(d->operand(2), DType::I32)) : v;
    };
    Value *xi = centered(x), *wi = centered(w);
    Value *sum = nullptr;
    if (conv) {
      std::vector<Value *> ops{xi, wi};
      if (bias)
        ops.push_back(bias);
      sum = b.op(OpKind::Conv, ops, p->attrs());
    } else {
      sum = b.op(OpKind::MatMul, {xi, wt ? b.transpose(wi, {1, 0}) : wi});
      if (bias)
        sum = b.add(sum, bias);
    }
    // The multiplier, per output channel along dim 1 of the convolution's result.
    Value *scale = ws;
    if (conv && !oneValue(ws)) {
      Shape s(static_cast<size_t>(product->rank() - 1), 1);
      s[0] = channels;
      scale = b.reshape(ws, s);
    } else if (wt && !oneValue(ws)) {
      scale = b.reshape(ws, {channels});
    }
    // (One QuantizeLinear with `multiply` applies the FP32 multiplier, so that no
    // precision pass can move the product to FP16. The Relu acts on the int32 sums:
    // the multiplier is positive, so it commutes.)
    Value *multiplier = b.div(b.mul(x->operand(1), scale), ys);
    if (relu)
      sum = b.op(OpKind::Relu, {sum});
    std::vector<Value *> qOps{b.cast(sum, DType::F32), multiplier};
    if (yz)
      qOps.push_back(yz);
    AttrMap qa = q.attrs();
    qa["multiply"] = Attribute(int64_t{1});
    Value *y = b.op(OpKind::QuantizeLinear, qOps, qa);
    if (!y || b.failed() || y->type() != q.result()->type()) {
      llvm::consumeError(b.takeError());
      return false; // (not reached: the operands were checked above; dce removes the rest)
    }
    const std::string name = q.result()->name();
    g.replaceAllUsesWith(q.result(), y);
    g.eraseNode(&q);
    g.renameValue(y, name);
    return true;
  }

  /// Whether the bias scale (one value or [M]) equals sx * sw per output channel,
  /// within FP32 rounding; all three constants.
  static bool biasScaleMatches(const Value *bs, const Value *sx, const Value *sw,
                               int64_t channels) {
    if (!bs->isConstant() || !sx->isConstant() || !sw->isConstant())
      return false;
    const Tensor &b = bs->data(), &x = sx->data(), &w = sw->data();
    for (int64_t m = 0; m < channels; ++m) {
      const double want = x.getDouble(0) * w.getDouble(w.numElements() == 1 ? 0 : m),
                   got = b.getDouble(b.numElements() == 1 ? 0 : m);
      if (!(std::abs(got - want) <= 1e-6 * std::abs(want)))
        return false;
    }
    return true;
  }

  /// Whether v is a constant whose every element satisfies `ok`.
  template <class Pred> static bool constantWhere(const Value *v, Pred ok) {
    if (!v->isConstant())
      return false;
    const Tensor &t = v->data();
    for (int64_t i = 0; i < t.numElements(); ++i)
      if (!ok(t.getDouble(i)))
        return false;
    return true;
  }
  static bool positive(const Value *v) {
    return constantWhere(v, [](double e) { return e > 0; });
  }
};

} // namespace

std::unique_ptr<Pass> createFoldQdq() {
  return std::make_unique<FoldQdq>();
}

} // namespace dlc::passes
