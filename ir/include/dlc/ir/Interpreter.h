//===- Interpreter.h - The reference interpreter ----------------*- C++ -*-===//
//
// Executes a graph node by node with the op table's reference kernels. It is the
// oracle for pass tests, constant folding and the conformance suite.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/ir/Graph.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace dlc::ir {

using TensorMap = std::map<std::string, Tensor, std::less<>>;

/// Runs the graph on inputs given by input name; returns outputs by output name.
/// Input types must match the graph's input types exactly. Parameters take their
/// initial value unless `inputs` also names them.
llvm::Expected<TensorMap> interpret(const Graph &g, const TensorMap &inputs);
/// The same, calling `onNode` with each node and its results as they are computed
/// (for per-node comparisons such as the accuracy report).
using NodeObserver = std::function<void(const Node &, const std::vector<Tensor> &)>;
llvm::Expected<TensorMap> interpret(const Graph &g, const TensorMap &inputs,
                                    const NodeObserver &onNode);

/// Runs one node on the given operand tensors (null for absent optional operands).
llvm::Expected<std::vector<Tensor>> evaluateNode(const Node &n,
                                                 const std::vector<const Tensor *> &operands);

/// Deterministic pseudo-random tensor: floats uniform in [lo, hi), integers in
/// [max(lo,0 for unsigned), hi], bools fair coin.
Tensor randomTensor(const TensorType &type, uint64_t seed, double lo = -1.0, double hi = 1.0);

/// Random inputs for every graph input, seeded from `seed` and the input index.
TensorMap randomInputs(const Graph &g, uint64_t seed);

struct Comparison {
  bool ok = true;
  double maxAbsError = 0;
  double maxRelError = 0; // |a-b| / max(|b|, tiny) over elements that fail atol
  int64_t worstIndex = -1;
  std::string message; // why it is not ok
};

/// Compares `actual` against `expected` elementwise: ok when for every element
/// |a - e| <= atol + rtol * |e| (NaN matches NaN, infinities must match exactly).
Comparison compareTensors(const Tensor &actual, const Tensor &expected, double rtol, double atol);

} // namespace dlc::ir
