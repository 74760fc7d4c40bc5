//===- Index.cpp - Gather/scatter, one-hot, triangular masks ---------------===//
//
// Ops whose element addressing depends on index tensors. Reference kernels copy
// raw elements (exact for every dtype); an index out of range is an error.
//===----------------------------------------------------------------------===//
#include "OpUtils.h"

#include <cstring>

namespace dlc::ir {
namespace {
using namespace ops;

int64_t ravel(const Shape &c, const Shape &strides) {
  int64_t r = 0;
  for (size_t d = 0; d < c.size(); ++d)
    r += c[d] * strides[d];
  return r;
}

/// Reads index i of an integer tensor, wrapping negatives by `dim`; errors if out of range.
llvm::Expected<int64_t> readIndex(const Tensor &t, int64_t i, int64_t dim) {
  int64_t v = t.getInt(i);
  if (v < -dim || v >= dim)
    return errorf("index {0} is out of range for a dimension of size {1}", v, dim);
  return v < 0 ? v + dim : v;
}

void copyElem(const Tensor &src, int64_t si, Tensor &dst, int64_t di) {
  size_t es = dtypeSize(src.dtype());
  std::memcpy(static_cast<char *>(dst.mutableRaw()) + di * es,
              static_cast<const char *>(src.raw()) + si * es, es);
}

llvm::Error verifyNone(const Node &) {
  return ok();
}

//===----------------------------------------------------------------------===//
// Trilu
//===----------------------------------------------------------------------===//

llvm::Error verifyTrilu(const Node &n) {
  return requireMinRank(n, 0, 2);
}

llvm::Error refTrilu(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &s = in[0]->shape();
  int64_t rows = s[s.size() - 2], cols = s.back(), k = n.attrInt("k");
  bool upper = n.attrInt("upper") != 0;
  for (int64_t i = 0; i < in[0]->numElements(); ++i) {
    int64_t c = i % cols, r = (i / cols) % rows;
    bool keep = upper ? c - r >= k : c - r <= k;
    if (keep)
      copyElem(*in[0], i, out[0], i);
  }
  return ok();
}

//===----------------------------------------------------------------------===//
// GatherElements / ScatterElements
//===----------------------------------------------------------------------===//

llvm::Error verifyElementsOp(const Node &n) {
  if (auto e = requireType(n, 1, kInt))
    return e;
  int64_t rank = n.operand(0)->rank();
  if (n.operand(1)->rank() != rank)
    return errorf("indices must have rank {0}, got {1}", rank, n.operand(1)->type().str());
  if (auto e = normalizeAxis(n.attrInt("axis"), rank).takeError())
    return e;
  if (n.kind() == OpKind::ScatterElements) {
    if (auto e = requireSameType(n, 0, 2))
      return e;
    if (n.operand(2)->shape() != n.operand(1)->shape())
      return makeError("updates must have the shape of indices");
  }
  return ok();
}

InferResult inferGatherElements(const Node &n) {
  return TypeList{{n.operand(0)->dtype(), n.operand(1)->shape()}};
}

llvm::Error refGatherElements(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &ds = in[0]->shape(), &is = in[1]->shape();
  int64_t axis = *normalizeAxis(n.attrInt("axis"), in[0]->rank());
  Shape st = stridesOf(ds);
  for (int64_t i = 0; i < in[1]->numElements(); ++i) {
    Shape c = unravel(i, is);
    auto idx = readIndex(*in[1], i, ds[axis]);
    if (!idx)
      return idx.takeError();
    c[axis] = *idx;
    copyElem(*in[0], ravel(c, st), out[0], i);
  }
  return ok();
}

/// Combines an existing value with an update according to `reduction`.
llvm::Expected<double> reduceInto(const std::string &reduction, double cur, double upd) {
  if (reduction == "none")
    return upd;
  if (reduction == "add")
    return cur + upd;
  if (reduction == "mul")
    return cur * upd;
  if (reduction == "max")
    return std::max(cur, upd);
  if (reduction == "min")
    return std::min(cur, upd);
  return errorf("unsupported reduction \"{0}\"", reduction);
}

/// out[target] = reduce(out[target], updates[u]) with exact copies when reduction is none.
llvm::Error scatterOne(const std::string &reduction, const Tensor &updates, int64_t u, Tensor &out,
                       int64_t target) {
  if (reduction == "none") {
    copyElem(updates, u, out, target);
    return ok();
  }
  DType dt = out.dtype();
  auto v = reduceInto(reduction, loadElement<double>(dt, out.raw(), target),
                      loadElement<double>(dt, updates.raw(), u));
  if (!v)
    return v.takeError();
  storeElement<double>(dt, out.mutableRaw(), target, *v);
  return ok();
}

llvm::Error refScatterElements(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &ds = in[0]->shape(), &is = in[1]->shape();
  int64_t axis = *normalizeAxis(n.attrInt("axis"), in[0]->rank());
  const std::string &red = n.attrString("reduction");
  Shape st = stridesOf(ds);
  std::memcpy(out[0].mutableRaw(), in[0]->raw(), in[0]->byteSize());
  for (int64_t i = 0; i < in[1]->numElements(); ++i) {
    Shape c = unravel(i, is);
    auto idx = readIndex(*in[1], i, ds[axis]);
    if (!idx)
      return idx.takeError();
    c[axis] = *idx;
    if (auto e = scatterOne(red, *in[2], i, out[0], ravel(c, st)))
      return e;
  }
  return ok();
}

//===----------------------------------------------------------------------===//
// GatherND / ScatterND
//===----------------------------------------------------------------------===//

llvm::Error verifyND(const Node &n) {
  if (auto e = requireType(n, 1, kInt))
    return e;
  const Shape &ds = n.operand(0)->shape(), &is = n.operand(1)->shape();
  int64_t b = n.kind() == OpKind::GatherND ? n.attrInt("batch_dims") : 0;
  if (is.empty() || ds.empty())
    return makeError("data and indices must have rank >= 1");
  int64_t q = is.back();
  if (b < 0 || b >= static_cast<int64_t>(std::min(ds.size(), is.size())))
    return errorf("batch_dims {0} is out of range", b);
  if (q < 1 || b + q > static_cast<int64_t>(ds.size()))
    return errorf("indices' last dimension {0} is out of range for data rank {1}", q, ds.size());
  for (int64_t i = 0; i < b; ++i)
    if (ds[i] != is[i])
      return makeError("batch dimensions of data and indices differ");
  if (n.kind() == OpKind::ScatterND) {
    if (auto e = requireSameType(n, 0, 2))
      return e;
    Shape want(is.begin(), is.end() - 1);
    want.insert(want.end(), ds.begin() + q, ds.end());
    if (n.operand(2)->shape() != want)
      return errorf("updates must have shape {0}, got {1}", shapeStr(want),
                    shapeStr(n.operand(2)->shape()));
  }
  return ok();
}

InferResult inferGatherND(const Node &n) {
  const Shape &ds = n.operand(0)->shape(), &is = n.operand(1)->shape();
  int64_t b = n.attrInt("batch_dims"), q = is.back();
  Shape out(is.begin(), is.end() - 1);
  out.insert(out.end(), ds.begin() + b + q, ds.end());
  return TypeList{{n.operand(0)->dtype(), out}};
}

llvm::Error refGatherND(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &ds = in[0]->shape(), &is = in[1]->shape();
  int64_t b = n.attrInt("batch_dims"), q = is.back();
  Shape st = stridesOf(ds);
  int64_t slice = 1, batch = 1;
  for (size_t i = b + q; i < ds.size(); ++i)
    slice *= ds[i];
  for (int64_t i = 0; i < b; ++i)
    batch *= ds[i];
  int64_t tuples = in[1]->numElements() / q, perBatch = tuples / std::max<int64_t>(batch, 1);
  int64_t batchStride = b > 0 ? st[b - 1] : 0;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t base = (t / std::max<int64_t>(perBatch, 1)) * batchStride;
    for (int64_t k = 0; k < q; ++k) {
      auto idx = readIndex(*in[1], t * q + k, ds[b + k]);
      if (!idx)
        return idx.takeError();
      base += *idx * st[b + k];
    }
    for (int64_t j = 0; j < slice; ++j)
      copyElem(*in[0], base + j, out[0], t * slice + j);
  }
  return ok();
}

llvm::Error refScatterND(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &ds = in[0]->shape(), &is = in[1]->shape();
  int64_t q = is.back();
  const std::string &red = n.attrString("reduction");
  Shape st = stridesOf(ds);
  int64_t slice = 1;
  for (size_t i = q; i < ds.size(); ++i)
    slice *= ds[i];
  std::memcpy(out[0].mutableRaw(), in[0]->raw(), in[0]->byteSize());
  int64_t tuples = in[1]->numElements() / q;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t base = 0;
    for (int64_t k = 0; k < q; ++k) {
      auto idx = readIndex(*in[1], t * q + k, ds[k]);
      if (!idx)
        return idx.takeError();
      base += *idx * st[k];
    }
    for (int64_t j = 0; j < slice; ++j)
      if (auto e = scatterOne(red, *in[2], t * slice + j, out[0], base + j))
        return e;
  }
  return ok();
}

