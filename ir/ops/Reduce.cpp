//===- Reduce.cpp - Reductions, softmax and log-softmax --------------------===//
#include "OpUtils.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dlc::ir {
namespace {
using namespace ops;

/// Reduced axes of a Reduce* node: `axes` normalized; empty means all axes unless
/// noop_with_empty_axes is set (then none).
llvm::Expected<std::vector<bool>> reducedAxes(const Node &n, int64_t rank) {
  std::vector<bool> r(rank, false);
  const auto &axes = n.attrInts("axes");
  if (axes.empty()) {
    if (n.attrInt("noop_with_empty_axes") == 0)
      r.assign(rank, true);
    return r;
  }
  auto na = normalizeAxes(axes, rank);
  if (!na)
    return na.takeError();
  for (int64_t a : *na)
    r[a] = true;
  return r;
}

llvm::Error verifyReduce(const Node &n) {
  if (auto e = requireType(n, 0, kNumeric))
    return e;
  return reducedAxes(n, n.operand(0)->rank()).takeError();
}

InferResult inferReduce(const Node &n) {
  const Shape &x = n.operand(0)->shape();
  auto red = reducedAxes(n, static_cast<int64_t>(x.size()));
  if (!red)
    return red.takeError();
  bool keep = n.attrInt("keepdims") != 0;
  Shape out;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(*red)[i])
      out.push_back(x[i]);
    else if (keep)
      out.push_back(1);
  }
  return TypeList{{n.operand(0)->dtype(), out}};
}

/// For each input element, the linear index of the output element it reduces into.
std::vector<int64_t> reduceTargets(const Shape &x, const std::vector<bool> &red) {
  Shape outDims(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    outDims[i] = red[i] ? 1 : x[i];
  Shape outStrides = stridesOf(outDims);
  int64_t n = product(x);
  std::vector<int64_t> target(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t rem = i, t = 0;
    for (int64_t d = static_cast<int64_t>(x.size()) - 1; d >= 0; --d) {
      int64_t c = rem % x[d];
      rem /= x[d];
      if (!red[d])
        t += c * outStrides[d];
    }
    target[i] = t;
  }
  return target;
}

template <OpKind K> llvm::Error refReduce(const Node &n, const Inputs &in, Outputs &out) {
  auto red = reducedAxes(n, in[0]->rank());
  if (!red)
    return red.takeError();
  auto target = reduceTargets(in[0]->shape(), *red);
  int64_t outN = out[0].numElements();
  int64_t count = outN ? in[0]->numElements() / outN : 0;
  return dispatch(in[0]->dtype(), [&](auto ct) -> llvm::Error {
    using CT = AccType<decltype(ct)>;
    auto x = in[0]->template toVector<CT>();
    CT init = K == OpKind::ReduceProd ? CT(1)
              : K == OpKind::ReduceMax
                  ? (std::numeric_limits<CT>::has_infinity ? -std::numeric_limits<CT>::infinity()
                                                           : std::numeric_limits<CT>::lowest())
              : K == OpKind::ReduceMin
                  ? (std::numeric_limits<CT>::has_infinity ? std::numeric_limits<CT>::infinity()
                                                           : std::numeric_limits<CT>::max())
                  : CT(0);
    std::vector<CT> acc(outN, init);
    for (size_t i = 0; i < x.size(); ++i) {
      CT &a = acc[target[i]];
      CT v = x[i];
      if constexpr (K == OpKind::ReduceSum || K == OpKind::ReduceMean)
        a += v;
      else if constexpr (K == OpKind::ReduceProd)
        a *= v;
      else if constexpr (K == OpKind::ReduceMax)
        a = (v > a || v != v) ? v : a;
      else
        a = (v < a || v != v) ? v : a;
    }
    if constexpr (K == OpKind::ReduceMean)
      for (auto &a : acc)
        a = count ? a / static_cast<CT>(count) : a;
    out[0] = Tensor::fromVector(out[0].type(), acc);
    return ok();
  });
}

//===----------------------------------------------------------------------===//
// Softmax / LogSoftmax along one axis (opset 13 semantics; the importer rewrites
// older opsets' "flatten to 2-D" semantics).
//===----------------------------------------------------------------------===//

llvm::Error verifySoftmax(const Node &n) {
  if (auto e = requireType(n, 0, kFloat))
    return e;
  return normalizeAxis(n.attrInt("axis"), n.operand(0)->rank()).takeError();
}

template <bool Log> llvm::Error refSoftmax(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &xs = in[0]->shape();
  int64_t axis = *normalizeAxis(n.attrInt("axis"), in[0]->rank());
  int64_t len = xs[axis], inner = 1, outer = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= xs[i];
  for (size_t i = axis + 1; i < xs.size(); ++i)
    inner *= xs[i];
  auto x = in[0]->toVector<double>();
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return (o * len + k) * inner + i; };
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < len; ++k)
        mx = std::max(mx, x[at(k)]);
      double s = 0;
      for (int64_t k = 0; k < len; ++k)
        s += std::exp(x[at(k)] - mx);
      for (int64_t k = 0; k < len; ++k)
        y[at(k)] = Log ? x[at(k)] - mx - std::log(s) : std::exp(x[at(k)] - mx) / s;
    }
  out[0] = Tensor::fromVector(out[0].type(), y);
  return ok();
}

