//===- ShapeHandlers.cpp - ONNX shape, movement and indexing ops -----------===//
//
// Shape-determining inputs (Reshape's shape, Slice's starts, ...) must be
// compile-time constants; they become IR attributes.
//===----------------------------------------------------------------------===//
#include "Common.h"

#include "llvm/Support/FormatVariadic.h"

#include <numeric>

namespace dlc::frontend {
namespace {

using namespace ir;

llvm::Error importReshape(NodeImporter &ni) {
  Value *x = ni.input(0);
  DLC_TRY(shape, ni.constInts(1, "the target shape"));
  bool allowZero = ni.attrInt("allowzero", 0) != 0;
  Shape s = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == 0 && !allowZero) {
      if (i >= static_cast<size_t>(x->rank()))
        return ni.error("shape entry " + std::to_string(i) + " is 0 (copy) beyond the input rank");
      s[i] = x->shape()[i];
    }
    if (s[i] == -1) {
      if (infer >= 0)
        return ni.error("the target shape has more than one -1");
      infer = static_cast<int64_t>(i);
    } else if (s[i] < 0) {
      return ni.error("invalid target shape " + shapeStr(shape));
    } else if (__builtin_mul_overflow(known, s[i], &known)) {
      return ni.error("the target shape " + shapeStr(shape) +
                      " has more elements than int64 holds");
    }
  }
  int64_t total = product(x->shape());
  if (infer >= 0) {
    if (known == 0 || total % known)
      return ni.error("cannot reshape " + x->type().str() + " to " + shapeStr(shape));
    s[infer] = total / known;
  }
  return single(ni, ni.op(OpKind::Reshape, {x}, {{"shape", Attribute(s)}}));
}

/// Squeeze/Unsqueeze: axes from the attribute (opset < 13) or the optional input.
template <OpKind K> llvm::Error importSqueezeLike(NodeImporter &ni) {
  std::vector<int64_t> axes;
  if (ni.opset() < 13) {
    axes = ni.attrInts("axes");
  } else if (ni.hasInput(1)) {
    DLC_TRY(a, ni.constInts(1, "axes"));
    axes = a;
  }
  return single(ni, ni.op(K, {ni.input(0)}, {{"axes", Attribute(axes)}}));
}

llvm::Error importSplit(NodeImporter &ni) {
  std::vector<int64_t> split;
  if (ni.opset() < 13) {
    split = ni.attrInts("split");
  } else if (ni.hasInput(1)) {
    DLC_TRY(s, ni.constInts(1, "split"));
    split = s;
  }
  unsigned outs = static_cast<unsigned>(ni.numOutputs());
  int64_t axis = ni.attrInt("axis", 0);
  if (ni.opset() >= 18 && ni.hasAttr("num_outputs")) {
    // Opset 18: num_outputs chunks of ceil(dim / n), the last one smaller.
    int64_t n = ni.attrInt("num_outputs", 0);
    if (n < 1 || n != static_cast<int64_t>(outs))
      return ni.error("num_outputs is " + std::to_string(n) + " but the node has " +
                      std::to_string(outs) + " outputs");
    Value *x = ni.input(0);
    int64_t ax = axis < 0 ? axis + x->rank() : axis;
    if (ax < 0 || ax >= x->rank())
      return ni.error("axis " + std::to_string(axis) + " is out of range for " + x->type().str());
    if (split.empty()) {
      int64_t dim = x->shape()[ax], chunk = (dim + n - 1) / n;
      if (dim - chunk * (n - 1) < 0)
        return ni.error("cannot split a dimension of " + std::to_string(dim) + " into " +
                        std::to_string(n) + " chunks of " + std::to_string(chunk));
      split.assign(n - 1, chunk);
      split.push_back(dim - chunk * (n - 1));
    }
  }
  AttrMap a{{"axis", Attribute(axis)}};
  if (!split.empty())
    a["split"] = Attribute(split);
  DLC_TRY(r, ni.opMulti(OpKind::Split, {ni.input(0)}, a, outs));
  for (unsigned i = 0; i < outs; ++i)
    ni.setOutput(i, r[i]);
  return llvm::Error::success();
}

