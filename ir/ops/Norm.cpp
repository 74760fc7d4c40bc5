//===- Norm.cpp - Batch, layer, RMS, instance and group normalization ------===//
#include "OpUtils.h"
#include "dlc/ir/GradBuilder.h"

namespace dlc::ir {
namespace {
using namespace ops;

//===----------------------------------------------------------------------===//
// BatchNormalization(X, scale, B, mean, var). With training_mode = 1 it uses the
// batch statistics and also returns the updated running mean and variance.
//===----------------------------------------------------------------------===//

llvm::Error verifyBatchNorm(const Node &n) {
  if (auto e = requireType(n, 0, kFloat))
    return e;
  if (auto e = requireMinRank(n, 0, 2))
    return e;
  int64_t c = n.operand(0)->shape()[1];
  for (unsigned i = 1; i < 5; ++i) {
    if (auto e = requireType(n, i, kFloat))
      return e;
    if (n.operand(i)->shape() != Shape{c})
      return errorf("operand {0} must have shape [{1}], got {2}", i, c, n.operand(i)->type().str());
  }
  bool training = n.attrInt("training_mode") != 0;
  if (!training && n.numResults() != 1)
    return makeError("only training_mode = 1 produces running mean and variance results");
  if (training && n.numResults() == 2)
    return makeError("training mode needs both running mean and running variance results");
  return ok();
}

InferResult inferBatchNorm(const Node &n) {
  TypeList r{n.operand(0)->type()};
  for (unsigned i = 1; i < n.numResults(); ++i)
    r.push_back(n.operand(2 + i)->type());
  return r;
}

llvm::Error refBatchNorm(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &xs = in[0]->shape();
  int64_t N = xs[0], C = xs[1], S = in[0]->numElements() / std::max<int64_t>(N * C, 1);
  double eps = n.attrFloat("epsilon"), momentum = n.attrFloat("momentum");
  auto x = in[0]->toVector<double>();
  auto scale = in[1]->toVector<double>(), bias = in[2]->toVector<double>();
  auto mean = in[3]->toVector<double>(), var = in[4]->toVector<double>();
  bool training = n.attrInt("training_mode") != 0;
  std::vector<double> useMean = mean, useVar = var;
  if (training) {
    for (int64_t c = 0; c < C; ++c) {
      double s = 0, s2 = 0;
      for (int64_t b = 0; b < N; ++b)
        for (int64_t i = 0; i < S; ++i)
          s += x[(b * C + c) * S + i];
      double m = s / static_cast<double>(N * S);
      for (int64_t b = 0; b < N; ++b)
        for (int64_t i = 0; i < S; ++i) {
          double d = x[(b * C + c) * S + i] - m;
          s2 += d * d;
        }
      useMean[c] = m;
      useVar[c] = s2 / static_cast<double>(N * S);
    }
  }
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < N; ++b)
    for (int64_t c = 0; c < C; ++c) {
      double inv = 1.0 / std::sqrt(useVar[c] + eps);
      for (int64_t i = 0; i < S; ++i) {
        int64_t k = (b * C + c) * S + i;
        y[k] = (x[k] - useMean[c]) * inv * scale[c] + bias[c];
      }
    }
  out[0] = Tensor::fromVector(out[0].type(), y);
  if (out.size() == 3) {
    std::vector<double> rm(C), rv(C);
    for (int64_t c = 0; c < C; ++c) {
      rm[c] = mean[c] * momentum + useMean[c] * (1 - momentum);
      rv[c] = var[c] * momentum + useVar[c] * (1 - momentum);
    }
    out[1] = Tensor::fromVector(out[1].type(), rm);
    out[2] = Tensor::fromVector(out[2].type(), rv);
  }
  return ok();
}

//===----------------------------------------------------------------------===//
// LayerNormalization(X, Scale, B?) over the dims from `axis` on. Optional results
// Mean and InvStdDev have X's shape with those dims set to 1.
//===----------------------------------------------------------------------===//

llvm::Error verifyLayerNorm(const Node &n) {
  if (auto e = requireType(n, 0, kFloat))
    return e;
  if (auto e = requireSameType(n, 0, 1))
    return e;
  if (auto e = requireSameType(n, 0, 2))
    return e;
  auto axis = normalizeAxis(n.attrInt("axis"), n.operand(0)->rank());
  if (!axis)
    return axis.takeError();
  const Shape &x = n.operand(0)->shape();
  Shape norm(x.begin() + *axis, x.end());
  for (unsigned i = 1; i < 3; ++i) {
    Value *v = n.operand(i);
    if (!v)
      continue;
    auto s = broadcastShapes(v->shape(), norm);
    if (!s || *s != norm)
      return errorf("operand {0} of shape {1} does not broadcast to the normalized shape {2}", i,
                    shapeStr(v->shape()), shapeStr(norm));
  }
  return ok();
}

InferResult inferLayerNorm(const Node &n) {
  TypeList r{n.operand(0)->type()};
  int64_t axis = *normalizeAxis(n.attrInt("axis"), n.operand(0)->rank());
  Shape stat = n.operand(0)->shape();
  for (size_t i = axis; i < stat.size(); ++i)
    stat[i] = 1;
  DType statType = n.attrInt("stash_type") == 1 ? DType::F32 : n.operand(0)->dtype();
  for (unsigned i = 1; i < n.numResults(); ++i)
    r.push_back({statType, stat});
  return r;
}

/// LayerNormalization's and RMSNormalization's view of X: rows of the dims from `axis`
/// on (`outer` rows of `inner` elements) and the scale broadcast over a row.
struct NormRows {
  Shape norm;
  int64_t inner, outer;
  std::vector<double> x, scale;
  NormRows(const Node &n, const Inputs &in)
      : norm(in[0]->shape().begin() + *normalizeAxis(n.attrInt("axis"), in[0]->rank()),
             in[0]->shape().end()),
        inner(product(norm)), outer(in[0]->numElements() / std::max<int64_t>(inner, 1)),
        x(in[0]->toVector<double>()), scale(in[1]->toVector<double>()) {}
};

llvm::Error refLayerNorm(const Node &n, const Inputs &in, Outputs &out) {
  NormRows rows(n, in);
  const Shape &norm = rows.norm;
  int64_t inner = rows.inner, outer = rows.outer;
  double eps = n.attrFloat("epsilon");
  const std::vector<double> &x = rows.x, &scale = rows.scale;
  std::vector<double> bias;
  if (in.size() > 2 && in[2])
    bias = in[2]->toVector<double>();
  BroadcastIndex is(in[1]->shape(), norm);
  std::optional<BroadcastIndex> ib;
  if (!bias.empty())
    ib.emplace(in[2]->shape(), norm);
  std::vector<double> y(x.size()), means(outer), invs(outer);
  for (int64_t o = 0; o < outer; ++o) {
    const double *row = x.data() + o * inner;
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < inner; ++i)
      s += row[i];
    double m = s / static_cast<double>(inner);
    for (int64_t i = 0; i < inner; ++i)
      s2 += (row[i] - m) * (row[i] - m);
    double inv = 1.0 / std::sqrt(s2 / static_cast<double>(inner) + eps);
    for (int64_t i = 0; i < inner; ++i)
      y[o * inner + i] = (row[i] - m) * inv * scale[is(i)] + (bias.empty() ? 0.0 : bias[(*ib)(i)]);
    means[o] = m;
    invs[o] = inv;
  }
  out[0] = Tensor::fromVector(out[0].type(), y);
  if (out.size() > 1)
    out[1] = Tensor::fromVector(out[1].type(), means);
  if (out.size() > 2)
    out[2] = Tensor::fromVector(out[2].type(), invs);
  return ok();
}

