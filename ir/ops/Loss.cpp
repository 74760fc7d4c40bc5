//===- Loss.cpp - Loss functions -------------------------------------------===//
//
// NegativeLogLikelihoodLoss(input[N,C,d...], target[N,d...], weight[C]?) with
// ONNX semantics: ignored targets contribute neither loss nor weight, and "mean"
// divides by the total weight of the counted targets. SoftmaxCrossEntropyLoss is
// imported as LogSoftmax followed by this op.
//===----------------------------------------------------------------------===//
#include "OpUtils.h"

#include <climits>
#include <numeric>

namespace dlc::ir {
namespace {
using namespace ops;

llvm::Error verifyNLL(const Node &n) {
  if (auto e = requireType(n, 0, kFloat))
    return e;
  if (auto e = requireType(n, 1, kInt))
    return e;
  const Shape &x = n.operand(0)->shape(), &t = n.operand(1)->shape();
  if (x.size() < 2)
    return makeError("input must be [N, C, d...]");
  Shape want{x[0]};
  want.insert(want.end(), x.begin() + 2, x.end());
  if (t != want)
    return errorf("target must have shape {0}, got {1}", shapeStr(want), shapeStr(t));
  if (Value *w = n.operand(2)) {
    if (auto e = requireSameType(n, 0, 2))
      return e;
    if (w->shape() != Shape{x[1]})
      return errorf("weight must have shape [{0}]", x[1]);
  }
  const std::string &r = n.attrString("reduction");
  if (r != "none" && r != "sum" && r != "mean")
    return errorf("unsupported reduction \"{0}\"", r);
  return ok();
}

InferResult inferNLL(const Node &n) {
  if (n.attrString("reduction") != "none")
    return TypeList{{n.operand(0)->dtype(), {}}};
  return TypeList{{n.operand(0)->dtype(), n.operand(1)->shape()}};
}

llvm::Error refNLL(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &xs = in[0]->shape();
  int64_t N = xs[0], C = xs[1], D = in[1]->numElements() / std::max<int64_t>(N, 1);
  int64_t ignore = n.attrInt("ignore_index"); // INT64_MIN (the default) ignores nothing
  auto x = in[0]->toVector<double>();
  std::vector<double> w;
  if (in.size() > 2 && in[2])
    w = in[2]->toVector<double>();
  std::vector<double> loss(N * D);
  double total = 0, weightSum = 0;
  for (int64_t b = 0; b < N; ++b)
    for (int64_t d = 0; d < D; ++d) {
      int64_t t = in[1]->getInt(b * D + d);
      if (t == ignore) {
        loss[b * D + d] = 0;
        continue;
      }
      if (t < 0 || t >= C)
        return errorf("target {0} is out of range for {1} classes", t, C);
      double wt = w.empty() ? 1.0 : w[t];
      loss[b * D + d] = -x[(b * C + t) * D + d] * wt;
      total += loss[b * D + d];
      weightSum += wt;
    }
  const std::string &r = n.attrString("reduction");
  if (r == "none")
    out[0] = Tensor::fromVector(out[0].type(), loss);
  else
    out[0] = Tensor::fromVector(out[0].type(),
                                std::vector<double>{r == "sum" ? total : total / weightSum});
  return ok();
}

/// d loss / d input[n, c, d] = -[c == target[n, d]] * w[c] * (g, or g / total
/// weight for "mean", or g[n, d] for "none"). Ignored targets get no gradient:
/// they are mapped to the out-of-range class C, for which OneHot is all zeros.
llvm::Error gradNLL(GradBuilder &b, const Node &n) {
  if (b.wants(2))
    return makeError("the class weights are not differentiable");
  Value *x = n.operand(0), *t = n.operand(1);
  int64_t C = x->shape()[1];
  DType dt = x->dtype();
  t = b.cast(t, DType::I64);
  int64_t ignore = n.attrInt("ignore_index");
  if (ignore != INT64_MIN)
    t = b.select(b.op(OpKind::Equal, {t, b.scalar(static_cast<double>(ignore), DType::I64)}),
                 b.scalar(static_cast<double>(C), DType::I64), t);
  Value *onOff =
      b.graph().addConstant("", Tensor::fromVector(TensorType{dt, {2}}, std::vector<double>{0, 1}));
  Value *mask =
      b.op(OpKind::OneHot, {t, onOff}, {{"axis", int64_t{1}}, {"depth", C}}); // [N, C, d...]
  if (Value *w = n.operand(2)) {
    Shape ws(x->rank(), 1);
    ws[1] = C;
    mask = b.mul(mask, b.reshape(w, ws));
  }
  const std::string &r = n.attrString("reduction");
  Value *g = b.grad();
  if (r == "none") {
    Shape gs = g->shape();
    gs.insert(gs.begin() + 1, 1);
    g = b.reshape(g, gs);
  } else if (r == "mean") {
    std::vector<int64_t> all(x->rank());
    std::iota(all.begin(), all.end(), 0);
    g = b.div(g, b.reshape(b.reduceSum(mask, all, false), {}));
  }
  b.accumulate(0, b.neg(b.mul(mask, g)));
  return ok();
}

} // namespace

void defineLossOps(OpTable &t) {
  t.def(OpKind::NegativeLogLikelihoodLoss)
      .operands(2, 3)
      .attr("ignore_index", AttrKind::Int, int64_t{INT64_MIN})
      .attr("reduction", AttrKind::String, "mean")
      .fusible(Fusibility::opaque())
      .fp16(Fp16Policy::Deny)
      .layout(LayoutRule::fixed())
      .verify(verifyNLL)
      .infer(inferNLL)
      .reference(refNLL);
  t[OpKind::NegativeLogLikelihoodLoss].gradient = gradNLL;
}

} // namespace dlc::ir
