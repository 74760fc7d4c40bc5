//===- ConstantFolding.cpp - Evaluate constant subgraphs -------------------===//
//
// A node whose present operands are all constants is evaluated with the
// reference interpreter (the same kernels the tests trust) and replaced by
// constants. Results larger than PassContext::foldElementLimit stay as nodes
// (folding an Expand of a scalar into megabytes of weights would be a loss), as do
// nodes whose reference kernel reports an error (e.g. an out-of-range Gather):
// the error then surfaces at run time, where the user can see the node.
//===----------------------------------------------------------------------===//
#include "dlc/ir/Interpreter.h"
#include "dlc/passes/Pass.h"

namespace dlc::passes {
namespace {

using namespace ir;

class ConstantFolding : public Pass {
public:
  std::string_view name() const override { return "constfold"; }

  bool run(Graph &g, PassContext &ctx) override {
    bool changed = false;
    for (Node *n : g.nodeList()) {
      if (!foldable(*n, ctx))
        continue;
      std::vector<const Tensor *> ops;
      for (Value *v : n->operands())
        ops.push_back(v ? &v->data() : nullptr);
      auto res = evaluateNode(*n, ops);
      if (!res) {
        llvm::consumeError(res.takeError());
        continue;
      }
      std::vector<std::string> names;
      std::vector<Value *> consts;
      for (unsigned i = 0; i < n->numResults(); ++i) {
        names.push_back(n->result(i)->name());
        consts.push_back(g.addConstant(g.uniqueName(names.back() + ".folded"), (*res)[i]));
        g.replaceAllUsesWith(n->result(i), consts.back());
      }
      g.eraseNode(n);
      for (unsigned i = 0; i < consts.size(); ++i)
        g.renameValue(consts[i], names[i]);
      changed = true;
    }
    changed |= g.removeUnusedConstants() > 0;
    return changed;
  }

private:
  static bool foldable(const Node &n, const PassContext &ctx) {
    for (Value *v : n.operands())
      if (v && !v->isConstant())
        return false;
    for (unsigned i = 0; i < n.numResults(); ++i)
      if (n.result(i)->type().numElements() > ctx.foldElementLimit)
        return false;
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createConstantFolding() {
  return std::make_unique<ConstantFolding>();
}

} // namespace dlc::passes