//===----------------------------------------------------------------------===//
// Hardmax, ArgMax/ArgMin, TopK, CumSum: ops over one axis.
//===----------------------------------------------------------------------===//

/// Splits a shape around `axis` into (outer, len, inner).
struct AxisSplit {
  int64_t outer = 1, len = 1, inner = 1;
  AxisSplit(const Shape &s, int64_t axis) {
    for (int64_t i = 0; i < axis; ++i)
      outer *= s[i];
    len = s[axis];
    for (size_t i = axis + 1; i < s.size(); ++i)
      inner *= s[i];
  }
  int64_t at(int64_t o, int64_t k, int64_t i) const { return (o * len + k) * inner + i; }
};

/// SoftmaxGrad(y, dy) {axis, log}: the input gradient of Softmax from its output y,
/// y (dy - sum(dy y)), or of LogSoftmax (log = 1), dy - exp(y) sum(dy), along the axis.
llvm::Error verifySoftmaxGrad(const Node &n) {
  if (auto e = requireType(n, 0, kFloat))
    return e;
  if (auto e = requireSameType(n, 0, 1))
    return e;
  if (n.operand(1)->shape() != n.operand(0)->shape())
    return errorf("the output gradient is {0}, the output {1}: they must match",
                  shapeStr(n.operand(1)->shape()), shapeStr(n.operand(0)->shape()));
  return normalizeAxis(n.attrInt("axis"), n.operand(0)->rank()).takeError();
}

llvm::Error refSoftmaxGrad(const Node &n, const Inputs &in, Outputs &out) {
  AxisSplit sp(in[0]->shape(), *normalizeAxis(n.attrInt("axis"), in[0]->rank()));
  const bool log = n.attrInt("log") != 0;
  auto y = in[0]->toVector<double>(), g = in[1]->toVector<double>();
  std::vector<double> dx(y.size());
  for (int64_t o = 0; o < sp.outer; ++o)
    for (int64_t i = 0; i < sp.inner; ++i) {
      double s = 0;
      for (int64_t k = 0; k < sp.len; ++k)
        s += log ? g[sp.at(o, k, i)] : g[sp.at(o, k, i)] * y[sp.at(o, k, i)];
      for (int64_t k = 0; k < sp.len; ++k) {
        const int64_t e = sp.at(o, k, i);
        dx[e] = log ? g[e] - std::exp(y[e]) * s : y[e] * (g[e] - s);
      }
    }
  out[0] = Tensor::fromVector(out[0].type(), dx);
  return ok();
}

/// LogSoftmax's gradient stays in FP32 as LogSoftmax does; Softmax's may run in FP16.
Fp16Policy softmaxGradFp16(const Node &n) {
  return n.attrInt("log") != 0 ? Fp16Policy::Deny : Fp16Policy::Allow;
}

llvm::Error verifyAxisOp(const Node &n) {
  if (auto e = requireType(n, 0, kNumeric))
    return e;
  return normalizeAxis(n.attrInt("axis"), n.operand(0)->rank()).takeError();
}

