//===- ContribHandlers.cpp - ONNX Runtime's com.microsoft element-wise ops --===//
//
// The contrib ops that ONNX Runtime's transformer optimizer and Optimum write, with
// the semantics of ONNX Runtime's CPU kernels, as compositions of IR ops, so that
// they fuse like the graphs they replace (a bias add joins its GEMM's epilogue, a
// skip connection its normalization's prologue). The attention family is in
// AttentionHandlers.cpp.
//===----------------------------------------------------------------------===//
#include "Common.h"

#include <numeric>

namespace dlc::frontend {
namespace {

using namespace ir;

/// Gelu (erf form) of X, or of X + bias when the node has a second input.
llvm::Error importGeluLike(NodeImporter &ni, const char *approximate) {
  Value *x = ni.input(0);
  if (ni.hasInput(1)) {
    DLC_TRY(s, ni.op(OpKind::Add, {x, ni.input(1)}));
    x = s;
  }
  return single(ni, ni.op(OpKind::Gelu, {x}, {{"approximate", Attribute(approximate)}}));
}

/// Gelu and BiasGelu: the erf form.
llvm::Error importGelu(NodeImporter &ni) {
  return importGeluLike(ni, "none");
}

/// FastGelu: the tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
llvm::Error importFastGelu(NodeImporter &ni) {
  return importGeluLike(ni, "tanh");
}

/// QuickGelu: x * sigmoid(alpha * x).
llvm::Error importQuickGelu(NodeImporter &ni) {
  Value *x = ni.input(0);
  float alpha = ni.attrFloat("alpha", 1.702f);
  Value *ax = x;
  if (alpha != 1.0f) {
    DLC_TRY(m, ni.op(OpKind::Mul, {x, ni.scalar(x->dtype(), alpha)}));
    ax = m;
  }
  DLC_TRY(sg, ni.op(OpKind::Sigmoid, {ax}));
  return single(ni, ni.op(OpKind::Mul, {x, sg}));
}

/// BiasAdd: X + bias + skip.
llvm::Error importBiasAdd(NodeImporter &ni) {
  DLC_TRY(a, ni.op(OpKind::Add, {ni.input(0), ni.input(1)}));
  return single(ni, ni.op(OpKind::Add, {a, ni.input(2)}));
}

/// FusedMatMul's operand as MatMul takes it: stored [rows, batch..., cols] when
/// transBatch (rows first), and with its last two dims swapped when trans.
llvm::Expected<Value *> fusedMatMulOperand(NodeImporter &ni, Value *v, bool trans,
                                           bool transBatch) {
  int64_t r = v->rank();
  if (!trans && !transBatch)
    return v;
  if (r < 2 || (transBatch && r < 3))
    return ni.error("transA/transB need rank >= 2 and transBatchA/transBatchB rank >= 3, got " +
                    v->type().str());
  // Read as [batch..., rows, cols]: transBatch moves dim 0 to r-2; trans swaps the two.
  std::vector<int64_t> perm;
  if (transBatch) {
    for (int64_t i = 1; i < r - 1; ++i)
      perm.push_back(i);
    perm.push_back(0);
    perm.push_back(r - 1);
  } else {
    perm.resize(r);
    std::iota(perm.begin(), perm.end(), 0);
  }
  if (trans)
    std::swap(perm[r - 2], perm[r - 1]);
  return ni.op(OpKind::Transpose, {v}, {{"perm", Attribute(perm)}});
}

/// FusedMatMul: alpha * op(A) op(B) (ONNX Runtime's MatMul with alpha, transA/transB
/// and transBatchA/transBatchB).
llvm::Error importFusedMatMul(NodeImporter &ni) {
  DLC_TRY(a, fusedMatMulOperand(ni, ni.input(0), ni.attrInt("transA", 0) != 0,
                                ni.attrInt("transBatchA", 0) != 0));
  DLC_TRY(b, fusedMatMulOperand(ni, ni.input(1), ni.attrInt("transB", 0) != 0,
                                ni.attrInt("transBatchB", 0) != 0));
  DLC_TRY(m, ni.op(OpKind::MatMul, {a, b}));
  float alpha = ni.attrFloat("alpha", 1.0f);
  if (alpha == 1.0f)
    return single(ni, m);
  return single(ni, ni.op(OpKind::Mul, {m, ni.scalar(m->dtype(), alpha)}));
}

/// The sum input + skip (+ bias) of the skip normalizations, set as output 3 when the
/// node has it.
llvm::Expected<Value *> skipSum(NodeImporter &ni, size_t biasInput) {
  DLC_TRY(s, ni.op(OpKind::Add, {ni.input(0), ni.input(1)}));
  Value *sum = s;
  if (ni.hasInput(biasInput)) {
    DLC_TRY(b, ni.op(OpKind::Add, {sum, ni.input(biasInput)}));
    sum = b;
  }
  if (ni.wantsOutput(3))
    ni.setOutput(3, sum);
  return sum;
}

/// SkipLayerNormalization(input, skip, gamma, beta?, bias?): LayerNormalization of
/// input + skip + bias over the last dim. Outputs: the normalized value, the mean and
/// the inverse standard deviation (LayerNormalization's), and the sum.
llvm::Error importSkipLayerNorm(NodeImporter &ni) {
  DLC_TRY(sum, skipSum(ni, 4));
  std::vector<Value *> ops{sum, ni.input(2)};
  if (ni.hasInput(3))
    ops.push_back(ni.input(3));
  unsigned results = ni.wantsOutput(1) || ni.wantsOutput(2) ? 3 : 1;
  DLC_TRY(r, ni.opMulti(OpKind::LayerNormalization, ops,
                        {{"axis", Attribute(int64_t{-1})},
                         {"epsilon", Attribute(ni.attrFloat("epsilon", 1e-12f))}},
                        results));
  for (unsigned i = 0; i < results; ++i)
    if (ni.wantsOutput(i))
      ni.setOutput(i, r[i]);
  return llvm::Error::success();
}

/// RMS normalization of x with `scale` (RMSNormalization), and, when the node wants
/// its output `invStdOutput`, 1 / sqrt(mean(x^2) + epsilon) over the same dims.
llvm::Error rmsNorm(NodeImporter &ni, Value *x, Value *scale, int64_t axis, float epsilon,
                    size_t invStdOutput) {
  // Y has the scale's type: an X of another float type is converted to it first.
  if (isFloat(x->dtype()) && isFloat(scale->dtype()) && x->dtype() != scale->dtype()) {
    DLC_TRY(c,
            ni.op(OpKind::Cast, {x}, {{"to", Attribute(std::string(dtypeName(scale->dtype())))}}));
    x = c;
  }
  DLC_TRY(y, ni.op(OpKind::RMSNormalization, {x, scale},
                   {{"axis", Attribute(axis)}, {"epsilon", Attribute(epsilon)}}));
  ni.setOutput(0, y);
  if (!ni.wantsOutput(invStdOutput))
    return llvm::Error::success();
  int64_t rank = x->rank(), a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    return ni.error("axis " + std::to_string(axis) + " is out of range for " + x->type().str());
  std::vector<int64_t> axes;
  for (int64_t i = a; i < rank; ++i)
    axes.push_back(i);
  if (x->dtype() != DType::F32) { // the statistic is float32, as ONNX Runtime gives it
    DLC_TRY(c, ni.op(OpKind::Cast, {x}, {{"to", Attribute(std::string("f32"))}}));
    x = c;
  }
  DLC_TRY(sq, ni.op(OpKind::Mul, {x, x}));
  DLC_TRY(ms, ni.op(OpKind::ReduceMean, {sq}, {{"axes", Attribute(axes)}}));
  DLC_TRY(v, ni.op(OpKind::Add, {ms, ni.scalar(x->dtype(), epsilon)}));
  DLC_TRY(rt, ni.op(OpKind::Sqrt, {v}));
  DLC_TRY(inv, ni.op(OpKind::Reciprocal, {rt}));
  ni.setOutput(invStdOutput, inv);
  return llvm::Error::success();
}

/// SkipSimplifiedLayerNormalization(input, skip, gamma, bias?): RMS normalization of
/// input + skip + bias over the last dim. Outputs: the normalized value, the "mean"
/// (zeros, as ONNX Runtime gives it), the inverse RMS and the sum.
llvm::Error importSkipSimplifiedLayerNorm(NodeImporter &ni) {
  DLC_TRY(sum, skipSum(ni, 3));
  if (ni.wantsOutput(1)) {
    Shape s = sum->shape();
    s.back() = 1;
    ni.setOutput(1, ni.constant(Tensor(TensorType(DType::F32, s)), "mean"));
  }
  return rmsNorm(ni, sum, ni.input(2), -1, ni.attrFloat("epsilon", 1e-12f), 2);
}

/// SimplifiedLayerNormalization(X, scale): RMSNormalization with an inverse-RMS output.
llvm::Error importSimplifiedLayerNorm(NodeImporter &ni) {
  return rmsNorm(ni, ni.input(0), ni.input(1), ni.attrInt("axis", -1),
                 ni.attrFloat("epsilon", 1e-5f), 1);
}

} // namespace

void registerContribHandlers(std::vector<HandlerEntry> &t) {
  t.push_back(contribEntry("Gelu", importGelu, 1));
  t.push_back(contribEntry("BiasGelu", importGelu, 2));
  t.push_back(contribEntry("FastGelu", importFastGelu, 1));
  t.push_back(contribEntry("QuickGelu", importQuickGelu, 1));
  t.push_back(contribEntry("BiasAdd", importBiasAdd, 3));
  t.push_back(contribEntry("FusedMatMul", importFusedMatMul, 2));
  t.push_back(contribEntry("SkipLayerNormalization", importSkipLayerNorm, 3));
  t.push_back(contribEntry("SkipSimplifiedLayerNormalization", importSkipSimplifiedLayerNorm, 3));
  // ONNX Runtime registers SimplifiedLayerNormalization in the default domain, where
  // its transformer optimizer writes it.
  t.push_back({"SimplifiedLayerNormalization", 1, kMaxOpset, importSimplifiedLayerNorm, "", 2});
}

} // namespace dlc::frontend
