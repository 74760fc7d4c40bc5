#include "OpUtils.h"

#include <algorithm>

namespace dlc::ir::ops {

bool inTypeSet(DType t, unsigned set) {
  return ((set & kFloat) && isFloat(t)) || ((set & kSInt) && isSignedInt(t)) ||
         ((set & kUInt) && isUnsignedInt(t)) || ((set & kBool) && t == DType::Bool);
}

std::string typeSetName(unsigned set) {
  if (set == kAny)
    return "any type";
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

InferResult inferSameAsOperand0(const Node &n) { return TypeList{n.operand(0)->type()}; }

const Tensor *constantOperand(const Node &n, unsigned i) {
  const Value *v = n.operand(i);
  return v && v->isConstant() ? &v->data() : nullptr;
}

} // namespace dlc::ir::ops
