//===- Conv.cpp - Convolution and transposed convolution -------------------===//
//
// Canonical IR form: explicit `pads` (no auto_pad) and no kernel_shape (it is
// W's spatial shape); the ONNX importer resolves both. The `layout` pass may set
// channels_last = 1 on a Conv: X [N, D1..Dk, C], W [M, k1..kk, C/group] and Y
// [N, D1..Dk, M]; its reference transposes to channels-first and back.
//===----------------------------------------------------------------------===//
#include "Window.h"

#include <numeric>

namespace dlc::ir {
namespace {
using namespace ops;

/// Whether a Conv is the INT8 form: i8 input and weights, an i32 bias, i32 sums.
bool int8Conv(const Node &n) {
  return n.operand(0) && n.operand(0)->dtype() == DType::I8;
}
/// Whether a Conv is the float8 form: float8 input and weights of one type, no bias,
/// FP32 sums (a FP8 QDQ model's, fold-qdq).
bool float8Conv(const Node &n) {
  return n.operand(0) && isFloat8(n.operand(0)->dtype());
}

llvm::Error verifyConvCommon(const Node &n, bool integer = false) {
  // (Conv on integers: ConvInteger's and QLinearConv's exact int32 sums, of int32
  // operands or, the tensor cores' form, of int8 ones with an int32 bias.)
  if (integer && int8Conv(n)) {
    if (n.operand(1)->dtype() != DType::I8 || (n.operand(2) && n.operand(2)->dtype() != DType::I32))
      return makeError("an int8 Conv takes int8 weights and an int32 bias");
  } else if (integer && float8Conv(n)) {
    if (n.operand(1)->dtype() != n.operand(0)->dtype() || n.operand(2))
      return errorf("a {0} Conv takes {0} weights and no bias", dtypeName(n.operand(0)->dtype()));
  } else {
    if (!(integer && n.operand(0) && n.operand(0)->dtype() == DType::I32))
      if (auto e = requireType(n, 0, kFloat))
        return e;
    for (unsigned i = 1; i < n.numOperands(); ++i)
      if (auto e = requireSameType(n, 0, i))
        return e;
  }
  const Shape x = channelsFirstShape(n, 0), w = channelsFirstShape(n, 1);
  if (x.size() < 3 || x.size() > 5)
    return errorf("input must be [N, C, D1..Dk] with 1 <= k <= 3, got {0}", shapeStr(x));
  if (w.size() != x.size())
    return errorf("weight rank {0} differs from input rank {1}", w.size(), x.size());
  if (n.attrInt("group") < 1)
    return makeError("group must be >= 1");
  return ok();
}

llvm::Error verifyConv(const Node &n) {
  if (auto e = verifyConvCommon(n, /*int32=*/true))
    return e;
  const Shape x = channelsFirstShape(n, 0), w = channelsFirstShape(n, 1);
  int64_t g = n.attrInt("group");
  if (w[1] * g != x[1] || w[0] % g != 0)
    return errorf("weight {0} with group {1} does not match input channels {2}", shapeStr(w), g,
                  x[1]);
  if (Value *b = n.operand(2))
    if (b->shape() != Shape{w[0]})
      return errorf("bias must have shape [{0}], got {1}", w[0], shapeStr(b->shape()));
  return ok();
}

InferResult inferConvNchw(const Node &n) {
  const Shape x = channelsFirstShape(n, 0), w = channelsFirstShape(n, 1);
  int64_t k = static_cast<int64_t>(x.size()) - 2;
  auto win = Window::fromNode(n, k, Shape(w.begin() + 2, w.end()));
  if (!win)
    return win.takeError();
  auto sp = win->outShape(Shape(x.begin() + 2, x.end()));
  if (!sp)
    return sp.takeError();
  Shape out{x[0], w[0]};
  out.insert(out.end(), sp->begin(), sp->end());
  return TypeList{{int8Conv(n)     ? DType::I32
                   : float8Conv(n) ? DType::F32
                                   : n.operand(0)->dtype(),
                   out}};
}

InferResult inferConv(const Node &n) {
  return channelsLastInfer(n, inferConvNchw);
}

/// Conv over 3 normalized spatial dims, accumulating in CT (double for floating types).
template <class CT>
void convLoops(const std::vector<CT> &x, const std::vector<CT> &w, const std::vector<CT> *b,
               std::vector<CT> &y, int64_t N, int64_t C, const Shape &in, int64_t M,
               const Shape &out, const Window &win, int64_t group) {
  int64_t Cg = C / group, Mg = M / group;
  const Shape &K = win.kernel;
  int64_t inSz = in[0] * in[1] * in[2], outSz = out[0] * out[1] * out[2];
  int64_t kSz = K[0] * K[1] * K[2];
  for (int64_t nb = 0; nb < N; ++nb)
    for (int64_t m = 0; m < M; ++m) {
      int64_t g = m / Mg;
      CT *yp = y.data() + (nb * M + m) * outSz;
      CT bias = b ? (*b)[m] : CT(0);
      for (int64_t i = 0; i < outSz; ++i)
        yp[i] = bias;
      for (int64_t c = 0; c < Cg; ++c) {
        const CT *xp = x.data() + (nb * C + g * Cg + c) * inSz;
        const CT *wp = w.data() + (m * Cg + c) * kSz;
        for (int64_t k0 = 0; k0 < K[0]; ++k0)
          for (int64_t k1 = 0; k1 < K[1]; ++k1)
            for (int64_t k2 = 0; k2 < K[2]; ++k2) {
              CT wv = wp[(k0 * K[1] + k1) * K[2] + k2];
              for (int64_t o0 = 0; o0 < out[0]; ++o0) {
                int64_t i0 = o0 * win.strides[0] + k0 * win.dilations[0] - win.padBegin[0];
                if (i0 < 0 || i0 >= in[0])
                  continue;
                for (int64_t o1 = 0; o1 < out[1]; ++o1) {
                  int64_t i1 = o1 * win.strides[1] + k1 * win.dilations[1] - win.padBegin[1];
                  if (i1 < 0 || i1 >= in[1])
                    continue;
                  const CT *row = xp + (i0 * in[1] + i1) * in[2];
                  CT *yrow = yp + (o0 * out[1] + o1) * out[2];
                  for (int64_t o2 = 0; o2 < out[2]; ++o2) {
                    int64_t i2 = o2 * win.strides[2] + k2 * win.dilations[2] - win.padBegin[2];
                    if (i2 >= 0 && i2 < in[2])
                      yrow[o2] += wv * row[i2];
                  }
                }
              }
            }
      }
    }
}

llvm::Error refConvNchw(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &xs = in[0]->shape(), &ws = in[1]->shape();
  int64_t k = static_cast<int64_t>(xs.size()) - 2;
  auto win = Window::fromNode(n, k, Shape(ws.begin() + 2, ws.end()));
  if (!win)
    return win.takeError();
  return dispatch(in[0]->dtype(), [&](auto ct) -> llvm::Error {
    // (int8 operands compute in int64: the sums are stored as int32 modulo 2^32, the
    // tensor cores' wrap.)
    using CT = AccType<decltype(ct)>;
    auto x = in[0]->template toVector<CT>(), w = in[1]->template toVector<CT>();
    std::vector<CT> bias;
    if (in.size() > 2 && in[2])
      bias = in[2]->template toVector<CT>();
    std::vector<CT> y(static_cast<size_t>(out[0].numElements()));
    convLoops<CT>(x, w, bias.empty() ? nullptr : &bias, y, xs[0], xs[1], spatial3D(xs, k), ws[0],
                  spatial3D(out[0].shape(), k), win->as3D(), n.attrInt("group"));
    out[0] = Tensor::fromVector(out[0].type(), y);
    return ok();
  });
}

llvm::Error refConv(const Node &n, const Inputs &in, Outputs &out) {
  return channelsLastReference(n, in, out, refConvNchw, {0, 1});
}

/// NHWC data read as NCHW: a channels-last Conv with OHWI weights.
std::optional<LayoutRemap> remapConv(const Node &n, const std::vector<int64_t> &perm) {
  return remapToChannelsLast(n, perm, 1);
}

//===----------------------------------------------------------------------===//
// ConvTranspose: W is [C, M/group, k...]; output_shape and auto_pad are resolved
// into pads/output_padding by the importer.
//===----------------------------------------------------------------------===//

llvm::Error verifyConvTranspose(const Node &n) {
  if (auto e = verifyConvCommon(n))
    return e;
  const Shape &x = n.operand(0)->shape(), &w = n.operand(1)->shape();
  int64_t g = n.attrInt("group");
  if (w[0] != x[1] || x[1] % g != 0)
    return errorf("weight {0} with group {1} does not match input channels {2}", shapeStr(w), g,
                  x[1]);
  if (Value *b = n.operand(2))
    if (b->shape() != Shape{w[1] * g})
      return errorf("bias must have shape [{0}], got {1}", w[1] * g, shapeStr(b->shape()));
  return ok();
}

llvm::Expected<Shape> convTransposeOutPad(const Node &n, int64_t k) {
  const Attribute *a = n.attr("output_padding");
  if (!a || a->ints().empty())
    return Shape(k, 0);
  if (static_cast<int64_t>(a->ints().size()) != k)
    return errorf("output_padding must have {0} values", k);
  return a->ints();
}

InferResult inferConvTranspose(const Node &n) {
  const Shape &x = n.operand(0)->shape(), &w = n.operand(1)->shape();
  int64_t k = static_cast<int64_t>(x.size()) - 2;
  auto win = Window::fromNode(n, k, Shape(w.begin() + 2, w.end()));
  if (!win)
    return win.takeError();
  auto opad = convTransposeOutPad(n, k);
  if (!opad)
    return opad.takeError();
  Shape out{x[0], w[1] * n.attrInt("group")};
  for (int64_t i = 0; i < k; ++i) {
    int64_t o = (x[2 + i] - 1) * win->strides[i] + (win->kernel[i] - 1) * win->dilations[i] + 1 -
                win->padBegin[i] - win->padEnd[i] + (*opad)[i];
    if (o < 1)
      return errorf("output spatial dim {0} would be {1}", i, o);
    out.push_back(o);
  }
  return TypeList{{n.operand(0)->dtype(), out}};
}

llvm::Error refConvTranspose(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &xs = in[0]->shape(), &ws = in[1]->shape(), &ys = out[0].shape();
  int64_t k = static_cast<int64_t>(xs.size()) - 2;
  auto win0 = Window::fromNode(n, k, Shape(ws.begin() + 2, ws.end()));
  if (!win0)
    return win0.takeError();
  Window win = win0->as3D();
  return dispatch(in[0]->dtype(), [&](auto ct) -> llvm::Error {
    using CT = AccType<decltype(ct)>;
    auto x = in[0]->template toVector<CT>(), w = in[1]->template toVector<CT>();
    int64_t N = xs[0], C = xs[1], G = n.attrInt("group"), Cg = C / G, Mg = ws[1], M = Mg * G;
    Shape is = spatial3D(xs, k), os = spatial3D(ys, k), K = win.kernel;
    int64_t inSz = is[0] * is[1] * is[2], outSz = os[0] * os[1] * os[2], kSz = K[0] * K[1] * K[2];
    std::vector<CT> y(static_cast<size_t>(out[0].numElements()), CT(0));
    if (in.size() > 2 && in[2]) {
      auto b = in[2]->template toVector<CT>();
      for (int64_t nb = 0; nb < N; ++nb)
        for (int64_t m = 0; m < M; ++m)
          for (int64_t i = 0; i < outSz; ++i)
            y[(nb * M + m) * outSz + i] = b[m];
    }
    for (int64_t nb = 0; nb < N; ++nb)
      for (int64_t c = 0; c < C; ++c) {
        int64_t g = c / Cg;
        const CT *xp = x.data() + (nb * C + c) * inSz;
        for (int64_t mm = 0; mm < Mg; ++mm) {
          CT *yp = y.data() + (nb * M + g * Mg + mm) * outSz;
          const CT *wp = w.data() + (c * Mg + mm) * kSz;
          for (int64_t i0 = 0; i0 < is[0]; ++i0)
            for (int64_t i1 = 0; i1 < is[1]; ++i1)
              for (int64_t i2 = 0; i2 < is[2]; ++i2) {
                CT xv = xp[(i0 * is[1] + i1) * is[2] + i2];
                for (int64_t k0 = 0; k0 < K[0]; ++k0) {
                  int64_t o0 = i0 * win.strides[0] + k0 * win.dilations[0] - win.padBegin[0];
                  if (o0 < 0 || o0 >= os[0])
                    continue;
                  for (int64_t k1 = 0; k1 < K[1]; ++k1) {
                    int64_t o1 = i1 * win.strides[1] + k1 * win.dilations[1] - win.padBegin[1];
                    if (o1 < 0 || o1 >= os[1])
                      continue;
                    for (int64_t k2 = 0; k2 < K[2]; ++k2) {
                      int64_t o2 = i2 * win.strides[2] + k2 * win.dilations[2] - win.padBegin[2];
                      if (o2 < 0 || o2 >= os[2])
                        continue;
                      yp[(o0 * os[1] + o1) * os[2] + o2] += xv * wp[(k0 * K[1] + k1) * K[2] + k2];
                    }
                  }
                }
              }
        }
      }
    out[0] = Tensor::fromVector(out[0].type(), y);
    return ok();
  });
}

//===----------------------------------------------------------------------===//
// Gradient rule
//===----------------------------------------------------------------------===//

/// The largest im2col matrix weightGradAsGemm builds (bytes), and the most taps one
/// kernel concatenates (one Slice each: a fused kernel's parameters hold every view
/// it reads; a kernel of up to 9 x 9 taps takes one GEMM per tap of its leading dims).
constexpr double kIm2colBytes = 1024.0 * 1024 * 1024;
constexpr int64_t kIm2colTaps = 9;

/// x padded by the window's pads (x itself without pads).
Value *padForWindow(GradBuilder &b, Value *x, const Window &win) {
  int64_t S = x->rank() - 2;
  std::vector<int64_t> pads(2 * (S + 2), 0);
  for (int64_t i = 0; i < S; ++i) {
    pads[2 + i] = win.padBegin[i];
    pads[S + 4 + i] = win.padEnd[i];
  }
  return llvm::all_of(pads, [](int64_t p) { return p == 0; })
             ? x
             : b.op(OpKind::Pad, {x}, {{"pads", pads}});
}

/// One strided Slice of v (x padded, or a tensor of x's spatial rank) per tap of the
/// window's spatial dims `dims` (the last fastest): the input elements that tap meets at
/// each of the output positions ys.
std::vector<Value *> tapSlices(GradBuilder &b, Value *v, const Window &win, const Shape &ys,
                               const std::vector<int64_t> &dims) {
  std::vector<Value *> parts;
  std::vector<int64_t> tap(dims.size(), 0), axes;
  for (int64_t i : dims)
    axes.push_back(2 + i);
  for (bool more = true; more;) {
    std::vector<int64_t> starts, ends, steps;
    for (size_t j = 0; j < dims.size(); ++j) {
      int64_t i = dims[j];
      starts.push_back(tap[j] * win.dilations[i]);
      ends.push_back(starts.back() + (ys[2 + i] - 1) * win.strides[i] + 1);
      steps.push_back(win.strides[i]);
    }
    parts.push_back(b.op(OpKind::Slice, {v},
                         {{"axes", axes}, {"starts", starts}, {"ends", ends}, {"steps", steps}}));
    more = false;
    for (int64_t j = static_cast<int64_t>(dims.size()) - 1; j >= 0 && !more; --j)
      if (++tap[j] < win.kernel[dims[j]])
        more = true;
      else
        tap[j] = 0;
  }
  return parts;
}

/// dW of a one-group convolution as one GEMM over the N * P output positions
/// (cuBLASLt, tensor cores in FP16/BF16): dW[M, (tap, C)] = dY^T[M, NP] x
/// im2col(x)[NP, (tap, C)], im2col being one strided Slice of the padded x per tap,
/// concatenated along the channels (Pad, Slices and Concat fuse into one kernel; in
/// channels-last regions the concatenation is already [N, P..., taps * C] and dY
/// already [N * P, M], so the transposes cancel), then [M, k..., C] -> [M, C, k...].
Value *weightGradAsGemm(GradBuilder &b, const Node &n, const Window &win) {
  Value *x = n.operand(0), *g = b.grad();
  const Shape &xs = x->shape(), &ws = n.operand(1)->shape(), &ys = n.result()->shape();
  int64_t S = static_cast<int64_t>(xs.size()) - 2, C = xs[1], M = ws[0],
          NP = xs[0] * product(Shape(ys.begin() + 2, ys.end()));
  std::vector<int64_t> toLast{0}, kernelFirst{0, S + 1};
  for (int64_t i = 0; i < S; ++i) {
    toLast.push_back(2 + i);
    kernelFirst.push_back(1 + i);
  }
  toLast.push_back(1);
  Value *xp = padForWindow(b, x, win);
  auto concat = [&](std::vector<Value *> parts, int64_t axis) {
    return b.op(OpKind::Concat, std::move(parts), {{"axis", axis}});
  };
  std::vector<int64_t> dims(S);
  std::iota(dims.begin(), dims.end(), 0);
  int64_t taps = product(win.kernel);
  Value *dy = b.reshape(b.transpose(g, toLast), {NP, M}), *dw;
  auto gemm = [&](Value *cat, int64_t k) {
    return b.op(OpKind::Gemm, {dy, b.reshape(b.transpose(cat, toLast), {NP, k})},
                {{"transA", int64_t{1}}});
  };
  if (taps <= kIm2colTaps) {
    dw = gemm(concat(tapSlices(b, xp, win, ys, dims), 1), taps * C);
  } else {
    // More taps than one kernel's parameters hold (a 7x7 stem): the last dim's taps
    // first, [N, k * C, ...] materialized, then one GEMM per tap of the other dims on
    // its strided slice (a copy kernel each), their [M, k * C] results concatenated.
    Value *rows = concat(tapSlices(b, xp, win, ys, {S - 1}), 1);
    std::vector<Value *> parts;
    for (Value *slice :
         tapSlices(b, rows, win, ys, std::vector<int64_t>(dims.begin(), dims.end() - 1)))
      parts.push_back(gemm(slice, win.kernel.back() * C));
    dw = concat(parts, 1);
  }
  Shape split{M};
  split.insert(split.end(), ws.begin() + 2, ws.end());
  split.push_back(C);
  return b.transpose(b.reshape(dw, split), kernelFirst);
}

/// The most taps a depthwise weight gradient takes one reduction each for.
constexpr int64_t kDepthwiseTaps = 64;

/// dW of a depthwise convolution (one input and one output channel per group): per
/// tap, dW[c, tap] = sum over the batch and positions of dY * (that tap's strided slice
/// of the padded x), a per-channel reduction (channels-last: a column reduction, split
/// when long), summed in FP32 for 16-bit data. The grouped convolution over the batch
/// that serves other groupings would run each channel's whole image as one thread's
/// kernel (77 ms for MobileNetV2's first depthwise layer at batch 32, on an H200).
Value *depthwiseWeightGrad(GradBuilder &b, const Node &n, const Window &win) {
  Value *x = n.operand(0), *g = b.grad();
  const Shape &ws = n.operand(1)->shape(), &ys = n.result()->shape();
  int64_t S = x->rank() - 2, C = ws[0];
  DType dt = x->dtype(), acc = sumType(dt);
  std::vector<int64_t> dims(S), axes = batchAndSpatialAxes(x->rank());
  std::iota(dims.begin(), dims.end(), 0);
  Value *gAcc = b.cast(g, acc);
  std::vector<Value *> parts;
  for (Value *slice : tapSlices(b, padForWindow(b, x, win), win, ys, dims))
    parts.push_back(b.reshape(b.reduceSum(b.mul(b.cast(slice, acc), gAcc), axes, false), {C, 1}));
  Value *dw = b.op(OpKind::Concat, std::move(parts), {{"axis", int64_t{1}}});
  return b.cast(b.reshape(dw, ws), dt);
}

/// Conv's gradient, for any group count and spatial rank:
/// - dX is the transposed convolution of dY with the same weights (output_padding
///   recovers the input size that the stride rounded away);
/// - dW of one group is a GEMM of dY and x's im2col (weightGradAsGemm); of a depthwise
///   convolution, one per-channel reduction per tap (depthwiseWeightGrad); with groups
///   (or over 9 taps in the last dim or the others, or an im2col over kIm2colBytes) it correlates X
///   with dY over the batch: a grouped convolution whose "batch" is the input channel of a group
///   and whose channels are (group, sample); the strides and dilations swap roles. The result can
///   be longer than the kernel (inputs that no output reached) and is sliced;
/// - dB sums dY over the batch and spatial dims.
llvm::Error gradConv(GradBuilder &b, const Node &n) {
  if (channelsLast(n))
    return makeError(
        "channels-last convolutions are not differentiable (autodiff runs before the layout pass)");
  Value *x = n.operand(0), *w = n.operand(1), *g = b.grad();
  const Shape &xs = x->shape(), &ws = w->shape(), &ys = n.result()->shape();
  int64_t S = x->rank() - 2, G = n.attrInt("group"), N = xs[0], C = xs[1], M = ws[0], Cg = C / G,
          Mg = M / G;
  auto win = Window::fromNode(n, S, Shape(ws.begin() + 2, ws.end()));
  if (!win)
    return win.takeError();
  auto tr = win->transposedAttrs(Shape(xs.begin() + 2, xs.end()), Shape(ys.begin() + 2, ys.end()));
  if (!tr)
    return tr.takeError();
  if (b.wants(0)) {
    AttrMap a = *tr;
    a["group"] = G;
    b.accumulate(0, b.op(OpKind::ConvTranspose, {g, w}, a));
  }
  const int64_t taps = product(Shape(ws.begin() + 2, ws.end()));
  if (b.wants(1) && G == 1 &&
      (taps <= kIm2colTaps ||
       (S > 1 && ws.back() <= kIm2colTaps && taps / ws.back() <= kIm2colTaps)) &&
      static_cast<double>(N) * product(Shape(ys.begin() + 2, ys.end())) *
              product(Shape(ws.begin() + 1, ws.end())) * dtypeSize(x->dtype()) <=
          kIm2colBytes) {
    b.accumulate(1, weightGradAsGemm(b, n, *win));
  } else if (b.wants(1) && G > 1 && Cg == 1 && Mg == 1 && taps <= kDepthwiseTaps) {
    b.accumulate(1, depthwiseWeightGrad(b, n, *win));
  } else if (b.wants(1)) {
    auto spatialPerm = [&](std::vector<int64_t> head) {
      for (int64_t i = 0; i < S; ++i)
        head.push_back(3 + i);
      return head;
    };
    Shape xg{N, G, Cg}, gg{N, G, Mg};
    xg.insert(xg.end(), xs.begin() + 2, xs.end());
    gg.insert(gg.end(), ys.begin() + 2, ys.end());
    Shape xin{Cg, G * N}, gin{M, N};
    xin.insert(xin.end(), xs.begin() + 2, xs.end());
    gin.insert(gin.end(), ys.begin() + 2, ys.end());
    Value *xr = b.reshape(b.transpose(b.reshape(x, xg), spatialPerm({2, 1, 0})), xin);
    Value *gr = b.reshape(b.transpose(b.reshape(g, gg), spatialPerm({1, 2, 0})), gin);
    Value *dw = b.op(OpKind::Conv, {xr, gr},
                     {{"group", G},
                      {"strides", win->dilations},
                      {"dilations", win->strides},
                      {"pads", tr->at("pads")}});
    if (dw) { // [Cg, M, k'...] -> [M, Cg, k...]
      std::vector<int64_t> axes, starts, ends;
      for (int64_t i = 0; i < S; ++i)
        if (dw->shape()[2 + i] != ws[2 + i])
          axes.push_back(2 + i), starts.push_back(0), ends.push_back(ws[2 + i]);
      if (!axes.empty())
        dw = b.op(OpKind::Slice, {dw}, {{"axes", axes}, {"starts", starts}, {"ends", ends}});
      std::vector<int64_t> perm{1, 0};
      for (int64_t i = 0; i < S; ++i)
        perm.push_back(2 + i);
      dw = b.transpose(dw, perm);
    }
    b.accumulate(1, dw);
  }
  if (b.wants(2))
    b.accumulate(2, b.reduceSum(g, batchAndSpatialAxes(x->rank()), false));
  return ok();
}

//===----------------------------------------------------------------------===//
// ConvTranspose as a convolution
//===----------------------------------------------------------------------===//

/// x [N, C, L...] with s - 1 zeros after each element along each spatial dim, its
/// end then cut or zero-extended to `len` (reshapes and constant pads: one fused
/// movement kernel).
Value *zeroStuff(GradBuilder &b, Value *x, const Shape &s, const Shape &len) {
  const Shape &xs = x->shape();
  int64_t S = static_cast<int64_t>(xs.size()) - 2, r = 2 + 2 * S;
  Shape split{xs[0], xs[1]}, merged{xs[0], xs[1]};
  std::vector<int64_t> stuff(2 * r, 0), cut(2 * (S + 2), 0);
  for (int64_t i = 0; i < S; ++i) {
    split.push_back(xs[2 + i]);
    split.push_back(1);
    merged.push_back(xs[2 + i] * s[i]);
    stuff[r + 3 + 2 * i] = s[i] - 1;
    cut[S + 2 + 2 + i] = len[i] - xs[2 + i] * s[i];
  }
  Value *y = b.reshape(b.op(OpKind::Pad, {b.reshape(x, split)}, {{"pads", stuff}}), merged);
  return llvm::all_of(cut, [](int64_t p) { return p == 0; })
             ? y
             : b.op(OpKind::Pad, {y}, {{"pads", cut}});
}

/// ConvTranspose as a convolution, which the implicit-GEMM and tensor-core kernels
/// run (the gather kernel walks every tap of every output on CUDA cores; autodiff
/// emits one for every convolution's input gradient):
/// - stride 1: the correlation of x with the flipped kernel, whose input and output
///   channels swap within each group, padded by dilation * (k - 1) minus the pads
///   (plus output_padding at the end);
/// - stride s > 1: the same on x zero-stuffed (s - 1 zeros between elements), where
///   the stride product is at most 4 (the convolution multiplies the zeros too);
///   a 1x1 kernel without pads or bias instead convolves at x's resolution and
///   zero-stuffs the result (no multiplication by zero, any stride).
/// An error (the node keeps the gather) where a pad exceeds the dilated kernel's
/// reach, which would need a negative convolution pad.
llvm::Expected<std::vector<Value *>> convTransposeAsConv(GradBuilder &b, const Node &n) {
  Value *x = n.operand(0), *w = n.operand(1), *bias = n.operand(2);
  const Shape &xs = x->shape(), &ws = w->shape(), &ys = n.result()->shape();
  int64_t S = static_cast<int64_t>(xs.size()) - 2, G = n.attrInt("group");
  auto win = Window::fromNode(n, S, Shape(ws.begin() + 2, ws.end()));
  if (!win)
    return win.takeError();
  auto opad = convTransposeOutPad(n, S);
  if (!opad)
    return opad.takeError();
  bool pointwise = true, unitStride = true;
  int64_t strideProduct = 1;
  std::vector<int64_t> pads(2 * S);
  for (int64_t i = 0; i < S; ++i) {
    int64_t reach = win->dilations[i] * (win->kernel[i] - 1);
    pads[i] = reach - win->padBegin[i];
    pads[S + i] = reach - win->padEnd[i] + (*opad)[i];
    pointwise &= win->kernel[i] == 1 && win->padBegin[i] == 0 && win->padEnd[i] == 0;
    unitStride &= win->strides[i] == 1;
    strideProduct *= win->strides[i];
  }
  bool stuffResult = pointwise && !unitStride && !bias; // (a bias reaches every output)
  if (!stuffResult && llvm::any_of(pads, [](int64_t p) { return p < 0; }))
    return makeError("a pad exceeds the dilated kernel's reach");
  if (!stuffResult && !unitStride && strideProduct > 4)
    return makeError("zero-stuffing would multiply the work by more than 4");

  // [Cx, M/G, k...] -> [M, Cx/G, k...] (channels swapped within each group), flipped.
  int64_t Cx = ws[0], Mg = ws[1];
  std::vector<int64_t> perm{1, 0}, flipAxes, starts, ends, steps;
  for (int64_t i = 0; i < S; ++i)
    perm.push_back(2 + i);
  Value *w2;
  if (G == 1) {
    w2 = b.transpose(w, perm);
  } else {
    Shape grouped{G, Cx / G, Mg}, merged{G * Mg, Cx / G};
    std::vector<int64_t> gperm{0, 2, 1};
    for (int64_t i = 0; i < S; ++i) {
      grouped.push_back(ws[2 + i]);
      merged.push_back(ws[2 + i]);
      gperm.push_back(3 + i);
    }
    w2 = b.reshape(b.transpose(b.reshape(w, grouped), gperm), merged);
  }
  for (int64_t i = 0; i < S; ++i)
    if (ws[2 + i] > 1) {
      flipAxes.push_back(2 + i);
      starts.push_back(-1);
      ends.push_back(std::numeric_limits<int64_t>::min());
      steps.push_back(-1);
    }
  if (!flipAxes.empty())
    w2 = b.op(OpKind::Slice, {w2},
              {{"axes", flipAxes}, {"starts", starts}, {"ends", ends}, {"steps", steps}});

  std::vector<Value *> ops{x, w2};
  if (bias)
    ops.push_back(bias);
  AttrMap attrs{{"group", G},
                {"strides", std::vector<int64_t>(S, 1)},
                {"dilations", std::vector<int64_t>(win->dilations)}};
  Shape outLen(ys.begin() + 2, ys.end());
  if (stuffResult) { // convolve, then stuff the result
    attrs["pads"] = std::vector<int64_t>(2 * S, 0);
    return std::vector<Value *>{zeroStuff(b, b.op(OpKind::Conv, ops, attrs), win->strides, outLen)};
  }
  if (!unitStride) { // stuff x, keeping its trailing zeros where they replace end padding
    Shape stuffed;
    for (int64_t i = 0; i < S; ++i) {
      int64_t full = xs[2 + i] * win->strides[i], trailing = win->strides[i] - 1;
      int64_t keep = std::min(trailing, pads[S + i]);
      stuffed.push_back(full - trailing + keep);
      pads[S + i] -= keep;
    }
    ops[0] = zeroStuff(b, x, win->strides, stuffed);
  }
  attrs["pads"] = pads;
  return std::vector<Value *>{b.op(OpKind::Conv, ops, attrs)};
}

} // namespace

void defineConvOps(OpTable &t) {
  t.def(OpKind::Conv)
      .operands(2, 3)
      .attr("dilations", AttrKind::Ints, std::vector<int64_t>{})
      .attr("group", AttrKind::Int, int64_t{1})
      .attr("pads", AttrKind::Ints, std::vector<int64_t>{})
      .attr("strides", AttrKind::Ints, std::vector<int64_t>{})
      .attr("channels_last", AttrKind::Int, int64_t{0})
      .fusible(Fusibility::anchor(/*prologue=*/false, /*epilogue=*/true))
      .fp16(Fp16Policy::Allow)
      .layout(LayoutRule::channel(1, remapConv))
      .verify(verifyConv)
      .infer(inferConv)
      .reference(refConv);
  t.def(OpKind::ConvTranspose)
      .operands(2, 3)
      .attr("dilations", AttrKind::Ints, std::vector<int64_t>{})
      .attr("group", AttrKind::Int, int64_t{1})
      .attr("output_padding", AttrKind::Ints, std::vector<int64_t>{})
      .attr("pads", AttrKind::Ints, std::vector<int64_t>{})
      .attr("strides", AttrKind::Ints, std::vector<int64_t>{})
      .fusible(Fusibility::opaque())
      .fp16(Fp16Policy::Allow)
      .layout(LayoutRule::channel(1))
      .verify(verifyConvTranspose)
      .infer(inferConvTranspose)
      .reference(refConvTranspose)
      .canonical(convTransposeAsConv);
  t[OpKind::Conv].gradient = gradConv;
}

} // namespace dlc::ir