llvm::Error refHardmax(const Node &n, const Inputs &in, Outputs &out) {
  int64_t axis = *normalizeAxis(n.attrInt("axis"), in[0]->rank());
  AxisSplit sp(in[0]->shape(), axis);
  auto x = in[0]->toVector<double>();
  std::vector<double> y(x.size(), 0.0);
  for (int64_t o = 0; o < sp.outer; ++o)
    for (int64_t i = 0; i < sp.inner; ++i) {
      int64_t best = 0;
      for (int64_t k = 1; k < sp.len; ++k)
        if (x[sp.at(o, k, i)] > x[sp.at(o, best, i)])
          best = k;
      if (sp.len)
        y[sp.at(o, best, i)] = 1;
    }
  out[0] = Tensor::fromVector(out[0].type(), y);
  return ok();
}

InferResult inferArg(const Node &n) {
  Shape s = n.operand(0)->shape();
  int64_t axis = *normalizeAxis(n.attrInt("axis"), n.operand(0)->rank());
  if (n.attrInt("keepdims"))
    s[axis] = 1;
  else
    s.erase(s.begin() + axis);
  return TypeList{{DType::I64, s}};
}

template <bool IsMax> llvm::Error refArg(const Node &n, const Inputs &in, Outputs &out) {
  int64_t axis = *normalizeAxis(n.attrInt("axis"), in[0]->rank());
  bool last = n.attrInt("select_last_index") != 0;
  AxisSplit sp(in[0]->shape(), axis);
  auto x = in[0]->toVector<double>();
  std::vector<int64_t> r(sp.outer * sp.inner);
  for (int64_t o = 0; o < sp.outer; ++o)
    for (int64_t i = 0; i < sp.inner; ++i) {
      int64_t best = 0;
      for (int64_t k = 1; k < sp.len; ++k) {
        double v = x[sp.at(o, k, i)], b = x[sp.at(o, best, i)];
        bool better = IsMax ? (v > b || (last && v == b)) : (v < b || (last && v == b));
        if (better)
          best = k;
      }
      r[o * sp.inner + i] = best;
    }
  out[0] = Tensor::fromVector(out[0].type(), r);
  return ok();
}

llvm::Error verifyTopK(const Node &n) {
  if (auto e = verifyAxisOp(n))
    return e;
  int64_t axis = *normalizeAxis(n.attrInt("axis"), n.operand(0)->rank());
  int64_t k = n.attrInt("k");
  if (k < 0 || k > n.operand(0)->shape()[axis])
    return errorf("k = {0} is out of range for axis {1} of size {2}", k, axis,
                  n.operand(0)->shape()[axis]);
  return ok();
}

InferResult inferTopK(const Node &n) {
  Shape s = n.operand(0)->shape();
  s[*normalizeAxis(n.attrInt("axis"), n.operand(0)->rank())] = n.attrInt("k");
  return TypeList{{n.operand(0)->dtype(), s}, {DType::I64, s}};
}

llvm::Error refTopK(const Node &n, const Inputs &in, Outputs &out) {
  int64_t axis = *normalizeAxis(n.attrInt("axis"), in[0]->rank());
  int64_t k = n.attrInt("k");
  bool largest = n.attrInt("largest") != 0;
  AxisSplit sp(in[0]->shape(), axis);
  auto x = in[0]->toVector<double>();
  std::vector<double> vals(sp.outer * k * sp.inner);
  std::vector<int64_t> idx(vals.size());
  std::vector<int64_t> order(sp.len);
  for (int64_t o = 0; o < sp.outer; ++o)
    for (int64_t i = 0; i < sp.inner; ++i) {
      for (int64_t j = 0; j < sp.len; ++j)
        order[j] = j;
      // Ties keep the lower index first, as ONNX specifies. NaN orders above every
      // number (as PyTorch sorts), which keeps the order strict and weak.
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        double va = x[sp.at(o, a, i)], vb = x[sp.at(o, b, i)];
        bool an = std::isnan(va), bn = std::isnan(vb);
        if (an || bn)
          return largest ? an && !bn : bn && !an;
        return largest ? va > vb : va < vb;
      });
      for (int64_t j = 0; j < k; ++j) {
        vals[(o * k + j) * sp.inner + i] = x[sp.at(o, order[j], i)];
        idx[(o * k + j) * sp.inner + i] = order[j];
      }
    }
  out[0] = Tensor::fromVector(out[0].type(), vals);
  out[1] = Tensor::fromVector(out[1].type(), idx);
  return ok();
}

