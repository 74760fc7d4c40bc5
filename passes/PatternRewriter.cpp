//===- PatternRewriter.cpp - The greedy worklist pattern driver ------------===//
//
// Every node starts on the worklist. When a pattern rewrites a node, the nodes it
// created and the users of replaced values are queued again, so rewrites cascade
// to a fixed point without rescanning the whole graph.
//===----------------------------------------------------------------------===//
#include "dlc/passes/Pass.h"

#include <unordered_map>

namespace dlc::passes {

using namespace ir;

void PatternRewriter::push(Node *n) {
  if (pending_.insert(n).second)
    queue_.push_back(n);
}

Node *PatternRewriter::pop() {
  while (!queue_.empty()) {
    Node *n = queue_.front();
    queue_.pop_front();
    if (pending_.erase(n)) // absent if erased since it was queued
      return n;
  }
  return nullptr;
}

void PatternRewriter::pushUsers(Value *v) {
  for (const Use &u : v->uses())
    push(u.user);
}

llvm::Expected<Node *> PatternRewriter::create(OpKind kind, std::vector<Value *> operands,
                                               AttrMap attrs, Node *before, unsigned numResults) {
  auto n = g_.createInferred(kind, std::move(operands), std::move(attrs), numResults,
                             before ? before->name() : "", before);
  if (n) {
    push(*n);
    for (unsigned i = 0; i < (*n)->numResults(); ++i)
      fresh_.insert((*n)->result(i));
  }
  return n;
}

Value *PatternRewriter::createConstant(const std::string &nameHint, Tensor data) {
  Value *v = g_.addConstant(g_.uniqueName(nameHint), std::move(data));
  fresh_.insert(v);
  return v;
}

void PatternRewriter::replaceNode(Node &n, llvm::ArrayRef<Value *> values) {
  std::vector<std::string> names;
  for (unsigned i = 0; i < n.numResults(); ++i) {
    Value *from = n.result(i);
    names.push_back(from->name());
    if (values[i] == from)
      continue;
    pushUsers(from);
    g_.replaceAllUsesWith(from, values[i]);
    if (Node *def = values[i]->definingNode())
      push(def);
  }
  eraseNode(n);
  for (unsigned i = 0; i < values.size(); ++i)
    if (fresh_.count(values[i]) && !g_.findValue(names[i]))
      g_.renameValue(values[i], names[i]);
  fresh_.clear();
}

void PatternRewriter::eraseNode(Node &n) {
  std::vector<Value *> ops(n.operands().begin(), n.operands().end());
  pending_.erase(&n);
  g_.eraseNode(&n);
  for (Value *v : ops) // producers may have become dead or newly matchable
    if (v && v->definingNode())
      push(v->definingNode());
}

void adoptResultNames(Graph &g, llvm::ArrayRef<std::string> names, llvm::ArrayRef<Value *> operands,
                      llvm::ArrayRef<Value *> values) {
  for (size_t i = 0; i < names.size() && i < values.size(); ++i)
    if (!llvm::is_contained(operands, values[i]) && !g.findValue(names[i]))
      g.renameValue(values[i], names[i]);
}

bool applyPatternsGreedily(Graph &g, const std::vector<std::unique_ptr<RewritePattern>> &pats,
                           PassContext &ctx, int maxRewrites) {
  std::unordered_map<OpKind, std::vector<const RewritePattern *>> byKind;
  std::vector<const RewritePattern *> anyKind;
  for (const auto &p : pats) {
    if (auto k = p->root())
      byKind[*k].push_back(p.get());
    else
      anyKind.push_back(p.get());
  }
  PatternRewriter rw(g);
  for (Node *n : g.nodeList())
    rw.push(n);
  bool changed = false;
  int rewrites = 0;
  while (Node *n = rw.pop()) {
    auto tryList = [&](const std::vector<const RewritePattern *> &list) {
      for (const RewritePattern *p : list)
        if (p->matchAndRewrite(*n, rw))
          return true;
      return false;
    };
    auto it = byKind.find(n->kind());
    bool applied = (it != byKind.end() && tryList(it->second)) || tryList(anyKind);
    if (applied) {
      changed = true;
      if (++rewrites > maxRewrites) {
        ctx.fail(makeError("pattern rewriting did not converge"));
        break;
      }
    }
  }
  return changed;
}

} // namespace dlc::passes
