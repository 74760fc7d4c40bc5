//===- Movement.cpp - Shape manipulation and data movement -----------------===//
//
// Canonical IR form: everything that determines a result shape is an attribute
// (Reshape's shape, Slice's starts/ends, Pad's pads, ...). The ONNX importer
// turns constant shape-operands into these attributes. Reference kernels copy
// raw elements, so every dtype is handled exactly.
//===----------------------------------------------------------------------===//
#include "OpUtils.h"
#include "dlc/ir/OpHelpers.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>

namespace dlc::ir {
namespace {
using namespace ops;

/// Copies out[i] = in[src(i)] for every output element (raw bytes).
template <class F> void gatherElements(const Tensor &in, Tensor &out, F &&src) {
  size_t es = dtypeSize(in.dtype());
  const char *s = static_cast<const char *>(in.raw());
  char *d = static_cast<char *>(out.mutableRaw());
  int64_t n = out.numElements();
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(d + i * es, s + src(i) * es, es);
}

llvm::Error verifyAny(const Node &) {
  return ok();
}

llvm::Error refCopy(const Node &, const Inputs &in, Outputs &out) {
  std::memcpy(out[0].mutableRaw(), in[0]->raw(), in[0]->byteSize());
  return ok();
}

//===----------------------------------------------------------------------===//
// Reshape / Flatten / Squeeze / Unsqueeze (pure metadata)
//===----------------------------------------------------------------------===//

InferResult inferReshape(const Node &n) {
  const Shape &x = n.operand(0)->shape();
  Shape s = n.attrInts("shape");
  int64_t inferred = -1, known = 1;
  for (size_t i = 0; i < s.size();
       ++i) { // 0 is a zero-size dim; the importer resolves ONNX's "copy"
    if (s[i] == -1) {
      if (inferred >= 0)
        return makeError("shape has more than one -1");
      inferred = static_cast<int64_t>(i);
    } else if (s[i] < 0) {
      return errorf("invalid shape dim {0}", s[i]);
    } else {
      known *= s[i];
    }
  }
  int64_t total = product(x);
  if (inferred >= 0) {
    if (known == 0 || total % known != 0)
      return errorf("cannot reshape {0} to {1}", shapeStr(x), shapeStr(n.attrInts("shape")));
    s[inferred] = total / known;
  }
  if (product(s) != total)
    return errorf("cannot reshape {0} ({1} elements) to {2}", shapeStr(x), total, shapeStr(s));
  return TypeList{{n.operand(0)->dtype(), s}};
}

InferResult inferFlatten(const Node &n) {
  const Shape &x = n.operand(0)->shape();
  int64_t axis = n.attrInt("axis");
  int64_t rank = static_cast<int64_t>(x.size());
  if (axis < -rank || axis > rank)
    return errorf("axis {0} is out of range for rank {1}", axis, rank);
  if (axis < 0)
    axis += rank;
  int64_t a = 1, b = 1;
  for (int64_t i = 0; i < rank; ++i)
    (i < axis ? a : b) *= x[i];
  return TypeList{{n.operand(0)->dtype(), {a, b}}};
}

InferResult inferSqueeze(const Node &n) {
  const Shape &x = n.operand(0)->shape();
  const auto &axes = n.attrInts("axes");
  std::vector<bool> drop(x.size(), false);
  if (axes.empty()) {
    for (size_t i = 0; i < x.size(); ++i)
      drop[i] = x[i] == 1;
  } else {
    auto na = normalizeAxes(axes, static_cast<int64_t>(x.size()));
    if (!na)
      return na.takeError();
    for (int64_t a : *na) {
      if (x[a] != 1)
        return errorf("cannot squeeze axis {0} of size {1}", a, x[a]);
      drop[a] = true;
    }
  }
  Shape out;
  for (size_t i = 0; i < x.size(); ++i)
    if (!drop[i])
      out.push_back(x[i]);
  return TypeList{{n.operand(0)->dtype(), out}};
}

InferResult inferUnsqueeze(const Node &n) {
  const Shape &x = n.operand(0)->shape();
  const auto &axes = n.attrInts("axes");
  int64_t outRank = static_cast<int64_t>(x.size() + axes.size());
  auto na = normalizeAxes(axes, outRank);
  if (!na)
    return na.takeError();
  Shape out(outRank, 1);
  std::vector<bool> isNew(outRank, false);
  for (int64_t a : *na)
    isNew[a] = true;
  for (int64_t i = 0, k = 0; i < outRank; ++i)
    if (!isNew[i])
      out[i] = x[k++];
  return TypeList{{n.operand(0)->dtype(), out}};
}

//===----------------------------------------------------------------------===//
// Transpose
//===----------------------------------------------------------------------===//

llvm::Error verifyTranspose(const Node &n) {
  Shape p = transposePerm(n);
  int64_t rank = n.operand(0)->rank();
  if (static_cast<int64_t>(p.size()) != rank)
    return errorf("perm has {0} entries for rank {1}", p.size(), rank);
  std::vector<bool> seen(rank, false);
  for (int64_t a : p) {
    if (a < 0 || a >= rank || seen[a])
      return errorf("perm {0} is not a permutation", shapeStr(p));
    seen[a] = true;
  }
  return ok();
}

InferResult inferTranspose(const Node &n) {
  Shape p = transposePerm(n), out;
  for (int64_t a : p)
    out.push_back(n.operand(0)->shape()[a]);
  return TypeList{{n.operand(0)->dtype(), out}};
}

llvm::Error refTranspose(const Node &n, const Inputs &in, Outputs &out) {
  out[0] = permuteTensor(*in[0], transposePerm(n));
  return ok();
}

//===----------------------------------------------------------------------===//
// Concat / Split
//===----------------------------------------------------------------------===//

llvm::Error verifyConcat(const Node &n) {
  if (auto e = requireAllSameType(n))
    return e;
  int64_t rank = n.operand(0)->rank();
  auto axis = normalizeAxis(n.attrInt("axis"), rank);
  if (!axis)
    return axis.takeError();
  for (unsigned i = 0; i < n.numOperands(); ++i) {
    if (!n.operand(i))
      return errorf("operand {0} is missing", i);
    const Shape &s = n.operand(i)->shape();
    if (static_cast<int64_t>(s.size()) != rank)
      return errorf("operand {0} has rank {1}, expected {2}", i, s.size(), rank);
    for (int64_t d = 0; d < rank; ++d)
      if (d != *axis && s[d] != n.operand(0)->shape()[d])
        return errorf("operand {0} has shape {1}, incompatible with {2} along axis {3}", i,
                      shapeStr(s), shapeStr(n.operand(0)->shape()), *axis);
  }
  return ok();
}

InferResult inferConcat(const Node &n) {
  int64_t axis = *normalizeAxis(n.attrInt("axis"), n.operand(0)->rank());
  Shape out = n.operand(0)->shape();
  out[axis] = 0;
  for (Value *v : n.operands())
    out[axis] += v->shape()[axis];
  return TypeList{{n.operand(0)->dtype(), out}};
}

llvm::Error refConcat(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &os = out[0].shape();
  int64_t axis = *normalizeAxis(n.attrInt("axis"), static_cast<int64_t>(os.size()));
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= os[i];
  for (size_t i = axis + 1; i < os.size(); ++i)
    inner *= os[i];
  size_t es = dtypeSize(out[0].dtype());
  char *d = static_cast<char *>(out[0].mutableRaw());
  int64_t offset = 0;
  for (const Tensor *t : in) {
    int64_t len = t->shape()[axis];
    const char *s = static_cast<const char *>(t->raw());
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(d + ((o * os[axis] + offset) * inner) * es, s + (o * len * inner) * es,
                  len * inner * es);
    offset += len;
  }
  return ok();
}

llvm::Expected<Shape> splitSizes(const Node &n) {
  int64_t axis = *normalizeAxis(n.attrInt("axis"), n.operand(0)->rank());
  int64_t dim = n.operand(0)->shape()[axis];
  Shape sizes = n.attrInts("split");
  if (sizes.empty()) {
    int64_t parts = n.numResults(), chunk = ceilDiv(dim, parts);
    for (int64_t i = 0; i < parts; ++i)
      sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - i * chunk)));
  }
  if (static_cast<int64_t>(sizes.size()) != n.numResults())
    return errorf("split has {0} sizes for {1} results", sizes.size(), n.numResults());
  int64_t sum = 0;
  for (int64_t s : sizes) {
    if (s < 0)
      return makeError("split sizes must be non-negative");
    sum += s;
  }
  if (sum != dim)
    return errorf("split sizes sum to {0}, but the axis has size {1}", sum, dim);
  return sizes;
}