//===----------------------------------------------------------------------===//
// LayerNormGrad(X, dY, scale) {axis, epsilon} -> (dX, mean, rstd): LayerNormalization's
// input gradient (autodiff), the statistics recomputed from X. With xhat = (X - mean)
// * rstd and gs = dY * scale, dX = rstd * (gs - mean(gs) - xhat * mean(gs * xhat)) over
// each row (the dims from `axis` on). The rows' mean and rstd = 1/sqrt(var + epsilon),
// in X's type, serve the scale's gradient. One row kernel reads X and dY once.
//===----------------------------------------------------------------------===//

llvm::Error verifyLayerNormGrad(const Node &n) {
  if (auto e = requireType(n, 0, kFloat))
    return e;
  if (auto e = requireSameType(n, 0, 1))
    return e;
  auto axis = normalizeAxis(n.attrInt("axis"), n.operand(0)->rank());
  if (!axis)
    return axis.takeError();
  const Shape &x = n.operand(0)->shape();
  if (n.operand(1)->shape() != x)
    return errorf("the output gradient is {0}, the input {1}: they must match",
                  shapeStr(n.operand(1)->shape()), shapeStr(x));
  Shape norm(x.begin() + *axis, x.end());
  if (product(norm) == 0)
    return errorf("the normalized shape {0} is empty", shapeStr(norm));
  const Value *scale = n.operand(2);
  if (scale->dtype() != n.operand(0)->dtype() || scale->shape() != norm)
    return errorf("the scale is {0}; it must be {1}{2} (the normalized shape)", scale->type().str(),
                  dtypeName(n.operand(0)->dtype()), shapeStr(norm));
  return ok();
}

