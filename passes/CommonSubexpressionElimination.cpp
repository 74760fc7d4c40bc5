//===- CommonSubexpressionElimination.cpp - Merge identical nodes ----------===//
//
// Two nodes are the same expression when they have the same op, the same operand
// values and equal attributes. Constants with identical data are merged first so
// that nodes reading duplicated weights also merge. Nodes are visited in order,
// so the first occurrence survives and dominates the later ones. Members of recorded
// fusion groups are left alone (the fusion pass recomputes cheap producers per kernel).
//===----------------------------------------------------------------------===//
#include "dlc/passes/Pass.h"

#include "llvm/ADT/Hashing.h"

#include <unordered_map>
#include <unordered_set>

namespace dlc::passes {
namespace {

using namespace ir;

size_t hashNode(const Node &n) {
  size_t h = llvm::hash_combine(static_cast<unsigned>(n.kind()), n.numResults());
  for (Value *v : n.operands())
    h = llvm::hash_combine(h, v);
  for (const auto &[name, a] : n.attrs())
    h = llvm::hash_combine(h, llvm::hash_value(name), static_cast<unsigned>(a.kind()));
  return h;
}

bool sameNode(const Node &a, const Node &b) {
  if (a.kind() != b.kind() || a.numResults() != b.numResults() || a.operands() != b.operands() ||
      a.attrs().size() != b.attrs().size())
    return false;
  for (auto ia = a.attrs().begin(), ib = b.attrs().begin(); ia != a.attrs().end(); ++ia, ++ib)
    if (ia->first != ib->first || ia->second != ib->second)
      return false;
  for (unsigned i = 0; i < a.numResults(); ++i)
    if (a.result(i)->type() != b.result(i)->type())
      return false;
  return true;
}

class CommonSubexpressionElimination : public Pass {
public:
  std::string_view name() const override { return "cse"; }

  bool run(Graph &g, PassContext &) override {
    bool changed = mergeConstants(g);
    // Members of recorded fusion groups stay: the fusion pass copies a cheap producer
    // into each consumer's kernel on purpose (recomputed, not materialized).
    std::unordered_set<const Node *> grouped;
    for (const auto &fg : g.fusionGroups())
      grouped.insert(fg->nodes.begin(), fg->nodes.end());
    std::unordered_multimap<size_t, Node *> seen;
    for (Node *n : g.nodeList()) {
      if (grouped.count(n))
        continue;
      size_t h = hashNode(*n);
      Node *match = nullptr;
      auto [lo, hi] = seen.equal_range(h);
      for (auto it = lo; it != hi && !match; ++it)
        if (sameNode(*it->second, *n))
          match = it->second;
      if (!match) {
        seen.emplace(h, n);
        continue;
      }
      for (unsigned i = 0; i < n->numResults(); ++i)
        g.replaceAllUsesWith(n->result(i), match->result(i));
      g.eraseNode(n);
      changed = true;
    }
    return changed;
  }

private:
  static bool mergeConstants(Graph &g) {
    std::unordered_multimap<size_t, Value *> seen;
    std::vector<Value *> dead;
    for (const auto &c : g.constants()) {
      const Tensor &t = c->data();
      size_t h = llvm::hash_combine(
          static_cast<unsigned>(t.dtype()),
          llvm::hash_combine_range(t.shape().begin(), t.shape().end()),
          llvm::hash_combine_range(static_cast<const char *>(t.raw()),
                                   static_cast<const char *>(t.raw()) + t.byteSize()));
      Value *match = nullptr;
      auto [lo, hi] = seen.equal_range(h);
      for (auto it = lo; it != hi && !match; ++it)
        if (it->second->data().bitwiseEqual(t))
          match = it->second;
      if (!match) {
        seen.emplace(h, c.get());
        continue;
      }
      g.replaceAllUsesWith(c.get(), match);
      dead.push_back(c.get());
    }
    for (Value *v : dead)
      g.eraseConstant(v);
    return !dead.empty();
  }
};

} // namespace

std::unique_ptr<Pass> createCommonSubexpressionElimination() {
  return std::make_unique<CommonSubexpressionElimination>();
}

} // namespace dlc::passes