llvm::Error verifySplit(const Node &n) {
  auto axis = normalizeAxis(n.attrInt("axis"), n.operand(0)->rank());
  if (!axis)
    return axis.takeError();
  return splitSizes(n).takeError();
}

InferResult inferSplit(const Node &n) {
  auto sizes = splitSizes(n);
  if (!sizes)
    return sizes.takeError();
  int64_t axis = *normalizeAxis(n.attrInt("axis"), n.operand(0)->rank());
  TypeList r;
  for (int64_t s : *sizes) {
    Shape sh = n.operand(0)->shape();
    sh[axis] = s;
    r.push_back({n.operand(0)->dtype(), sh});
  }
  return r;
}

llvm::Error refSplit(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &xs = in[0]->shape();
  int64_t axis = *normalizeAxis(n.attrInt("axis"), in[0]->rank());
  Shape st = stridesOf(xs);
  int64_t offset = 0;
  for (Tensor &o : out) {
    const Shape &os = o.shape();
    gatherElements(*in[0], o, [&](int64_t i) {
      Shape c = unravel(i, os);
      c[axis] += offset;
      int64_t s = 0;
      for (size_t d = 0; d < c.size(); ++d)
        s += c[d] * st[d];
      return s;
    });
    offset += os[axis];
  }
  return ok();
}