InferResult inferLayerNormGrad(const Node &n) {
  int64_t axis = *normalizeAxis(n.attrInt("axis"), n.operand(0)->rank());
  Shape stat = n.operand(0)->shape();
  for (size_t i = axis; i < stat.size(); ++i)
    stat[i] = 1;
  const DType dt = n.operand(0)->dtype();
  return TypeList{n.operand(0)->type(), TensorType(dt, stat), TensorType(dt, stat)};
}

llvm::Error refLayerNormGrad(const Node &n, const Inputs &in, Outputs &out) {
  NormRows rows(n, std::vector<const Tensor *>{in[0], in[2]});
  const int64_t len = rows.inner;
  const double eps = n.attrFloat("epsilon"), count = static_cast<double>(len);
  const std::vector<double> &x = rows.x, &scale = rows.scale;
  auto g = in[1]->toVector<double>();
  std::vector<double> dx(x.size()), means(rows.outer), rstds(rows.outer);
  for (int64_t o = 0; o < rows.outer; ++o) {
    const double *xr = x.data() + o * len, *gr = g.data() + o * len;
    double s = 0, s2 = 0, sg = 0, sgx = 0;
    for (int64_t i = 0; i < len; ++i)
      s += xr[i];
    const double m = s / count;
    for (int64_t i = 0; i < len; ++i)
      s2 += (xr[i] - m) * (xr[i] - m);
    const double r = 1.0 / std::sqrt(s2 / count + eps);
    for (int64_t i = 0; i < len; ++i) {
      sg += gr[i] * scale[i];
      sgx += gr[i] * scale[i] * (xr[i] - m) * r;
    }
    for (int64_t i = 0; i < len; ++i)
      dx[o * len + i] = r * (gr[i] * scale[i] - sg / count - (xr[i] - m) * r * sgx / count);
    means[o] = m;
    rstds[o] = r;
  }
  out[0] = Tensor::fromVector(out[0].type(), dx);
  out[1] = Tensor::fromVector(out[1].type(), means);
  out[2] = Tensor::fromVector(out[2].type(), rstds);
  return ok();
}

//===----------------------------------------------------------------------===//
// RMSNormalization(X, scale) (ONNX opset 23) over the dims from `axis` on:
// Y = X / sqrt(mean(X^2) + epsilon) * scale, computed in FP32 when stash_type is 1
// (ONNX's FLOAT), else in X's dtype. With stash_type 1 and FP32/FP16/BF16 data it is
// the row_norm kernels' RMS form (one read of each row, the scaling in FP32 and one
// rounding); otherwise its decomposition, ONNX's function body, is its lowering
// (`legalize`). Autodiff differentiates the decomposition (`decompose`).
//===----------------------------------------------------------------------===//

llvm::Error refRmsNorm(const Node &n, const Inputs &in, Outputs &out) {
  NormRows rows(n, in);
  const Shape &norm = rows.norm;
  int64_t inner = rows.inner, outer = rows.outer;
  double eps = n.attrFloat("epsilon");
  const std::vector<double> &x = rows.x, &scale = rows.scale;
  BroadcastIndex is(in[1]->shape(), norm);
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    const double *row = x.data() + o * inner;
    double s2 = 0;
    for (int64_t i = 0; i < inner; ++i)
      s2 += row[i] * row[i];
    double inv = 1.0 / std::sqrt(s2 / static_cast<double>(inner) + eps);
    for (int64_t i = 0; i < inner; ++i)
      y[o * inner + i] = row[i] * inv * scale[is(i)];
  }
  out[0] = Tensor::fromVector(out[0].type(), y);
  return ok();
}