llvm::Error importSlice(NodeImporter &ni) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (ni.opset() < 10) {
    starts = ni.attrInts("starts");
    ends = ni.attrInts("ends");
    axes = ni.attrInts("axes");
  } else {
    DLC_TRY(s, ni.constInts(1, "starts"));
    DLC_TRY(e, ni.constInts(2, "ends"));
    starts = s;
    ends = e;
    if (ni.hasInput(3)) {
      DLC_TRY(a, ni.constInts(3, "axes"));
      axes = a;
    }
    if (ni.hasInput(4)) {
      DLC_TRY(st, ni.constInts(4, "steps"));
      steps = st;
    }
  }
  AttrMap a{{"starts", Attribute(starts)}, {"ends", Attribute(ends)}};
  if (!axes.empty())
    a["axes"] = Attribute(axes);
  if (!steps.empty())
    a["steps"] = Attribute(steps);
  return single(ni, ni.op(OpKind::Slice, {ni.input(0)}, a));
}

llvm::Error importExpand(NodeImporter &ni) {
  DLC_TRY(shape, ni.constInts(1, "the target shape"));
  return single(ni, ni.op(OpKind::Expand, {ni.input(0)}, {{"shape", Attribute(shape)}}));
}

llvm::Error importTile(NodeImporter &ni) {
  DLC_TRY(rep, ni.constInts(1, "repeats"));
  return single(ni, ni.op(OpKind::Tile, {ni.input(0)}, {{"repeats", Attribute(rep)}}));
}

llvm::Error importPad(NodeImporter &ni) {
  Value *x = ni.input(0);
  int64_t rank = x->rank();
  std::vector<int64_t> pads;
  Value *cv = nullptr;
  if (ni.opset() < 11) {
    pads = ni.attrInts("pads");
    float value = ni.attrFloat("value", 0.0f);
    if (value != 0.0f)
      cv = ni.scalar(x->dtype(), value);
  } else {
    DLC_TRY(p, ni.constInts(1, "pads"));
    pads = p;
    cv = ni.input(2);
    if (ni.hasInput(3)) { // opset 18: pads only for the listed axes
      DLC_TRY(axes, ni.constInts(3, "axes"));
      if (pads.size() != 2 * axes.size())
        return ni.error("pads must have two values per axis");
      std::vector<int64_t> full(2 * rank, 0);
      for (size_t i = 0; i < axes.size(); ++i) {
        int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (a < 0 || a >= rank)
          return ni.error("pad axis out of range");
        full[a] = pads[i];
        full[a + rank] = pads[i + axes.size()];
      }
      pads = full;
    }
  }
  std::vector<Value *> ops{x};
  if (cv)
    ops.push_back(cv);
  return single(ni, ni.op(OpKind::Pad, ops,
                          {{"pads", Attribute(pads)},
                           {"mode", Attribute(ni.attrString("mode", "constant"))}}));
}

/// CenterCropPad (opset 18): each listed axis cropped or zero-padded to its target
/// length around the centre (the odd element at the end), as a Slice then a Pad.
llvm::Error importCenterCropPad(NodeImporter &ni) {
  Value *x = ni.input(0);
  DLC_TRY(target, ni.constInts(1, "shape"));
  int64_t rank = x->rank();
  std::vector<int64_t> axes = ni.attrInts("axes");
  if (axes.empty()) {
    axes.resize(rank);
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (target.size() != axes.size())
    return ni.error("shape must have one length per axis");
  std::vector<int64_t> starts, ends, sliced, pads(2 * rank, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (a < 0 || a >= rank || target[i] < 0)
      return ni.error("axis " + std::to_string(axes[i]) + " or its length is out of range");
    int64_t dim = x->shape()[a], len = target[i];
    if (len < dim) {
      sliced.push_back(a);
      starts.push_back((dim - len) / 2);
      ends.push_back((dim - len) / 2 + len);
    } else if (len > dim) {
      pads[a] = (len - dim) / 2;
      pads[a + rank] = len - dim - pads[a];
    }
  }
  if (!sliced.empty()) {
    DLC_TRY(c, ni.op(OpKind::Slice, {x},
                     {{"starts", Attribute(starts)},
                      {"ends", Attribute(ends)},
                      {"axes", Attribute(sliced)}}));
    x = c;
  }
  if (std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p != 0; })) {
    DLC_TRY(p, ni.op(OpKind::Pad, {x}, {{"pads", Attribute(pads)}}));
    x = p;
  }
  ni.setOutput(0, x);
  return llvm::Error::success();
}