//===----------------------------------------------------------------------===//
// Slice
//===----------------------------------------------------------------------===//

} // namespace

Shape transposePerm(const Node &n) {
  Shape p = n.attrInts("perm");
  if (p.empty()) {
    p.resize(n.operand(0)->rank());
    std::iota(p.rbegin(), p.rend(), 0);
  }
  return p;
}

bool transposeMovesOnlyUnitDims(const Shape &in, const std::vector<int64_t> &perm) {
  if (in.size() != perm.size())
    return false;
  int64_t last = -1;
  for (int64_t p : perm)
    if (in[p] != 1) {
      if (p < last)
        return false;
      last = p;
    }
  return true;
}

llvm::Expected<SliceWindow> sliceWindow(const Node &n) {
  const Shape &x = n.operand(0)->shape();
  int64_t rank = static_cast<int64_t>(x.size());
  const auto &starts = n.attrInts("starts"), &ends = n.attrInts("ends");
  Shape axes = n.attrInts("axes"), steps = n.attrInts("steps");
  if (starts.size() != ends.size())
    return makeError("starts and ends must have the same length");
  if (axes.empty()) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (steps.empty())
    steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    return makeError("starts, ends, axes and steps must have the same length");
  auto na = normalizeAxes(axes, rank);
  if (!na)
    return na.takeError();
  SliceWindow d{Shape(rank, 0), Shape(rank, 1), x};
  for (size_t k = 0; k < na->size(); ++k) {
    int64_t a = (*na)[k], dim = x[a], st = steps[k];
    if (st == 0)
      return makeError("slice step must not be 0");
    // Clamp as ONNX specifies; the arithmetic is done in a wide type to avoid overflow
    // with INT64_MAX/MIN sentinels.
    auto clampIdx = [&](int64_t v, int64_t lo, int64_t hi) {
      __int128 w = v;
      if (w < 0)
        w += dim;
      return static_cast<int64_t>(std::clamp<__int128>(w, lo, hi));
    };
    int64_t s, e;
    if (st > 0) {
      s = clampIdx(starts[k], 0, dim);
      e = clampIdx(ends[k], 0, dim);
    } else {
      s = clampIdx(starts[k], 0, dim - 1);
      e = clampIdx(ends[k], -1, dim - 1);
    }
    int64_t len = st > 0 ? (e > s ? ceilDiv(e - s, st) : 0) : (s > e ? ceilDiv(s - e, -st) : 0);
    d.start[a] = s;
    d.step[a] = st;
    d.size[a] = len;
  }
  return d;
}

namespace {

llvm::Error verifySlice(const Node &n) {
  return sliceWindow(n).takeError();
}

InferResult inferSlice(const Node &n) {
  auto d = sliceWindow(n);
  if (!d)
    return d.takeError();
  return TypeList{{n.operand(0)->dtype(), d->size}};
}

llvm::Error refSlice(const Node &n, const Inputs &in, Outputs &out) {
  auto d = sliceWindow(n);
  if (!d)
    return d.takeError();
  Shape st = stridesOf(in[0]->shape());
  const Shape &os = out[0].shape();
  gatherElements(*in[0], out[0], [&](int64_t i) {
    Shape c = unravel(i, os);
    int64_t s = 0;
    for (size_t k = 0; k < c.size(); ++k)
      s += (d->start[k] + c[k] * d->step[k]) * st[k];
    return s;
  });
  return ok();
}

//===----------------------------------------------------------------------===//
// Gather
//===----------------------------------------------------------------------===//

llvm::Error verifyGather(const Node &n) {
  if (auto e = requireType(n, 1, kInt))
    return e;
  return normalizeAxis(n.attrInt("axis"), n.operand(0)->rank()).takeError();
}

InferResult inferGather(const Node &n) {
  const Shape &x = n.operand(0)->shape();
  int64_t axis = *normalizeAxis(n.attrInt("axis"), n.operand(0)->rank());
  Shape out(x.begin(), x.begin() + axis);
  const Shape &idx = n.operand(1)->shape();
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), x.begin() + axis + 1, x.end());
  return TypeList{{n.operand(0)->dtype(), out}};
}

llvm::Error refGather(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &x = in[0]->shape();
  int64_t axis = *normalizeAxis(n.attrInt("axis"), in[0]->rank());
  int64_t dim = x[axis], outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= x[i];
  for (size_t i = axis + 1; i < x.size(); ++i)
    inner *= x[i];
  std::vector<int64_t> idx(in[1]->numElements());
  for (size_t k = 0; k < idx.size(); ++k) {
    int64_t v = in[1]->getInt(static_cast<int64_t>(k));
    if (v < -dim || v >= dim)
      return errorf("index {0} is out of range for axis {1} of size {2}", v, axis, dim);
    idx[k] = v < 0 ? v + dim : v;
  }
  int64_t ni = static_cast<int64_t>(idx.size());
  gatherElements(*in[0], out[0], [&](int64_t i) {
    int64_t in_ = i % inner, rest = i / inner;
    int64_t k = rest % std::max<int64_t>(ni, 1), o = rest / std::max<int64_t>(ni, 1);
    return (o * dim + idx[k]) * inner + in_;
  });
  (void)outer;
  return ok();
}

