//===- OpHelpers.h - Op semantics shared by the interpreter and codegen ----===//
//
// Where an op's semantics need real computation at compile time, the reference
// implementation and the code generator call the same function, so they cannot
// drift apart.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/ir/Graph.h"

#include <vector>

namespace dlc::ir {

struct ResizeTap {
  int64_t index;
  double weight;
};
/// For a Resize node: per dim, per output coordinate, the input taps (index and
/// weight). An empty list means the coordinate lies outside the crop
/// (tf_crop_and_resize): the output is extrapolation_value.
std::vector<std::vector<std::vector<ResizeTap>>> resizeTapTable(const Node &n);

/// One activation function of an RNN, GRU or LSTM node with its alpha and beta
/// (ONNX's defaults where the node gives none). `name` is ONNX's ("Sigmoid",
/// "HardSigmoid", ...); the kernel library's enum is dlc::kAct<name> (dlc_rnn.cuh).
struct RnnActivation {
  std::string name;
  double alpha = 0, beta = 0;
  /// The function (the reference interpreter's).
  double operator()(double x) const;
};
/// The node's activations: per direction, its gate functions in ONNX's order (f, g
/// and, for LSTM, h), defaults filled in. An error names an unknown activation or a
/// list of the wrong length.
llvm::Expected<std::vector<RnnActivation>> rnnActivations(const Node &n);

/// Transpose's permutation (without a perm attribute: the dims reversed).
Shape transposePerm(const Node &n);
/// out.shape[i] = in.shape[perm[i]] (Transpose's rule).
Shape permuteShape(const Shape &s, const std::vector<int64_t> &perm);
/// Whether perm is 0, 1, 2, ...
bool isIdentityPerm(const std::vector<int64_t> &perm);

/// A Slice's window per input dim: first element, step and length, with ONNX's
/// clamping of starts and ends applied.
struct SliceWindow {
  Shape start, step, size;
};
llvm::Expected<SliceWindow> sliceWindow(const Node &n);

} // namespace dlc::ir
