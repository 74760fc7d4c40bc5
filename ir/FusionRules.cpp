//===- FusionRules.cpp - Fusion groups and multi-node patterns --------------===//
#include "dlc/ir/FusionRules.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <unordered_set>

namespace dlc::ir {

std::string_view groupKindName(GroupKind k) {
  switch (k) {
  case GroupKind::Elementwise:
    return "elementwise";
  case GroupKind::Anchored:
    return "anchored";
  case GroupKind::GemmEpilogue:
    return "gemm_epilogue";
  case GroupKind::Attention:
    return "attention";
  case GroupKind::UpdateLane:
    return "update_lane";
  }
  return "?";
}

std::optional<GroupKind> groupKindFromName(std::string_view name) {
  for (GroupKind k : {GroupKind::Elementwise, GroupKind::Anchored, GroupKind::GemmEpilogue,
                      GroupKind::Attention, GroupKind::UpdateLane})
    if (groupKindName(k) == name)
      return k;
  return std::nullopt;
}

bool FusionGroup::contains(const Node *n) const {
  return std::find(nodes.begin(), nodes.end(), n) != nodes.end();
}

bool FusionGroup::computes(const Value *v) const {
  return v && v->definingNode() && contains(v->definingNode());
}

namespace {

/// A node in messages: its name and op, or (hand-written IR) its first result and op.
std::string ref(const Node &n) {
  return n.name().empty() ? "%" + n.result()->name() + " (" + std::string(n.opName()) + ")"
                          : n.describe();
}

bool elementwise(const Node &n) {
  return n.numResults() == 1 && fusibility(n).role == Fusibility::Role::Elementwise;
}

/// The capabilities of the attention kernel as an anchor: Q, K and V load through
/// prologues (the head split), the output stores through an epilogue (the merge).
Fusibility attentionAnchor() {
  return Fusibility::anchor(/*prologue=*/true, /*epilogue=*/true);
}

} // namespace

std::optional<GemmEpilogueMatch>
matchGemmEpilogue(const Value *gemmOut, const std::vector<const Node *> &epilogue,
                  const std::function<bool(const Value *)> &inGroup) {
  const Value *cur = gemmOut;
  DType dt = cur->dtype();
  if (!isFloat(dt) || cur->rank() < 1) // cuBLASLt: bias in D's type, FP32 epilogue math
    return std::nullopt;
  int64_t n = cur->shape().back();
  GemmEpilogueMatch e;
  for (const Node *node : epilogue) {
    if (e.activation != GemmEpilogueOp::None)
      return std::nullopt; // nothing may follow the activation
    GemmEpilogueOp op =
        node->numResults() == 1 ? fusibility(*node).gemmEpilogue : GemmEpilogueOp::None;
    if (op == GemmEpilogueOp::Add) {
      Value *other = node->operand(0) == cur   ? node->operand(1)
                     : node->operand(1) == cur ? node->operand(0)
                                               : nullptr;
      if (!other || other == cur || inGroup(other) || other->dtype() != dt ||
          node->result()->shape() != cur->shape())
        return std::nullopt;
      if (other->rank() >= 1 && other->shape().back() == n && other->type().numElements() == n &&
          !e.bias)
        e.bias = other;
      else if (other->shape() == cur->shape() && !e.residual)
        e.residual = other;
      else
        return std::nullopt;
    } else if (op != GemmEpilogueOp::None && node->operand(0) == cur) {
      e.activation = op;
    } else {
      return std::nullopt;
    }
    cur = node->result();
  }
  return e;
}

std::vector<Node *> attentionCore(const Node &mm2, const Value *probs) {
  auto singleUse = [](const Value *v) {
    return v->uses().size() == 1 && !v->graph()->isOutput(v) && v->definingNode();
  };
  // Any float storage: the kernel computes in FP32 (its loads convert).
  const DType dt = mm2.result()->dtype();
  if (!definedBy(mm2.result(), OpKind::MatMul) ||
      (dt != DType::F32 && dt != DType::F16 && dt != DType::BF16))
    return {};
  const Value *p = probs ? probs : mm2.operand(0), *v = mm2.operand(1);
  Node *softmax = singleUse(p) ? definedBy(p, OpKind::Softmax) : nullptr;
  if (!softmax)
    return {};
  int64_t rank = p->rank(), axis = softmax->attrInt("axis");
  if (rank < 3 || (axis != -1 && axis != rank - 1))
    return {};
  // Walk back through the element-wise chain (scale, mask) to the first MatMul.
  std::vector<Node *> chain;
  const Value *cur = softmax->operand(0);
  while (singleUse(cur) && !definedBy(cur, OpKind::MatMul)) {
    Node *n = cur->definingNode();
    if (!elementwise(*n) || fusibility(*n).operandAccess || cur->shape() != p->shape())
      return {};
    const Value *next = nullptr;
    for (const Value *op : n->operands())
      if (op && op->shape() == p->shape() && op->definingNode() && !next)
        next = op;
    if (!next)
      return {};
    chain.push_back(n);
    cur = next;
  }
  Node *mm1 = singleUse(cur) ? definedBy(cur, OpKind::MatMul) : nullptr;
  if (!mm1)
    return {};
  const Value *q = mm1->operand(0), *k = mm1->operand(1);
  const Shape &s = cur->shape();
  if (s != p->shape() || q->rank() != rank || k->rank() != rank || v->rank() != rank ||
      q->dtype() != dt || k->dtype() != dt || v->dtype() != dt)
    return {};
  for (int64_t d = 0; d < rank - 2; ++d)
    if (q->shape()[d] != s[d] || k->shape()[d] != s[d] || v->shape()[d] != s[d])
      return {};
  int64_t hd = q->shape()[rank - 1], hdv = v->shape()[rank - 1];
  if (hd > kMaxAttentionHeadSize || hdv > kMaxAttentionHeadSize ||
      v->shape()[rank - 2] != s[rank - 1])
    return {};
  std::vector<Node *> core = {mm1};
  core.insert(core.end(), chain.rbegin(), chain.rend());
  core.push_back(softmax);
  return core;
}

AttentionMask attentionCausalMask(const std::vector<Node *> &core, int64_t Sq, int64_t Sk) {
  AttentionMask none;
  none.reach = Sk;
  // A mask: its constant, where (i, j) is in it (strides), and what marks a masked cell.
  struct Mask {
    const Node *node;
    const Value *c;
    int64_t si, sj;
    const Value *fill; // Where: the -inf scalar (masked where cond == whenTrue)
    bool whenTrue;
    bool onlyMasks; // an Add whose unmasked values are all 0 (set below), or a Where
  };
  std::vector<Mask> masks;
  bool finiteMask = false, skippedBias = false;
  auto isMaskValue = [&](double v) {
    if (std::isinf(v) && v < 0)
      return true;
    // FP32, FP16 and BF16's lowest finite values.
    if (v == -3.4028234663852886e38 || v == -65504.0 || v == -3.3895313892515355e38) {
      finiteMask = true;
      return true;
    }
    return false;
  };
  for (size_t k = 1; k + 1 < core.size(); ++k) {
    const Node &n = *core[k];
    const OpKind op = n.kind();
    if (op == OpKind::Cast)
      continue;
    if (op == OpKind::Mul || op == OpKind::Div) { // by a positive scalar constant
      const Value *c = n.operand(1);
      if (op == OpKind::Mul && !(c->isConstant() && c->type().numElements() == 1))
        c = n.operand(0);
      if (!c->isConstant() || c->type().numElements() != 1 ||
          !(loadElement<double>(c->dtype(), c->data().raw(), 0) > 0))
        return none;
      continue;
    }
    Mask m{&n, nullptr, 0, 0, nullptr, true, true};
    if (op == OpKind::Add) {
      for (const Value *v : n.operands())
        if (v && v->isConstant())
          m.c = v;
      if (!m.c) { // a bias computed at run time: it cannot unmask a -inf score
        skippedBias = true;
        continue;
      }
    } else if (op == OpKind::Where) {
      m.c = n.operand(0);
      for (int b = 1; b <= 2; ++b)
        if (n.operand(b)->isConstant() && n.operand(b)->type().numElements() == 1) {
          m.fill = n.operand(b);
          m.whenTrue = b == 1;
        }
      if (!m.fill || !isMaskValue(loadElement<double>(m.fill->dtype(), m.fill->data().raw(), 0)))
        return none;
    }
    if (!m.c || !m.c->isConstant())
      return none;
    // Broadcast from its last two dims, every other dim 1 (an added constant that
    // varies over the batch or heads is a bias, as one computed at run time).
    const Shape &cs = m.c->shape();
    bool perBatch = false;
    for (size_t d = 0; d + 2 < cs.size(); ++d)
      perBatch |= cs[d] != 1;
    if (perBatch && op == OpKind::Add) {
      skippedBias = true;
      continue;
    }
    if (perBatch)
      return none;
    const int64_t r = m.c->rank(), rows = r >= 2 ? cs[r - 2] : 1, cols = r >= 1 ? cs[r - 1] : 1;
    if ((rows != 1 && rows != Sq) || (cols != 1 && cols != Sk))
      return none;
    m.si = rows == 1 ? 0 : cols;
    m.sj = cols == 1 ? 0 : 1;
    masks.push_back(m);
  }
  // (Scanning Sq x Sk cells per mask: skipped for masks beyond 64M cells.)
  if (masks.empty() || Sq * Sk > (int64_t(1) << 26))
    return none;
  std::vector<uint8_t> row(static_cast<size_t>(Sk));
  std::vector<int64_t> last(static_cast<size_t>(Sq));
  int64_t reach = -Sk;
  for (int pass = 0; pass < 2; ++pass) { // the reach, then whether the mask is exact
    bool exact = true;
    for (int64_t i = 0; i < Sq; ++i) {
      std::fill(row.begin(), row.end(), 0);
      for (Mask &m : masks) {
        const void *raw = m.c->data().raw();
        for (int64_t j = 0; j < Sk; ++j) {
          const double v = loadElement<double>(m.c->dtype(), raw, i * m.si + j * m.sj);
          const bool masked = m.fill ? (v != 0) == m.whenTrue : isMaskValue(v);
          row[static_cast<size_t>(j)] |= masked;
          if (!m.fill && !masked && v != 0)
            m.onlyMasks = false; // (a bias as well: its functor must run)
        }
      }
      if (pass == 0) {
        int64_t l = -1;
        for (int64_t j = 0; j < Sk; ++j)
          if (!row[static_cast<size_t>(j)])
            l = j;
        if (l < 0 && finiteMask) // (a row of lowest values averages every key)
          return none;
        reach = std::max(reach, l - i);
      } else {
        for (int64_t j = 0; j < Sk && exact; ++j)
          exact = (row[static_cast<size_t>(j)] != 0) == (j > i + reach);
        if (!exact)
          break;
      }
    }
    // (Lowest finite values mask only where every row keeps a key: a bias the analysis
    // does not see may take those keys away, and the row then averages every key.)
    if (finiteMask && skippedBias)
      return none;
    if (pass == 1) {
      AttentionMask r;
      r.reach = std::min(reach, Sk);
      r.exact = exact && reach < Sk - 1;
      if (r.exact)
        for (const Mask &m : masks)
          if (m.onlyMasks)
            r.nodes.insert(m.node);
      return r;
    }
  }
  return none;
}

std::optional<AttentionChain> attentionChain(const std::vector<Node *> &core,
                                             const std::set<const Node *> &masks,
                                             const std::function<bool(const Value &)> &biasOk) {
  AttentionChain chain;
  double scale = 1;
  const Value *cur = core.front()->result(); // the chain's value so far
  for (size_t k = 1; k + 1 < core.size(); ++k) {
    const Node &n = *core[k];
    Value *other = nullptr; // the operand that is not the chain's value
    for (Value *o : n.operands())
      if (o != cur)
        other = o;
    const bool first = n.numOperands() > 0 && n.operand(0) == cur;
    const bool scalar =
        other && other->isConstant() && other->type().numElements() == 1 && n.numOperands() == 2;
    if (n.kind() == OpKind::Cast || masks.count(&n)) {
      // (a cast; a mask the kernel applies itself)
    } else if ((n.kind() == OpKind::Mul || (n.kind() == OpKind::Div && first)) && scalar &&
               !chain.bias) {
      const double v = loadElement<double>(other->dtype(), other->data().raw(), 0);
      if (!(v > 0) || std::isinf(v))
        return std::nullopt;
      scale = n.kind() == OpKind::Mul ? scale * v : scale / v;
    } else if (n.kind() == OpKind::Add && n.numOperands() == 2 && other && !chain.bias && biasOk &&
               biasOk(*other)) {
      chain.bias = other;
    } else {
      return std::nullopt;
    }
    cur = n.result();
  }
  chain.scale = static_cast<float>(scale);
  if (!(chain.scale > 0) || std::isinf(chain.scale))
    return std::nullopt;
  return chain;
}

std::vector<std::pair<int64_t, int64_t>>
mergeBatchDims(const Shape &sizes, const std::vector<int64_t> &strides, size_t count) {
  std::vector<std::pair<int64_t, int64_t>> groups;
  for (size_t d = 0; d < count; ++d) {
    const int64_t n = sizes[d], st = strides[d];
    if (n == 1)
      continue;
    if (!groups.empty() && groups.back().second == n * st) {
      groups.back().first *= n;
      groups.back().second = st;
    } else {
      groups.push_back({n, st});
    }
  }
  return groups;
}

std::optional<AttentionBiasView> attentionBiasView(const Shape &bias, const Shape &scores) {
  const size_t r = scores.size();
  if (r < 2 || bias.size() > r || bias.empty() || bias.back() != scores.back())
    return std::nullopt;
  Shape b(r - bias.size(), 1);
  b.insert(b.end(), bias.begin(), bias.end());
  std::vector<int64_t> stride(r, 0);
  int64_t run = 1;
  for (size_t d = r; d-- > 0;) {
    if (b[d] != 1 && b[d] != scores[d])
      return std::nullopt;
    stride[d] = b[d] == 1 ? 0 : run;
    run *= b[d];
  }
  const auto groups = mergeBatchDims(scores, stride, r - 2);
  if (groups.size() > 2)
    return std::nullopt;
  AttentionBiasView v;
  v.row = stride[r - 2];
  if (!groups.empty()) {
    v.inner = groups.back().second;
    v.innerCount = groups.back().first;
  }
  if (groups.size() == 2)
    v.outer = groups.front().second;
  return v;
}

bool selectsByRuntimeCondition(const Node &n) {
  const Value *c = n.numOperands() == 3 ? n.operand(0) : nullptr;
  return n.def().selects && c && c->dtype() == DType::Bool && c->type().numElements() == 1 &&
         !c->isConstant();
}

llvm::Expected<FusionGroup> classifyFusionGroup(const std::vector<Node *> &nodes) {
  if (nodes.size() < 2)
    return makeError("a fusion group has at least two nodes");
  if (nodes.size() > kMaxGroupNodes)
    return errorf("a fused kernel holds at most {0} nodes", kMaxGroupNodes);
  const Graph &g = *nodes.front()->graph();
  std::unordered_set<const Node *> in(nodes.begin(), nodes.end());
  auto member = [&](const Value *v) {
    return v && v->definingNode() && in.count(v->definingNode()) != 0;
  };
  FusionGroup fg;
  fg.nodes = nodes;
  // The attention pattern: its second MatMul anchors, with its whole core inside.
  for (Node *n : nodes) {
    std::vector<Node *> core =
        fusibility(*n).inlinable() ? std::vector<Node *>{} : attentionCore(*n);
    if (!core.empty() &&
        std::all_of(core.begin(), core.end(), [&](Node *c) { return in.count(c); })) {
      fg.kind = GroupKind::Attention;
      fg.anchor = n;
      fg.core = std::move(core);
      break;
    }
  }
  std::unordered_set<const Node *> core(fg.core.begin(), fg.core.end());
  for (Node *n : nodes) {
    if (n == fg.anchor || core.count(n))
      continue;
    if (selectsByRuntimeCondition(*n))
      return errorf("{0} selects by a run-time condition and runs alone", ref(*n));
    Fusibility f = fusibility(*n);
    if (f.inlinable())
      continue;
    if (f.role != Fusibility::Role::Anchor)
      return errorf("{0} cannot be fused ({1})", ref(*n), fusionRoleName(f.role));
    if (fg.anchor)
      return errorf("{0} and {1} are both anchors", ref(*fg.anchor), ref(*n));
    fg.anchor = n;
  }
  // One output: the root's result (every other member's users are members).
  for (Node *n : nodes) {
    bool external = false;
    for (unsigned r = 0; r < n->numResults(); ++r) {
      external |= g.isOutput(n->result(r));
      for (const Use &u : n->result(r)->uses())
        external |= !in.count(u.user);
    }
    if (external != (n == nodes.back()))
      return errorf("{0} is used outside the group, which has one output: {1}", ref(*n),
                    ref(*nodes.back()));
  }
  if (!fg.anchor) {
    fg.kind = GroupKind::Elementwise;
    return fg;
  }
  const Fusibility caps =
      fg.kind == GroupKind::Attention ? attentionAnchor() : fusibility(*fg.anchor);
  // The anchor's descendants in the group (its epilogue, the anchor included) and its
  // ancestors (its prologue).
  auto reachable = [&](bool down) {
    std::unordered_set<const Node *> seen;
    std::vector<const Node *> work = {fg.anchor};
    while (!work.empty()) {
      const Node *v = work.back();
      work.pop_back();
      auto visit = [&](const Node *u) {
        if (u && in.count(u) && seen.insert(u).second)
          work.push_back(u);
      };
      if (down)
        for (unsigned r = 0; r < v->numResults(); ++r)
          for (const Use &u : v->result(r)->uses())
            visit(u.user);
      else
        for (const Value *op : v->operands())
          visit(op ? op->definingNode() : nullptr);
    }
    return seen;
  };
  std::unordered_set<const Node *> desc = reachable(true), anc = reachable(false);
  desc.insert(fg.anchor);
  for (unsigned k = 0; k < fg.anchor->numOperands(); ++k)
    if (member(fg.anchor->operand(k)) && (k >= 32 || !(caps.prologueOperands >> k & 1u)))
      return errorf("operand {0} of {1} takes no prologue", k, ref(*fg.anchor));
  const Value *anchorOut = fg.anchor->result();
  bool reindexed = false, chain = true;
  for (Node *n : nodes) {
    if (n == fg.anchor || core.count(n))
      continue;
    if (anc.count(n)) {
      if (!caps.prologue)
        return errorf("{0} takes no prologue", ref(*fg.anchor));
      fg.prologue.push_back(n);
      continue;
    }
    fg.epilogue.push_back(n);
    if (!desc.count(n))
      continue; // a producer of an epilogue operand, inlined where the epilogue runs
    // The epilogue keeps the anchor's element: operands that depend on the anchor
    // are read at the node's own index, or the node permutes whole dims.
    Fusibility f = fusibility(*n);
    bool permutes = f.role == Fusibility::Role::Injective && f.indexMap(*n).isPermutation();
    bool ok = caps.epilogue &&
              n->result()->type().numElements() == anchorOut->type().numElements() &&
              (f.role == Fusibility::Role::Metadata || permutes ||
               f.role == Fusibility::Role::Elementwise);
    std::unordered_set<const Node *> fromAnchor; // producers on a path from the anchor
    for (unsigned k = 0; ok && k < n->numOperands(); ++k)
      if (const Value *v = n->operand(k); v && v->definingNode() && desc.count(v->definingNode())) {
        fromAnchor.insert(v->definingNode());
        ok = f.role != Fusibility::Role::Elementwise || f.readsAtOwnIndex(*n, k);
      }
    if (!ok)
      return errorf("{0} cannot be in the epilogue of {1}", ref(*n), ref(*fg.anchor));
    reindexed |= permutes;
    chain &= fromAnchor.size() == 1;
  }
  // A permuted epilogue maps each anchor element to one output element; that needs a
  // single path from the anchor to the output.
  if (reindexed && !chain)
    return errorf("the permuted epilogue of {0} has more than one path", ref(*fg.anchor));
  if (fg.kind == GroupKind::Attention)
    return fg;
  if (!caps.libraryEpilogue) {
    fg.kind = GroupKind::Anchored;
    return fg;
  }
  // A library GEMM takes only the epilogue the library applies itself; anything else
  // would cost a kernel of its own, so it is better left to the consumers.
  std::vector<const Node *> epi(fg.epilogue.begin(), fg.epilogue.end());
  if (!fg.prologue.empty() ||
      std::any_of(epi.begin(), epi.end(), [&](const Node *n) { return !desc.count(n); }))
    return errorf("{0} is a library call: only its epilogue joins it", ref(*fg.anchor));
  auto m = matchGemmEpilogue(anchorOut, epi, member);
  if (!m)
    return errorf("the epilogue of {0} is not one the GEMM library applies", ref(*fg.anchor));
  fg.kind = GroupKind::GemmEpilogue;
  fg.bias = m->bias;
  fg.residual = m->residual;
  fg.activation = m->activation;
  return fg;
}

std::vector<UpdateLane> updateLanes(const Graph &g) {
  // Candidates: element-wise nodes reached back from each update's value through
  // values of the same shape (single elements stay outside: they are shared).
  std::set<const Node *> in;
  std::vector<const Node *> work;
  auto reach = [&](const Value *v, const Shape &shape) {
    const Node *d = v ? v->definingNode() : nullptr;
    if (d && elementwise(*d) && !fusibility(*d).operandAccess && v->shape() == shape &&
        in.insert(d).second)
      work.push_back(d);
  };
  for (const GraphOutput &o : g.outputs())
    if (o.isUpdate())
      reach(o.value, o.variable->shape());
  while (!work.empty()) {
    const Node *n = work.back();
    work.pop_back();
    for (const Value *op : n->operands())
      reach(op, n->result()->shape());
  }
  // Keep a node only while every use is a node of the same shape kept, or an update.
  for (bool changed = true; changed;) {
    changed = false;
    for (auto it = in.begin(); it != in.end();) {
      const Value *r = (*it)->result();
      bool keep = true;
      for (const Use &u : r->uses())
        keep &= in.count(u.user) && u.user->result()->shape() == r->shape();
      for (const GraphOutput &o : g.outputs())
        keep &= o.value != r || o.isUpdate();
      if (keep) {
        ++it;
      } else {
        it = in.erase(it);
        changed = true;
      }
    }
  }
  // Lanes: the connected parts, in graph order.
  std::map<const Node *, const Node *> parent;
  std::function<const Node *(const Node *)> find = [&](const Node *n) {
    auto it = parent.find(n);
    return it == parent.end() || it->second == n ? n : (it->second = find(it->second));
  };
  for (const Node *n : in)
    for (const Value *op : n->operands())
      if (op && op->definingNode() && in.count(op->definingNode()))
        parent[find(n)] = find(op->definingNode());
  std::map<const Node *, size_t> laneOf;
  std::vector<UpdateLane> lanes;
  for (Node &n : g.nodes())
    if (in.count(&n)) {
      auto [it, fresh] = laneOf.emplace(find(&n), lanes.size());
      if (fresh)
        lanes.emplace_back();
      lanes[it->second].nodes.push_back(&n);
    }
  std::map<const Value *, size_t> writer; // variable -> the lane that writes it
  for (const GraphOutput &o : g.outputs())
    if (o.isUpdate() && o.value->definingNode() && in.count(o.value->definingNode())) {
      size_t k = laneOf.at(find(o.value->definingNode()));
      lanes[k].updates.push_back(&o);
      writer[o.variable] = k;
    }
  // In place, a lane must be the only one touching the variables it writes, and read
  // them at its own index (not through a view).
  std::vector<bool> drop(lanes.size(), false);
  for (size_t k = 0; k < lanes.size(); ++k) {
    drop[k] = drop[k] || lanes[k].updates.empty();
    for (const Node *n : lanes[k].nodes)
      for (const Value *op : n->operands()) {
        if (!op || (op->definingNode() && in.count(op->definingNode())))
          continue;
        const Value *base = op;
        while (base->definingNode() &&
               fusibility(*base->definingNode()).role == Fusibility::Role::Metadata)
          base = base->definingNode()->operand(0);
        auto w = writer.find(base);
        if (w != writer.end() && (w->second != k || op != base))
          drop[w->second] = true;
      }
  }
  std::vector<UpdateLane> kept;
  for (size_t k = 0; k < lanes.size(); ++k)
    if (!drop[k])
      kept.push_back(std::move(lanes[k]));
  return kept;
}

} // namespace dlc::ir
