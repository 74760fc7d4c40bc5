//===- Legalize.cpp - Ops without a kernel, as their decomposition ----------===//
//
// An op whose OpDef has a `legalize` hook has no kernel of its own (RMSNormalization
// is ONNX's function body: Cast, Mul, ReduceMean, Add, Sqrt, Div, Mul), except the
// nodes its `hasKernel` accepts (RMSNormalization with an FP32 stash: row_norm). The pass
// runs at every -O level, after the precision and layout passes, so the
// decomposition sees the node's final dtypes (a reduced-precision RMSNormalization
// still accumulates in FP32, as its stash_type says), and before fusion, which
// fuses the pieces like any other ops. The pieces keep the node's name.
//===----------------------------------------------------------------------===//
#include "dlc/ir/GradBuilder.h"
#include "dlc/passes/Pass.h"

#include <algorithm>

namespace dlc::passes {

namespace {

class Legalize : public Pass {
public:
  std::string_view name() const override { return "legalize"; }
  bool run(ir::Graph &g, PassContext &ctx) override {
    ir::GradBuilder b(g);
    b.setNameSuffix("");
    bool changed = false;
    for (ir::Node *n : g.nodeList()) {
      ir::DecomposeFn legalize = n->def().legalize;
      if (!legalize || (n->def().hasKernel && n->def().hasKernel(*n)))
        continue;
      b.begin(*n, {}, {});
      auto parts = legalize(b, *n);
      if (parts && b.failed())
        parts = b.takeError();
      if (!parts) {
        ctx.fail(
            ir::errorf("{0}: cannot lower: {1}", n->describe(), llvm::toString(parts.takeError())));
        return changed;
      }
      std::vector<std::string> names;
      for (unsigned i = 0; i < n->numResults(); ++i) {
        names.push_back(n->result(i)->name());
        g.replaceAllUsesWith(n->result(i), (*parts)[i]);
      }
      std::vector<ir::Value *> operands(n->operands().begin(), n->operands().end());
      g.eraseNode(n);
      adoptResultNames(g, names, operands, *parts);
      changed = true;
    }
    if (changed && !g.topologicalSort())
      ctx.fail(ir::makeError("internal error: a decomposition made a cycle"));
    return changed;
  }
};

} // namespace

std::unique_ptr<Pass> createLegalize() {
  return std::make_unique<Legalize>();
}

} // namespace dlc::passes
