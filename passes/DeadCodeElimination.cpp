//===- DeadCodeElimination.cpp - Remove unused nodes and constants ---------===//
//
// Walks nodes backwards so a whole dead chain goes in one sweep. A node is dead
// when none of its results is used or returned. Graph inputs are the model's
// interface and are never removed.
//===----------------------------------------------------------------------===//
#include "dlc/passes/Pass.h"

namespace dlc::passes {
namespace {

class DeadCodeElimination : public Pass {
public:
  std::string_view name() const override { return "dce"; }
  bool run(ir::Graph &g, PassContext &) override {
    bool changed = false;
    auto nodes = g.nodeList();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      ir::Node *n = *it;
      bool live = false;
      for (unsigned i = 0; i < n->numResults() && !live; ++i)
        live = n->result(i)->hasUses() || g.isOutput(n->result(i));
      if (!live) {
        g.eraseNode(n);
        changed = true;
      }
    }
    changed |= g.removeUnusedConstants() > 0;
    return changed;
  }
};

} // namespace

std::unique_ptr<Pass> createDeadCodeElimination() {
  return std::make_unique<DeadCodeElimination>();
}

} // namespace dlc::passes