bool rmsNormHasKernel(const Node &n) {
  auto floating = [](DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; };
  return n.attrInt("stash_type") == 1 && n.numResults() == 1 && floating(n.operand(0)->dtype()) &&
         floating(n.operand(1)->dtype());
}

llvm::Expected<std::vector<Value *>> decomposeRmsNorm(GradBuilder &b, const Node &n) {
  Value *x = n.operand(0);
  int64_t rank = x->rank(), axis = *normalizeAxis(n.attrInt("axis"), rank);
  std::vector<int64_t> axes;
  for (int64_t i = axis; i < rank; ++i)
    axes.push_back(i);
  DType stash = n.attrInt("stash_type") == 1 ? DType::F32 : x->dtype();
  Value *xs = b.cast(x, stash);
  Value *meanSquare =
      b.op(OpKind::ReduceMean, {b.mul(xs, xs)}, {{"axes", axes}, {"keepdims", int64_t{1}}});
  Value *rms = b.op(OpKind::Sqrt, {b.add(meanSquare, b.scalar(n.attrFloat("epsilon"), stash))});
  Value *y = b.mul(b.cast(b.div(xs, rms), x->dtype()), n.operand(1));
  if (auto e = b.takeError())
    return e;
  return std::vector<Value *>{y};
}

//===----------------------------------------------------------------------===//
// InstanceNormalization(X, scale[C], B[C]) and GroupNormalization(X, scale[C],
// bias[C]) normalize per (n, group) over the group's channels and all spatial
// positions; instance normalization is the case group = channel. The importer
// expands opset 18's per-group scale/bias to per-channel.
//===----------------------------------------------------------------------===//

llvm::Error verifyChannelNorm(const Node &n) {
  if (auto e = requireType(n, 0, kFloat))
    return e;
  if (auto e = requireMinRank(n, 0, 3))
    return e;
  int64_t c = n.operand(0)->shape()[1];
  for (unsigned i = 1; i < 3; ++i) {
    if (auto e = requireSameType(n, 0, i))
      return e;
    if (n.operand(i)->shape() != Shape{c})
      return errorf("operand {0} must have shape [{1}], got {2}", i, c, n.operand(i)->type().str());
  }
  if (n.kind() == OpKind::GroupNormalization) {
    int64_t g = n.attrInt("num_groups");
    if (g < 1 || c % g != 0)
      return errorf("num_groups = {0} must divide the channel count {1}", g, c);
  }
  return ok();
}

llvm::Error refChannelNorm(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &xs = in[0]->shape();
  int64_t N = xs[0], C = xs[1], S = in[0]->numElements() / std::max<int64_t>(N * C, 1);
  int64_t G = n.kind() == OpKind::GroupNormalization ? n.attrInt("num_groups") : C;
  int64_t cpg = C / G, len = cpg * S;
  double eps = n.attrFloat("epsilon");
  auto x = in[0]->toVector<double>();
  auto scale = in[1]->toVector<double>(), bias = in[2]->toVector<double>();
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < N; ++b)
    for (int64_t g = 0; g < G; ++g) {
      const double *p = x.data() + (b * C + g * cpg) * S;
      double s = 0, s2 = 0;
      for (int64_t i = 0; i < len; ++i)
        s += p[i];
      double m = len ? s / static_cast<double>(len) : 0;
      for (int64_t i = 0; i < len; ++i)
        s2 += (p[i] - m) * (p[i] - m);
      double inv = 1.0 / std::sqrt((len ? s2 / static_cast<double>(len) : 0) + eps);
      for (int64_t i = 0; i < len; ++i) {
        int64_t c = g * cpg + i / S;
        y[(b * C + g * cpg) * S + i] = (p[i] - m) * inv * scale[c] + bias[c];
      }
    }
  out[0] = Tensor::fromVector(out[0].type(), y);
  return ok();
}

llvm::Error verifyLRN(const Node &n) {
  if (auto e = requireType(n, 0, kFloat))
    return e;
  if (auto e = requireMinRank(n, 0, 3))
    return e;
  if (n.attrInt("size") < 1)
    return makeError("size must be positive");
  return ok();
}

