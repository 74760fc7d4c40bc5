//===- Fusion.cpp - Group nodes into kernels --------------------------------===//
//
// Post-dominator based fusion, as in TVM's FuseOps. For every node n (in order) let
// p be its immediate post-dominator in the dataflow graph (graph outputs flow to a
// virtual sink). If every path from n to p can live in one kernel, n, p and all the
// nodes between them join one group:
//   - n inlinable (element-wise, broadcast, metadata, index mapping): the nodes
//     between must be inlinable too, and p inlinable or an anchor that accepts a
//     prologue (reductions, softmax, layer norm, pooling);
//   - n an anchor that accepts an epilogue (also GEMM and convolution): every node up
//     to p must be an element-wise/broadcast/metadata node over the anchor's index
//     space (the anchor stores each element through the epilogue).
// Because p post-dominates n, diamonds (x used by two branches that rejoin) are
// absorbed whole, and a value with uses outside the group is never produced inside
// it: each group has one output. A group holds at most one anchor and at most
// kMaxGroupNodes nodes. A reduction whose result is used twice without the uses
// rejoining keeps its own kernel (fusing it would compute it twice).
//
// Whether a merged set of nodes is still one kernel, and which kind, is decided by
// classifyFusionGroup (FusionRules.h), which the verifier also checks recorded groups
// with. The pass records each group of two or more nodes in the graph (FusionGroup.h:
// kind, anchor, prologue, epilogue, the matched pattern) and reorders the graph so
// that each kernel's nodes are contiguous; the code generator reads the records.
//===----------------------------------------------------------------------===//
#include "dlc/ir/FusionRules.h"
#include "dlc/passes/Pass.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <queue>
#include <unordered_set>

namespace dlc::passes {
namespace {

using namespace ir;

constexpr int kSink = -1;

struct DataflowGraph {
  std::vector<Node *> nodes;
  std::unordered_map<const Node *, int> index;
  std::vector<std::vector<int>> users, producers;
  std::vector<bool> toSink; // a result is a graph output

  explicit DataflowGraph(const Graph &g) : nodes(g.nodeList()) {
    for (size_t i = 0; i < nodes.size(); ++i)
      index[nodes[i]] = static_cast<int>(i);
    users.resize(nodes.size());
    producers.resize(nodes.size());
    toSink.assign(nodes.size(), false);
    for (size_t i = 0; i < nodes.size(); ++i) {
      Node *n = nodes[i];
      for (unsigned r = 0; r < n->numResults(); ++r) {
        if (g.isOutput(n->result(r)))
          toSink[i] = true;
        for (const Use &u : n->result(r)->uses()) {
          int j = index.at(u.user);
          if (std::find(users[i].begin(), users[i].end(), j) == users[i].end()) {
            users[i].push_back(j);
            producers[j].push_back(static_cast<int>(i));
          }
        }
      }
    }
  }
};

/// Immediate post-dominators (kSink for none) of a DAG in topological order.
std::vector<int> postDominators(const DataflowGraph &dg) {
  size_t n = dg.nodes.size();
  std::vector<int> ipdom(n, kSink), depth(n, 0);
  auto depthOf = [&](int v) { return v == kSink ? 0 : depth[v]; };
  auto lca = [&](int a, int b) {
    while (a != b) {
      if (depthOf(a) < depthOf(b))
        std::swap(a, b);
      a = ipdom[a];
    }
    return a;
  };
  for (size_t k = n; k-- > 0;) {
    int i = static_cast<int>(k);
    if (dg.toSink[i] || dg.users[i].empty()) {
      ipdom[i] = kSink;
    } else {
      int p = dg.users[i][0];
      for (size_t u = 1; u < dg.users[i].size(); ++u)
        p = lca(p, dg.users[i][u]);
      ipdom[i] = p;
    }
    depth[i] = depthOf(ipdom[i]) + 1;
  }
  return ipdom;
}

class Fusion : public Pass {
public:
  std::string_view name() const override { return "fuse"; }

