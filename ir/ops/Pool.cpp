//===- Pool.cpp - Max/average pooling, global pooling ----------------------===//
#include "Window.h"

#include <algorithm>
#include <limits>

namespace dlc::ir {
namespace {
using namespace ops;

/// The window of MaxPool, AveragePool and MaxPoolGrad (gradMaxPool carries them over).
constexpr const char *kWindowAttrs[] = {"ceil_mode", "dilations", "kernel_shape", "pads",
                                        "strides"};
OpBuilder &windowAttrs(OpBuilder &&b) {
  return b.attr("ceil_mode", AttrKind::Int, int64_t{0})
      .attr("dilations", AttrKind::Ints, std::vector<int64_t>{})
      .attr("kernel_shape", AttrKind::Ints)
      .attr("pads", AttrKind::Ints, std::vector<int64_t>{})
      .attr("strides", AttrKind::Ints, std::vector<int64_t>{});
}

/// The cell of a window's maximum: the first of equal maxima in window order (NaN never
/// wins: a window of NaNs gives its first cell and a maximum of -inf, as the kernel
/// does; an empty window gives 0). `best` receives the maximum.
int64_t argmaxCell(const std::vector<double> &x, int64_t base, const std::vector<int64_t> &cells,
                   double *best) {
  *best = -std::numeric_limits<double>::infinity();
  int64_t bestCell = cells.empty() ? 0 : cells[0];
  for (int64_t c : cells)
    if (x[base + c] > *best) {
      *best = x[base + c];
      bestCell = c;
    }
  return bestCell;
}

llvm::Error verifyPoolInput(const Node &n) {
  if (auto e = requireType(n, 0, n.kind() == OpKind::MaxPool ? kFloat | kInt : kFloat))
    return e;
  const Shape &x = n.operand(0)->shape();
  if (x.size() < 3 || x.size() > 5)
    return errorf("input must be [N, C, D1..Dk] with 1 <= k <= 3, got {0}", shapeStr(x));
  return ok();
}

llvm::Error verifyPool(const Node &n) {
  if (auto e = verifyPoolInput(n))
    return e;
  if (n.kind() == OpKind::MaxPool && n.numResults() == 2 && n.attrInt("storage_order") > 1)
    return makeError("storage_order must be 0 or 1");
  if (n.numResults() == 2 && channelsLast(n))
    return makeError("a channels-last MaxPool has no indices result");
  return Window::fromNode(n, n.operand(0)->rank() - 2, {}).takeError();
}

InferResult inferPoolNchw(const Node &n) {
  const Shape x = channelsFirstShape(n, 0);
  auto win = Window::fromNode(n, static_cast<int64_t>(x.size()) - 2, {});
  if (!win)
    return win.takeError();
  auto sp = win->outShape(Shape(x.begin() + 2, x.end()));
  if (!sp)
    return sp.takeError();
  Shape out{x[0], x[1]};
  out.insert(out.end(), sp->begin(), sp->end());
  TypeList r{{n.operand(0)->dtype(), out}};
  if (n.numResults() == 2)
    r.push_back({DType::I64, out});
  return r;
}

InferResult inferPool(const Node &n) {
  return channelsLastInfer(n, inferPoolNchw);
}

/// MaxPoolGrad(x, dy): dy must be the shape MaxPool's output would have for x.
llvm::Error verifyMaxPoolGrad(const Node &n) {
  if (auto e = verifyPoolInput(n))
    return e;
  if (n.operand(1)->dtype() != n.operand(0)->dtype())
    return errorf("the output gradient is {0}, the input {1}: they must match",
                  dtypeName(n.operand(1)->dtype()), dtypeName(n.operand(0)->dtype()));
  auto y = inferPool(n);
  if (!y)
    return y.takeError();
  if ((*y)[0].shape != n.operand(1)->shape())
    return errorf("the output gradient is {0}, MaxPool of the input gives {1}",
                  shapeStr(n.operand(1)->shape()), shapeStr((*y)[0].shape));
  return Window::fromNode(n, n.operand(0)->rank() - 2, {}).takeError();
}

InferResult inferMaxPoolGrad(const Node &n) {
  return TypeList{{n.operand(1)->dtype(), n.operand(0)->shape()}};
}

/// Visits each window: f(outIndex, inputChannelBase, list of (spatial index) in window,
/// number of window cells including padding that lie within [-padBegin, in + padEnd)).
template <class F> void forEachWindow(const Shape &xs, const Shape &ys, const Window &w0, F &&f) {
  int64_t k = static_cast<int64_t>(xs.size()) - 2;
  Window w = w0.as3D();
  Shape is = spatial3D(xs, k), os = spatial3D(ys, k);
  int64_t NC = xs[0] * xs[1], inSz = is[0] * is[1] * is[2], outSz = os[0] * os[1] * os[2];
  std::vector<int64_t> cells;
  for (int64_t nc = 0; nc < NC; ++nc)
    for (int64_t o0 = 0; o0 < os[0]; ++o0)
      for (int64_t o1 = 0; o1 < os[1]; ++o1)
        for (int64_t o2 = 0; o2 < os[2]; ++o2) {
          cells.clear();
          int64_t o[3] = {o0, o1, o2}, padded = 1;
          for (int d = 0; d < 3; ++d) {
            int64_t start = o[d] * w.strides[d] - w.padBegin[d];
            int64_t end =
                std::min(start + (w.kernel[d] - 1) * w.dilations[d] + 1, is[d] + w.padEnd[d]);
            padded *= (end - start + w.dilations[d] - 1) / w.dilations[d];
          }
          for (int64_t k0 = 0; k0 < w.kernel[0]; ++k0) {
            int64_t i0 = o0 * w.strides[0] + k0 * w.dilations[0] - w.padBegin[0];
            if (i0 < 0 || i0 >= is[0])
              continue;
            for (int64_t k1 = 0; k1 < w.kernel[1]; ++k1) {
              int64_t i1 = o1 * w.strides[1] + k1 * w.dilations[1] - w.padBegin[1];
              if (i1 < 0 || i1 >= is[1])
                continue;
              for (int64_t k2 = 0; k2 < w.kernel[2]; ++k2) {
                int64_t i2 = o2 * w.strides[2] + k2 * w.dilations[2] - w.padBegin[2];
                if (i2 >= 0 && i2 < is[2])
                  cells.push_back((i0 * is[1] + i1) * is[2] + i2);
              }
            }
          }
          f(nc * outSz + (o0 * os[1] + o1) * os[2] + o2, nc * inSz, cells, padded);
        }
}

llvm::Error refMaxPool(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &xs = in[0]->shape();
  int64_t k = static_cast<int64_t>(xs.size()) - 2;
  auto win = Window::fromNode(n, k, {});
  if (!win)
    return win.takeError();
  bool colMajor = n.attrInt("storage_order") == 1;
  Shape is(xs.begin() + 2, xs.end());
  auto x = in[0]->toVector<double>();
  std::vector<double> y(out[0].numElements());
  std::vector<int64_t> idx(out[0].numElements());
  forEachWindow(xs, out[0].shape(), *win, [&](int64_t o, int64_t base, auto &cells, int64_t) {
    const int64_t bestCell = argmaxCell(x, base, cells, &y[o]);
    int64_t flat = bestCell;
    if (colMajor) { // index over the spatial dims in column-major order
      Shape coord(is.size());
      for (int64_t d = k - 1, r = bestCell; d >= 0; --d) {
        coord[d] = r % is[d];
        r /= is[d];
      }
      flat = 0;
      for (int64_t d = k - 1; d >= 0; --d)
        flat = flat * is[d] + coord[d];
    }
    idx[o] = base + flat;
  });
  out[0] = Tensor::fromVector(out[0].type(), y);
  if (out.size() > 1)
    out[1] = Tensor::fromVector(out[1].type(), idx);
  return ok();
}

/// dx: each window's gradient added at its maximum (the first of equal maxima in
/// window order, as MaxPool picks it), NCHW.
llvm::Error refMaxPoolGrad(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &xs = in[0]->shape();
  auto win = Window::fromNode(n, static_cast<int64_t>(xs.size()) - 2, {});
  if (!win)
    return win.takeError();
  auto x = in[0]->toVector<double>(), dy = in[1]->toVector<double>();
  std::vector<double> dx(out[0].numElements(), 0.0);
  forEachWindow(xs, in[1]->shape(), *win, [&](int64_t o, int64_t base, auto &cells, int64_t) {
    double best;
    if (!cells.empty())
      dx[base + argmaxCell(x, base, cells, &best)] += dy[o];
  });
  out[0] = Tensor::fromVector(out[0].type(), dx);
  return ok();
}

llvm::Error refAveragePool(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &xs = in[0]->shape();
  auto win = Window::fromNode(n, static_cast<int64_t>(xs.size()) - 2, {});
  if (!win)
    return win.takeError();
  bool includePad = n.attrInt("count_include_pad") != 0;
  auto x = in[0]->toVector<double>();
  std::vector<double> y(out[0].numElements());
  forEachWindow(xs, out[0].shape(), *win,
                [&](int64_t o, int64_t base, auto &cells, int64_t padded) {
                  double s = 0;
                  for (int64_t c : cells)
                    s += x[base + c];
                  int64_t count = includePad ? padded : static_cast<int64_t>(cells.size());
                  y[o] = count ? s / count : 0.0;
                });
  out[0] = Tensor::fromVector(out[0].type(), y);
  return ok();
}

InferResult inferGlobalPoolNchw(const Node &n) {
  Shape s = channelsFirstShape(n, 0);
  for (size_t i = 2; i < s.size(); ++i)
    s[i] = 1;
  return TypeList{{n.operand(0)->dtype(), s}};
}

InferResult inferGlobalPool(const Node &n) {
  return channelsLastInfer(n, inferGlobalPoolNchw);
}

template <bool IsMax> llvm::Error refGlobalPool(const Node &, const Inputs &in, Outputs &out) {
  const Shape &xs = in[0]->shape();
  int64_t NC = xs[0] * xs[1], sz = in[0]->numElements() / std::max<int64_t>(NC, 1);
  auto x = in[0]->toVector<double>();
  std::vector<double> y(NC);
  for (int64_t i = 0; i < NC; ++i) {
    double acc = IsMax ? -std::numeric_limits<double>::infinity() : 0.0;
    for (int64_t j = 0; j < sz; ++j)
      acc = IsMax ? std::max(acc, x[i * sz + j]) : acc + x[i * sz + j];
    y[i] = IsMax ? acc : acc / static_cast<double>(sz);
  }
  out[0] = Tensor::fromVector(out[0].type(), y);
  return ok();
}

/// The channels-last forms only differ in layout: the references transpose.
template <RefFn Nchw> llvm::Error refPool(const Node &n, const Inputs &in, Outputs &out) {
  return channelsLastReference(n, in, out, Nchw, {0});
}

/// NHWC data read as NCHW: pool channels-last (MaxPool without its indices).
std::optional<LayoutRemap> remapPool(const Node &n, const std::vector<int64_t> &perm) {
  if (n.numResults() > 1)
    return std::nullopt;
  return remapToChannelsLast(n, perm, -1);
}

/// MaxPoolGrad channels-last: the output gradient in the same layout as x.
std::optional<LayoutRemap> remapMaxPoolGrad(const Node &n, const std::vector<int64_t> &perm) {
  auto r = remapToChannelsLast(n, perm, -1);
  if (r)
    r->operands[1] = LayoutRemap::Operand::Actual;
  return r;
}

llvm::Error refMaxPoolGradLayout(const Node &n, const Inputs &in, Outputs &out) {
  return channelsLastReference(n, in, out, refMaxPoolGrad, {0, 1});
}

//===----------------------------------------------------------------------===//
// Gradient rules
//===----------------------------------------------------------------------===//

llvm::Error requireChannelsFirst(const Node &n) {
  if (channelsLast(n))
    return makeError(
        "channels-last pooling is not differentiable (autodiff runs before the layout pass)");
  return ok();
}

/// MaxPool: MaxPoolGrad, which finds each window's maximum in x again (as cuDNN's
/// pooling backward does) and gathers, for every input element, the gradients of the
/// windows whose maximum it is: no indices tensor, no atomics, and a channels-last form
/// that the layout pass can move (a scatter into NCHW-flat indices could not).
llvm::Error gradMaxPool(GradBuilder &b, const Node &n) {
  if (auto e = requireChannelsFirst(n))
    return e;
  AttrMap a;
  for (const char *k : kWindowAttrs)
    if (n.hasAttr(k))
      a[k] = *n.attr(k);
  b.accumulate(0, b.op(OpKind::MaxPoolGrad, {n.operand(0), b.grad()}, std::move(a)));
  return ok();
}

/// AveragePool: each output's gradient divided by its window's element count,
/// spread back by a depthwise transposed convolution with unit weights.
llvm::Error gradAveragePool(GradBuilder &b, const Node &n) {
  if (auto e = requireChannelsFirst(n))
    return e;
  Value *x = n.operand(0), *g = b.grad();
  const Shape &xs = x->shape(), &ys = n.result()->shape();
  int64_t S = x->rank() - 2, C = xs[1];
  auto win = Window::fromNode(n, S, {});
  if (!win)
    return win.takeError();
  auto tr = win->transposedAttrs(Shape(xs.begin() + 2, xs.end()), Shape(ys.begin() + 2, ys.end()));
  if (!tr)
    return tr.takeError();
  int64_t K = product(win->kernel);
  bool padded = llvm::any_of(tr->at("pads").ints(), [](int64_t p) { return p != 0; });
  if (n.attrInt("count_include_pad") || !padded) {
    g = b.scale(g, 1.0 / static_cast<double>(K));
  } else { // per-output counts of real elements: K * the pad-inclusive average of ones
    AttrMap a = n.attrs();
    a["count_include_pad"] = int64_t{1};
    Value *ones = b.full(1, x->dtype(), xs);
    g = b.div(g, b.scale(b.op(OpKind::AveragePool, {ones}, a), static_cast<double>(K)));
  }
  Shape ws{C, 1};
  ws.insert(ws.end(), win->kernel.begin(), win->kernel.end());
  Value *unit = b.full(1, x->dtype(), ws);
  AttrMap a = *tr;
  a["group"] = C;
  b.accumulate(0, b.op(OpKind::ConvTranspose, {g, unit}, a));
  return ok();
}

llvm::Error gradGlobalAveragePool(GradBuilder &b, const Node &n) {
  if (auto e = requireChannelsFirst(n))
    return e;
  const Shape &xs = n.operand(0)->shape();
  int64_t area = product(Shape(xs.begin() + 2, xs.end()));
  b.accumulate(0, b.op(OpKind::Expand,
                       {b.scale(b.grad(), 1.0 / static_cast<double>(std::max<int64_t>(area, 1)))},
                       {{"shape", std::vector<int64_t>(xs)}}));
  return ok();
}

/// Whether every window of a MaxPool holds an input cell: no dilation gaps, no
/// ceil_mode, pads smaller than the kernel. (Conservative: an empty float window's -inf
/// quantizes to the lowest value too, but the integer kernels' empty windows are not
/// checked to give it.)
bool noEmptyWindow(const Node &n) {
  if (n.attrInt("ceil_mode") != 0)
    return false;
  const std::vector<int64_t> &k = n.attrInts("kernel_shape"), &d = n.attrInts("dilations"),
                             &p = n.attrInts("pads");
  if (std::any_of(d.begin(), d.end(), [](int64_t e) { return e != 1; }))
    return false;
  for (size_t i = 0; i < p.size(); ++i)
    if (k.empty() || p[i] >= k[i % k.size()])
      return false;
  return true;
}

} // namespace

void definePoolOps(OpTable &t) {
  windowAttrs(t.def(OpKind::MaxPool))
      .operands(1)
      .movesValues(noEmptyWindow)
      .results(1, 2)
      .attr("storage_order", AttrKind::Int, int64_t{0})
      .fusible(Fusibility::anchor(/*prologue=*/true, /*epilogue=*/true))
      .fp16(Fp16Policy::Allow)
      .attr("channels_last", AttrKind::Int, int64_t{0})
      .layout(LayoutRule::channel(1, remapPool))
      .verify(verifyPool)
      .infer(inferPool)
      .reference(refPool<refMaxPool>);
  windowAttrs(t.def(OpKind::AveragePool))
      .operands(1)
      .attr("count_include_pad", AttrKind::Int, int64_t{0})
      .fusible(Fusibility::anchor(/*prologue=*/true, /*epilogue=*/true))
      .fp16(Fp16Policy::Allow)
      .attr("channels_last", AttrKind::Int, int64_t{0})
      .layout(LayoutRule::channel(1, remapPool))
      .verify(verifyPool)
      .infer(inferPool)
      .reference(refPool<refAveragePool>);
  t.def(OpKind::GlobalAveragePool)
      .operands(1)
      .fusible(Fusibility::anchor(/*prologue=*/true, /*epilogue=*/true))
      .fp16(Fp16Policy::Allow)
      .attr("channels_last", AttrKind::Int, int64_t{0})
      .layout(LayoutRule::channel(1, remapPool))
      .verify(verifyPoolInput)
      .infer(inferGlobalPool)
      .reference(refPool<refGlobalPool<false>>);
  t.def(OpKind::GlobalMaxPool)
      .operands(1)
      .fusible(Fusibility::anchor(/*prologue=*/true, /*epilogue=*/true))
      .fp16(Fp16Policy::Allow)
      .attr("channels_last", AttrKind::Int, int64_t{0})
      .layout(LayoutRule::channel(1, remapPool))
      .verify(verifyPoolInput)
      .infer(inferGlobalPool)
      .reference(refPool<refGlobalPool<true>>);
  windowAttrs(t.def(OpKind::MaxPoolGrad))
      .operands(2)
      .fusible(Fusibility::anchor(/*prologue=*/false, /*epilogue=*/true))
      .fp16(Fp16Policy::Allow)
      .attr("channels_last", AttrKind::Int, int64_t{0})
      .layout(LayoutRule::channel(1, remapMaxPoolGrad))
      .verify(verifyMaxPoolGrad)
      .infer(inferMaxPoolGrad)
      .reference(refMaxPoolGradLayout);
  t[OpKind::MaxPool].gradient = gradMaxPool;
  t[OpKind::AveragePool].gradient = gradAveragePool;
  t[OpKind::GlobalAveragePool].gradient = gradGlobalAveragePool;
}

} // namespace dlc::ir