llvm::Error refLRN(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &xs = in[0]->shape();
  int64_t N = xs[0], C = xs[1], S = in[0]->numElements() / std::max<int64_t>(N * C, 1);
  int64_t size = n.attrInt("size");
  double alpha = n.attrFloat("alpha"), beta = n.attrFloat("beta"), bias = n.attrFloat("bias");
  int64_t lo = (size - 1) / 2, hi = (size - 1) - lo; // floor and ceil of (size-1)/2
  auto x = in[0]->toVector<double>();
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < N; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < S; ++i) {
        double sq = 0;
        for (int64_t k = std::max<int64_t>(0, c - lo); k <= std::min<int64_t>(C - 1, c + hi); ++k) {
          double v = x[(b * C + k) * S + i];
          sq += v * v;
        }
        int64_t idx = (b * C + c) * S + i;
        y[idx] = x[idx] / std::pow(bias + alpha / static_cast<double>(size) * sq, beta);
      }
  out[0] = Tensor::fromVector(out[0].type(), y);
  return ok();
}

//===----------------------------------------------------------------------===//
// Gradient rules
//===----------------------------------------------------------------------===//

/// Normalization over `axes` with statistics of the batch (BatchNorm in training
/// mode, LayerNorm): with xhat = (x - mean) * rstd and gs = dY * scale,
/// dX = rstd * (gs - mean(gs) - xhat * mean(gs * xhat)). The statistics are
/// computed again from X (normStats: the forward's own, after CSE). Returns dX and xhat.
std::pair<Value *, Value *> normalizeBackward(GradBuilder &b, Value *x, Value *g, Value *scale,
                                              const std::vector<int64_t> &axes, double eps) {
  AttrMap mean{{"axes", axes}, {"keepdims", int64_t{1}}};
  NormStats st = normStats(b, x, axes, eps);
  Value *xhat = b.mul(st.centered, st.rstd);
  Value *gs = b.mul(g, scale);
  Value *inner = b.sub(b.sub(gs, b.op(OpKind::ReduceMean, {gs}, mean)),
                       b.mul(xhat, b.op(OpKind::ReduceMean, {b.mul(gs, xhat)}, mean)));
  return {b.mul(st.rstd, inner), xhat};
}

/// BatchNormalization's reduced dims (all but the channel dim 1) and the per-channel
/// shape [1, C, 1...] its scale, bias and statistics broadcast from.
std::pair<std::vector<int64_t>, Shape> batchNormAxes(const Value *x) {
  Shape cs(static_cast<size_t>(x->rank()), 1);
  cs[1] = x->shape()[1];
  return {batchAndSpatialAxes(x->rank()), cs};
}

llvm::Expected<std::vector<Value *>> batchNormTrainingCanonical(GradBuilder &b, const Node &n) {
  if (!n.attrInt("training_mode"))
    return makeError("inference-mode BatchNormalization is element-wise already");
  for (unsigned i = 1; i < 5; ++i) // (ONNX lets them differ; the ops below would not verify)
    if (n.operand(i)->dtype() != n.operand(0)->dtype())
      return makeError("the scale, bias and statistics are of another type than X");
  // An inference graph's batch statistics (a TRAINING export compiled for inference:
  // the running statistics lead nowhere) in FP32 wait for `precision`: lowered to
  // FP16/BF16 first, they decompose with normStats' FP32 squares; decomposed now, the
  // squares would be lowered too (and FP32 keeps the kernel, as an inference build).
  const Graph &g = *n.graph();
  bool trainsStatistics = false;
  for (unsigned r = 1; r < n.numResults(); ++r)
    trainsStatistics |= !n.result(r)->uses().empty() || g.isOutput(n.result(r));
  if (!trainsStatistics && n.operand(0)->dtype() == DType::F32)
    return makeError("FP32 batch statistics of an inference graph stay one kernel");
  std::vector<Value *> r = batchNormTrainingOps(b, n, /*allReduce=*/false);
  if (auto e = b.takeError())
    return e;
  return r;
}