//===----------------------------------------------------------------------===//
// OneHot(indices, values[2]) with a constant depth attribute.
//===----------------------------------------------------------------------===//

llvm::Error verifyOneHot(const Node &n) {
  if (auto e = requireType(n, 0, kNumeric))
    return e;
  if (n.operand(1)->type().numElements() != 2)
    return makeError("values must have two elements [off, on]");
  if (n.attrInt("depth") < 1)
    return makeError("depth must be positive");
  int64_t rank = n.operand(0)->rank() + 1, axis = n.attrInt("axis");
  if (axis < -rank || axis >= rank)
    return errorf("axis {0} is out of range for output rank {1}", axis, rank);
  return ok();
}

InferResult inferOneHot(const Node &n) {
  Shape s = n.operand(0)->shape();
  int64_t rank = static_cast<int64_t>(s.size()) + 1, axis = n.attrInt("axis");
  if (axis < 0)
    axis += rank;
  s.insert(s.begin() + axis, n.attrInt("depth"));
  return TypeList{{n.operand(1)->dtype(), s}};
}

llvm::Error refOneHot(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &os = out[0].shape();
  int64_t rank = static_cast<int64_t>(os.size()), axis = n.attrInt("axis");
  if (axis < 0)
    axis += rank;
  int64_t depth = n.attrInt("depth");
  Shape ist = stridesOf(in[0]->shape());
  auto idx = in[0]->toVector<double>();
  for (int64_t i = 0; i < out[0].numElements(); ++i) {
    Shape c = unravel(i, os);
    int64_t d = c[axis];
    c.erase(c.begin() + axis);
    int64_t v = static_cast<int64_t>(idx[ravel(c, ist)]);
    if (v < 0)
      v += depth;
    copyElem(*in[1], v == d ? 1 : 0, out[0], i);
  }
  return ok();
}

