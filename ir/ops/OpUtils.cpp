#include "OpUtils.h"

#include <algorithm>
#include <cstring>

namespace dlc::ir::ops {

bool inTypeSet(DType t, unsigned set) {
  return ((set & kFloat) && isFloat(t)) || ((set & kSInt) && isSignedInt(t)) ||
         ((set & kUInt) && isUnsignedInt(t)) || ((set & kBool) && t == DType::Bool);
}

std::string typeSetName(unsigned set) {
  if (set == kAny)
    return "any type but float8";
  std::vector<std::string> parts;
  if (set & kFloat)
    parts.push_back("float");
  if ((set & kInt) == kInt)
    parts.push_back("integer");
  else if (set & kSInt)
    parts.push_back("signed integer");
  else if (set & kUInt)
    parts.push_back("unsigned integer");
  if (set & kBool)
    parts.push_back("bool");
  std::string r;
  for (size_t i = 0; i < parts.size(); ++i)
    r += (i ? (i + 1 == parts.size() ? " or " : ", ") : "") + parts[i];
  return r;
}

llvm::Error requireType(const Node &n, unsigned i, unsigned set) {
  const Value *v = n.operand(i);
  if (!v)
    return errorf("operand {0} is required", i);
  if (!inTypeSet(v->dtype(), set))
    return errorf("operand {0} has element type {1}, expected {2}", i, dtypeName(v->dtype()),
                  typeSetName(set));
  return ok();
}

llvm::Error requireSameType(const Node &n, unsigned i, unsigned j) {
  const Value *a = n.operand(i), *b = n.operand(j);
  if (a && b && a->dtype() != b->dtype())
    return errorf("operands {0} and {1} must have the same element type, got {2} and {3}", i, j,
                  dtypeName(a->dtype()), dtypeName(b->dtype()));
  return ok();
}

llvm::Error requireAllSameType(const Node &n) {
  for (unsigned i = 1; i < n.numOperands(); ++i)
    if (auto e = requireSameType(n, 0, i))
      return e;
  return ok();
}

llvm::Error requireRank(const Node &n, unsigned i, int64_t rank) {
  const Value *v = n.operand(i);
  if (v && v->rank() != rank)
    return errorf("operand {0} must have rank {1}, got {2}", i, rank, v->type().str());
  return ok();
}

llvm::Error requireMinRank(const Node &n, unsigned i, int64_t rank) {
  const Value *v = n.operand(i);
  if (v && v->rank() < rank)
    return errorf("operand {0} must have rank >= {1}, got {2}", i, rank, v->type().str());
  return ok();
}

llvm::Expected<int64_t> normalizeAxis(int64_t axis, int64_t rank, const char *what) {
  if (axis < -rank || axis >= rank || rank == 0)
    return errorf("{0} {1} is out of range for rank {2}", what, axis, rank);
  return axis < 0 ? axis + rank : axis;
}

llvm::Expected<std::vector<int64_t>> normalizeAxes(const std::vector<int64_t> &axes, int64_t rank) {
  std::vector<int64_t> r;
  for (int64_t a : axes) {
    auto na = normalizeAxis(a, rank);
    if (!na)
      return na.takeError();
    if (std::find(r.begin(), r.end(), *na) != r.end())
      return errorf("axis {0} appears twice", a);
    r.push_back(*na);
  }
  return r;
}

llvm::Expected<Shape> broadcastShapes(const Shape &a, const Shape &b) {
  size_t rank = std::max(a.size(), b.size());
  Shape r(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return errorf("shapes {0} and {1} cannot be broadcast together", shapeStr(a), shapeStr(b));
    r[i] = da == 1 ? db : da;
  }
  return r;
}

llvm::Expected<Shape> broadcastOperands(const Node &n) {
  Shape r;
  for (Value *v : n.operands()) {
    if (!v)
      continue;
    auto s = broadcastShapes(r, v->shape());
    if (!s)
      return s.takeError();
    r = std::move(*s);
  }
  return r;
}

BroadcastIndex::BroadcastIndex(const Shape &in, const Shape &out) : outShape_(out) {
  Shape strides = stridesOf(in);
  inStrides_.assign(out.size(), 0);
  size_t off = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i)
    inStrides_[off + i] = in[i] == 1 ? 0 : strides[i];
}