/// BatchNormalization: training mode differentiates through the batch statistics;
/// inference mode treats the running statistics as constants. The running
/// statistics (operands 3, 4) get no gradient.
///
/// In training mode the scale is per channel, so normalizeBackward's mean(gs) and
/// mean(gs * xhat) are scale * sum(g) / count and scale * sum(g * xhat) / count, the
/// bias's and scale's gradients: two reductions per channel in all (not four), summed
/// in FP32 for 16-bit data (a loss-scaled sum over a batch's positions overflows FP16).
llvm::Error gradBatchNorm(GradBuilder &b, const Node &n) {
  if (b.wants(3) || b.wants(4))
    return makeError("the running mean and variance are not differentiable");
  Value *x = n.operand(0), *g = b.grad();
  auto [axes, cs] = batchNormAxes(x);
  Value *scale = b.reshape(n.operand(1), cs);
  double eps = n.attrFloat("epsilon");
  DType dt = x->dtype();
  if (n.attrInt("training_mode")) {
    NormStats st = normStats(b, x, axes, eps);
    Value *xhat = b.mul(st.centered, st.rstd);
    DType acc = st.var->dtype(); // (FP32 for 16-bit data)
    Value *g32 = b.cast(g, acc);
    Value *sumG = b.reduceSum(g32, axes, true);
    Value *sumGX = b.reduceSum(b.mul(g32, b.cast(xhat, acc)), axes, true);
    double inv = static_cast<double>(cs[1]) / static_cast<double>(x->type().numElements());
    Value *inner = b.sub(b.sub(g, b.cast(b.scale(sumG, inv), dt)),
                         b.mul(xhat, b.cast(b.scale(sumGX, inv), dt)));
    b.accumulate(0, b.mul(b.mul(scale, st.rstd), inner));
    Shape c{cs[1]};
    if (b.wants(1))
      b.accumulate(1, b.cast(b.reshape(sumGX, c), dt));
    if (b.wants(2))
      b.accumulate(2, b.cast(b.reshape(sumG, c), dt));
    return ok();
  }
  Value *rstd = b.op(OpKind::Reciprocal,
                     {b.op(OpKind::Sqrt, {b.add(b.reshape(n.operand(4), cs), b.scalar(eps, dt))})});
  Value *xhat = b.mul(b.sub(x, b.reshape(n.operand(3), cs)), rstd);
  b.accumulate(0, b.mul(g, b.mul(scale, rstd)));
  if (b.wants(1))
    b.accumulate(1, b.reduceSum(b.mul(g, xhat), axes, false));
  if (b.wants(2))
    b.accumulate(2, b.reduceSum(g, axes, false));
  return ok();
}

llvm::Error gradLayerNorm(GradBuilder &b, const Node &n) {
  Value *x = n.operand(0), *g = b.grad();
  int64_t r = x->rank(), axis = *normalizeAxis(n.attrInt("axis"), r);
  std::vector<int64_t> axes;
  for (int64_t i = axis; i < r; ++i)
    axes.push_back(i);
  Value *scale = n.operand(1);
  const Shape norm(x->shape().begin() + axis, x->shape().end());
  Value *dx = nullptr, *xhat = nullptr;
  if (scale->shape() == norm && product(norm) > 0 && x->dtype() != DType::F64) {
    // One row kernel for dX; the scale's gradient sums dY * xhat from its statistics.
    std::vector<Value *> st =
        b.ops(OpKind::LayerNormGrad, {x, g, scale},
              {{"axis", Attribute(axis)}, {"epsilon", *n.attr("epsilon")}}, 3); // (dX, mean, rstd)
    dx = st[0];
    xhat = b.mul(b.sub(x, st[1]), st[2]);
  } else { // a scale broadcast to the normalized shape, FP64, or no elements: spelled out
    std::tie(dx, xhat) = normalizeBackward(b, x, g, scale, axes, n.attrFloat("epsilon"));
  }
  b.accumulate(0, dx);
  b.accumulate(1, b.mul(g, xhat)); // summed to the scale's shape by the builder
  if (n.operand(2))
    b.accumulate(2, g);
  return ok();
}