/// Shapes are static, so Shape and Size are constants.
llvm::Error importShape(NodeImporter &ni) {
  const Shape &s = ni.input(0)->shape();
  int64_t rank = static_cast<int64_t>(s.size());
  auto clampAxis = [&](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + rank : a, 0, rank); };
  int64_t start = clampAxis(ni.attrInt("start", 0)), end = clampAxis(ni.attrInt("end", rank));
  std::vector<int64_t> dims(s.begin() + start, s.begin() + std::max(start, end));
  ni.setOutput(0, ni.ints(dims));
  return llvm::Error::success();
}

llvm::Error importSize(NodeImporter &ni) {
  ni.setOutput(0, ni.scalar(DType::I64, static_cast<double>(ni.input(0)->type().numElements())));
  return llvm::Error::success();
}

llvm::Error importConstantOfShape(NodeImporter &ni) {
  DLC_TRY(shape, ni.constInts(0, "the shape"));
  AttrMap a{{"shape", Attribute(shape)}};
  if (ni.hasAttr("value")) {
    DLC_TRY(v, ni.attrTensor("value"));
    a["value"] = Attribute(v.reshaped({1}));
  }
  return single(ni, ni.op(OpKind::ConstantOfShape, {}, a));
}

llvm::Error importEyeLike(NodeImporter &ni) {
  Value *x = ni.input(0);
  if (x->rank() != 2)
    return ni.error("input must be 2-D");
  DType dt = x->dtype();
  if (ni.hasAttr("dtype")) {
    auto d = dtypeFromOnnx(static_cast<int32_t>(ni.attrInt("dtype", 1)));
    if (!d)
      return ni.unsupported("dtype");
    dt = *d;
  }
  int64_t k = ni.attrInt("k", 0), rows = x->shape()[0], cols = x->shape()[1];
  std::vector<double> v(rows * cols, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    if (r + k >= 0 && r + k < cols)
      v[r * cols + r + k] = 1;
  ni.setOutput(0, ni.constant(Tensor::fromVector(TensorType(dt, x->shape()), v)));
  return llvm::Error::success();
}

llvm::Error importTrilu(NodeImporter &ni) {
  int64_t k = 0;
  if (ni.hasInput(1)) {
    DLC_TRY(kv, ni.constInts(1, "k"));
    k = kv.empty() ? 0 : kv[0];
  }
  return single(ni, ni.op(OpKind::Trilu, {ni.input(0)},
                          {{"upper", Attribute(ni.attrInt("upper", 1))}, {"k", Attribute(k)}}));
}

llvm::Error importOneHot(NodeImporter &ni) {
  const Tensor *depth = ni.constInput(1);
  if (!depth)
    return ni.error("depth (input 1) must be a compile-time constant" + ni.bindHint(1));
  int64_t d = static_cast<int64_t>(depth->getDouble(0));
  return single(ni, ni.op(OpKind::OneHot, {ni.input(0), ni.input(2)},
                          {{"depth", Attribute(d)}, {"axis", Attribute(ni.attrInt("axis", -1))}}));
}

llvm::Error importNonZero(NodeImporter &ni) {
  const Tensor *x = ni.constInput(0);
  if (!x)
    return ni.unsupported("NonZero of a non-constant input (its output shape depends on the data)" +
                          ni.bindHint(0));
  const Shape &s = x->shape();
  std::vector<int64_t> hits;
  for (int64_t i = 0; i < x->numElements(); ++i)
    if (x->getDouble(i) != 0)
      hits.push_back(i);
  int64_t rank = static_cast<int64_t>(s.size()), n = static_cast<int64_t>(hits.size());
  std::vector<int64_t> out(rank * n);
  Shape st = stridesOf(s);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t d = 0; d < rank; ++d)
      out[d * n + j] = (hits[j] / st[d]) % s[d];
  ni.setOutput(0, ni.constant(Tensor::fromVector(TensorType(DType::I64, {rank, n}), out)));
  return llvm::Error::success();
}

