//===- FusionRules.cpp - Inlinable nodes and anchors ------------------------===//
#include "dlc/ir/FusionRules.h"

#include <map>
#include <set>

namespace dlc::ir {

namespace {
bool floatingPoint(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
}

/// Only the first result is used (ops with optional extra results).
bool onlyFirstResultUsed(const Node &n) {
  for (unsigned i = 1; i < n.numResults(); ++i)
    if (n.result(i)->hasUses() || n.graph()->isOutput(n.result(i)))
      return false;
  return true;
}
} // namespace

bool isMetadataOnly(const Node &n) {
  switch (n.kind()) {
  case OpKind::Identity:
  case OpKind::Reshape:
  case OpKind::Flatten:
  case OpKind::Squeeze:
  case OpKind::Unsqueeze:
    return true;
  default:
    return false;
  }
}

bool isInlinable(const Node &n) {
  if (n.numResults() != 1)
    return n.kind() == OpKind::BatchNormalization && n.attrInt("training_mode") == 0 &&
           onlyFirstResultUsed(n);
  if (isMetadataOnly(n))
    return true;
  switch (n.kind()) {
  case OpKind::Transpose:
  case OpKind::Expand:
  case OpKind::Slice:
  case OpKind::Gather:
  case OpKind::Tile:
  case OpKind::Concat:
    return true;
  case OpKind::BatchNormalization:
    return n.attrInt("training_mode") == 0;
  default:
    break;
  }
  FusionKind k = n.def().fusion;
  return n.def().cudaExpr && (k == FusionKind::ElemWise || k == FusionKind::Broadcast);
}

AnchorCaps anchorCaps(const Node &n) {
  switch (n.kind()) {
  case OpKind::ReduceSum:
  case OpKind::ReduceMean:
  case OpKind::ReduceMax:
  case OpKind::ReduceMin:
  case OpKind::ReduceProd:
  case OpKind::Softmax:
  case OpKind::LogSoftmax:
    return {true, true, true};
  case OpKind::LayerNormalization:
    return {onlyFirstResultUsed(n), onlyFirstResultUsed(n), onlyFirstResultUsed(n), 1u};
  case OpKind::MatMul:
    if (n.hasAttr(kPatternAttr)) // fused attention: loads and stores are both fusable
      return {true, true, true};
    return {floatingPoint(n.result()->dtype()), false, floatingPoint(n.result()->dtype())};
  case OpKind::Conv:
    return {true, false, true};
  case OpKind::MaxPool:
    return {onlyFirstResultUsed(n), true, onlyFirstResultUsed(n)};
  case OpKind::AveragePool:
  case OpKind::GlobalAveragePool:
  case OpKind::GlobalMaxPool:
    return {true, true, true};
  default:
    return {};
  }
}

std::optional<GemmEpilogueMatch>
matchGemmEpilogue(const Node &mm, const std::vector<const Node *> &epilogue,
                  const std::function<bool(const Value *)> &inGroup) {
  const Value *cur = mm.result();
  DType dt = cur->dtype();
  if (!floatingPoint(dt) || cur->rank() < 1) // cuBLASLt: bias in D's type, FP32 epilogue math
    return std::nullopt;
  int64_t n = cur->shape().back();
  GemmEpilogueMatch e;
  for (const Node *node : epilogue) {
    if (e.activation != GemmEpilogueMatch::None)
      return std::nullopt; // nothing may follow the activation
    if (node->kind() == OpKind::Add) {
      const Value *other = node->operand(0) == cur   ? node->operand(1)
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
    } else if (node->kind() == OpKind::Relu && node->operand(0) == cur) {
      e.activation = GemmEpilogueMatch::Relu;
    } else if (node->kind() == OpKind::Gelu && node->operand(0) == cur &&
               node->attrString("approximate") == "tanh") {
      e.activation = GemmEpilogueMatch::GeluTanh;
    } else {
      return std::nullopt;
    }
    cur = node->result();
  }
  return e;
}

std::vector<Node *> attentionCore(const Node &mm2) {
  auto singleUse = [](const Value *v) {
    return v->uses().size() == 1 && !v->graph()->isOutput(v) && v->definingNode();
  };
  // Any float storage: the kernel computes in FP32 (its loads convert).
  const DType dt = mm2.result()->dtype();
  if (mm2.kind() != OpKind::MatMul || (dt != DType::F32 && dt != DType::F16 && dt != DType::BF16))
    return {};
  const Value *p = mm2.operand(0), *v = mm2.operand(1);
  if (!singleUse(p) || p->definingNode()->kind() != OpKind::Softmax)
    return {};
  Node *softmax = p->definingNode();
  int64_t rank = p->rank(), axis = softmax->attrInt("axis");
  if (rank < 3 || (axis != -1 && axis != rank - 1))
    return {};
  // Walk back through the element-wise chain (scale, mask) to the first MatMul.
  std::vector<Node *> chain;
  const Value *cur = softmax->operand(0);
  while (singleUse(cur) && cur->definingNode()->kind() != OpKind::MatMul) {
    Node *n = cur->definingNode();
    if (!isInlinable(*n) || isMetadataOnly(*n) || !n->def().cudaExpr || cur->shape() != p->shape())
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
  if (!singleUse(cur) || cur->definingNode()->kind() != OpKind::MatMul)
    return {};
  Node *mm1 = cur->definingNode();
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

bool selectsByRuntimeCondition(const Node &n) {
  const Value *c = n.numOperands() == 3 ? n.operand(0) : nullptr;
  return n.kind() == OpKind::Where && c && c->dtype() == DType::Bool &&
         c->type().numElements() == 1 && !c->isConstant();
}

std::vector<UpdateLane> updateLanes(const Graph &g) {
  auto elementwise = [](const Node &n) {
    return n.numResults() == 1 && n.def().cudaExpr && !isMetadataOnly(n) && isInlinable(n);
  };
  // Candidates: element-wise nodes reached back from each update's value through
  // values of the same shape (single elements stay outside: they are shared).
  std::set<const Node *> in;
  std::vector<const Node *> work;
  auto reach = [&](const Value *v, const Shape &shape) {
    const Node *d = v ? v->definingNode() : nullptr;
    if (d && elementwise(*d) && v->shape() == shape && in.insert(d).second)
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
        while (base->definingNode() && isMetadataOnly(*base->definingNode()))
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