  bool run(Graph &g, PassContext &ctx) override {
    bool changed = !g.fusionGroups().empty();
    g.clearFusionGroups();
    changed |= recomputeCheapProducers(g);
    DataflowGraph dg(g);
    dg_ = &dg;
    size_t n = dg.nodes.size();
    std::vector<int> ipdom = postDominators(dg);
    parent_.resize(n);
    std::iota(parent_.begin(), parent_.end(), 0);
    members_.assign(n, {});
    for (size_t i = 0; i < n; ++i)
      members_[i] = {static_cast<int>(i)};
    seen_.assign(n, 0);
    stamp_ = 0;
    // Nodes that join no kernel: variable updates, each lowered as part of a
    // multi-tensor kernel, and the Where of an If with a run-time condition (its
    // branches' steps run only on their side, so neither side may share its kernel).
    std::vector<bool> alone(n, false);
    std::vector<UpdateLane> lanes = updateLanes(g);
    for (const UpdateLane &l : lanes)
      for (Node *m : l.nodes)
        alone[dg.index.at(m)] = true;
    for (size_t i = 0; i < n; ++i)
      alone[i] = alone[i] || selectsByRuntimeCondition(*dg.nodes[i]);
    // Attention first: its two MatMuls, the scores' element-wise chain and the
    // Softmax become one group anchored on the second MatMul.
    std::vector<bool> core(n, false), attention(n, false);
    for (size_t i = 0; i < n; ++i)
      for (Node *c : attentionCore(*dg.nodes[i])) {
        int ci = dg.index.at(c);
        core[ci] = attention[i] = true;
        unite(static_cast<int>(i), ci);
      }
    // Where a producer may join: an anchor that takes a prologue (the attention
    // kernel loads Q, K and V through theirs).
    auto takesPrologue = [&](int s) {
      return fusibility(*dg.nodes[s]).prologue || core[s] || attention[s];
    };
    for (size_t i = 0; i < n; ++i) {
      Node *node = dg.nodes[i];
      Fusibility f = fusibility(*node);
      bool inl = f.inlinable();
      if ((!inl && !(f.role == Fusibility::Role::Anchor && f.epilogue)) || ipdom[i] == kSink ||
          alone[i])
        continue;
      auto path = fusablePath(
          static_cast<int>(i), ipdom[i], inl, [&](int s) { return alone[s]; }, takesPrologue);
      if (!path)
        continue;
      std::vector<int> members = std::move(*path);
      members.push_back(static_cast<int>(i));
      tryMerge(members);
    }
    // Groups of two or more nodes, contiguous, in a topological order of groups.
    std::vector<std::vector<int>> groups(n);
    for (size_t i = 0; i < n; ++i)
      groups[find(static_cast<int>(i))].push_back(static_cast<int>(i));
    std::vector<int> order = groupOrder(groups);
    std::vector<Node *> newOrder;
    std::vector<FusionGroup> records;
    for (int root : order) {
      std::vector<Node *> members;
      for (int m : groups[root])
        members.push_back(dg.nodes[m]);
      newOrder.insert(newOrder.end(), members.begin(), members.end());
      if (members.size() < 2)
        continue;
      auto fg = classifyFusionGroup(members);
      if (!fg) { // every merge was classified; a failure here is a bug
        ctx.fail(llvm::make_error<llvm::StringError>(
            "internal error: a merged group does not classify: " + llvm::toString(fg.takeError()),
            llvm::inconvertibleErrorCode()));
        return changed;
      }
      records.push_back(std::move(*fg));
    }
    for (size_t i = 0; i < newOrder.size(); ++i) {
      if (newOrder[i] != dg.nodes[i])
        changed = true;
      g.moveBefore(newOrder[i], nullptr);
    }
    for (FusionGroup &fg : records)
      g.addFusionGroup(std::move(fg));
    // The lanes again, with their nodes in the new order.
    for (UpdateLane &l : updateLanes(g)) {
      FusionGroup lane;
      lane.kind = GroupKind::UpdateLane;
      lane.nodes = std::move(l.nodes);
      g.addFusionGroup(std::move(lane));
    }
    return changed || !records.empty() || !lanes.empty();
  }

private:
  /// Element-wise producers that each consumer recomputes instead of reading: a node
  /// whose result would be materialized (its uses do not all fuse with it down to its
  /// post-dominator), used by 2..kMaxCopies nodes that can each take it inline
  /// (element-wise or injective consumers, anchors' prologues), and whose operands cost
  /// less to read again per consumer than its result costs to write and read back: a
  /// widening Cast, x - mean, x * rstd with per-channel operands (BatchNorm's
  /// decomposition in training). Each consumer but the first gets a copy, which then
  /// fuses into its kernel. Visited from the last node back, so a chain of them is
  /// recomputed from the last value that is materialized anyway.
  bool recomputeCheapProducers(Graph &g) {
    constexpr size_t kMaxCopies = 8;
    std::unordered_set<const Node *> lanes;
    for (const UpdateLane &l : updateLanes(g))
      lanes.insert(l.nodes.begin(), l.nodes.end());
    // The dataflow graph and post-dominators, redone after copies where a node's users
    // changed (a copied consumer). A change further down that leaves the node's own
    // users as they were is not seen: the snapshot may then call it fused and it keeps
    // its single copy (a missed recomputation, never a wrong graph).
    std::unique_ptr<DataflowGraph> dg;
    std::vector<int> ipdom;
    auto analyze = [&] {
      dg = std::make_unique<DataflowGraph>(g);
      dg_ = dg.get();
      seen_.assign(dg->nodes.size(), 0);
      stamp_ = 0;
      ipdom = postDominators(*dg);
    };
    analyze();
    bool stale = false;
    auto settled = [&](const Node *u) { return lanes.count(u) || selectsByRuntimeCondition(*u); };
    // The node fuses with all of its uses as it is (fusion's own test, without sizes).
    auto fusesWhole = [&](const Node *n, size_t users) {
      if (stale && dg->users[dg->index.at(n)].size() != users) {
        analyze();
        stale = false;
      }
      const int i = dg->index.at(n);
      return ipdom[i] != kSink &&
             fusablePath(
                 i, ipdom[i], true, [&](int s) { return settled(dg->nodes[s]); },
                 [&](int s) { return fusibility(*dg->nodes[s]).prologue; });
    };
    // A kernel of ours that reads its operands itself (an anchor without a prologue: a
    // convolution, MaxPool's gradient) and the element-wise nodes that may be its
    // epilogue: a copy feeding one of them would be recomputed per element in that
    // kernel's epilogue (a convolution is compute-bound). (A library GEMM's epilogue
    // takes no copies: libraryChain.)
    auto computeAnchor = [](const Value *v) {
      const Node *d = v ? v->definingNode() : nullptr;
      if (!d)
        return false;
      Fusibility fd = fusibility(*d);
      return fd.role == Fusibility::Role::Anchor && fd.epilogue && !fd.prologue &&
             !fd.libraryEpilogue;
    };
    std::function<bool(const Node &, int)> feedsComputeEpilogue = [&](const Node &u, int depth) {
      for (const Use &w : u.result()->uses()) {
        const Node &wn = *w.user;
        if (fusibility(wn).role != Fusibility::Role::Elementwise)
          continue;
        if (std::any_of(wn.operands().begin(), wn.operands().end(), computeAnchor) ||
            (depth > 0 && feedsComputeEpilogue(wn, depth - 1)))
          return true;
      }
      return false;
    };
    // A library GEMM's result, or that of its epilogue so far: an element-wise consumer
    // may join the chain (cuBLASLt's bias, residual add, activation), which reads its
    // other operands materialized.
    std::function<bool(const Value *, int)> libraryResult = [&](const Value *v, int depth) {
      const Node *d = v ? v->definingNode() : nullptr;
      if (!d)
        return false;
      Fusibility fd = fusibility(*d);
      if (fd.libraryEpilogue)
        return true;
      return depth > 0 && fd.gemmEpilogue != GemmEpilogueOp::None &&
             std::any_of(d->operands().begin(), d->operands().end(),
                         [&](const Value *o) { return libraryResult(o, depth - 1); });
    };
    auto libraryChain = [&](const Node &u) {
      return fusibility(u).gemmEpilogue != GemmEpilogueOp::None &&
             std::any_of(u.operands().begin(), u.operands().end(),
                         [&](const Value *o) { return libraryResult(o, 3); });
    };
    // u reads v only where it can inline v's producer.
    auto absorbs = [&](const Node &u, const Value *v) {
      Fusibility fu = fusibility(u);
      if (fu.inlinable())
        return !libraryChain(u) &&
               !(u.numResults() == 1 &&
                 (std::any_of(u.operands().begin(), u.operands().end(), computeAnchor) ||
                  feedsComputeEpilogue(u, 2)));
      if (fu.role != Fusibility::Role::Anchor || !fu.prologue)
        return false;
      for (unsigned k = 0; k < u.numOperands(); ++k)
        if (u.operand(k) == v && (k >= 32 || !(fu.prologueOperands >> k & 1u)))
          return false;
      return true;
    };
    bool changed = false;
    const std::vector<Node *> order = dg->nodes; // the copies are not visited
    for (size_t k = order.size(); k-- > 0;) {
      Node *n = order[k];
      if (fusibility(*n).role != Fusibility::Role::Elementwise || n->numResults() != 1 ||
          settled(n) || g.isOutput(n->result()) || libraryChain(*n))
        continue;
      Value *r = n->result();
      std::vector<Node *> users;
      for (const Use &u : r->uses())
        if (std::find(users.begin(), users.end(), u.user) == users.end())
          users.push_back(u.user);
      if (users.size() < 2 || users.size() > kMaxCopies || fusesWhole(n, users.size()) ||
          !std::all_of(users.begin(), users.end(),
                       [&](const Node *u) { return !settled(u) && absorbs(*u, r); }))
        continue;
      double operandBytes = 0, resultBytes = static_cast<double>(r->type().byteSize());
      for (const Value *v : n->operands())
        if (v && v->type().numElements() > 1)
          operandBytes += static_cast<double>(v->type().byteSize());
      const double uses = static_cast<double>(users.size());
      if (uses * operandBytes > resultBytes * (1 + uses))
        continue;
      for (size_t u = 1; u < users.size(); ++u) {
        Node *copy =
            g.createNode(n->kind(), n->operands(), {r->type()}, n->attrs(), n->name(), users[u]);
        copy->setLoc(n->loc());
        for (unsigned i = 0; i < users[u]->numOperands(); ++i)
          if (users[u]->operand(i) == r)
            users[u]->setOperand(i, copy->result());
      }
      changed = stale = true;
    }
    dg_ = nullptr;
    return changed;
  }

