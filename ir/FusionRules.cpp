//===- FusionRules.cpp - Inlinable nodes and anchors ------------------------===//
#include "dlc/ir/FusionRules.h"

namespace dlc::ir {

namespace {
bool floatingPoint(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64; }

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
  case OpKind::Unsqueeze: return true;
  default: return false;
  }
}

bool isInlinable(const Node &n) {
  if (n.numResults() != 1)
    return n.kind() == OpKind::BatchNormalization && n.attrInt("training_mode") == 0 && onlyFirstResultUsed(n);
  if (isMetadataOnly(n))
    return true;
  switch (n.kind()) {
  case OpKind::Transpose:
  case OpKind::Expand:
  case OpKind::Slice:
  case OpKind::Gather:
  case OpKind::Tile:
  case OpKind::Concat: return true;
  case OpKind::BatchNormalization: return n.attrInt("training_mode") == 0;
  default: break;
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
  case OpKind::LogSoftmax: return {true, true, true};
  case OpKind::LayerNormalization:
    return {onlyFirstResultUsed(n), onlyFirstResultUsed(n), onlyFirstResultUsed(n), 1u};
  case OpKind::MatMul:
    if (n.hasAttr(kPatternAttr)) // fused attention: loads and stores are both fusable
      return {true, true, true};
    return {floatingPoint(n.result()->dtype()), false, floatingPoint(n.result()->dtype())};
  case OpKind::Conv: return {true, false, true};
  case OpKind::MaxPool: return {onlyFirstResultUsed(n), true, onlyFirstResultUsed(n)};
  case OpKind::AveragePool:
  case OpKind::GlobalAveragePool:
  case OpKind::GlobalMaxPool: return {true, true, true};
  default: return {};
  }
}

std::optional<GemmEpilogueMatch> matchGemmEpilogue(const Node &mm, const std::vector<const Node *> &epilogue,
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
      if (other->rank() >= 1 && other->shape().back() == n && other->type().numElements() == n && !e.bias)
        e.bias = other;
      else if (other->shape() == cur->shape() && !e.residual)
        e.residual = other;
      else
        return std::nullopt;
    } else if (node->kind() == OpKind::Relu && node->operand(0) == cur) {
      e.activation = GemmEpilogueMatch::Relu;
    } else if (node->kind() == OpKind::Gelu && node->operand(0) == cur && node->attrString("approximate") == "tanh") {
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
  if (hd > kMaxAttentionHeadSize || hdv > kMaxAttentionHeadSize || v->shape()[rank - 2] != s[rank - 1])
    return {};
  std::vector<Node *> core = {mm1};
  core.insert(core.end(), chain.rbegin(), chain.rend());
  core.push_back(softmax);
  return core;
}

} // namespace dlc::ir
