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
// sums. The other DequantizeLinear users keep their float values. Symmetric int8
// operands multiply as they are (INT8 tensor cores); u8 activations (and i8 ones with a
// zero point) by symmetric int8 weights, where nothing is padded, as the int8 x - 128
// (x) with a corrected bias. Float8 (FP8 QDQ: e4m3 or e5m2 input and weights, no zero
// point) Convs multiply as they are too, into FP32 sums, then times sx * sw plus the
// FP32 bias, if any (float8 tensor cores):
//   Conv(DQ(x8, sx), DQ(w8, sw), b) -> Conv(x8, w8) * (sx * sw) + b
//===----------------------------------------------------------------------===//
#include "dlc/ir/GradBuilder.h"
#include "dlc/passes/Pass.h"

#include <cmath>

namespace dlc::passes {
namespace {

using namespace ir;

bool quantized(DType t) {
  return t == DType::U8 || t == DType::I8 || isFloat8(t);
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

/// The sums of an int8 weight per output channel, wrapped to int32 as the sums they
/// correct: along dim 0 (`leading`: a Conv's [M, ...], a transposed B's [N, K]), else
/// along the last dim (a MatMul's B [K, N]).
std::vector<int64_t> channelSums(const Tensor &w, bool leading) {
  const Shape &s = w.shape();
  const int64_t rows = leading ? s[0] : w.numElements() / s.back(),
                cols = leading ? w.numElements() / s[0] : s.back();
  const auto *p = static_cast<const int8_t *>(w.raw());
  std::vector<int64_t> sums(static_cast<size_t>(leading ? rows : cols), 0);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      sums[static_cast<size_t>(leading ? i : j)] += p[i * cols + j];
  for (int64_t &v : sums)
    v = static_cast<int32_t>(static_cast<uint32_t>(v));
  return sums;
}

class FoldQdq : public Pass {
public:
  std::string_view name() const override { return "fold-qdq"; }

  bool run(Graph &g, PassContext &) override {
    bool changed = false;
    // Quantized data first moves through the ops that only move it, so that the
    // products below find their operands quantized.
    for (Node *q : g.nodesOf(OpKind::QuantizeLinear))
      changed |= passThrough(g, *q);
    for (Node *q : g.nodesOf(OpKind::QuantizeLinear))
      changed |= requantize(g, *q);
    for (OpKind k : {OpKind::Conv, OpKind::MatMul})
      for (Node *p : g.nodesOf(k))
        changed |= dequantize(g, *p);
    return changed;
  }

private:
  /// Whether two quantization parameters (a scale, or a zero point where null means
  /// 0) are the same: one value, or equal constants.
  static bool sameParam(const Value *a, const Value *b) {
    if (a == b)
      return true;
    auto value = [](const Value *v) -> std::optional<double> {
      if (!v)
        return 0.0;
      if (!v->isConstant() || v->type().numElements() != 1)
        return std::nullopt;
      return v->data().getDouble(0);
    };
    auto x = value(a), y = value(b);
    return x && y && *x == *y;
  }

  /// Q(Op(DQ(x, s, z), ...), s, z) -> Op(x, ...), where Op only moves or selects
  /// values (a view, or the op table's movesValues: each data operand, of the result's
  /// type, dequantized at the same scale) and the scale is positive; and
  /// Q(DQ(x, s, z), s, z) -> x.
  static bool passThrough(Graph &g, Node &q) {
    Value *in = q.operand(0);
    if (q.attrInt("multiply") != 0)
      return false;
    Node *m = in->definingNode();
    if (!m)
      return false;
    const bool direct = m->kind() == OpKind::DequantizeLinear;
    const bool moves = fusibility(*m).role == Fusibility::Role::Metadata ||
                       (m->def().movesValues && m->def().movesValues(*m));
    if (!direct && (!moves || in != m->result(0)))
      return false;
    if (!direct)
      for (unsigned r = 1; r < m->numResults(); ++r)
        if (!m->result(r)->uses().empty() || g.isOutput(m->result(r)))
          return false;
    // The DequantizeLinear of each data operand (of a direct Q(DQ): the DQ itself).
    auto quantizedAsQ = [&](Node *d) {
      return d && oneValue(d->operand(1)) && positive(d->operand(1)) &&
             d->operand(0)->dtype() == q.result()->dtype() &&
             sameParam(d->operand(1), q.operand(1)) && sameParam(d->operand(2), q.operand(2));
    };
    if (direct) {
      if (!quantizedAsQ(m))
        return false;
    } else {
      bool any = false;
      for (Value *o : m->operands())
        if (o && o->dtype() == in->dtype()) {
          if (!quantizedAsQ(dequantized(o)))
            return false;
          any = true;
        }
      if (!any)
        return false;
    }
    Value *y = direct ? m->operand(0) : nullptr;
    if (!direct) {
      GradBuilder b(g);
      b.setNameSuffix(".int");
      b.setInsertionPoint(&q);
      b.begin(q, {}, {});
      std::vector<Value *> ops(m->operands().begin(), m->operands().end());
      for (Value *&o : ops)
        if (o && o->dtype() == in->dtype())
          o = dequantized(o)->operand(0);
      y = b.op(m->kind(), ops, m->attrs());
      if (!y || b.failed() || y->type() != q.result()->type()) {
        llvm::consumeError(b.takeError());
        return false; // (the op takes no integers: it stays in float)
      }
    }
    const std::string name = q.result()->name();
    g.replaceAllUsesWith(q.result(), y);
    g.eraseNode(&q);
    if (!direct)
      g.renameValue(y, name);
    return true;
  }

  /// A Conv or MatMul of dequantized operands, as integer sums: what is checked
  /// before anything is built.
  struct Product {
    Node *p = nullptr;          // the Conv or MatMul
    Node *x = nullptr;          // its input's DequantizeLinear
    Node *w = nullptr;          // its weight's
    Node *wt = nullptr;         // the Transpose of the weight's (a Gemm's transB)
    Value *ws = nullptr;        // the weight's scale
    Value *bias = nullptr;      // int32 sums [channels], or null
    Value *floatBias = nullptr; // a float8 Conv's FP32 bias [channels], or null
    int64_t channels = 0;
    bool conv = false;
    /// Float8 input and weights of one type (a Conv's): FP32 sums.
    bool fp8() const { return isFloat8(x->operand(0)->dtype()); }
  };

  /// `p` (a Conv or MatMul whose result, or whose Add with a DequantizeLinear bias,
  /// is `product`) as a Product, or nothing.
  static std::optional<Product> match(Graph &g, Node *p, Node *biasDq, const Value *product) {
    if (!p || (p->kind() != OpKind::Conv && p->kind() != OpKind::MatMul) ||
        product->dtype() != DType::F32 ||
        (p->kind() == OpKind::Conv && p->attrInt("channels_last") != 0))
      return std::nullopt;
    Product r;
    r.p = p;
    r.conv = p->kind() == OpKind::Conv;
    // B may be a DequantizeLinear transposed (a Gemm's transB, after canonicalize).
    r.wt = r.conv ? nullptr : definedBy(p->operand(1), OpKind::Transpose);
    if (r.wt &&
        !(r.wt->operand(0)->rank() == 2 && r.wt->attrInts("perm") == std::vector<int64_t>{1, 0}))
      r.wt = nullptr;
    r.x = dequantized(p->operand(0));
    r.w = dequantized(r.wt ? r.wt->operand(0) : p->operand(1));
    if (!r.x || !r.w || !oneValue(r.x->operand(1)))
      return std::nullopt;
    // (Float8: a Conv of one float8 type; its bias, if any, FP32 as FP8 tools write it.)
    const bool f8x = isFloat8(r.x->operand(0)->dtype()), f8w = isFloat8(r.w->operand(0)->dtype());
    if (f8x || f8w) {
      if (!r.conv || r.x->operand(0)->dtype() != r.w->operand(0)->dtype())
        return std::nullopt;
      if (Value *b = p->operand(2)) {
        if (b->dtype() != DType::F32 || b->shape() != Shape{p->operand(1)->shape()[0]})
          return std::nullopt;
        r.floatBias = b;
      }
    }
    // The weight's scale: per tensor, or per output channel (a Conv's dim 0; a
    // MatMul's last dim, which broadcasts as it is).
    r.ws = r.w->operand(1);
    r.channels = r.conv ? p->operand(1)->shape()[0] : p->operand(1)->shape().back();
    // (Per channel: the importer's shape for the output-channel axis, [M, 1, ...] of the
    // weight's rank for a Conv, [N] for a MatMul's B of rank 2 or more; a scale along
    // any other axis cannot be taken out of the sums.)
    const Value *wq = r.w->operand(0), *ws = r.ws;
    const int64_t channels = r.channels;
    // (Transposed, B is [N, K], its per-channel scale [N, 1].)
    if (r.conv ? !(oneValue(ws) || (ws->rank() == wq->rank() && perOutputChannel(ws, channels)))
               : !(oneValue(ws) || (r.wt ? ws->shape() == Shape{channels, 1}
                                         : wq->rank() >= 2 && ws->shape() == Shape{channels})))
      return std::nullopt;
    // The bias (a Conv's operand, a MatMul's Add): none, or the DequantizeLinear of
    // int32 sums [channels] with zero point 0.
    if (Node *bd =
            r.conv && p->operand(2) ? definedBy(p->operand(2), OpKind::DequantizeLinear) : biasDq;
        !r.fp8() && (bd || (r.conv && p->operand(2)))) {
      if (!bd || bd->operand(0)->dtype() != DType::I32 ||
          bd->operand(0)->shape() != Shape{channels} ||
          (bd->operand(2) && !constantWhere(bd->operand(2), [](double e) { return e == 0; })))
        return std::nullopt;
      // Its scale must be sx * sw, as quantization tools write it (ONNX Runtime adds
      // the int32 bias to the sums as it is): checked where the scales are constants.
      if (!biasScaleMatches(bd->operand(1), r.x->operand(1), ws, channels))
        return std::nullopt;
      r.bias = bd->operand(0);
    }
    (void)g;
    return r;
  }

  /// The product's exact int32 sums, and its scale sx * sw shaped to multiply them.
  static std::pair<Value *, Value *> build(GradBuilder &b, const Product &r, const Value *product) {
    auto centered = [&](Node *d) {
      Value *v = b.cast(d->operand(0), DType::I32);
      return d->operand(2) ? b.sub(v, b.cast(d->operand(2), DType::I32)) : v;
    };
    // INT8 operands with zero points 0 (symmetric, TensorRT's form) multiply as they
    // are: the int8 Conv and MatMul (tensor cores), int32 sums.
    auto zeroPoint0 = [](Node *d) {
      return !d->operand(2) || constantWhere(d->operand(2), [](double e) { return e == 0; });
    };
    const bool int8 = r.x->operand(0)->dtype() == DType::I8 &&
                      r.w->operand(0)->dtype() == DType::I8 && zeroPoint0(r.x) && zeroPoint0(r.w);
    // u8 activations with a zero point zx (ONNX Runtime's quantizer's default), or i8
    // ones with a nonzero zx, by symmetric int8 weights, where the product takes no
    // padding (a MatMul, a convolution without pads; the importer resolves auto_pad):
    // with offset 128 for u8 (0 for i8), x - offset is int8, and sum (x - zx) w =
    // sum (x - offset) w + (offset - zx) sum_k w, the int8 product plus a per-channel
    // int32 correction, so that it too runs on INT8 tensor cores. (A padded position
    // would count (offset - zx) w where x - zx is 0.)
    auto unpadded = [&] {
      for (int64_t p : r.p->attrInts("pads"))
        if (p != 0)
          return false;
      return true;
    };
    const DType xt = r.x->operand(0)->dtype();
    const bool shifted = !int8 && (xt == DType::U8 || xt == DType::I8) &&
                         (!r.x->operand(2) || oneValue(r.x->operand(2))) &&
                         r.w->operand(0)->dtype() == DType::I8 && zeroPoint0(r.w) &&
                         (r.conv ? unpadded() : r.w->operand(0)->rank() == 2);
    Value *xi = nullptr, *wi = nullptr, *bias = r.bias;
    if (int8 || r.fp8()) {
      xi = r.x->operand(0);
      wi = r.w->operand(0);
    } else if (shifted) {
      Value *w = r.w->operand(0);
      const int64_t offset = xt == DType::U8 ? 128 : 0;
      xi = offset ? b.cast(b.sub(b.cast(r.x->operand(0), DType::I32),
                                 b.scalar(static_cast<double>(offset), DType::I32)),
                           DType::I8)
                  : r.x->operand(0);
      wi = w;
      // sum_k w per output channel (a Conv's dims after 0; B's rows, or its columns
      // where it is transposed): summed here for constant weights (a large weight's
      // ReduceSum would not fold), else by a ReduceSum.
      Value *wsum = nullptr;
      if (w->isConstant()) {
        wsum =
            b.graph().addConstant("", Tensor::fromVector(TensorType(DType::I32, {r.channels}),
                                                         channelSums(w->data(), r.conv || r.wt)));
      } else {
        std::vector<int64_t> axes = {r.wt ? 1 : 0}; // (B is rank 2)
        if (r.conv) {
          axes.clear();
          for (int64_t d = 1; d < w->rank(); ++d)
            axes.push_back(d);
        }
        wsum = b.reduceSum(b.cast(w, DType::I32), axes, false);
      }
      Value *zx = r.x->operand(2) ? b.cast(r.x->operand(2), DType::I32) : b.scalar(0, DType::I32);
      Value *shift = b.sub(b.scalar(static_cast<double>(offset), DType::I32), zx); // offset - zx
      Value *correction = b.mul(wsum, b.reshape(shift, {}));
      bias = bias ? b.add(bias, correction) : correction;
    } else {
      xi = centered(r.x);
      wi = centered(r.w);
    }
    Value *sum = nullptr;
    if (r.conv) {
      std::vector<Value *> ops{xi, wi};
      if (bias)
        ops.push_back(bias);
      sum = b.op(OpKind::Conv, ops, r.p->attrs());
    } else {
      sum = b.op(OpKind::MatMul, {xi, r.wt ? b.transpose(wi, {1, 0}) : wi});
      if (bias)
        sum = b.add(sum, bias);
    }
    // The weight's scale, per output channel along dim 1 of the convolution's result.
    Value *scale = r.ws;
    if (r.conv && !oneValue(r.ws)) {
      Shape s(static_cast<size_t>(product->rank() - 1), 1);
      s[0] = r.channels;
      scale = b.reshape(r.ws, s);
    } else if (r.wt && !oneValue(r.ws)) {
      scale = b.reshape(r.ws, {r.channels});
    }
    return {sum, b.mul(r.x->operand(1), scale)};
  }

  /// Q(Relu?(product)) -> Q(float(integer sums), sx * sw / sy) {multiply}. (Float8
  /// products stay to dequantize(): their FP32 bias is added after the scale.)
  static bool requantize(Graph &g, Node &q) {
    Value *in = q.operand(0), *ys = q.operand(1), *yz = q.operand(2);
    if (!oneValue(ys) || ys->dtype() != DType::F32 || g.isOutput(in) || in->uses().size() != 1 ||
        q.attrInt("multiply") != 0)
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
    if (p && p->kind() == OpKind::Add)
      std::tie(p, biasDq) = biasAdd(g, *p, product);
    auto r = match(g, p, biasDq, product);
    if (!r || r->fp8() ||
        (relu && !(positive(r->x->operand(1)) && positive(r->ws) && positive(ys))))
      return false;
    GradBuilder b(g);
    b.setNameSuffix(".int");
    b.setInsertionPoint(&q);
    b.begin(q, {}, {});
    auto [sum, scale] = build(b, *r, product);
    // (One QuantizeLinear with `multiply` applies the FP32 multiplier, so that no
    // precision pass can move the product to FP16. The Relu acts on the int32 sums:
    // the multiplier is positive, so it commutes.)
    Value *multiplier = b.div(scale, ys);
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
    // The float chain it replaced (Relu, a bias Add, the product), now dead: erased,
    // so that dequantize() does not rebuild it.
    std::vector<Node *> chain;
    if (relu)
      chain.push_back(relu);
    if (Node *add = product->definingNode(); add && add != p)
      chain.push_back(add);
    chain.push_back(p);
    for (Node *dead : chain)
      if (!eraseIfDead(g, dead))
        break;
    return true;
  }

  static bool eraseIfDead(Graph &g, Node *n) {
    for (unsigned r = 0; r < n->numResults(); ++r)
      if (n->result(r)->hasUses() || g.isOutput(n->result(r)))
        return false;
    g.eraseNode(n);
    return true;
  }

  /// A product no QuantizeLinear takes: DequantizeLinear(integer sums, sx * sw), in
  /// FP32 (as ONNX Runtime's QDQ MatMul and Conv with a float output, up to FP32
  /// rounding).
  static bool dequantize(Graph &g, Node &p) {
    Value *product = p.result();
    if (product->uses().empty() && !g.isOutput(product))
      return false; // (a product requantize() replaced: dce removes it)
    Node *biasDq = nullptr, *anchor = &p;
    // A MatMul's bias: its only use an Add of a DequantizeLinear.
    if (p.kind() == OpKind::MatMul && product->uses().size() == 1 && !g.isOutput(product))
      if (Node *add = product->uses()[0].user; add && add->kind() == OpKind::Add)
        if (auto [mm, bd] = biasAdd(g, *add, add->result()); mm == &p && bd) {
          biasDq = bd;
          anchor = add;
          product = add->result();
        }
    auto r = match(g, &p, biasDq, product);
    if (!r)
      return false;
    GradBuilder b(g);
    b.setNameSuffix(".int");
    b.setInsertionPoint(anchor);
    b.begin(*anchor, {}, {});
    auto [sum, scale] = build(b, *r, product);
    // (As a DequantizeLinear of the sums, which stays FP32 under --fp16: the sums
    // exceed FP16's range. Float8's FP32 sums likewise, by MulAdd: times the scale plus
    // the bias along dim 1, in FP32.)
    Value *y = nullptr;
    if (r->fp8()) {
      Value *bias = b.scalar(0.0, DType::F32);
      if (r->floatBias) {
        Shape s(static_cast<size_t>(product->rank() - 1), 1);
        s[0] = r->channels;
        bias = b.reshape(r->floatBias, s);
      }
      y = b.op(OpKind::MulAdd, {sum, scale, bias});
    } else {
      y = b.op(OpKind::DequantizeLinear, {sum, scale});
    }
    if (!y || b.failed() || y->type() != product->type()) {
      llvm::consumeError(b.takeError());
      return false;
    }
    const std::string name = product->name();
    g.replaceAllUsesWith(product, y);
    g.renameValue(product, g.uniqueName(name + ".float"));
    g.renameValue(y, name);
    return true;
  }

  /// Add(MatMul, DequantizeLinear) of the product's shape: (the MatMul, the bias's
  /// DequantizeLinear), else (null, null).
  static std::pair<Node *, Node *> biasAdd(Graph &g, Node &add, const Value *product) {
    for (unsigned k : {0u, 1u}) {
      Node *mm = definedBy(add.operand(k), OpKind::MatMul);
      Node *bd = definedBy(add.operand(1 - k), OpKind::DequantizeLinear);
      if (mm && bd && !g.isOutput(mm->result()) && mm->result()->uses().size() == 1 &&
          mm->result()->shape() == product->shape())
        return {mm, bd};
    }
    return {nullptr, nullptr};
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