//===----------------------------------------------------------------------===//
// ReverseSequence(input, sequence_lens)
//===----------------------------------------------------------------------===//

llvm::Error verifyReverseSequence(const Node &n) {
  if (auto e = requireType(n, 1, kInt))
    return e;
  if (auto e = requireMinRank(n, 0, 2))
    return e;
  int64_t b = n.attrInt("batch_axis"), t = n.attrInt("time_axis");
  if ((b != 0 && b != 1) || (t != 0 && t != 1) || b == t)
    return makeError("batch_axis and time_axis must be 0 and 1 in some order");
  if (n.operand(1)->shape() != Shape{n.operand(0)->shape()[b]})
    return makeError("sequence_lens must have one entry per batch element");
  return ok();
}

llvm::Error refReverseSequence(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &s = in[0]->shape();
  int64_t b = n.attrInt("batch_axis"), t = n.attrInt("time_axis");
  Shape st = stridesOf(s);
  for (int64_t i = 0; i < in[0]->numElements(); ++i) {
    Shape c = unravel(i, s);
    int64_t len = std::clamp<int64_t>(in[1]->getInt(c[b]), 0, s[t]);
    if (c[t] < len)
      c[t] = len - 1 - c[t];
    copyElem(*in[0], ravel(c, st), out[0], i);
  }
  return ok();
}

//===----------------------------------------------------------------------===//
// MaxUnpool(X, I): scatters X to the flat positions in I of a zero output.
//===----------------------------------------------------------------------===//

llvm::Error verifyMaxUnpool(const Node &n) {
  if (auto e = requireType(n, 1, kInt))
    return e;
  if (n.operand(1)->shape() != n.operand(0)->shape())
    return makeError("indices must have the shape of X");
  int64_t k = n.operand(0)->rank() - 2;
  if (k < 1 || static_cast<int64_t>(n.attrInts("kernel_shape").size()) != k)
    return makeError("kernel_shape must have one entry per spatial dimension");
  return ok();
}

/// The unpooled shape implied by kernel, strides and pads (indices refer to it).
Shape defaultUnpoolShape(const Node &n) {
  const Shape &x = n.operand(0)->shape();
  int64_t k = static_cast<int64_t>(x.size()) - 2;
  const auto &ks = n.attrInts("kernel_shape"), &strides = n.attrInts("strides"),
             &pads = n.attrInts("pads");
  Shape out{x[0], x[1]};
  for (int64_t i = 0; i < k; ++i) {
    int64_t s = strides.empty() ? 1 : strides[i];
    int64_t p = pads.empty() ? 0 : pads[i] + pads[i + k];
    out.push_back((x[2 + i] - 1) * s + ks[i] - p);
  }
  return out;
}

