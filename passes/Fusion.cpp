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
// The pass writes the group id into "dlc.kernel" on every node of a group with two
// or more nodes, and reorders the graph so that each group is contiguous.
//===----------------------------------------------------------------------===//
#include "dlc/ir/FusionRules.h"
#include "dlc/passes/Pass.h"

#include <algorithm>
#include <numeric>
#include <queue>

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

  bool run(Graph &g, PassContext &) override {
    bool changed = false;
    for (Node &n : g.nodes())
      for (const char *a : {kKernelAttr, kPatternAttr, kLaneAttr})
        if (n.hasAttr(a)) {
          n.removeAttr(a);
          changed = true;
        }
    DataflowGraph dg(g);
    dg_ = &dg;
    size_t n = dg.nodes.size();
    std::vector<int> ipdom = postDominators(dg);
    parent_.resize(n);
    std::iota(parent_.begin(), parent_.end(), 0);
    core_.assign(n, false);
    // Nodes that join no group: variable updates, each lowered as part of a
    // multi-tensor kernel, and the Where of an If with a run-time condition (its
    // branches' steps run only on their side, so neither side may share its kernel).
    std::vector<bool> alone(n, false);
    int64_t laneId = 0;
    for (const UpdateLane &l : updateLanes(g)) {
      for (Node *m : l.nodes) {
        m->setAttr(kLaneAttr, Attribute(laneId));
        alone[dg.index.at(m)] = true;
      }
      ++laneId;
      changed = true;
    }
    for (size_t i = 0; i < n; ++i)
      alone[i] = alone[i] || selectsByRuntimeCondition(*dg.nodes[i]);
    // Attention first: its two MatMuls, the scores' element-wise chain and the
    // Softmax become one group anchored on the second MatMul.
    for (size_t i = 0; i < n; ++i) {
      std::vector<Node *> core = attentionCore(*dg.nodes[i]);
      if (core.empty())
        continue;
      dg.nodes[i]->setAttr(kPatternAttr, Attribute(std::string("attention")));
      for (Node *c : core) {
        int ci = dg.index.at(c);
        core_[ci] = true;
        parent_[find(ci)] = find(static_cast<int>(i));
      }
      changed = true;
    }
    for (size_t i = 0; i < n; ++i) {
      Node *node = dg.nodes[i];
      AnchorCaps caps = anchorCaps(*node);
      bool inl = isInlinable(*node);
      if ((!inl && !(caps.anchor && caps.epilogue)) || ipdom[i] == kSink || alone[i])
        continue;
      int p = ipdom[i];
      std::vector<int> path = pathTo(static_cast<int>(i), p);
      bool ok = std::none_of(path.begin(), path.end(), [&](int s) { return alone[s]; });
      if (inl) {
        for (int s : path)
          ok &= s == p
                    ? (isInlinable(*dg.nodes[s]) || anchorCaps(*dg.nodes[s]).prologue || core_[s])
                    : isInlinable(*dg.nodes[s]);
      } else {
        for (int s : path)
          ok &= isInlinable(*dg.nodes[s]);
      }
      if (!ok)
        continue;
      std::vector<int> members = path;
      members.push_back(static_cast<int>(i));
      tryMerge(members);
    }
    // Groups of two or more nodes, contiguous, in a topological order of groups.
    std::vector<std::vector<int>> groups(n);
    for (size_t i = 0; i < n; ++i)
      groups[find(static_cast<int>(i))].push_back(static_cast<int>(i));
    std::vector<int> order = groupOrder(groups);
    int nextId = 0;
    std::vector<Node *> newOrder;
    for (int root : order) {
      for (int m : groups[root]) {
        newOrder.push_back(dg.nodes[m]);
        if (groups[root].size() > 1) {
          dg.nodes[m]->setAttr(kKernelAttr, Attribute(static_cast<int64_t>(nextId)));
          changed = true;
        }
      }
      if (groups[root].size() > 1)
        ++nextId;
    }
    for (size_t i = 0; i < newOrder.size(); ++i) {
      if (newOrder[i] != dg.nodes[i])
        changed = true;
      g.moveBefore(newOrder[i], nullptr);
    }
    return changed;
  }