llvm::Error refCumSum(const Node &n, const Inputs &in, Outputs &out) {
  int64_t axis = *normalizeAxis(n.attrInt("axis"), in[0]->rank());
  bool exclusive = n.attrInt("exclusive") != 0, reverse = n.attrInt("reverse") != 0;
  AxisSplit sp(in[0]->shape(), axis);
  return dispatch(in[0]->dtype(), [&](auto ct) -> llvm::Error {
    using CT = AccType<decltype(ct)>;
    auto x = in[0]->template toVector<CT>();
    std::vector<CT> y(x.size());
    for (int64_t o = 0; o < sp.outer; ++o)
      for (int64_t i = 0; i < sp.inner; ++i) {
        CT acc = 0;
        for (int64_t step = 0; step < sp.len; ++step) {
          int64_t k = reverse ? sp.len - 1 - step : step;
          CT v = x[sp.at(o, k, i)];
          if (exclusive) {
            y[sp.at(o, k, i)] = acc;
            acc += v;
          } else {
            acc += v;
            y[sp.at(o, k, i)] = acc;
          }
        }
      }
    out[0] = Tensor::fromVector(out[0].type(), y);
    return ok();
  });
}

template <OpKind K> void reduce(OpTable &t, Fp16Policy fp16) {
  t.def(K)
      .operands(1)
      .attr("axes", AttrKind::Ints, std::vector<int64_t>{})
      .attr("keepdims", AttrKind::Int, int64_t{1})
      .attr("noop_with_empty_axes", AttrKind::Int, int64_t{0})
      .fusible(Fusibility::anchor(/*prologue=*/true, /*epilogue=*/true))
      .fp16(fp16)
      .layout(LayoutRule::axisAttrs(remapReduceAxes))
      .verify(verifyReduce)
      .infer(inferReduce)
      .reference(refReduce<K>);
}

//===----------------------------------------------------------------------===//
// Gradient rules
//===----------------------------------------------------------------------===//

/// The gradient of a reduction broadcast back over the reduced axes (scaled by
/// 1/count for ReduceMean).
template <bool Mean> llvm::Error gradReduceSumMean(GradBuilder &b, const Node &n) {
  const Shape &x = n.operand(0)->shape();
  auto red = reducedAxes(n, static_cast<int64_t>(x.size()));
  if (!red)
    return red.takeError();
  Shape kept = x;
  int64_t count = 1;
  for (size_t k = 0; k < x.size(); ++k)
    if ((*red)[k])
      kept[k] = 1, count *= x[k];
  Value *g = b.reshape(b.grad(), kept);
  if (Mean)
    g = b.scale(g, 1.0 / static_cast<double>(std::max<int64_t>(count, 1)));
  b.accumulate(0, b.op(OpKind::Expand, {g}, {{"shape", std::vector<int64_t>(x)}}));
  return ok();
}

/// Softmax: dx = y (g - sum(g y)); LogSoftmax: dx = g - softmax(x) sum(g), both
/// along the axis: one SoftmaxGrad node, which reads y and g once per row (its kernels
/// compute in FP32; FP64 spells the ops out).
template <bool Log> llvm::Error gradSoftmax(GradBuilder &b, const Node &n) {
  int64_t axis = *normalizeAxis(n.attrInt("axis"), n.operand(0)->rank());
  Value *g = b.grad(), *y = n.result();
  if (y->dtype() == DType::F64)
    b.accumulate(0, Log ? b.sub(g, b.mul(b.op(OpKind::Exp, {y}), b.reduceSum(g, {axis}, true)))
                        : b.mul(y, b.sub(g, b.reduceSum(b.mul(g, y), {axis}, true))));
  else
    b.accumulate(0, b.op(OpKind::SoftmaxGrad, {y, g},
                         {{"axis", Attribute(axis)}, {"log", Attribute(int64_t{Log})}}));
  return ok();
}

} // namespace