//===----------------------------------------------------------------------===//
// Expand / Tile / Pad
//===----------------------------------------------------------------------===//

InferResult inferExpand(const Node &n) {
  auto s = broadcastShapes(n.operand(0)->shape(), n.attrInts("shape"));
  if (!s)
    return s.takeError();
  return TypeList{{n.operand(0)->dtype(), *s}};
}

llvm::Error refExpand(const Node &, const Inputs &in, Outputs &out) {
  BroadcastIndex bi(in[0]->shape(), out[0].shape());
  gatherElements(*in[0], out[0], [&](int64_t i) { return bi(i); });
  return ok();
}

InferResult inferTile(const Node &n) {
  Shape s = n.operand(0)->shape();
  const auto &rep = n.attrInts("repeats");
  if (rep.size() != s.size())
    return errorf("repeats has {0} values for rank {1}", rep.size(), s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (rep[i] < 0)
      return makeError("repeats must be non-negative");
    if (__builtin_mul_overflow(s[i], rep[i], &s[i]))
      return errorf("dimension {0} ({1}) repeated {2} times overflows", i, n.operand(0)->shape()[i],
                    rep[i]);
  }
  return TypeList{{n.operand(0)->dtype(), s}};
}

llvm::Error refTile(const Node &, const Inputs &in, Outputs &out) {
  const Shape &xs = in[0]->shape(), &os = out[0].shape();
  Shape st = stridesOf(xs);
  gatherElements(*in[0], out[0], [&](int64_t i) {
    Shape c = unravel(i, os);
    int64_t s = 0;
    for (size_t d = 0; d < c.size(); ++d)
      s += (c[d] % xs[d]) * st[d];
    return s;
  });
  return ok();
}

llvm::Error verifyPad(const Node &n) {
  const std::string &mode = n.attrString("mode");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    return errorf("unsupported pad mode \"{0}\"", mode);
  if (Value *cv = n.operand(1)) {
    if (auto e = requireSameType(n, 0, 1))
      return e;
    if (cv->type().numElements() != 1)
      return makeError("constant_value must be a scalar");
  }
  if (n.attrInts("pads").size() != 2 * n.operand(0)->shape().size())
    return errorf("pads must have {0} values", 2 * n.operand(0)->shape().size());
  return ok();
}

InferResult inferPad(const Node &n) {
  Shape s = n.operand(0)->shape();
  const auto &p = n.attrInts("pads");
  size_t r = s.size();
  for (size_t i = 0; i < r; ++i) {
    s[i] += p[i] + p[i + r];
    if (s[i] < 0)
      return errorf("pads make dimension {0} negative", i);
    if (n.attrString("mode") != "constant" && n.operand(0)->shape()[i] == 0 && s[i] > 0)
      return makeError("cannot reflect/edge/wrap-pad an empty dimension");
  }
  return TypeList{{n.operand(0)->dtype(), s}};
}

llvm::Error refPad(const Node &n, const Inputs &in, Outputs &out) {
  const Shape &xs = in[0]->shape(), &os = out[0].shape();
  const auto &p = n.attrInts("pads");
  const std::string &mode = n.attrString("mode");
  size_t r = xs.size(), es = dtypeSize(in[0]->dtype());
  Shape st = stridesOf(xs);
  Tensor fill(TensorType(in[0]->dtype(), {}));
  if (in.size() > 1 && in[1])
    std::memcpy(fill.mutableRaw(), in[1]->raw(), es);
  char *d = static_cast<char *>(out[0].mutableRaw());
  const char *s = static_cast<const char *>(in[0]->raw());
  for (int64_t i = 0; i < out[0].numElements(); ++i) {
    Shape c = unravel(i, os);
    int64_t src = 0;
    bool useFill = false;
    for (size_t k = 0; k < r; ++k) {
      int64_t v = c[k] - p[k], dim = xs[k];
      if (v < 0 || v >= dim) {
        if (mode == "constant") {
          useFill = true;
          break;
        }
        if (mode == "edge") {
          v = std::clamp<int64_t>(v, 0, dim - 1);
        } else if (mode == "wrap") {
          v = ((v % dim) + dim) % dim;
        } else { // reflect without repeating the edge
          int64_t period = dim == 1 ? 1 : 2 * (dim - 1);
          v = ((v % period) + period) % period;
          if (v >= dim)
            v = period - v;
        }
      }
      src += v * st[k];
    }
    std::memcpy(d + i * es, useFill ? static_cast<const char *>(fill.raw()) : s + src * es, es);
  }
  return ok();
}

