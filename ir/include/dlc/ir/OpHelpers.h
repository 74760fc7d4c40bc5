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

class GradBuilder;

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

/// The weights of a MatMulNBits (ONNX Runtime's weight-only quantized GEMM) as FP32
/// [K, N]: `b` is u8 [N, ceil(K / block), block * bits / 8], `bits`-bit values low bits
/// first; each block of K has its scale (`scales`, N * blocks values) and zero point
/// (`zeroPoints`, u8, packed like b, ceil(blocks * bits / 8) bytes per column; absent:
/// 2^(bits - 1)); w = float(q - zero point) * scale, rounded once. The shapes must have
/// been checked (verifyMatMulNBits).
std::vector<float> matMulNBitsWeights(const Tensor &b, const Tensor &scales,
                                      const Tensor *zeroPoints, int64_t K, int64_t N, int64_t bits,
                                      int64_t block);

/// Transpose's permutation (without a perm attribute: the dims reversed).
Shape transposePerm(const Node &n);
/// out.shape[i] = in.shape[perm[i]] (Transpose's rule).
Shape permuteShape(const Shape &s, const std::vector<int64_t> &perm);
/// Whether perm is 0, 1, 2, ...
bool isIdentityPerm(const std::vector<int64_t> &perm);
/// Whether Transpose(perm) of a tensor of shape `in` keeps the dims other than 1 in
/// their order (it moves only size-1 dims): then it is a Reshape.
bool transposeMovesOnlyUnitDims(const Shape &in, const std::vector<int64_t> &perm);

/// A Slice's window per input dim: first element, step and length, with ONNX's
/// clamping of starts and ends applied.
struct SliceWindow {
  Shape start, step, size;
};
llvm::Expected<SliceWindow> sliceWindow(const Node &n);

/// Statistics over `axes` (kept as size-1 dims) of a normalization: the mean, x - mean,
/// the population variance and 1 / sqrt(var + eps). BatchNormalization's training form,
/// its gradient and LayerNorm's gradient build them through this one function, so that
/// CSE merges a forward pass's statistics with its gradient's copy. 16-bit x squares
/// and averages in FP32 (a deviation past 256 overflows FP16); `var` is FP32 then and
/// `rstd` x's type. allReduce: the mean and variance are averaged over the ranks.
struct NormStats {
  Value *mean = nullptr, *centered = nullptr, *var = nullptr, *rstd = nullptr;
};
NormStats normStats(GradBuilder &b, Value *x, const std::vector<int64_t> &axes, double eps,
                    bool allReduce = false);

/// BatchNormalization in training mode as ops: normStats over every dim but 1, then
/// (x - mean) * rstd * scale + bias, and the running statistics' ONNX update (momentum *
/// running + (1 - momentum) * batch). Returns its results (Y, and the running mean and
/// variance when the node has them). canonicalize substitutes it for every such node
/// (the reductions then take the layout pass's channels-last order and the split and
/// column reduction kernels); sync-batchnorm builds it with allReduce.
std::vector<Value *> batchNormTrainingOps(GradBuilder &b, const Node &n, bool allReduce);

} // namespace dlc::ir