int64_t BroadcastIndex::operator()(int64_t outIndex) const {
  int64_t r = 0;
  for (int64_t d = static_cast<int64_t>(outShape_.size()) - 1; d >= 0; --d) {
    int64_t dim = outShape_[d];
    r += (outIndex % dim) * inStrides_[d];
    outIndex /= dim;
  }
  return r;
}

InferResult inferSameAsOperand0(const Node &n) {
  return TypeList{n.operand(0)->type()};
}

const Tensor *constantOperand(const Node &n, unsigned i) {
  const Value *v = n.operand(i);
  return v && v->isConstant() ? &v->data() : nullptr;
}

Shape unravel(int64_t i, const Shape &s) {
  Shape c(s.size());
  for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
    c[d] = s[d] ? i % s[d] : 0;
    i = s[d] ? i / s[d] : 0;
  }
  return c;
}

Tensor permuteTensor(const Tensor &t, const std::vector<int64_t> &perm) {
  Tensor out(TensorType(t.dtype(), permuteShape(t.shape(), perm)));
  Shape is = stridesOf(t.shape());
  const Shape &os = out.shape();
  size_t es = dtypeSize(t.dtype());
  const char *src = static_cast<const char *>(t.raw());
  char *dst = static_cast<char *>(out.mutableRaw());
  for (int64_t i = 0, n = out.numElements(); i < n; ++i) {
    Shape c = unravel(i, os);
    int64_t s = 0;
    for (size_t d = 0; d < c.size(); ++d)
      s += c[d] * is[perm[d]];
    std::memcpy(dst + i * es, src + s * es, es);
  }
  return out;
}

bool channelsLast(const Node &n) {
  const Attribute *a = n.attr("channels_last");
  return a && a->i() != 0;
}

Shape channelsFirstShape(const Node &n, unsigned i) {
  const Shape &s = n.operand(i)->shape();
  if (!channelsLast(n) || s.size() < 2)
    return s;
  return permuteShape(s, channelsFirstPerm(static_cast<int64_t>(s.size())));
}

llvm::Error channelsLastReference(const Node &n, const Inputs &in, Outputs &out, RefFn nchw,
                                  std::vector<unsigned> permuted) {
  if (!channelsLast(n))
    return nchw(n, in, out);
  std::vector<Tensor> owned;
  owned.reserve(in.size());
  Inputs cf = in;
  for (unsigned i : permuted)
    if (i < in.size() && in[i]) {
      owned.push_back(permuteTensor(*in[i], channelsFirstPerm(in[i]->rank())));
      cf[i] = &owned.back();
    }
  Outputs cfOut;
  for (const Tensor &o : out)
    cfOut.emplace_back(TensorType(o.dtype(), permuteShape(o.shape(), channelsFirstPerm(o.rank()))));
  if (auto e = nchw(n, cf, cfOut))
    return e;
  for (size_t r = 0; r < out.size(); ++r)
    out[r] = permuteTensor(cfOut[r], channelsLastPerm(cfOut[r].rank()));
  return ok();
}

InferResult channelsLastInfer(const Node &n, InferFn nchw) {
  auto types = nchw(n);
  if (!types || !channelsLast(n))
    return types;
  for (TensorType &t : *types)
    t.shape = permuteShape(t.shape, channelsLastPerm(t.rank()));
  return types;
}

std::optional<LayoutRemap> remapToChannelsLast(const Node &n, const std::vector<int64_t> &perm,
                                               int weights) {
  int64_t rank = n.operand(0)->rank();
  if (channelsLast(n) || rank < 3 || perm != channelsFirstPerm(rank))
    return std::nullopt;
  LayoutRemap r;
  r.operands.assign(n.numOperands(), LayoutRemap::Operand::AsIs);
  r.operandPerms.resize(n.numOperands());
  r.operands[0] = LayoutRemap::Operand::Actual;
  if (weights >= 0 && n.operand(weights)) {
    r.operands[weights] = LayoutRemap::Operand::Permute;
    r.operandPerms[weights] = channelsLastPerm(n.operand(weights)->rank());
  }
  r.attrs["channels_last"] = Attribute(int64_t{1});
  r.resultPerm = perm;
  return r;
}

