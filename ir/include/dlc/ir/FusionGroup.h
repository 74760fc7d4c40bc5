//===- FusionGroup.h - A fused kernel as an IR object ----------*- C++ -*-===//
//
// The fusion pass decides which nodes share a kernel and records each decision as a
// FusionGroup in the graph (Graph::fusionGroups). The textual IR prints a group after
// its root node and the parser reads it back, so lit tests can check fusion decisions;
// the verifier checks a group against the fusion rules (FusionRules.h:
// classifyFusionGroup); the code generator lowers a group by its kind and never
// re-derives a decision.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/ir/OpDef.h"

#include <optional>
#include <string_view>
#include <vector>

namespace dlc::ir {

class Node;
class Value;

/// What a fused kernel is.
enum class GroupKind : uint8_t {
  Elementwise,  // inlinable nodes only: one element-wise kernel over the root's elements
  Anchored,     // an anchor's kernel template, its prologue and epilogue inlined
  GemmEpilogue, // a library GEMM that applies the epilogue itself (bias, residual, activation)
  Attention,    // MatMul(Softmax(f(MatMul(Q, K'))), V): one kernel, no score matrix in memory
  UpdateLane,   // a variable update, element by element, written in place when the step ends
};
std::string_view groupKindName(GroupKind k);
std::optional<GroupKind> groupKindFromName(std::string_view name);

struct FusionGroup {
  GroupKind kind = GroupKind::Elementwise;
  /// Every member, in graph order. The last is the root: the only member whose
  /// result is used outside the group (an UpdateLane's results are updates).
  std::vector<Node *> nodes;
  /// Anchored, GemmEpilogue: the anchor; Attention: the second MatMul.
  Node *anchor = nullptr;
  /// Members evaluated where the anchor loads its operands (its ancestors in the group).
  std::vector<Node *> prologue;
  /// Attention: the first MatMul, the score chain and the Softmax, in order.
  std::vector<Node *> core;
  /// Members evaluated where the anchor stores its result (the others).
  std::vector<Node *> epilogue;
  /// GemmEpilogue: D = activation(A * B + residual + bias), bias along the last dim.
  Value *bias = nullptr, *residual = nullptr;
  GemmEpilogueOp activation = GemmEpilogueOp::None;

  Node *root() const { return nodes.back(); }
  bool contains(const Node *n) const;
  /// Whether a member computes `v` (its value lives in registers unless it is the root's).
  bool computes(const Value *v) const;
};

} // namespace dlc::ir