  /// The nodes on the paths from node i to its post-dominator p if they can all share
  /// i's kernel: none `alone`, each inlinable, except that p may take a prologue when i
  /// is inlinable (`inl`).
  template <class Alone, class Prologue>
  std::optional<std::vector<int>> fusablePath(int i, int p, bool inl, Alone alone,
                                              Prologue takesPrologue) {
    std::vector<int> path = pathTo(i, p);
    for (int s : path) {
      const bool inlinable = fusibility(*dg_->nodes[s]).inlinable();
      if (alone(s) || !(s == p && inl ? inlinable || takesPrologue(s) : inlinable))
        return std::nullopt;
    }
    return path;
  }

  int find(int x) {
    while (parent_[x] != x)
      x = parent_[x] = parent_[parent_[x]];
    return x;
  }

  /// Joins b's group into a's (their members lists too).
  void unite(int a, int b) {
    a = find(a);
    b = find(b);
    if (a == b)
      return;
    parent_[b] = a;
    members_[a].insert(members_[a].end(), members_[b].begin(), members_[b].end());
    members_[b] = {};
  }

  /// Nodes on the paths from `from` to its post-dominator `to` (excluding `from`). The
  /// visited marks are stamps, so a call costs its paths, not the graph.
  std::vector<int> pathTo(int from, int to) {
    std::vector<int> out, stack = {from};
    ++stamp_;
    while (!stack.empty()) {
      int v = stack.back();
      stack.pop_back();
      for (int u : dg_->users[v]) {
        if (seen_[u] == stamp_)
          continue;
        seen_[u] = stamp_;
        out.push_back(u);
        if (u != to)
          stack.push_back(u);
      }
    }
    return out;
  }