void defineReduceOps(OpTable &t) {
  reduce<OpKind::ReduceMean>(t, Fp16Policy::Allow);
  reduce<OpKind::ReduceSum>(t, Fp16Policy::Allow);
  reduce<OpKind::ReduceMax>(t, Fp16Policy::Allow);
  reduce<OpKind::ReduceMin>(t, Fp16Policy::Allow);
  reduce<OpKind::ReduceProd>(t, Fp16Policy::Deny);
  t.def(OpKind::Softmax)
      .operands(1)
      .attr("axis", AttrKind::Int, int64_t{-1})
      .fusible(Fusibility::anchor(/*prologue=*/true, /*epilogue=*/true))
      .fp16(Fp16Policy::Allow)
      .layout(LayoutRule::axisAttrs(remapAxis))
      .verify(verifySoftmax)
      .infer(inferSameAsOperand0)
      .reference(refSoftmax<false>);
  t.def(OpKind::LogSoftmax)
      .operands(1)
      .attr("axis", AttrKind::Int, int64_t{-1})
      .fusible(Fusibility::anchor(/*prologue=*/true, /*epilogue=*/true))
      .fp16(Fp16Policy::Deny)
      .layout(LayoutRule::axisAttrs(remapAxis))
      .verify(verifySoftmax)
      .infer(inferSameAsOperand0)
      .reference(refSoftmax<true>);
  t.def(OpKind::SoftmaxGrad)
      .operands(2)
      .attr("axis", AttrKind::Int, int64_t{-1})
      .attr("log", AttrKind::Int, int64_t{0})
      .fusible(Fusibility::anchor(/*prologue=*/false, /*epilogue=*/true))
      .fp16(Fp16Policy::Allow, softmaxGradFp16)
      .layout(LayoutRule::axisAttrs(remapAxis))
      .verify(verifySoftmaxGrad)
      .infer(inferSameAsOperand0)
      .reference(refSoftmaxGrad);
  t.def(OpKind::Hardmax)
      .operands(1)
      .attr("axis", AttrKind::Int, int64_t{-1})
      .fusible(Fusibility::opaque())
      .fp16(Fp16Policy::Follow) // comparisons only
      .layout(LayoutRule::axisAttrs(remapAxis))
      .verify(verifySoftmax)
      .infer(inferSameAsOperand0)
      .reference(refHardmax);
  for (OpKind k : {OpKind::ArgMax, OpKind::ArgMin})
    t.def(k)
        .operands(1)
        .attr("axis", AttrKind::Int, int64_t{0})
        .attr("keepdims", AttrKind::Int, int64_t{1})
        .attr("select_last_index", AttrKind::Int, int64_t{0})
        .fusible(Fusibility::opaque())
        .fp16(Fp16Policy::Follow) // comparisons only
        .layout(LayoutRule::axisAttrs(remapAxis))
        .verify(verifyAxisOp)
        .infer(inferArg)
        .reference(k == OpKind::ArgMax ? refArg<true> : refArg<false>);
  t.def(OpKind::TopK)
      .operands(1)
      .results(2)
      .attr("axis", AttrKind::Int, int64_t{-1})
      .attr("k", AttrKind::Int)
      .attr("largest", AttrKind::Int, int64_t{1})
      .attr("sorted", AttrKind::Int, int64_t{1})
      .fusible(Fusibility::opaque())
      .fp16(Fp16Policy::Follow) // comparisons only
      .layout(LayoutRule::axisAttrs(remapAxis))
      .verify(verifyTopK)
      .infer(inferTopK)
      .reference(refTopK);
  t.def(OpKind::CumSum)
      .operands(1)
      .attr("axis", AttrKind::Int)
      .attr("exclusive", AttrKind::Int, int64_t{0})
      .attr("reverse", AttrKind::Int, int64_t{0})
      .fusible(Fusibility::opaque())
      .fp16(Fp16Policy::Deny)
      .layout(LayoutRule::axisAttrs(remapAxis))
      .verify(verifyAxisOp)
      .infer(inferSameAsOperand0)
      .reference(refCumSum);
  t[OpKind::ReduceSum].gradient = gradReduceSumMean<false>;
  t[OpKind::ReduceMean].gradient = gradReduceSumMean<true>;
  t[OpKind::Softmax].gradient = gradSoftmax<false>;
  t[OpKind::LogSoftmax].gradient = gradSoftmax<true>;
}

} // namespace dlc::ir
