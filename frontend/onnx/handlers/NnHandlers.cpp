//===- NnHandlers.cpp - ONNX conv, pooling, normalization, GEMM, RNN -------===//
#include "Common.h"

namespace dlc::frontend {
namespace {

using namespace ir;

Shape spatialOf(const Value *v) {
  return Shape(v->shape().begin() + 2, v->shape().end());
}

} // namespace

llvm::Expected<Value *> buildConv(NodeImporter &ni, Value *x, Value *w, Value *b) {
  if (x->rank() < 3 || w->rank() != x->rank())
    return ni.error("X and W must have the same rank >= 3, got " + x->type().str() + " and " +
                    w->type().str());
  Shape kernel = spatialOf(w);
  if (ni.hasAttr("kernel_shape") && ni.attrInts("kernel_shape") != kernel)
    return ni.error("kernel_shape " + shapeStr(ni.attrInts("kernel_shape")) +
                    " does not match the weight's spatial shape " + shapeStr(kernel));
  auto strides = ni.attrInts("strides"), dilations = ni.attrInts("dilations");
  DLC_TRY(pads, resolvePads(ni, spatialOf(x), kernel, strides, dilations));
  AttrMap a{{"pads", Attribute(pads)}, {"group", Attribute(ni.attrInt("group", 1))}};
  if (!strides.empty())
    a["strides"] = Attribute(strides);
  if (!dilations.empty())
    a["dilations"] = Attribute(dilations);
  std::vector<Value *> operands{x, w};
  if (b)
    operands.push_back(b);
  return ni.op(OpKind::Conv, operands, a);
}

namespace {

llvm::Error importConv(NodeImporter &ni) {
  return single(ni, buildConv(ni, ni.input(0), ni.input(1), ni.input(2)));
}

llvm::Error importConvTranspose(NodeImporter &ni) {
  Value *x = ni.input(0), *w = ni.input(1);
  if (x->rank() < 3 || w->rank() != x->rank())
    return ni.error("X and W must have the same rank >= 3");
  int64_t k = x->rank() - 2;
  Shape kernel = spatialOf(w), in = spatialOf(x);
  auto strides = ni.attrInts("strides", Shape(k, 1));
  auto dilations = ni.attrInts("dilations", Shape(k, 1));
  auto outPad = ni.attrInts("output_padding", Shape(k, 0));
  auto outShape = ni.attrInts("output_shape");
  std::string autoPad = ni.attrString("auto_pad", "NOTSET");
  if (strides.size() != size_t(k) || dilations.size() != size_t(k) || outPad.size() != size_t(k))
    return ni.error("strides, dilations and output_padding need one value per spatial dim");
  Shape pads = ni.attrInts("pads", Shape(2 * k, 0));
  if (outShape.size() == size_t(k) + 2)
    outShape.erase(outShape.begin(), outShape.begin() + 2);
  if (outShape.empty() && (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER"))
    for (int64_t i = 0; i < k; ++i)
      outShape.push_back(in[i] * strides[i]);
  if (!outShape.empty()) {
    if (outShape.size() != size_t(k))
      return ni.error("output_shape must have one value per spatial dim");
    for (int64_t i = 0; i < k; ++i) {
      int64_t total =
          strides[i] * (in[i] - 1) + outPad[i] + ((kernel[i] - 1) * dilations[i] + 1) - outShape[i];
      if (total < 0) { // the requested output is larger: grow it at the end
        outPad[i] -= total;
        total = 0;
      }
      bool upper = autoPad != "SAME_LOWER";
      pads[i] = upper ? total / 2 : total - total / 2;
      pads[i + k] = upper ? total - total / 2 : total / 2;
    }
  } else if (autoPad == "VALID") {
    pads.assign(2 * k, 0);
  }
  AttrMap a{{"pads", Attribute(pads)},
            {"strides", Attribute(strides)},
            {"dilations", Attribute(dilations)},
            {"output_padding", Attribute(outPad)},
            {"group", Attribute(ni.attrInt("group", 1))}};
  DLC_TRY(r, ni.op(OpKind::ConvTranspose, allInputs(ni), a));
  ni.setOutput(0, r);
  return llvm::Error::success();
}

/// Col2Im (opset 18), the adjoint of im2col: input [N, C*K, L] (K = prod(block_shape),
/// L sliding positions) is summed into [N, C, image_shape...]. That is a transposed
/// convolution with one group per channel and a one-hot kernel: input channel c*K + k
/// adds into channel c at block position k.
llvm::Error importCol2Im(NodeImporter &ni) {
  Value *x = ni.input(0);
  DLC_TRY(image, ni.constInts(1, "image_shape"));
  DLC_TRY(block, ni.constInts(2, "block_shape"));
  int64_t k = static_cast<int64_t>(image.size());
  if (x->rank() != 3 || k < 1 || block.size() != image.size())
    return ni.error("input must be [N, C*prod(block_shape), L] and image_shape and block_shape "
                    "must have one value per spatial dim");
  auto strides = ni.attrInts("strides", Shape(k, 1));
  auto dilations = ni.attrInts("dilations", Shape(k, 1));
  Shape pads = ni.attrInts("pads", Shape(2 * k, 0));
  if (strides.size() != size_t(k) || dilations.size() != size_t(k) || pads.size() != size_t(2 * k))
    return ni.error("strides and dilations need one value per spatial dim, pads two");
  const Shape &xs = x->shape();
  int64_t blockSize = 1, total = 1;
  Shape positions, outPad(k);
  for (int64_t d = 0; d < k; ++d) {
    // Bounded so that the arithmetic below cannot overflow.
    constexpr int64_t kLimit = int64_t{1} << 31;
    auto in = [&](int64_t v, int64_t lo) { return v >= lo && v <= kLimit; };
    if (!in(block[d], 1) || !in(image[d], 1) || !in(strides[d], 1) || !in(dilations[d], 1) ||
        !in(pads[d], 0) || !in(pads[d + k], 0))
      return ni.error("image_shape, block_shape, strides and dilations must be in 1..2^31, pads "
                      "in 0..2^31");
    if (block[d] > xs[1] / blockSize)
      return ni.error("the blocks do not fit the " + std::to_string(xs[1]) + " channels of " +
                      x->type().str());
    blockSize *= block[d];
    int64_t span = dilations[d] * (block[d] - 1) + 1;
    int64_t n = (image[d] + pads[d] + pads[d + k] - span) / strides[d] + 1;
    if (n < 1)
      return ni.error("the block does not fit the padded image in dim " + std::to_string(d));
    positions.push_back(n);
    outPad[d] = image[d] - (strides[d] * (n - 1) + span - pads[d] - pads[d + k]);
    if (n > xs[2] / total)
      return ni.error("input " + x->type().str() + " has fewer than the image's block positions");
    total *= n;
  }
  if (xs[1] % blockSize || xs[2] != total)
    return ni.error("input " + x->type().str() + " does not hold C*" + std::to_string(blockSize) +
                    " channels of " + std::to_string(total) + " block positions");
  if (xs[1] > (int64_t{1} << 26) / blockSize)
    return ni.unsupported("Col2Im with " + std::to_string(xs[1]) + " channels of blocks of " +
                          std::to_string(blockSize) + " (its one-hot kernel would be too large)");
  int64_t c = xs[1] / blockSize;
  Shape inShape{xs[0], xs[1]};
  inShape.insert(inShape.end(), positions.begin(), positions.end());
  DLC_TRY(in, ni.op(OpKind::Reshape, {x}, {{"shape", Attribute(inShape)}}));
  Shape wShape{xs[1], 1};
  wShape.insert(wShape.end(), block.begin(), block.end());
  Tensor w(TensorType(x->dtype(), wShape));
  std::vector<double> one(static_cast<size_t>(xs[1] * blockSize), 0.0);
  for (int64_t ch = 0; ch < xs[1]; ++ch)
    one[ch * blockSize + ch % blockSize] = 1.0;
  w = Tensor::fromVector(w.type(), one);
  AttrMap a{{"pads", Attribute(pads)},
            {"strides", Attribute(strides)},
            {"dilations", Attribute(dilations)},
            {"output_padding", Attribute(outPad)},
            {"group", Attribute(c)}};
  DLC_TRY(r, ni.op(OpKind::ConvTranspose, {in, ni.constant(std::move(w), "col2im_kernel")}, a));
  ni.setOutput(0, r);
  return llvm::Error::success();
}

/// A pooling node's window as IR attributes: kernel_shape, explicit pads (auto_pad
/// resolved), strides and dilations where given.
llvm::Expected<AttrMap> poolWindow(NodeImporter &ni, Value *x) {
  if (x->rank() < 3)
    return ni.error("input must have rank >= 3, got " + x->type().str());
  auto kernel = ni.attrInts("kernel_shape");
  auto strides = ni.attrInts("strides"), dilations = ni.attrInts("dilations");
  if (kernel.size() != size_t(x->rank() - 2))
    return ni.error("kernel_shape must have one value per spatial dim");
  DLC_TRY(pads, resolvePads(ni, spatialOf(x), kernel, strides, dilations));
  AttrMap a{{"kernel_shape", Attribute(kernel)}, {"pads", Attribute(pads)}};
  if (!strides.empty())
    a["strides"] = Attribute(strides);
  if (!dilations.empty())
    a["dilations"] = Attribute(dilations);
  return a;
}

llvm::Error importPool(NodeImporter &ni) {
  bool isMax = ni.opType() == "MaxPool";
  Value *x = ni.input(0);
  DLC_TRY(a, poolWindow(ni, x));
  if (ni.attrInt("ceil_mode", 0))
    a["ceil_mode"] = Attribute(int64_t{1});
  if (isMax && ni.attrInt("storage_order", 0))
    a["storage_order"] = Attribute(int64_t{1});
  if (!isMax && ni.attrInt("count_include_pad", 0))
    a["count_include_pad"] = Attribute(int64_t{1});
  unsigned outs = isMax && ni.wantsOutput(1) ? 2 : 1;
  DLC_TRY(r, ni.opMulti(isMax ? OpKind::MaxPool : OpKind::AveragePool, {x}, a, outs));
  for (unsigned i = 0; i < outs; ++i)
    ni.setOutput(i, r[i]);
  return llvm::Error::success();
}

/// RMSNormalization (opset 23). Y has the scale's type (ONNX's V): an X of another
/// float type is converted to it first.
llvm::Error importRmsNorm(NodeImporter &ni) {
  Value *x = ni.input(0), *scale = ni.input(1);
  if (isFloat(x->dtype()) && isFloat(scale->dtype()) && x->dtype() != scale->dtype()) {
    DLC_TRY(c,
            ni.op(OpKind::Cast, {x}, {{"to", Attribute(std::string(dtypeName(scale->dtype())))}}));
    x = c;
  }
  DLC_TRY(attrs, ni.copyAttrs(OpKind::RMSNormalization));
  return single(ni, ni.op(OpKind::RMSNormalization, {x, scale}, attrs));
}

/// |x|^p for the Lp pools (p = 1 and 2 without a power).
llvm::Expected<Value *> absPow(NodeImporter &ni, Value *x, int64_t p) {
  if (p == 2)
    return ni.op(OpKind::Mul, {x, x});
  DLC_TRY(a, ni.op(OpKind::Abs, {x}));
  if (p == 1)
    return a;
  return ni.op(OpKind::Pow, {a, ni.scalar(x->dtype(), static_cast<double>(p))});
}

/// s^(1/p), the end of the Lp pools.
llvm::Expected<Value *> rootP(NodeImporter &ni, Value *s, int64_t p) {
  if (p == 1)
    return s;
  if (p == 2)
    return ni.op(OpKind::Sqrt, {s});
  return ni.op(OpKind::Pow, {s, ni.scalar(s->dtype(), 1.0 / static_cast<double>(p))});
}

/// LpPool: (sum over the window of |x|^p)^(1/p), padding counting as zeros: the
/// average pool of |x|^p that counts padding, times the window size. With ceil_mode
/// a last window can pass the padding and hold fewer elements, so it is refused.
llvm::Error importLpPool(NodeImporter &ni) {
  Value *x = ni.input(0);
  int64_t p = ni.attrInt("p", 2);
  if (p < 1)
    return ni.error("p must be at least 1");
  if (ni.attrInt("ceil_mode", 0))
    return ni.unsupported("LpPool with ceil_mode = 1");
  DLC_TRY(a, poolWindow(ni, x));
  a["count_include_pad"] = Attribute(int64_t{1});
  double window = 1;
  for (int64_t k : a["kernel_shape"].ints())
    window *= static_cast<double>(k);
  DLC_TRY(xp, absPow(ni, x, p));
  DLC_TRY(avg, ni.op(OpKind::AveragePool, {xp}, a));
  DLC_TRY(sum, ni.op(OpKind::Mul, {avg, ni.scalar(x->dtype(), window)}));
  return single(ni, rootP(ni, sum, p));
}

/// GlobalLpPool: (sum over the spatial dims of |x|^p)^(1/p).
llvm::Error importGlobalLpPool(NodeImporter &ni) {
  Value *x = ni.input(0);
  int64_t p = ni.attrInt("p", 2);
  if (p < 1 || x->rank() < 3)
    return ni.error("p must be at least 1 and the input of rank >= 3");
  std::vector<int64_t> axes;
  for (int64_t d = 2; d < x->rank(); ++d)
    axes.push_back(d);
  DLC_TRY(xp, absPow(ni, x, p));
  DLC_TRY(sum, ni.op(OpKind::ReduceSum, {xp}, {{"axes", Attribute(axes)}}));
  return single(ni, rootP(ni, sum, p));
}

llvm::Error importBatchNorm(NodeImporter &ni) {
  if (ni.opset() < 9 && ni.attrInt("spatial", 1) != 1)
    return ni.unsupported("BatchNormalization with spatial = 0");
  bool training = ni.opset() >= 14 ? ni.attrInt("training_mode", 0) != 0 : ni.wantsOutput(1);
  if (ni.wantsOutput(3) || ni.wantsOutput(4))
    return ni.unsupported("saved_mean / saved_var outputs of BatchNormalization");
  AttrMap a{{"epsilon", Attribute(ni.attrFloat("epsilon", 1e-5f))},
            {"momentum", Attribute(ni.attrFloat("momentum", 0.9f))}};
  if (training)
    a["training_mode"] = Attribute(int64_t{1});
  unsigned outs = training ? 3 : 1;
  DLC_TRY(r, ni.opMulti(OpKind::BatchNormalization, allInputs(ni), a, outs));
  for (unsigned i = 0; i < outs; ++i)
    ni.setOutput(i, r[i]);
  return llvm::Error::success();
}

/// Opset 18's per-group scale/bias become per-channel (repeat each group's value).
llvm::Error importGroupNorm(NodeImporter &ni) {
  Value *x = ni.input(0);
  int64_t g = ni.attrInt("num_groups", 0);
  if (x->rank() < 3 || g < 1 || x->shape()[1] % g)
    return ni.error("num_groups must divide the channel count of " + x->type().str());
  int64_t c = x->shape()[1];
  std::vector<Value *> ops{x};
  for (size_t i = 1; i < 3; ++i) {
    Value *v = ni.input(i);
    if (v->shape() == Shape{g} && g != c) {
      DLC_TRY(u, ni.op(OpKind::Reshape, {v}, {{"shape", Attribute(Shape{g, 1})}}));
      DLC_TRY(e, ni.op(OpKind::Expand, {u}, {{"shape", Attribute(Shape{g, c / g})}}));
      DLC_TRY(f, ni.op(OpKind::Reshape, {e}, {{"shape", Attribute(Shape{c})}}));
      v = f;
    }
    ops.push_back(v);
  }
  DLC_TRY(r, ni.op(OpKind::GroupNormalization, ops,
                   {{"num_groups", Attribute(g)},
                    {"epsilon", Attribute(ni.attrFloat("epsilon", 1e-5f))}}));
  ni.setOutput(0, r);
  return llvm::Error::success();
}

/// MeanVarianceNormalization per its ONNX function body:
/// (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9) over `axes`.
llvm::Error importMVN(NodeImporter &ni) {
  Value *x = ni.input(0);
  AttrMap red{{"axes", Attribute(ni.attrInts("axes", {0, 2, 3}))}};
  DLC_TRY(mean, ni.op(OpKind::ReduceMean, {x}, red));
  DLC_TRY(sq, ni.op(OpKind::Mul, {x, x}));
  DLC_TRY(meanSq, ni.op(OpKind::ReduceMean, {sq}, red));
  DLC_TRY(mean2, ni.op(OpKind::Mul, {mean, mean}));
  DLC_TRY(var, ni.op(OpKind::Sub, {meanSq, mean2}));
  DLC_TRY(sd, ni.op(OpKind::Sqrt, {var}));
  DLC_TRY(sdEps, ni.op(OpKind::Add, {sd, ni.scalar(x->dtype(), 1e-9)}));
  DLC_TRY(centered, ni.op(OpKind::Sub, {x, mean}));
  DLC_TRY(y, ni.op(OpKind::Div, {centered, sdEps}));
  ni.setOutput(0, y);
  return llvm::Error::success();
}

llvm::Error importGemm(NodeImporter &ni) {
  auto attrs = ni.copyAttrs(OpKind::Gemm, {"broadcast"});
  if (!attrs)
    return attrs.takeError();
  DLC_TRY(r, ni.op(OpKind::Gemm, allInputs(ni), std::move(*attrs)));
  ni.setOutput(0, r);
  return llvm::Error::success();
}

/// LSTM and GRU map one to one; hidden_size defaults to R's last dim.
llvm::Error importRnn(NodeImporter &ni) {
  bool lstm = ni.opType() == "LSTM";
  OpKind k = lstm ? OpKind::LSTM : OpKind::GRU;
  auto attrs = ni.copyAttrs(k);
  if (!attrs)
    return attrs.takeError();
  if (!attrs->count("hidden_size")) {
    const Value *r = ni.input(2);
    if (!r || r->rank() != 3)
      return makeError("input R (recurrence weights) must have rank 3");
    (*attrs)["hidden_size"] = Attribute(r->shape().back());
  }
  unsigned outs = std::max<unsigned>(1, static_cast<unsigned>(ni.numOutputs()));
  DLC_TRY(r, ni.opMulti(k, allInputs(ni), std::move(*attrs), outs));
  for (unsigned i = 0; i < outs; ++i)
    ni.setOutput(i, r[i]);
  return llvm::Error::success();
}

} // namespace

void registerNnHandlers(std::vector<HandlerEntry> &t) {
  t.push_back({"Conv", 1, kMaxOpset, importConv});
  t.push_back({"ConvTranspose", 1, kMaxOpset, importConvTranspose});
  t.push_back({"Col2Im", 18, kMaxOpset, importCol2Im, "", 3});
  t.push_back({"MaxPool", 1, kMaxOpset, importPool});
  t.push_back({"AveragePool", 1, kMaxOpset, importPool});
  t.push_back({"GlobalAveragePool", 1, kMaxOpset, direct<OpKind::GlobalAveragePool>});
  t.push_back({"LpPool", 2, kMaxOpset, importLpPool});
  t.push_back({"GlobalLpPool", 2, kMaxOpset, importGlobalLpPool});
  t.push_back({"GlobalMaxPool", 1, kMaxOpset, direct<OpKind::GlobalMaxPool>});
  t.push_back({"BatchNormalization", 7, kMaxOpset, importBatchNorm});
  t.push_back({"LayerNormalization", 17, kMaxOpset, direct<OpKind::LayerNormalization>});
  // Opset 23's op; files at opsets above kMaxOpset are refused before any handler runs.
  t.push_back({"RMSNormalization", 23, kMaxOpset, importRmsNorm, "", 2});
  t.push_back({"InstanceNormalization", 6, kMaxOpset, direct<OpKind::InstanceNormalization>});
  t.push_back({"GroupNormalization", 18, kMaxOpset, importGroupNorm});
  t.push_back({"LRN", 1, kMaxOpset, direct<OpKind::LRN>});
  t.push_back({"MeanVarianceNormalization", 9, kMaxOpset, importMVN});
  t.push_back({"MatMul", 1, kMaxOpset, direct<OpKind::MatMul>});
  t.push_back({"Gemm", 7, kMaxOpset, importGemm});
  t.push_back({"LSTM", 7, kMaxOpset, importRnn});
  t.push_back({"GRU", 7, kMaxOpset, importRnn});
}

} // namespace dlc::frontend