/// BatchNormalization trains with batch statistics, and its running statistics
/// become state variables updated by the node's second and third results (ONNX's
/// momentum formula). An inference-form node (PyTorch's eval-mode export) gets the
/// training form; a training-form node (a TrainingMode.TRAINING export, whose
/// running-statistics results lead nowhere) keeps its own.
llvm::Error batchNormToTraining(Graph &g, Node &n) {
  Value *mean = n.operand(3), *var = n.operand(4);
  for (Value *s : {mean, var}) {
    if (s->isConstant())
      g.makeParameter(s, false);
    else if (s->isParameter())
      g.setTrainable(s, false);
    else
      return errorf("{0}: the running statistics must be initializers to be trained", n.describe());
  }
  Node *t = &n;
  if (n.numResults() < 3) {
    AttrMap attrs = n.attrs();
    attrs["training_mode"] = int64_t{1};
    std::vector<Value *> ops(n.operands().begin(), n.operands().end());
    auto made = g.createInferred(OpKind::BatchNormalization, ops, attrs, 3, n.name(), &n);
    if (!made)
      return made.takeError();
    t = *made;
    g.replaceAllUsesWith(n.result(0), t->result(0));
    g.eraseNode(&n);
  }
  g.addUpdate(mean, t->result(1));
  g.addUpdate(var, t->result(2));
  return ok();
}

/// In inference mode, a training-form BatchNormalization reads its running statistics.
std::optional<std::vector<Value *>> batchNormForInference(Graph &g, const Node &n,
                                                          const std::vector<Value *> &operands) {
  if (n.attrInt("training_mode") == 0)
    return std::nullopt;
  AttrMap attrs = n.attrs();
  attrs["training_mode"] = int64_t{0};
  Node *c = g.createNode(OpKind::BatchNormalization, operands, {n.result()->type()}, attrs,
                         n.name() + ".eval", nullptr, {g.uniqueName(n.result()->name() + ".eval")});
  std::vector<Value *> results(n.numResults(), nullptr);
  results[0] = c->result();
  return results;
}

/// Inference BatchNormalization is element-wise: its statistics are read per channel
/// (dim 1), and the result stays in FP32 inside a fused kernel. In training mode it
/// computes batch statistics: a kernel of its own.
Fusibility fusibleBatchNorm() {
  Fusibility f = Fusibility::elementwise();
  f.operandAccess = [](const Node &n, unsigned k) -> std::optional<OperandAccess> {
    if (k == 0)
      return std::nullopt;
    OperandAccess channel{k, std::vector<DimAccess>(n.result()->rank())};
    channel.dims[1].dim = 0;
    return channel;
  };
  f.roundsResult = false;
  f.opaqueWhen = [](const Node &n) { return n.attrInt("training_mode") != 0; };
  return f;
}

/// LayerNormalization's row kernel takes a prologue on X only (it reads the scale and
/// bias directly).
Fusibility fusibleLayerNorm() {
  Fusibility f = Fusibility::anchor(/*prologue=*/true, /*epilogue=*/true);
  f.prologueOperands = 1u;
  return f;
}

} // namespace

NormStats normStats(GradBuilder &b, Value *x, const std::vector<int64_t> &axes, double eps,
                    bool allReduce) {
  AttrMap meanAttrs{{"axes", axes}, {"keepdims", int64_t{1}}};
  auto mean = [&](Value *v) {
    Value *m = b.op(OpKind::ReduceMean, {v}, meanAttrs);
    return allReduce ? b.op(OpKind::AllReduce, {m}) : m;
  };
  DType dt = x->dtype(), acc = sumType(dt);
  NormStats s;
  s.mean = mean(x);
  s.centered = b.sub(x, s.mean);
  Value *c = b.cast(s.centered, acc);
  s.var = mean(b.mul(c, c));
  s.rstd = b.cast(
      b.op(OpKind::Reciprocal, {b.op(OpKind::Sqrt, {b.add(s.var, b.scalar(eps, acc))})}), dt);
  return s;
}

std::vector<Value *> batchNormTrainingOps(GradBuilder &b, const Node &n, bool allReduce) {
  Value *x = n.operand(0);
  auto [axes, cs] = batchNormAxes(x);
  NormStats st = normStats(b, x, axes, n.attrFloat("epsilon"), allReduce);
  Value *y = b.add(b.mul(b.mul(st.centered, st.rstd), b.reshape(n.operand(1), cs)),
                   b.reshape(n.operand(2), cs));
  std::vector<Value *> results{y};
  if (n.numResults() == 3) {
    double momentum = n.attrFloat("momentum");
    auto running = [&](Value *old, Value *batch) {
      Value *flat = b.reshape(b.cast(batch, old->dtype()), old->shape());
      return b.add(b.scale(old, momentum), b.scale(flat, 1 - momentum));
    };
    results.push_back(running(n.operand(3), st.mean));
    results.push_back(running(n.operand(4), st.var));
  }
  return results;
}