private:
  int find(int x) {
    while (parent_[x] != x)
      x = parent_[x] = parent_[parent_[x]];
    return x;
  }

  /// Nodes on the paths from `from` to its post-dominator `to` (excluding `from`).
  std::vector<int> pathTo(int from, int to) {
    std::vector<int> out, stack = {from};
    std::vector<bool> seen(dg_->nodes.size(), false);
    while (!stack.empty()) {
      int v = stack.back();
      stack.pop_back();
      for (int u : dg_->users[v]) {
        if (seen[u])
          continue;
        seen[u] = true;
        out.push_back(u);
        if (u != to)
          stack.push_back(u);
      }
    }
    return out;
  }

  /// Merges the groups of `members` if the result is a valid group.
  void tryMerge(const std::vector<int> &members) {
    size_t n = dg_->nodes.size();
    std::vector<bool> in(n, false);
    std::vector<int> roots;
    for (int m : members)
      roots.push_back(find(m));
    std::sort(roots.begin(), roots.end());
    roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
    if (roots.size() == 1)
      return;
    size_t count = 0;
    for (size_t i = 0; i < n; ++i)
      if (std::binary_search(roots.begin(), roots.end(), find(static_cast<int>(i)))) {
        in[i] = true;
        ++count;
      }
    if (count > kMaxGroupNodes || !validGroup(in))
      return;
    for (int r : roots)
      parent_[r] = roots[0];
  }

  bool validGroup(const std::vector<bool> &in) {
    const auto &nodes = dg_->nodes;
    int anchor = -1, outputs = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!in[i])
        continue;
      if (!isInlinable(*nodes[i]) && !core_[i]) {
        if (anchor >= 0 || !anchorCaps(*nodes[i]).anchor)
          return false;
        anchor = static_cast<int>(i);
      }
      bool external = dg_->toSink[i];
      for (int u : dg_->users[i])
        external |= !in[u];
      outputs += external;
    }
    if (outputs != 1)
      return false;
    if (anchor < 0)
      return true;
    AnchorCaps caps = anchorCaps(*nodes[anchor]);
    // Descendants of the anchor inside the group (its epilogue, the anchor included)
    // and its ancestors (its prologue).
    auto reachable = [&](const std::vector<std::vector<int>> &edges) {
      std::vector<bool> seen(nodes.size(), false);
      std::vector<int> work = {anchor};
      while (!work.empty()) {
        int v = work.back();
        work.pop_back();
        for (int u : edges[v])
          if (in[u] && !seen[u]) {
            seen[u] = true;
            work.push_back(u);
          }
      }
      return seen;
    };
    std::vector<bool> desc = reachable(dg_->users), anc = reachable(dg_->producers);
    desc[anchor] = true;
    // A producer in the group feeds the anchor through an operand that takes a prologue.
    for (unsigned k = 0; k < nodes[anchor]->numOperands(); ++k)
      if (const Value *v = nodes[anchor]->operand(k); v && v->definingNode())
        if (auto it = dg_->index.find(v->definingNode());
            it != dg_->index.end() && in[it->second] &&
            (k >= 32 || !(caps.prologueOperands >> k & 1u)))
          return false;
    const Value *anchorOut = nodes[anchor]->result();
    bool reindexed = false, chain = true;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!in[i] || static_cast<int>(i) == anchor || core_[i])
        continue;
      if (anc[i] && !caps.prologue)
        return false;
      if (desc[i] && !(caps.epilogue && epilogueNode(*nodes[i], anchorOut, desc)))
        return false;
      if (desc[i]) {
        reindexed |= nodes[i]->kind() == OpKind::Transpose;
        int fromAnchor = 0;
        for (int p : dg_->producers[i])
          fromAnchor += desc[p];
        chain &= fromAnchor == 1;
      }
    }
    // A transposed epilogue maps each anchor element to one output element; that
    // needs a single path from the anchor to the output.
    if (reindexed && !chain)
      return false;
    // A library GEMM takes only the epilogue cuBLASLt applies itself; anything else
    // would cost a kernel of its own, so it is better left to the consumers.
    const Node &a = *nodes[anchor];
    if (a.kind() == OpKind::MatMul && !a.hasAttr(kPatternAttr)) {
      std::vector<const Node *> epi;
      for (size_t i = 0; i < nodes.size(); ++i)
        if (in[i] && static_cast<int>(i) != anchor) {
          if (!desc[i])
            return false;
          epi.push_back(nodes[i]);
        }
      auto inGroup = [&](const Value *v) {
        auto it = v->definingNode() ? dg_->index.find(v->definingNode()) : dg_->index.end();
        return it != dg_->index.end() && in[it->second];
      };
      return matchGemmEpilogue(a, epi, inGroup).has_value();
    }
    return true;
  }

  /// An epilogue node keeps the anchor's linear index: the operands that depend on
  /// the anchor have the node's shape (or the node only reinterprets the shape).
  bool epilogueNode(const Node &n, const Value *anchorOut, const std::vector<bool> &desc) {
    if (n.numResults() != 1 && n.kind() != OpKind::BatchNormalization)
      return false;
    const Value *out = n.result();
    if (out->type().numElements() != anchorOut->type().numElements())
      return false;
    if (isMetadataOnly(n) || n.kind() == OpKind::Transpose)
      return true;
    if (!n.def().cudaExpr && n.kind() != OpKind::BatchNormalization)
      return false;
    for (const Value *v : n.operands()) {
      if (!v || !v->definingNode())
        continue;
      auto it = dg_->index.find(v->definingNode());
      if (it != dg_->index.end() && desc[it->second] && v->shape() != out->shape())
        return false;
    }
    if (n.kind() == OpKind::BatchNormalization)
      for (unsigned k = 1; k < 5; ++k)
        if (n.operand(k) && n.operand(k)->definingNode() &&
            desc[dg_->index.at(n.operand(k)->definingNode())])
          return false;
    return true;
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
  std::vector<bool> core_; // inner nodes of a fused attention
};

} // namespace

std::unique_ptr<Pass> createFusion() {
  return std::make_unique<Fusion>();
}

} // namespace dlc::passes