/// Compress with a constant condition is a Gather of the selected indices.
llvm::Error importCompress(NodeImporter &ni) {
  const Tensor *cond = ni.constInput(1);
  if (!cond)
    return ni.unsupported("Compress with a non-constant condition (data-dependent output shape)" +
                          ni.bindHint(1));
  Value *x = ni.input(0);
  int64_t axis = 0;
  if (ni.hasAttr("axis")) {
    axis = ni.attrInt("axis", 0);
    if (axis < 0)
      axis += x->rank();
  } else {
    DLC_TRY(flat, ni.op(OpKind::Reshape, {x}, {{"shape", Attribute(Shape{product(x->shape())})}}));
    x = flat;
  }
  std::vector<int64_t> idx;
  for (int64_t i = 0; i < cond->numElements() && i < x->shape()[axis]; ++i)
    if (cond->getDouble(i) != 0)
      idx.push_back(i);
  return single(ni, ni.op(OpKind::Gather, {x, ni.ints(idx)}, {{"axis", Attribute(axis)}}));
}

/// DepthToSpace / SpaceToDepth as Reshape -> Transpose -> Reshape.
llvm::Error importDepthSpace(NodeImporter &ni) {
  Value *x = ni.input(0);
  if (x->rank() != 4)
    return ni.error("input must be 4-D");
  int64_t b = ni.attrInt("blocksize", 0), n = x->shape()[0], c = x->shape()[1], h = x->shape()[2],
          w = x->shape()[3];
  if (b < 1)
    return ni.error("blocksize must be positive");
  Shape s1, perm, s2;
  if (ni.opType() == "DepthToSpace") {
    if (c % (b * b))
      return ni.error("channels must be divisible by blocksize^2");
    if (ni.attrString("mode", "DCR") == "DCR") {
      s1 = {n, b, b, c / (b * b), h, w};
      perm = {0, 3, 4, 1, 5, 2};
    } else {
      s1 = {n, c / (b * b), b, b, h, w};
      perm = {0, 1, 4, 2, 5, 3};
    }
    s2 = {n, c / (b * b), h * b, w * b};
  } else {
    if (h % b || w % b)
      return ni.error("spatial dims must be divisible by blocksize");
    s1 = {n, c, h / b, b, w / b, b};
    perm = {0, 3, 5, 1, 2, 4};
    s2 = {n, c * b * b, h / b, w / b};
  }
  DLC_TRY(r1, ni.op(OpKind::Reshape, {x}, {{"shape", Attribute(s1)}}));
  DLC_TRY(t, ni.op(OpKind::Transpose, {r1}, {{"perm", Attribute(perm)}}));
  return single(ni, ni.op(OpKind::Reshape, {t}, {{"shape", Attribute(s2)}}));
}