  /// Merges the groups of `members` if the result is a valid group. It costs the
  /// groups' sizes (at most kMaxGroupNodes), not the graph's: long chains fuse in
  /// linear time.
  void tryMerge(const std::vector<int> &members) {
    std::vector<int> roots;
    for (int m : members)
      roots.push_back(find(m));
    std::sort(roots.begin(), roots.end());
    roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
    if (roots.size() == 1)
      return;
    size_t total = 0;
    for (int r : roots)
      total += members_[r].size();
    if (total > kMaxGroupNodes)
      return;
    std::vector<int> indices;
    for (int r : roots)
      indices.insert(indices.end(), members_[r].begin(), members_[r].end());
    std::sort(indices.begin(), indices.end()); // the graph's (topological) order
    std::vector<Node *> merged;
    for (int i : indices)
      merged.push_back(dg_->nodes[i]);
    auto fg = classifyFusionGroup(merged);
    if (!fg) {
      llvm::consumeError(fg.takeError());
      return;
    }
    for (int r : roots)
      unite(roots[0], r);
  }

  /// Kahn's algorithm over groups, picking the ready group with the earliest node.
  std::vector<int> groupOrder(const std::vector<std::vector<int>> &groups) {
    size_t n = dg_->nodes.size();
    std::vector<int> pending(n, 0);
    std::vector<std::vector<int>> succ(n);
    for (size_t i = 0; i < n; ++i)
      for (int u : dg_->users[i]) {
        int a = find(static_cast<int>(i)), b = find(u);
        if (a != b) {
          succ[a].push_back(b);
          ++pending[b];
        }
      }
    std::priority_queue<std::pair<int, int>, std::vector<std::pair<int, int>>, std::greater<>>
        ready;
    for (size_t r = 0; r < n; ++r)
      if (!groups[r].empty() && pending[r] == 0)
        ready.push({groups[r].front(), static_cast<int>(r)});
    std::vector<int> order;
    while (!ready.empty()) {
      int r = ready.top().second;
      ready.pop();
      order.push_back(r);
      for (int s : succ[r])
        if (--pending[s] == 0)
          ready.push({groups[s].front(), s});
    }
    return order;
  }

  const DataflowGraph *dg_ = nullptr;
  std::vector<int> parent_;
  std::vector<std::vector<int>> members_; // of each root: its group's nodes
  std::vector<unsigned> seen_;            // pathTo's visit stamps
  unsigned stamp_ = 0;
};

} // namespace

std::unique_ptr<Pass> createFusion() {
  return std::make_unique<Fusion>();
}

} // namespace dlc::passes