void defineNormOps(OpTable &t) {
  t.def(OpKind::BatchNormalization)
      .operands(5)
      .results(1, 3)
      .attr("epsilon", AttrKind::Float, 1e-5f)
      .attr("momentum", AttrKind::Float, 0.9f)
      .attr("training_mode", AttrKind::Int, int64_t{0})
      .stateOperands({3, 4})
      .modes(batchNormToTraining, batchNormForInference)
      .fusible(fusibleBatchNorm())
      .canonical(batchNormTrainingCanonical)
      .cudaExpr("($0 - $3) * (($T)1 / dlc::sqrt_($4 + ($T)${epsilon})) * $1 + $2")
      .fp16(Fp16Policy::Allow)
      .layout(LayoutRule::channel(1))
      .verify(verifyBatchNorm)
      .infer(inferBatchNorm)
      .reference(refBatchNorm);
  t.def(OpKind::LayerNormalization)
      .operands(2, 3)
      .results(1, 3)
      .attr("axis", AttrKind::Int, int64_t{-1})
      .attr("epsilon", AttrKind::Float, 1e-5f)
      .attr("stash_type", AttrKind::Int, int64_t{1})
      .fusible(fusibleLayerNorm())
      .fp16(Fp16Policy::Allow)
      .layout(LayoutRule::axisAttrs())
      .verify(verifyLayerNorm)
      .infer(inferLayerNorm)
      .reference(refLayerNorm);
  t.def(OpKind::LayerNormGrad)
      .operands(3)
      .results(3)
      .attr("axis", AttrKind::Int, int64_t{-1})
      .attr("epsilon", AttrKind::Float, 1e-5f)
      .fusible(Fusibility::opaque())
      .fp16(Fp16Policy::Allow)
      .layout(LayoutRule::axisAttrs())
      .verify(verifyLayerNormGrad)
      .infer(inferLayerNormGrad)
      .reference(refLayerNormGrad);
  t.def(OpKind::RMSNormalization)
      .operands(2)
      .attr("axis", AttrKind::Int, int64_t{-1})
      .attr("epsilon", AttrKind::Float, 1e-5f)
      .attr("stash_type", AttrKind::Int, int64_t{1})
      .fusible(fusibleLayerNorm()) // (or legalized into fusible ops before fusion)
      .fp16(Fp16Policy::Allow)     // either form accumulates in stash_type
      .layout(LayoutRule::axisAttrs())
      .verify(verifyLayerNorm)
      .infer(inferSameAsOperand0)
      .reference(refRmsNorm)
      .decompose(decomposeRmsNorm)
      .legalize(decomposeRmsNorm, rmsNormHasKernel);
  t.def(OpKind::InstanceNormalization)
      .operands(3)
      .attr("epsilon", AttrKind::Float, 1e-5f)
      .fusible(Fusibility::opaque())
      .fp16(Fp16Policy::Allow)
      .layout(LayoutRule::channel(1))
      .verify(verifyChannelNorm)
      .infer(inferSameAsOperand0)
      .reference(refChannelNorm);
  t.def(OpKind::GroupNormalization)
      .operands(3)
      .attr("epsilon", AttrKind::Float, 1e-5f)
      .attr("num_groups", AttrKind::Int)
      .fusible(Fusibility::opaque())
      .fp16(Fp16Policy::Allow)
      .layout(LayoutRule::channel(1))
      .verify(verifyChannelNorm)
      .infer(inferSameAsOperand0)
      .reference(refChannelNorm);
  t.def(OpKind::LRN)
      .operands(1)
      .attr("alpha", AttrKind::Float, 1e-4f)
      .attr("beta", AttrKind::Float, 0.75f)
      .attr("bias", AttrKind::Float, 1.0f)
      .attr("size", AttrKind::Int)
      .fusible(Fusibility::opaque())
      .fp16(Fp16Policy::Deny)
      .layout(LayoutRule::channel(1))
      .verify(verifyLRN)
      .infer(inferSameAsOperand0)
      .reference(refLRN);
  t[OpKind::BatchNormalization].gradient = gradBatchNorm;
  t[OpKind::LayerNormalization].gradient = gradLayerNorm;
}

} // namespace dlc::ir