llvm::Error resizeCommon(NodeImporter &ni, std::vector<float> scales, std::vector<int64_t> sizes,
                         std::vector<float> roi, AttrMap a) {
  Value *x = ni.input(0);
  int64_t rank = x->rank();
  const Shape &in = x->shape();
  std::vector<int64_t> axes = wrapAxes(ni.attrInts("axes"), rank);
  auto expand = [&](auto vals, auto fill) {
    if (axes.empty())
      return vals;
    decltype(vals) full(rank, fill);
    for (size_t i = 0; i < axes.size() && i < vals.size(); ++i)
      full[axes[i]] = vals[i];
    return full;
  };
  if (!sizes.empty()) {
    std::vector<int64_t> full = expand(sizes, int64_t{-1});
    for (int64_t i = 0; i < rank; ++i)
      if (full[i] < 0)
        full[i] = in[i];
    std::string policy = ni.attrString("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch") {
      std::vector<int64_t> ax = axes;
      if (ax.empty()) {
        ax.resize(rank);
        std::iota(ax.begin(), ax.end(), 0);
      }
      double s = policy == "not_larger" ? 1e300 : 0;
      for (int64_t i : ax) {
        double r = static_cast<double>(full[i]) / in[i];
        s = policy == "not_larger" ? std::min(s, r) : std::max(s, r);
      }
      for (int64_t i : ax)
        full[i] = static_cast<int64_t>(std::round(s * in[i]));
      scales.assign(rank, 1.0f);
      for (int64_t i : ax)
        scales[i] = static_cast<float>(s);
    } else {
      scales.assign(rank, 1.0f);
      for (int64_t i = 0; i < rank; ++i)
        scales[i] = in[i] ? static_cast<float>(full[i]) / in[i] : 1.0f;
    }
    sizes = full;
  } else if (!scales.empty()) {
    scales = expand(scales, 1.0f);
    if (static_cast<int64_t>(scales.size()) != rank)
      return ni.error("scales must have one value per dimension");
    sizes.resize(rank);
    for (int64_t i = 0; i < rank; ++i) {
      double size = std::floor(in[i] * static_cast<double>(scales[i]));
      if (!(size >= 0 && size <= static_cast<double>(int64_t{1} << 48)))
        return ni.error(llvm::formatv("scale {0:e} of dimension {1} gives a length of {2:e} "
                                      "(at most 2^48)",
                                      scales[i], i, size)
                            .str());
      sizes[i] = static_cast<int64_t>(size);
    }
  } else {
    return ni.error("one of scales or sizes must be given");
  }
  if (!roi.empty()) {
    if (!axes.empty()) {
      std::vector<float> full(2 * rank);
      for (int64_t i = 0; i < rank; ++i) {
        full[i] = 0;
        full[i + rank] = 1;
      }
      for (size_t i = 0; i < axes.size(); ++i) {
        full[axes[i]] = roi[i];
        full[axes[i] + rank] = roi[i + axes.size()];
      }
      roi = full;
    }
    if (a.count("coordinate_transformation_mode") &&
        a["coordinate_transformation_mode"].s() == "tf_crop_and_resize")
      a["roi"] = Attribute(roi);
  }
  a["scales"] = Attribute(scales);
  a["sizes"] = Attribute(sizes);
  return single(ni, ni.op(OpKind::Resize, {x}, a));
}

llvm::Error importResize(NodeImporter &ni) {
  auto attrs = ni.copyAttrs(OpKind::Resize, {"axes", "keep_aspect_ratio_policy"});
  if (!attrs)
    return attrs.takeError();
  std::vector<float> scales, roi;
  std::vector<int64_t> sizes;
  size_t scalesIdx = ni.opset() < 11 ? 1 : 2;
  if (ni.opset() >= 11 && ni.hasInput(1)) {
    DLC_TRY(r, ni.constFloats(1, "roi"));
    roi = r;
  }
  if (ni.hasInput(scalesIdx)) {
    DLC_TRY(s, ni.constFloats(scalesIdx, "scales"));
    scales = s;
  }
  if (ni.opset() >= 11 && ni.hasInput(3)) {
    DLC_TRY(s, ni.constInts(3, "sizes"));
    sizes = s;
  }
  if (!sizes.empty())
    scales.clear();
  if (ni.opset() < 11) { // Resize-10 behaves like Upsample
    (*attrs)["coordinate_transformation_mode"] = Attribute("asymmetric");
    (*attrs)["nearest_mode"] = Attribute("floor");
  }
  return resizeCommon(ni, scales, sizes, roi, std::move(*attrs));
}

llvm::Error importUpsample(NodeImporter &ni) {
  std::vector<float> scales = ni.attrFloats("scales");
  if (ni.hasInput(1)) {
    DLC_TRY(s, ni.constFloats(1, "scales"));
    scales = s;
  }
  std::string mode = ni.attrString("mode", "nearest");
  AttrMap a{{"mode", Attribute(mode == "bilinear" ? std::string("linear") : mode)},
            {"coordinate_transformation_mode", Attribute("asymmetric")},
            {"nearest_mode", Attribute("floor")}};
  return resizeCommon(ni, scales, {}, {}, a);
}