InferResult inferMaxUnpool(const Node &n) {
  const Shape &x = n.operand(0)->shape();
  const auto &os = n.attrInts("output_shape");
  if (!os.empty()) {
    if (os.size() != x.size() || os[0] != x[0] || os[1] != x[1])
      return errorf("output_shape {0} does not match input {1}", shapeStr(os), shapeStr(x));
    return TypeList{{n.operand(0)->dtype(), os}};
  }
  return TypeList{{n.operand(0)->dtype(), defaultUnpoolShape(n)}};
}

/// Indices are flat positions in the default unpooled shape; with an explicit
/// output_shape they are re-addressed into it (as the ONNX reference does).
llvm::Error refMaxUnpool(const Node &n, const Inputs &in, Outputs &out) {
  Shape def = defaultUnpoolShape(n);
  const Shape &os = out[0].shape();
  Shape ost = stridesOf(os);
  int64_t total = product(def);
  for (int64_t i = 0; i < in[0]->numElements(); ++i) {
    int64_t t = in[1]->getInt(i);
    if (t < 0 || t >= total)
      return errorf("index {0} is out of range for an output of {1} elements", t, total);
    Shape c = unravel(t, def);
    bool inside = true;
    for (size_t d = 0; d < c.size(); ++d)
      inside &= c[d] < os[d];
    if (inside)
      copyElem(*in[0], i, out[0], ravel(c, ost));
  }
  return ok();
}

OpBuilder indexOp(OpTable &t, OpKind k) {
  return t.def(k)
      .fusible(Fusibility::opaque())
      .fp16(Fp16Policy::Follow)
      .layout(LayoutRule::axisAttrs())
      .verify(verifyNone);
}

} // namespace

void defineIndexOps(OpTable &t) {
  const std::vector<int64_t> none;
  indexOp(t, OpKind::Trilu)
      .operands(1)
      .attr("k", AttrKind::Int, int64_t{0})
      .attr("upper", AttrKind::Int, int64_t{1})
      .verify(verifyTrilu)
      .infer(inferSameAsOperand0)
      .reference(refTrilu);
  indexOp(t, OpKind::GatherElements)
      .operands(2)
      .attr("axis", AttrKind::Int, int64_t{0})
      .verify(verifyElementsOp)
      .infer(inferGatherElements)
      .reference(refGatherElements);
  indexOp(t, OpKind::ScatterElements)
      .operands(3)
      .attr("axis", AttrKind::Int, int64_t{0})
      .attr("reduction", AttrKind::String, "none")
      .verify(verifyElementsOp)
      .infer(inferSameAsOperand0)
      .reference(refScatterElements);
  indexOp(t, OpKind::GatherND)
      .operands(2)
      .attr("batch_dims", AttrKind::Int, int64_t{0})
      .verify(verifyND)
      .infer(inferGatherND)
      .reference(refGatherND);
  indexOp(t, OpKind::ScatterND)
      .operands(3)
      .attr("reduction", AttrKind::String, "none")
      .verify(verifyND)
      .infer(inferSameAsOperand0)
      .reference(refScatterND);
  indexOp(t, OpKind::OneHot)
      .operands(2)
      .attr("axis", AttrKind::Int, int64_t{-1})
      .attr("depth", AttrKind::Int)
      .verify(verifyOneHot)
      .infer(inferOneHot)
      .reference(refOneHot);
  indexOp(t, OpKind::ReverseSequence)
      .operands(2)
      .attr("batch_axis", AttrKind::Int, int64_t{1})
      .attr("time_axis", AttrKind::Int, int64_t{0})
      .verify(verifyReverseSequence)
      .infer(inferSameAsOperand0)
      .reference(refReverseSequence);
  indexOp(t, OpKind::MaxUnpool)
      .operands(2)
      .attr("kernel_shape", AttrKind::Ints)
      .attr("output_shape", AttrKind::Ints, none)
      .attr("pads", AttrKind::Ints, none)
      .attr("strides", AttrKind::Ints, none)
      .layout(LayoutRule::channel(1))
      .verify(verifyMaxUnpool)
      .infer(inferMaxUnpool)
      .reference(refMaxUnpool);
}

} // namespace dlc::ir
