//===- Decompose.cpp - Ops that gradients cross, as their decomposition -----===//
//
// `decompose` replaces every op that a gradient must cross and that has no gradient
// rule of its own (OpDef::decompose: LSTM, GRU) by simpler ops. Autodiff does it
// first itself; mixed-precision training runs it before the precision pass, so that
// the pass sees (and lowers) the primitives.
//===----------------------------------------------------------------------===//
#include "dlc/passes/Autodiff.h"
#include "dlc/passes/Pass.h"

namespace dlc::passes {

namespace {

class Decompose : public Pass {
public:
  std::string_view name() const override { return "decompose"; }
  bool run(ir::Graph &g, PassContext &ctx) override {
    size_t before = g.numNodes();
    if (auto e = decomposeForGradients(g))
      ctx.fail(std::move(e));
    return g.numNodes() != before;
  }
};

} // namespace

std::unique_ptr<Pass> createDecompose() {
  return std::make_unique<Decompose>();
}

} // namespace dlc::passes