//===----------------------------------------------------------------------===//
// Shape / ConstantOfShape / Range
//===----------------------------------------------------------------------===//

std::pair<int64_t, int64_t> shapeRange(const Node &n) {
  int64_t rank = n.operand(0)->rank();
  auto clampAxis = [&](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + rank : a, 0, rank); };
  int64_t s = clampAxis(n.attrInt("start"));
  int64_t e = clampAxis(n.attrInt("end"));
  return {s, std::max(s, e)};
}

InferResult inferShape(const Node &n) {
  auto [s, e] = shapeRange(n);
  return TypeList{{DType::I64, {e - s}}};
}

llvm::Error refShape(const Node &n, const Inputs &in, Outputs &out) {
  auto [s, e] = shapeRange(n);
  std::vector<int64_t> v(in[0]->shape().begin() + s, in[0]->shape().begin() + e);
  out[0] = Tensor::fromVector(out[0].type(), v);
  return ok();
}

llvm::Error verifyConstantOfShape(const Node &n) {
  if (n.attrTensor("value").numElements() != 1)
    return makeError("value must have exactly one element");
  for (int64_t d : n.attrInts("shape"))
    if (d < 0)
      return errorf("shape has negative dimension {0}", d);
  return ok();
}

InferResult inferConstantOfShape(const Node &n) {
  return TypeList{{n.attrTensor("value").dtype(), n.attrInts("shape")}};
}

llvm::Error refConstantOfShape(const Node &n, const Inputs &, Outputs &out) {
  const Tensor &v = n.attrTensor("value");
  size_t es = dtypeSize(v.dtype());
  char *d = static_cast<char *>(out[0].mutableRaw());
  for (int64_t i = 0; i < out[0].numElements(); ++i)
    std::memcpy(d + i * es, v.raw(), es);
  return ok();
}

llvm::Error verifyRange(const Node &n) {
  for (unsigned i = 0; i < 3; ++i) {
    if (auto e = requireType(n, i, kFloat | kSInt))
      return e;
    if (auto e = requireSameType(n, 0, i))
      return e;
    if (n.operand(i)->type().numElements() != 1)
      return errorf("operand {0} must be a scalar", i);
  }
  return ok();
}

llvm::Expected<int64_t> rangeLength(const Node &n) {
  const Tensor *s = constantOperand(n, 0), *l = constantOperand(n, 1), *d = constantOperand(n, 2);
  if (!s || !l || !d)
    return makeError("start, limit and delta must be constants (the result shape depends on them)");
  double sv = s->getDouble(0), lv = l->getDouble(0), dv = d->getDouble(0);
  if (dv == 0)
    return makeError("delta must not be 0");
  double len = std::ceil((lv - sv) / dv);
  if (!(len < 1e15))
    return makeError("range is too long");
  return std::max<int64_t>(0, static_cast<int64_t>(len));
}

InferResult inferRange(const Node &n) {
  auto len = rangeLength(n);
  if (!len)
    return len.takeError();
  return TypeList{{n.operand(0)->dtype(), {*len}}};
}

llvm::Error refRange(const Node &, const Inputs &in, Outputs &out) {
  int64_t len = out[0].numElements();
  if (isFloat(in[0]->dtype())) {
    std::vector<double> v(len);
    double s = in[0]->getDouble(0), d = in[2]->getDouble(0);
    for (int64_t i = 0; i < len; ++i)
      v[i] = s + static_cast<double>(i) * d;
    out[0] = Tensor::fromVector(out[0].type(), v);
  } else {
    std::vector<int64_t> v(len);
    int64_t s = in[0]->getInt(0), d = in[2]->getInt(0);
    for (int64_t i = 0; i < len; ++i)
      v[i] = s + i * d;
    out[0] = Tensor::fromVector(out[0].type(), v);
  }
  return ok();
}

/// Pad in another layout: the pads follow their dims (constant_value as it is).
std::optional<LayoutRemap> remapPad(const Node &n, const std::vector<int64_t> &perm) {
  const int64_t rank = static_cast<int64_t>(perm.size());
  const auto &pads = n.attrInts("pads");
  if (n.operand(0)->rank() != rank || static_cast<int64_t>(pads.size()) != 2 * rank)
    return std::nullopt;
  std::vector<int64_t> actual(2 * rank);
  for (int64_t k = 0; k < rank; ++k) {
    actual[perm[k]] = pads[k];
    actual[rank + perm[k]] = pads[rank + k];
  }
  LayoutRemap m;
  m.operands.assign(n.numOperands(), LayoutRemap::Operand::Actual);
  if (n.numOperands() > 1)
    m.operands[1] = LayoutRemap::Operand::AsIs;
  m.operandPerms.resize(n.numOperands());
  m.attrs["pads"] = Attribute(actual);
  m.resultPerm = perm;
  return m;
}