std::optional<LayoutRemap> remapAxis(const Node &n, const std::vector<int64_t> &perm) {
  const int64_t rank = static_cast<int64_t>(perm.size());
  if (n.hasAttr("keepdims") && n.attrInt("keepdims") == 0)
    return std::nullopt;
  auto axis = normalizeAxis(n.attrInt("axis"), rank);
  if (!axis) {
    llvm::consumeError(axis.takeError());
    return std::nullopt;
  }
  for (Value *v : n.operands())
    if (v && v->rank() != rank)
      return std::nullopt;
  LayoutRemap m;
  m.operands.assign(n.numOperands(), LayoutRemap::Operand::Actual);
  m.operandPerms.resize(n.numOperands());
  m.attrs["axis"] = Attribute(perm[*axis]);
  m.resultPerm = perm;
  return m;
}

std::optional<LayoutRemap> remapReduceAxes(const Node &n, const std::vector<int64_t> &perm) {
  const int64_t rank = static_cast<int64_t>(perm.size());
  const auto &axes = n.attrInts("axes");
  if (n.operand(0)->rank() != rank || (axes.empty() && n.attrInt("noop_with_empty_axes") != 0))
    return std::nullopt;
  if (axes.empty()) { // all axes: the result (a scalar, or ones) is the same in any layout,
    LayoutRemap m;    // and the kernel reads x as it is stored, not through a transpose
    m.operands = {LayoutRemap::Operand::Actual};
    m.operandPerms.resize(1);
    return m;
  }
  auto na = normalizeAxes(axes, rank);
  if (!na) {
    llvm::consumeError(na.takeError());
    return std::nullopt;
  }
  std::vector<bool> reduced(rank, false); // actual axes
  std::vector<int64_t> actualAxes;
  for (int64_t a : *na) {
    reduced[perm[a]] = true;
    actualAxes.push_back(perm[a]);
  }
  std::sort(actualAxes.begin(), actualAxes.end());
  LayoutRemap m;
  m.operands = {LayoutRemap::Operand::Actual};
  m.operandPerms.resize(1);
  m.attrs["axes"] = Attribute(actualAxes);
  if (n.attrInt("keepdims") != 0) {
    m.resultPerm = perm;
    return m;
  }
  // Without the reduced dims: logical result dim k is logical dim kept[k], which is
  // actual dim perm[kept[k]], found among the actual dims that remain.
  std::vector<int64_t> position(rank, -1);
  for (int64_t d = 0, p = 0; d < rank; ++d)
    if (!reduced[d])
      position[d] = p++;
  for (int64_t d = 0; d < rank; ++d)
    if (std::find(na->begin(), na->end(), d) == na->end())
      m.resultPerm.push_back(position[perm[d]]);
  return m;
}

llvm::Error gradPassThrough(GradBuilder &b, const Node &) {
  b.accumulate(0, b.grad());
  return ok();
}

llvm::Error gradReshapeBack(GradBuilder &b, const Node &n) {
  b.accumulate(0, b.reshape(b.grad(), n.operand(0)->shape()));
  return ok();
}

} // namespace dlc::ir::ops

namespace dlc::ir {

Shape permuteShape(const Shape &s, const std::vector<int64_t> &perm) {
  Shape r(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    r[i] = s[perm[i]];
  return r;
}

bool isIdentityPerm(const std::vector<int64_t> &perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i))
      return false;
  return true;
}

std::vector<int64_t> channelsLastPerm(int64_t rank) {
  std::vector<int64_t> p{0};
  for (int64_t d = 2; d < rank; ++d)
    p.push_back(d);
  p.push_back(1);
  return p;
}

std::vector<int64_t> channelsFirstPerm(int64_t rank) {
  return inversePerm(channelsLastPerm(rank));
}

std::vector<int64_t> inversePerm(const std::vector<int64_t> &perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

std::optional<LayoutRemap> remapElementwise(const Node &n, const std::vector<int64_t> &perm) {
  const int64_t rank = static_cast<int64_t>(perm.size());
  for (unsigned r = 0; r < n.numResults(); ++r)
    if (n.result(r)->rank() != rank)
      return std::nullopt;
  if (std::none_of(n.operands().begin(), n.operands().end(),
                   [&](Value *v) { return v && v->rank() == rank; }))
    return std::nullopt; // no operand in the layout (ConstantOfShape, Range)
  LayoutRemap m;
  for (Value *v : n.operands()) {
    bool unit =
        v && std::all_of(v->shape().begin(), v->shape().end(), [](int64_t d) { return d == 1; });
    m.operands.push_back(!v || unit ? LayoutRemap::Operand::AsIs : LayoutRemap::Operand::Actual);
  }
  m.operandPerms.resize(n.numOperands());
  m.resultPerm = perm;
  return m;
}

} // namespace dlc::ir
