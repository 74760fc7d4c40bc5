//===- GradBuilder.cpp - What a gradient rule sees --------------------------===//
#include "dlc/ir/GradBuilder.h"

#include "dlc/ir/OpHelpers.h"

#include <numeric>

namespace dlc::ir {

void GradBuilder::begin(const Node &n, std::vector<Value *> resultGrads, std::vector<bool> wanted) {
  node_ = &n;
  resultGrads_ = std::move(resultGrads);
  wanted_ = std::move(wanted);
  operandGrads_.clear();
  error_.clear();
}

Value *GradBuilder::grad(unsigned result) const {
  return result < resultGrads_.size() ? resultGrads_[result] : nullptr;
}

bool GradBuilder::wants(unsigned operand) const {
  return operand < wanted_.size() && wanted_[operand];
}

void GradBuilder::accumulate(unsigned operand, Value *g) {
  if (!wants(operand) || failed())
    return;
  if (!g)
    return fail(errorf("operand {0}'s gradient could not be built", operand));
  Value *x = node_->operand(operand);
  g = cast(g, x->dtype());
  if (g && g->shape() != x->shape())
    g = sumTo(g, x->shape());
  if (!g)
    return;
  auto [it, fresh] = operandGrads_.emplace(operand, g);
  if (!fresh)
    it->second = add(it->second, g);
}

llvm::Error GradBuilder::takeError() {
  if (error_.empty())
    return llvm::Error::success();
  std::string e = std::move(error_);
  error_.clear();
  return makeError(e);
}

void GradBuilder::fail(llvm::Error e) {
  std::string msg = llvm::toString(std::move(e));
  if (error_.empty())
    error_ = "gradient of " + (node_ ? node_->describe() : std::string("?")) + ": " + msg;
}

std::vector<Value *> GradBuilder::ops(OpKind k, std::vector<Value *> operands, AttrMap attrs,
                                      unsigned numResults) {
  std::vector<Value *> none(numResults, nullptr);
  if (failed())
    return none;
  // Optional operands (past the op's minimum) may be null, absent; a null among the
  // required ones means an earlier builder call failed.
  for (size_t i = 0; i < operands.size(); ++i)
    if (!operands[i] && i < static_cast<size_t>(opDef(k).minOperands)) {
      fail(errorf("{0} is missing operand {1}", opName(k), i));
      return none;
    }
  std::string name = node_ && !node_->name().empty() ? node_->name() + suffix_ : std::string();
  auto n = g_.createInferred(k, std::move(operands), std::move(attrs), numResults, std::move(name),
                             before_);
  if (!n) {
    fail(n.takeError());
    return none;
  }
  std::vector<Value *> r;
  for (unsigned i = 0; i < numResults; ++i)
    r.push_back((*n)->result(i));
  return r;
}

Value *GradBuilder::op(OpKind k, std::vector<Value *> operands, AttrMap attrs) {
  return ops(k, std::move(operands), std::move(attrs), 1)[0];
}

Value *GradBuilder::scalar(double v, DType dt) {
  return g_.addConstant("", Tensor::fromVector(TensorType{dt, {}}, std::vector<double>{v}));
}

Value *GradBuilder::cast(Value *x, DType to) {
  if (!x || x->dtype() == to)
    return x;
  return op(OpKind::Cast, {x}, {{"to", std::string(dtypeName(to))}});
}

Value *GradBuilder::scale(Value *a, double s) {
  return a ? mul(a, scalar(s, a->dtype())) : nullptr;
}

Value *GradBuilder::reshape(Value *x, const Shape &s) {
  if (x && x->shape() == s)
    return x;
  return op(OpKind::Reshape, {x}, {{"shape", std::vector<int64_t>(s)}});
}

Value *GradBuilder::transpose(Value *x, const std::vector<int64_t> &perm) {
  return op(OpKind::Transpose, {x}, {{"perm", perm}});
}

Value *GradBuilder::reduceSum(Value *x, const std::vector<int64_t> &axes, bool keepDims) {
  if (axes.empty())
    return x;
  return op(OpKind::ReduceSum, {x}, {{"axes", axes}, {"keepdims", int64_t{keepDims}}});
}

Value *GradBuilder::sumTo(Value *g, const Shape &to) {
  if (!g || g->shape() == to)
    return g;
  const Shape &from = g->shape();
  int64_t lead = static_cast<int64_t>(from.size()) - static_cast<int64_t>(to.size());
  if (lead < 0) {
    fail(errorf("cannot sum a gradient of shape {0} to {1}", shapeStr(from), shapeStr(to)));
    return nullptr;
  }
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < static_cast<int64_t>(from.size()); ++i)
    if (i < lead || (to[i - lead] == 1 && from[i] != 1))
      axes.push_back(i);
  return reshape(reduceSum(g, axes, true), to);
}

Value *GradBuilder::full(double v, DType dt, const Shape &shape) {
  return op(OpKind::Expand, {scalar(v, dt)}, {{"shape", std::vector<int64_t>(shape)}});
}

} // namespace dlc::ir
