//===- Accuracy.h - Where mixed precision loses accuracy -------*- C++ -*-===//
//
// `dlc compile --fp16 --check-accuracy`: runs a graph in FP32 and after the
// precision pass on the reference interpreter, compares every node's results, names
// the first nodes where the error jumps, and searches for the --fp32-nodes that
// bring every output within a target error (re-running with each suggestion).
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/ir/Interpreter.h"
#include "dlc/passes/Pass.h"

#include "llvm/Support/JSON.h"

namespace dlc::passes {

/// The error of a reduced-precision tensor against its FP32 reference. maxRel is
/// max|a - b| / max|b| (normalized by the reference's largest magnitude, so values
/// near zero do not dominate); for integer tensors it is the fraction that differ.
struct TensorError {
  double maxAbs = 0, meanAbs = 0, maxRel = 0;
  bool nonFinite = false; // a non-finite value where the reference is finite
  /// maxRel, or infinity when nonFinite.
  double score() const;
};
TensorError compareToReference(const ir::Tensor &actual, const ir::Tensor &reference);

struct AccuracyOptions {
  PrecisionOptions precision;
  /// Every output within this score ends the search for --fp32-nodes.
  double target = 1e-2;
  /// A node "jumps" when its error is above this and `jumpRatio` times its inputs'.
  double jumpThreshold = 1e-2, jumpRatio = 8;
  int maxSuggestions = 8;
};

struct AccuracyReport {
  struct Output {
    std::string name;
    TensorError error;
  };
  struct Culprit {
    std::string node, op, value;
    double error = 0, inputError = 0; // scores
  };
  std::string dtype;
  size_t reducedNodes = 0, fp32Nodes = 0; // as compiled (without suggestions)
  std::vector<Output> outputs;            // as compiled
  std::vector<Culprit> culprits;          // in the order they were found
  /// Node names for --fp32-nodes (culprits without a name give their op in fp32Ops).
  std::vector<std::string> suggestedFp32Nodes, suggestedFp32Ops;
  std::vector<Output> outputsWithSuggestion; // empty when nothing was suggested
  bool withinTarget = false;                 // with the suggestions (or as compiled)

  void print(llvm::raw_ostream &os, double target) const;
  llvm::json::Value toJson() const;
};

/// `base` is the graph the precision pass would run on (after clean-up). Inputs by
/// input name, in the graph's (FP32) input types.
llvm::Expected<AccuracyReport> checkAccuracy(const ir::Graph &base, const ir::TensorMap &inputs,
                                             const AccuracyOptions &opts);

/// The stages that lower a cleaned-up graph to mixed precision (precision, then clean-up).
Pipeline precisionPipeline();

} // namespace dlc::passes
