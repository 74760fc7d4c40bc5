//===- FusionRules.h - Which nodes a fused kernel can contain ---*- C++ -*-===//
//
// The fusion pass (passes/Fusion.cpp) groups nodes into kernels and the code
// generator (codegen/Fused.cpp) emits one kernel per group; both decide what may be
// fused through these functions, so they cannot disagree.
//
// A group has at most one *anchor* (a reduction, normalization, GEMM, convolution
// or pooling: a node with its own kernel template) and any number of *inlinable*
// nodes (element-wise, broadcast, metadata and index-mapping nodes, which a kernel
// evaluates at any index it needs). Inlinable nodes upstream of the anchor form its
// prologue (evaluated where the anchor loads its input); nodes downstream form its
// epilogue (applied where the anchor stores its output).
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/ir/Graph.h"

#include <functional>
#include <optional>

namespace dlc::ir {

/// Annotations the fusion pass leaves on nodes (the verifier accepts "dlc.*"
/// attributes on every op).
inline constexpr const char *kKernelAttr = "dlc.kernel";   // group id (int)
inline constexpr const char *kPatternAttr = "dlc.pattern"; // on an anchor: "attention"
inline constexpr const char *kLaneAttr = "dlc.lane";       // update lane id (int), see updateLanes

/// Metadata-only: the result holds the operand's bytes unchanged.
bool isMetadataOnly(const Node &n);
/// A fused kernel can compute this node's single result at any index.
bool isInlinable(const Node &n);

struct AnchorCaps {
  bool anchor = false;   // has a kernel template that accepts fused neighbours
  bool prologue = false; // its input loads can be inlined producers
  bool epilogue = false; // its stores can run element-wise consumers
  /// The operands whose loads take a prologue (bit k: operand k); the others must
  /// come from memory (LayerNormalization reads its scale and bias directly).
  uint32_t prologueOperands = ~0u;
};
AnchorCaps anchorCaps(const Node &n);

/// The attention pattern: MatMul(Softmax(f(MatMul(Q, K'))), V) with f element-wise
/// (scale, mask). If `mm2` is its second MatMul, returns the nodes from the first
/// MatMul to the Softmax (in order), else an empty list. The code generator emits
/// the whole pattern as one kernel (online softmax, no score matrix in memory).
std::vector<Node *> attentionCore(const Node &mm2);
/// A GEMM epilogue in the form cuBLASLt applies itself:
/// D = act(A*B + residual + bias), bias over the last dim, act ReLU or tanh-GELU.
struct GemmEpilogueMatch {
  const Value *bias = nullptr, *residual = nullptr;
  enum Activation { None, Relu, GeluTanh } activation = None;
};
/// Matches the nodes after a MatMul (in order, each consuming the previous result)
/// against that form; `inGroup` tells which values the group computes itself (a
/// bias or residual must come from memory).
std::optional<GemmEpilogueMatch>
matchGemmEpilogue(const Node &matmul, const std::vector<const Node *> &epilogue,
                  const std::function<bool(const Value *)> &inGroup);

/// A variable update computed element by element over the variable's shape (an
/// optimizer step, a running statistic): element-wise nodes whose results feed only
/// the lane itself and the graph's updates. The code generator computes all lanes
/// of one structure in a single multi-tensor launch at the end of the step that
/// writes the variables in place, instead of a kernel and a commit copy per update.
struct UpdateLane {
  std::vector<Node *> nodes; // graph order; every result has the lane's shape
  std::vector<const GraphOutput *> updates;
};
/// The lanes of `g`, excluding any that would be unsafe in place: a lane writing a
/// variable that another lane reads, or reading its own variable through a view.
/// Lane operands from outside are values of the lane's shape or single elements.
std::vector<UpdateLane> updateLanes(const Graph &g);

/// A node that passes operand 1 or operand 2 through by a single-element run-time
/// condition (operand 0): Where from an ONNX If with a run-time condition. Only the
/// selected operand's producers need to run; the code generator predicates their
/// steps on the condition.
bool selectsByRuntimeCondition(const Node &n);

/// Largest head size the fused attention kernel handles.
inline constexpr int64_t kMaxAttentionHeadSize = 128;

/// Ops the code generator can fold into one kernel: at most this many nodes.
inline constexpr size_t kMaxGroupNodes = 64;

} // namespace dlc::ir