/// Slice in another layout: each sliced axis is its dim's actual position.
std::optional<LayoutRemap> remapSlice(const Node &n, const std::vector<int64_t> &perm) {
  const int64_t rank = static_cast<int64_t>(perm.size());
  if (n.operand(0)->rank() != rank)
    return std::nullopt;
  Shape axes = n.attrInts("axes");
  if (axes.empty()) {
    axes.resize(n.attrInts("starts").size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  auto na = normalizeAxes(axes, rank);
  if (!na) {
    llvm::consumeError(na.takeError());
    return std::nullopt;
  }
  std::vector<int64_t> actual;
  for (int64_t a : *na)
    actual.push_back(perm[a]);
  LayoutRemap m;
  m.operands = {LayoutRemap::Operand::Actual};
  m.operandPerms.resize(1);
  m.attrs["axes"] = Attribute(actual);
  m.resultPerm = perm;
  return m;
}

OpBuilder movement(OpTable &t, OpKind k, LayoutRule layout) {
  return t.def(k)
      .fusible(Fusibility::opaque()) // the ops with an index map say so below
      .fp16(Fp16Policy::Follow)
      .layout(layout)
      .verify(verifyAny);
}

//===----------------------------------------------------------------------===//
// Index maps (Fusibility::indexMap): where a result element reads its operand
//===----------------------------------------------------------------------===//

IndexMap mapTranspose(const Node &n) {
  IndexMap m;
  m.access.operand = 0;
  for (int64_t d : transposePerm(n))
    m.access.dims.push_back({d});
  return m;
}

/// Numpy broadcasting, aligned at the last dim: size-1 operand dims are not read.
IndexMap mapExpand(const Node &n) {
  const Shape &xs = n.operand(0)->shape();
  int64_t r = n.result()->rank(), off = r - static_cast<int64_t>(xs.size());
  IndexMap m;
  for (int64_t d = 0; d < r; ++d)
    m.access.dims.push_back({d >= off && xs[d - off] != 1 ? d - off : -1});
  return m;
}

IndexMap mapTile(const Node &n) {
  const Shape &xs = n.operand(0)->shape(), &os = n.result()->shape();
  IndexMap m;
  for (size_t d = 0; d < os.size(); ++d)
    m.access.dims.push_back(
        xs[d] == 1 ? DimAccess{}
                   : DimAccess{static_cast<int64_t>(d), 0, 1, os[d] == xs[d] ? 0 : xs[d]});
  return m;
}

IndexMap mapSlice(const Node &n) {
  SliceWindow w = llvm::cantFail(sliceWindow(n)); // the verifier checked the window
  IndexMap m;
  for (size_t d = 0; d < w.start.size(); ++d)
    m.access.dims.push_back({static_cast<int64_t>(d), w.start[d], w.step[d]});
  return m;
}

/// Result dims [0, axis) and [axis + q, ...) are the data's other dims; the q dims in
/// between are the indices' dims.
IndexMap mapGather(const Node &n) {
  const Shape &xs = n.operand(0)->shape();
  int64_t axis = *normalizeAxis(n.attrInt("axis"), n.operand(0)->rank()), q = n.operand(1)->rank(),
          r = n.result()->rank();
  IndexMap m;
  m.kind = IndexMap::Kind::Gather;
  m.axis = axis;
  m.axisSize = xs[axis];
  m.indices.operand = 1;
  for (int64_t d = 0; d < r; ++d) {
    bool index = d >= axis && d < axis + q;
    m.access.dims.push_back({index ? -1 : d < axis ? d : d - q + 1});
    m.indices.dims.push_back({index ? d - axis : -1});
  }
  return m;
}

/// Piece k: operand k's range along the axis, read with the coordinate shifted back.
IndexMap mapConcat(const Node &n) {
  int64_t r = n.result()->rank(), axis = *normalizeAxis(n.attrInt("axis"), r), offset = 0;
  IndexMap m;
  m.kind = IndexMap::Kind::Concat;
  m.axis = axis;
  for (unsigned k = 0; k < n.numOperands(); ++k) {
    int64_t len = n.operand(k)->shape()[axis];
    if (len == 0)
      continue;
    OperandAccess a = OperandAccess::identity(k, r);
    a.dims[axis].start = -offset;
    m.pieces.push_back({offset, len, std::move(a)});
    offset += len;
  }
  return m;
}

//===----------------------------------------------------------------------===//
// Gradient rules
//===----------------------------------------------------------------------===//

llvm::Error gradTranspose(GradBuilder &b, const Node &n) {
  b.accumulate(0, b.transpose(b.grad(), inversePerm(transposePerm(n))));
  return ok();
}

/// Concat: each operand gets its slice of the gradient.
llvm::Error gradConcat(GradBuilder &b, const Node &n) {
  int64_t axis = *normalizeAxis(n.attrInt("axis"), n.result()->rank()), at = 0;
  for (unsigned i = 0; i < n.numOperands(); ++i) {
    int64_t len = n.operand(i)->shape()[axis];
    if (b.wants(i))
      b.accumulate(i, b.op(OpKind::Slice, {b.grad()},
                           {{"axes", std::vector<int64_t>{axis}},
                            {"starts", std::vector<int64_t>{at}},
                            {"ends", std::vector<int64_t>{at + len}}}));
    at += len;
  }
  return ok();
}

/// Split: the results' gradients concatenated (zeros for a result the loss ignores).
llvm::Error gradSplit(GradBuilder &b, const Node &n) {
  std::vector<Value *> parts;
  for (unsigned i = 0; i < n.numResults(); ++i)
    parts.push_back(b.grad(i) ? b.grad(i) : b.zerosLike(n.result(i)));
  b.accumulate(0, b.op(OpKind::Concat, parts, {{"axis", n.attrInt("axis")}}));
  return ok();
}

/// Slice with unit steps: the gradient padded back with zeros.
llvm::Error gradSlice(GradBuilder &b, const Node &n) {
  auto d = sliceWindow(n);
  if (!d)
    return d.takeError();
  const Shape &x = n.operand(0)->shape();
  int64_t r = static_cast<int64_t>(x.size());
  std::vector<int64_t> pads(2 * r);
  for (int64_t k = 0; k < r; ++k) {
    if (d->step[k] != 1)
      return makeError("only slices with unit steps are differentiable");
    pads[k] = d->start[k];
    pads[k + r] = x[k] - d->start[k] - d->size[k];
  }
  b.accumulate(0, b.op(OpKind::Pad, {b.grad()}, {{"pads", pads}}));
  return ok();
}

/// Constant Pad: the gradient sliced back (negative pads crop, which Slice undoes
/// by padding; only non-negative pads are supported).
llvm::Error gradPad(GradBuilder &b, const Node &n) {
  if (n.attrString("mode") != "constant")
    return errorf("only constant padding is differentiable, not \"{0}\"", n.attrString("mode"));
  const auto &pads = n.attrInts("pads");
  const Shape &x = n.operand(0)->shape();
  int64_t r = static_cast<int64_t>(x.size());
  std::vector<int64_t> axes, starts, ends;
  for (int64_t k = 0; k < r; ++k) {
    if (pads[k] < 0 || pads[k + r] < 0)
      return makeError("only non-negative pads are differentiable");
    axes.push_back(k), starts.push_back(pads[k]), ends.push_back(pads[k] + x[k]);
  }
  b.accumulate(
      0, b.op(OpKind::Slice, {b.grad()}, {{"axes", axes}, {"starts", starts}, {"ends", ends}}));
  return ok();
}

llvm::Error gradExpand(GradBuilder &b, const Node &) {
  b.accumulate(0, b.grad()); // the builder sums the broadcast dims
  return ok();
}

/// Gather: the gradient slices scatter-added to the gathered positions (an index
/// may repeat: embeddings). Along another axis than 0, that axis is moved to the
/// front first; negative indices count from the end.
llvm::Error gradGather(GradBuilder &b, const Node &n) {
  Value *data = n.operand(0), *idx = n.operand(1), *g = b.grad();
  int64_t r = data->rank(), axis = *normalizeAxis(n.attrInt("axis"), r), q = idx->rank();
  const Shape &ds = data->shape();
  idx = b.cast(idx, DType::I64);
  idx = b.select(b.op(OpKind::Less, {idx, b.scalar(0, DType::I64)}),
                 b.add(idx, b.scalar(ds[axis], DType::I64)), idx);
  Shape is = idx->shape();
  is.push_back(1);
  // Data with `axis` first: perm = [axis, 0..axis-1, axis+1..]; the gradient's index
  // dims (axis..axis+q-1) go first the same way.
  std::vector<int64_t> perm{axis}, gperm;
  for (int64_t i = 0; i < r; ++i)
    if (i != axis)
      perm.push_back(i);
  for (int64_t i = 0; i < q; ++i)
    gperm.push_back(axis + i);
  for (int64_t i = 0; i < g->rank(); ++i)
    if (i < axis || i >= axis + q)
      gperm.push_back(i);
  Shape front = permuteShape(ds, perm);
  Value *zeros = b.full(0, data->dtype(), front);
  Value *scattered =
      b.op(OpKind::ScatterND, {zeros, b.reshape(idx, is), axis ? b.transpose(g, gperm) : g},
           {{"reduction", std::string("add")}});
  b.accumulate(0, axis ? b.transpose(scattered, inversePerm(perm)) : scattered);
  return ok();
}

} // namespace

void defineMovementOps(OpTable &t) {
  using LR = LayoutRule;
  const std::vector<int64_t> none;
  movement(t, OpKind::Identity, LR::agnostic())
      .fusible(Fusibility::metadata())
      .operands(1)
      .infer(inferSameAsOperand0)
      .reference(refCopy);
  movement(t, OpKind::Reshape, LR::fixed())
      .fusible(Fusibility::metadata())
      .operands(1)
      .attr("shape", AttrKind::Ints)
      .infer(inferReshape)
      .reference(refCopy);
  movement(t, OpKind::Flatten, LR::fixed())
      .fusible(Fusibility::metadata())
      .operands(1)
      .attr("axis", AttrKind::Int, int64_t{1})
      .infer(inferFlatten)
      .reference(refCopy);
  movement(t, OpKind::Squeeze, LR::fixed())
      .fusible(Fusibility::metadata())
      .operands(1)
      .attr("axes", AttrKind::Ints, none)
      .infer(inferSqueeze)
      .reference(refCopy);
  movement(t, OpKind::Unsqueeze, LR::fixed())
      .fusible(Fusibility::metadata())
      .operands(1)
      .attr("axes", AttrKind::Ints)
      .infer(inferUnsqueeze)
      .reference(refCopy);
  movement(t, OpKind::Transpose, LR::axisAttrs())
      .movesValues()
      .fusible(Fusibility::injective(mapTranspose))
      .operands(1)
      .attr("perm", AttrKind::Ints, none)
      .verify(verifyTranspose)
      .infer(inferTranspose)
      .reference(refTranspose);
  movement(t, OpKind::Concat, LR::axisAttrs(remapAxis))
      .movesValues()
      .fusible(Fusibility::injective(mapConcat))
      .operands(1, kVariadic)
      .attr("axis", AttrKind::Int)
      .verify(verifyConcat)
      .infer(inferConcat)
      .reference(refConcat);
  movement(t, OpKind::Split, LR::axisAttrs(remapAxis))
      .operands(1)
      .results(1, kVariadic)
      .attr("axis", AttrKind::Int, int64_t{0})
      .attr("split", AttrKind::Ints, none)
      .verify(verifySplit)
      .infer(inferSplit)
      .reference(refSplit);
  movement(t, OpKind::Slice, LR::axisAttrs(remapSlice))
      .movesValues()
      .fusible(Fusibility::injective(mapSlice))
      .operands(1)
      .attr("axes", AttrKind::Ints, none)
      .attr("ends", AttrKind::Ints)
      .attr("starts", AttrKind::Ints)
      .attr("steps", AttrKind::Ints, none)
      .verify(verifySlice)
      .infer(inferSlice)
      .reference(refSlice);
  movement(t, OpKind::Gather, LR::axisAttrs())
      .fusible(Fusibility::injective(mapGather))
      .operands(2)
      .attr("axis", AttrKind::Int, int64_t{0})
      .verify(verifyGather)
      .infer(inferGather)
      .reference(refGather);
  movement(t, OpKind::Expand, LR::fixed())
      .fusible(Fusibility::injective(mapExpand))
      .operands(1)
      .attr("shape", AttrKind::Ints)
      .infer(inferExpand)
      .reference(refExpand);
  movement(t, OpKind::Tile, LR::axisAttrs())
      .fusible(Fusibility::injective(mapTile))
      .operands(1)
      .attr("repeats", AttrKind::Ints)
      .infer(inferTile)
      .reference(refTile);
  movement(t, OpKind::Pad, LR::axisAttrs(remapPad))
      .operands(1, 2)
      .attr("mode", AttrKind::String, "constant")
      .attr("pads", AttrKind::Ints)
      .verify(verifyPad)
      .infer(inferPad)
      .reference(refPad);
  movement(t, OpKind::Shape, LR::fixed())
      .operands(1)
      .attr("end", AttrKind::Int, std::numeric_limits<int64_t>::max())
      .attr("start", AttrKind::Int, int64_t{0})
      .infer(inferShape)
      .reference(refShape);
  movement(t, OpKind::ConstantOfShape, LR::agnostic())
      .operands(0)
      .attr("shape", AttrKind::Ints)
      .attr("value", AttrKind::Tensor, Tensor(TensorType(DType::F32, {1})))
      .verify(verifyConstantOfShape)
      .infer(inferConstantOfShape)
      .reference(refConstantOfShape);
  movement(t, OpKind::Range, LR::agnostic())
      .operands(3)
      .verify(verifyRange)
      .infer(inferRange)
      .reference(refRange);
  for (OpKind k : {OpKind::Identity})
    t[k].gradient = gradPassThrough;
  for (OpKind k : {OpKind::Reshape, OpKind::Flatten, OpKind::Squeeze, OpKind::Unsqueeze})
    t[k].gradient = gradReshapeBack;
  t[OpKind::Transpose].gradient = gradTranspose;
  t[OpKind::Concat].gradient = gradConcat;
  t[OpKind::Split].gradient = gradSplit;
  t[OpKind::Slice].gradient = gradSlice;
  t[OpKind::Pad].gradient = gradPad;
  t[OpKind::Expand].gradient = gradExpand;
  t[OpKind::Gather].gradient = gradGather;
}

} // namespace dlc::ir
