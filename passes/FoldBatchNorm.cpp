//===- FoldBatchNorm.cpp - Fold inference BatchNormalization into Conv -------===//
//
// Conv(x, W, b) followed by BatchNormalization(scale, B, mean, var) in inference
// mode, with constant parameters, becomes one Conv with
//   W'[m] = W[m] * s[m],  b'[m] = (b[m] - mean[m]) * s[m] + B[m],
//   s[m]  = scale[m] / sqrt(var[m] + epsilon)
// computed in double precision. The convolution's result must feed only the
// normalization. (What TensorRT and ONNX Runtime do at build time.)
//===----------------------------------------------------------------------===//
#include "dlc/passes/Pass.h"

#include <cmath>

namespace dlc::passes {
namespace {

using namespace ir;

class FoldBatchNorm : public Pass {
public:
  std::string_view name() const override { return "fold-bn"; }

  bool run(Graph &g, PassContext &) override {
    bool changed = false;
    for (Node *bn : g.nodesOf(OpKind::BatchNormalization)) {
      if (bn->attrInt("training_mode") != 0)
        continue;
      bool extraResults = false;
      for (unsigned r = 1; r < bn->numResults(); ++r)
        extraResults |= bn->result(r)->hasUses() || g.isOutput(bn->result(r));
      Value *y = bn->operand(0);
      Node *conv = definedBy(y, OpKind::Conv);
      if (extraResults || !conv || y->uses().size() != 1 || g.isOutput(y) ||
          conv->attrInt("channels_last") != 0) // BN's channel axis 1 is not the conv's channels
        continue;
      Value *w = conv->operand(1), *b = conv->operand(2);
      bool constants = w->isConstant() && (!b || b->isConstant());
      for (unsigned k = 1; k < 5; ++k)
        constants &= bn->operand(k)->isConstant();
      DType dt = w->dtype();
      if (!constants || (dt != DType::F32 && dt != DType::F64))
        continue;
      int64_t M = w->shape()[0], per = w->type().numElements() / M;
      double eps = bn->attrFloat("epsilon");
      const Tensor &scale = bn->operand(1)->data(), &beta = bn->operand(2)->data(),
                   &mean = bn->operand(3)->data(), &var = bn->operand(4)->data();
      std::vector<double> wv(static_cast<size_t>(M * per)), bv(static_cast<size_t>(M));
      for (int64_t m = 0; m < M; ++m) {
        double s = scale.getDouble(m) / std::sqrt(var.getDouble(m) + eps);
        for (int64_t j = 0; j < per; ++j)
          wv[m * per + j] = w->data().getDouble(m * per + j) * s;
        bv[m] = ((b ? b->data().getDouble(m) : 0.0) - mean.getDouble(m)) * s + beta.getDouble(m);
      }
      Value *nw, *nb;
      if (dt == DType::F32) {
        nw = g.addConstant(g.uniqueName(w->name() + ".bn"),
                           Tensor::fromVector(w->type(), std::vector<float>(wv.begin(), wv.end())));
        nb = g.addConstant(
            g.uniqueName(bn->result()->name() + ".bias"),
            Tensor::fromVector(TensorType(dt, {M}), std::vector<float>(bv.begin(), bv.end())));
      } else {
        nw = g.addConstant(g.uniqueName(w->name() + ".bn"), Tensor::fromVector(w->type(), wv));
        nb = g.addConstant(g.uniqueName(bn->result()->name() + ".bias"),
                           Tensor::fromVector(TensorType(dt, {M}), bv));
      }
      Node *folded =
          g.createNode(OpKind::Conv, {conv->operand(0), nw, nb}, {bn->result()->type()},
                       conv->attrs(), bn->name().empty() ? conv->name() : bn->name(), bn);
      folded->setLoc(conv->loc());
      g.replaceAllUsesWith(bn->result(), folded->result());
      std::string resultName = bn->result()->name();
      g.eraseNode(bn);
      g.eraseNode(conv);
      g.renameValue(folded->result(), resultName); // keep the normalization's name
      changed = true;
    }
    if (changed)
      g.removeUnusedConstants();
    return changed;
  }
};

} // namespace

std::unique_ptr<Pass> createFoldBatchNorm() {
  return std::make_unique<FoldBatchNorm>();
}

} // namespace dlc::passes
