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