/// Range's length depends on its operands' values, so they must be constants.
llvm::Error importRange(NodeImporter &ni) {
  for (size_t i = 0; i < 3; ++i)
    if (!ni.constInput(i))
      return ni.error("start, limit and delta must be compile-time constants (the output length "
                      "depends on them)" +
                      ni.bindHint(i));
  return single(ni, ni.op(OpKind::Range, allInputs(ni)));
}

llvm::Error importMaxUnpool(NodeImporter &ni) {
  auto attrs = ni.copyAttrs(OpKind::MaxUnpool);
  if (!attrs)
    return attrs.takeError();
  if (ni.hasInput(2)) {
    DLC_TRY(os, ni.constInts(2, "output_shape"));
    (*attrs)["output_shape"] = Attribute(os);
  }
  return single(ni, ni.op(OpKind::MaxUnpool, {ni.input(0), ni.input(1)}, std::move(*attrs)));
}

llvm::Error importScatter(NodeImporter &ni) {
  return single(ni, ni.op(OpKind::ScatterElements, allInputs(ni),
                          {{"axis", Attribute(ni.attrInt("axis", 0))}}));
}

} // namespace

void registerShapeHandlers(std::vector<HandlerEntry> &t) {
  t.push_back({"Reshape", 5, kMaxOpset, importReshape});
  t.push_back({"Flatten", 1, kMaxOpset, direct<OpKind::Flatten>});
  t.push_back({"Transpose", 1, kMaxOpset, direct<OpKind::Transpose>});
  t.push_back({"Squeeze", 1, kMaxOpset, importSqueezeLike<OpKind::Squeeze>});
  t.push_back({"Unsqueeze", 1, kMaxOpset, importSqueezeLike<OpKind::Unsqueeze>});
  t.push_back({"Concat", 4, kMaxOpset, direct<OpKind::Concat>});
  t.push_back({"Split", 2, kMaxOpset, importSplit});
  t.push_back({"Slice", 1, kMaxOpset, importSlice});
  t.push_back({"Gather", 1, kMaxOpset, direct<OpKind::Gather>});
  t.push_back({"GatherElements", 11, kMaxOpset, direct<OpKind::GatherElements>});
  t.push_back({"GatherND", 11, kMaxOpset, direct<OpKind::GatherND>});
  t.push_back({"ScatterElements", 11, kMaxOpset, direct<OpKind::ScatterElements>});
  t.push_back({"Scatter", 9, 10, importScatter});
  t.push_back({"ScatterND", 11, kMaxOpset, direct<OpKind::ScatterND>});
  t.push_back({"Expand", 8, kMaxOpset, importExpand});
  t.push_back({"Tile", 6, kMaxOpset, importTile});
  t.push_back({"Pad", 2, kMaxOpset, importPad});
  t.push_back({"CenterCropPad", 18, kMaxOpset, importCenterCropPad, "", 2});
  t.push_back({"Shape", 1, kMaxOpset, importShape});
  t.push_back({"Size", 1, kMaxOpset, importSize});
  t.push_back({"ConstantOfShape", 9, kMaxOpset, importConstantOfShape});
  t.push_back({"Range", 11, kMaxOpset, importRange});
  t.push_back({"EyeLike", 9, kMaxOpset, importEyeLike});
  t.push_back({"Trilu", 14, kMaxOpset, importTrilu});
  t.push_back({"OneHot", 9, kMaxOpset, importOneHot});
  t.push_back({"NonZero", 9, kMaxOpset, importNonZero});
  t.push_back({"Compress", 9, kMaxOpset, importCompress});
  t.push_back({"ReverseSequence", 10, kMaxOpset, direct<OpKind::ReverseSequence>});
  t.push_back({"DepthToSpace", 1, kMaxOpset, importDepthSpace});
  t.push_back({"SpaceToDepth", 1, kMaxOpset, importDepthSpace});
  t.push_back({"Resize", 10, kMaxOpset, importResize});
  t.push_back({"Upsample", 7, 9, importUpsample});
  t.push_back({"MaxUnpool", 9, kMaxOpset, importMaxUnpool});
}

} // namespace dlc::frontend
