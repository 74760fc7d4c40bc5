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
  case OpKind::LayerNormalization: return {onlyFirstResultUsed(n), onlyFirstResultUsed(n), onlyFirstResultUsed(n)};
  case OpKind::MatMul: return {floatingPoint(n.result()->dtype()), false, floatingPoint(n.result()->dtype())};
  case OpKind::Conv: return {true, false, true};
  case OpKind::MaxPool: return {onlyFirstResultUsed(n), true, onlyFirstResultUsed(n)};
  case OpKind::AveragePool:
  case OpKind::GlobalAveragePool:
  case OpKind::GlobalMaxPool: return {true, true, true};
  default: return {};
  }
}

} // namespace dlc::ir
