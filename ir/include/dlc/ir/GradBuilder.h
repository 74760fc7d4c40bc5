//===- GradBuilder.h - What a gradient rule sees ----------------*- C++ -*-===//
//
// The autodiff pass walks the forward graph backwards and, for each node on a path
// from a parameter to the loss, calls the op's gradient rule (OpDef::gradient) with
// a GradBuilder. The rule reads the gradients of the node's results (`grad`), asks
// which operands need one (`wants`), builds the vector-Jacobian product from
// ordinary ops and hands each operand's share to `accumulate`, which sums a
// broadcast gradient back to the operand's shape.
//
// Builder calls never fail loudly: the first error is kept (a rule that builds an
// ill-typed node is a bug in the rule, reported with the node it was for) and every
// later call returns null, so a rule is a plain sequence of expressions.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/ir/Graph.h"

#include <map>

namespace dlc::ir {

/// The state variable (i64 scalar) that numbers training steps for Dropout's RNG;
/// the importer creates it with the first training-mode Dropout, and the training
/// step advances it.
inline constexpr const char *kDropoutStepName = "dlc.dropout_step";

class GradBuilder {
public:
  explicit GradBuilder(Graph &g) : g_(g) {}
  Graph &graph() { return g_; }

  /// Prepares for one node: the gradients of its results (null where none flows)
  /// and which operands need a gradient.
  void begin(const Node &n, std::vector<Value *> resultGrads, std::vector<bool> wanted);
  /// The gradient of result i (null when the loss does not depend on it).
  Value *grad(unsigned result = 0) const;
  /// Whether operand i needs a gradient (it lies on a path from a parameter).
  bool wants(unsigned operand) const;
  /// Adds `g` to operand i's gradient; a gradient of a broadcast shape is summed
  /// down to the operand's shape. Ignored when the operand needs none.
  void accumulate(unsigned operand, Value *g);
  /// The operand gradients the rule produced, after it ran.
  const std::map<unsigned, Value *> &operandGrads() const { return operandGrads_; }
  /// The first error of the rule (success when none).
  llvm::Error takeError();
  void fail(llvm::Error e);
  bool failed() const { return !error_.empty(); }

  // Builders. Each returns null after an error or when an operand is null.
  Value *op(OpKind k, std::vector<Value *> operands, AttrMap attrs = {});
  std::vector<Value *> ops(OpKind k, std::vector<Value *> operands, AttrMap attrs,
                           unsigned numResults);
  /// A rank-0 constant of dtype `dt`.
  Value *scalar(double v, DType dt);
  Value *add(Value *a, Value *b) { return op(OpKind::Add, {a, b}); }
  Value *sub(Value *a, Value *b) { return op(OpKind::Sub, {a, b}); }
  Value *mul(Value *a, Value *b) { return op(OpKind::Mul, {a, b}); }
  Value *div(Value *a, Value *b) { return op(OpKind::Div, {a, b}); }
  Value *neg(Value *a) { return op(OpKind::Neg, {a}); }
  /// a * s for a scalar s in a's dtype.
  Value *scale(Value *a, double s);
  Value *reshape(Value *x, const Shape &s);
  Value *transpose(Value *x, const std::vector<int64_t> &perm);
  /// Sums `g` over the axes along which `to` was broadcast, then reshapes to `to`.
  Value *sumTo(Value *g, const Shape &to);
  /// ReduceSum over `axes` (keepdims 1 or 0).
  Value *reduceSum(Value *x, const std::vector<int64_t> &axes, bool keepDims);
  /// Where(cond, a, b).
  Value *select(Value *cond, Value *a, Value *b) { return op(OpKind::Where, {cond, a, b}); }
  /// x converted to `to` (x itself when it already has that dtype).
  Value *cast(Value *x, DType to);
  /// A tensor of `shape` filled with v (a scalar constant expanded).
  Value *full(double v, DType dt, const Shape &shape);
  Value *zerosLike(Value *x) { return x ? full(0, x->dtype(), x->shape()) : nullptr; }

  /// The node being differentiated.
  const Node &node() const { return *node_; }
  /// What the built nodes' names add to the node's name (default ".grad"; a
  /// decomposition that stands for the node keeps its name with "").
  void setNameSuffix(std::string s) { suffix_ = std::move(s); }
  /// Built nodes go before `n` (default: at the end of the graph, which a pass
  /// that builds in the middle must sort afterwards).
  void setInsertionPoint(Node *n) { before_ = n; }

private:
  Graph &g_;
  const Node *node_ = nullptr;
  std::vector<Value *> resultGrads_;
  std::vector<bool> wanted_;
  std::map<unsigned, Value *> operandGrads_;
  std::string error_;
  std::string suffix_ = ".grad";
  Node *before_ = nullptr;
};

} // namespace dlc::ir
