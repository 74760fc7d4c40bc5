//===- OpUtils.h - Helpers shared by the op family files --------*- C++ -*-===//
#pragma once

#include "dlc/ir/GradBuilder.h"
#include "dlc/ir/Graph.h"
#include "dlc/ir/OpHelpers.h"

#include <cmath>
#include <type_traits>
#include <vector>

namespace dlc::ir::ops {

using TypeList = std::vector<TensorType>;
using InferResult = llvm::Expected<TypeList>;
using Inputs = std::vector<const Tensor *>;
using Outputs = std::vector<Tensor>;

/// Sets of element types an operand may have.
enum TypeSet : unsigned {
  kFloat = 1,
  kSInt = 2,
  kUInt = 4,
  kBool = 8,
  kInt = kSInt | kUInt,
  kSigned = kFloat | kSInt,
  kNumeric = kFloat | kInt,
  kAny = kNumeric | kBool,
};
bool inTypeSet(DType t, unsigned set);
std::string typeSetName(unsigned set);

/// Operand i must exist and have a dtype in `set`.
llvm::Error requireType(const Node &n, unsigned i, unsigned set);
/// Operands i and j (when present) must have the same dtype.
llvm::Error requireSameType(const Node &n, unsigned i, unsigned j);
/// All present operands must have the dtype of operand 0.
llvm::Error requireAllSameType(const Node &n);
llvm::Error requireRank(const Node &n, unsigned i, int64_t rank);
llvm::Error requireMinRank(const Node &n, unsigned i, int64_t rank);

/// Normalizes a possibly negative axis into [0, rank).
llvm::Expected<int64_t> normalizeAxis(int64_t axis, int64_t rank, const char *what = "axis");
/// Normalizes a list of axes; rejects duplicates.
llvm::Expected<std::vector<int64_t>> normalizeAxes(const std::vector<int64_t> &axes, int64_t rank);

/// Numpy-style broadcast of two shapes.
llvm::Expected<Shape> broadcastShapes(const Shape &a, const Shape &b);
/// Broadcast of all present operands' shapes.
llvm::Expected<Shape> broadcastOperands(const Node &n);

/// Maps linear indices of a broadcast output to linear indices of one input.
class BroadcastIndex {
public:
  BroadcastIndex(const Shape &in, const Shape &out);
  int64_t operator()(int64_t outIndex) const;

private:
  Shape outShape_;
  Shape inStrides_; // 0 on broadcast dims, aligned to the output rank
};

/// A single result with operand 0's type.
InferResult inferSameAsOperand0(const Node &n);

/// Calls f(CT{}) with the compute type of operand 0's dtype (see visitComputeType).
template <class F> llvm::Error dispatch(DType dt, F &&f) {
  return visitComputeType(dt, f);
}

/// The accumulation type of a reference kernel for compute type T: sums of
/// products are carried in double for floating types (the oracle should be closer
/// to the exact result than any kernel it checks), bool counts in int64, and the
/// integer types keep their own (wrapping) arithmetic. Results round once, on store.
template <class T>
using AccType = std::conditional_t<std::is_same_v<T, bool>, int64_t,
                                   std::conditional_t<std::is_floating_point_v<T>, double, T>>;

/// Constant data of operand i, or null if it is absent or not a constant.
const Tensor *constantOperand(const Node &n, unsigned i);

inline llvm::Error ok() {
  return llvm::Error::success();
}

/// Multi-index of linear index i in shape s.
Shape unravel(int64_t i, const Shape &s);
/// The tensor transposed by perm (a copy).
Tensor permuteTensor(const Tensor &t, const std::vector<int64_t> &perm);

/// Whether a Conv/pooling node computes on channels-last tensors (the `layout`
/// pass sets channels_last = 1: input [N, D1..Dk, C], a conv's weights
/// [M, k1..kk, C/group], output [N, D1..Dk, M]).
bool channelsLast(const Node &n);
/// The channels-first view of operand i's shape (itself unless channelsLast(n)).
Shape channelsFirstShape(const Node &n, unsigned i);
/// A reference kernel on channels-last operands: the `permuted` operands are
/// transposed to channels-first, `nchw` computes on those, and every result is
/// transposed back. For ops whose channels-last form only differs in layout.
llvm::Error channelsLastReference(const Node &n, const Inputs &in, Outputs &out, RefFn nchw,
                                  std::vector<unsigned> permuted);
/// Infers channels-last result types from the channels-first inference `nchw`
/// (which reads operand shapes through channelsFirstShape).
InferResult channelsLastInfer(const Node &n, InferFn nchw);
/// The remap hook of an op with a channels-last form: accepts operands laid out by
/// channelsFirstPerm (NHWC data read as NCHW) when n is channels-first and
/// accepted(n) holds; operand 0 takes the actual layout, `weights` (if >= 0) is
/// transposed to channels-last, the rest stay, and channels_last = 1.
std::optional<LayoutRemap> remapToChannelsLast(const Node &n, const std::vector<int64_t> &perm,
                                               int weights);

/// The remap hook of a rank-preserving op with one `axis` attribute (Softmax, Concat,
/// Split, CumSum, TopK, ArgMax with keepdims): the axis follows the permutation and
/// every operand takes the actual layout.
std::optional<LayoutRemap> remapAxis(const Node &n, const std::vector<int64_t> &perm);
/// The remap hook of a Reduce* op (`axes`, `keepdims`, `noop_with_empty_axes`).
std::optional<LayoutRemap> remapReduceAxes(const Node &n, const std::vector<int64_t> &perm);

/// Gradient rule of an op whose result is its operand 0 (Identity, Cast: the
/// builder casts back to the operand's dtype).
llvm::Error gradPassThrough(GradBuilder &b, const Node &n);
/// Gradient rule of an op that only reshapes operand 0 (Reshape, Flatten, Squeeze,
/// Unsqueeze): the gradient reshaped back.
llvm::Error gradReshapeBack(GradBuilder &b, const Node &n);

/// Dims 0, 2, 3, ..., rank - 1: all but the channel dim of an [N, C, D...] tensor (a
/// per-channel reduction's axes).
inline std::vector<int64_t> batchAndSpatialAxes(int64_t rank) {
  std::vector<int64_t> axes{0};
  for (int64_t i = 2; i < rank; ++i)
    axes.push_back(i);
  return axes;
}

/// Integer ceil division for non-negative numerator, positive divisor.
inline int64_t ceilDiv(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

} // namespace dlc::ir::ops

namespace dlc::ir {
/// Cast, QuantizeLinear, DequantizeLinear and MulAdd (ops/Quantize.cpp), defined with the
/// element-wise family.
void defineConversionOps(OpTable &t);
} // namespace dlc::ir
