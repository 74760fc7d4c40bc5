//===- FusionRules.h - Which nodes a fused kernel can contain ---*- C++ -*-===//
//
// What one op can do in a fused kernel is its Fusibility (OpDef.h): opaque, a view,
// element-wise, injective with an index map, or an anchor (a kernel template) with
// its capabilities. This file holds the rules that span several nodes:
//   - classifyFusionGroup: whether a set of nodes can be one kernel, and which kind
//     (FusionGroup.h); the fusion pass asks it before every merge, the verifier checks
//     every recorded group with it;
//   - the patterns: attention, the GEMM epilogue cuBLASLt applies, update lanes, and
//     the Where of an If with a run-time condition.
// A group has at most one anchor and any number of inlinable nodes, which a kernel
// evaluates at any index it needs. Inlinable nodes upstream of the anchor form its
// prologue (evaluated where the anchor loads its input); the others form its epilogue
// (applied where the anchor stores its output).
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/ir/Graph.h"

#include "llvm/Support/Error.h"

#include <functional>
#include <optional>
#include <set>

namespace dlc::ir {

/// Ops the code generator can fold into one kernel: at most this many nodes.
inline constexpr size_t kMaxGroupNodes = 64;
/// Largest head size the fused attention kernel handles.
inline constexpr int64_t kMaxAttentionHeadSize = 256;
/// Largest head size of FlashAttention (training; its backward kernel's registers).
inline constexpr int64_t kFlashAttentionMaxHeadSize = 128;
/// Most (batch, head) pairs of FlashAttention's kernels (their grids' y dimension).
inline constexpr int64_t kMaxAttentionBatchHeads = 65535;

/// The group `nodes` (in graph order, at least two) would form, with its kind,
/// anchor, prologue, epilogue and matched pattern filled in; or an error saying why
/// the nodes cannot share a kernel. Update lanes are not kernel groups (updateLanes).
llvm::Expected<FusionGroup> classifyFusionGroup(const std::vector<Node *> &nodes);

/// The attention pattern: MatMul(Softmax(f(MatMul(Q, K'))), V) with f element-wise
/// (scale, mask). If `mm2` is its second MatMul, returns the nodes from the first
/// MatMul to the Softmax (in order), else an empty list. `probs`: the Softmax's result
/// where it reaches mm2 through another node (training's Dropout), else mm2's operand.
std::vector<Node *> attentionCore(const Node &mm2, const Value *probs = nullptr);

/// The causal mask in an attention core's score chain (attentionCore's nodes, scores
/// [..., Sq, Sk]): `reach` is the largest key - query that some row leaves unmasked,
/// where the chain only scales by positive constants, casts, and masks with constants
/// that do not depend on the (batch, head): Add of a [Sq, Sk] (broadcast) constant
/// holding -inf, or Where selecting a -inf scalar by a constant condition. Lowest
/// finite values (finfo.min, as some exporters write) count as masks when every row
/// keeps a key (their exp underflows to exactly 0 beside it); an Add of a value computed
/// at run time, or of a constant that varies over the batch dims, is a bias, not a mask
/// (it cannot unmask a -inf). Sk where the chain is
/// not that or masks nothing past the diagonal. `exact`: the masks are exactly "key >
/// query + reach"; `nodes`: then the masking nodes that do nothing else (an Add whose
/// other values are all 0, a Where), which a kernel may apply itself.
struct AttentionMask {
  int64_t reach = 0;
  bool exact = false;
  std::set<const Node *> nodes;
};
AttentionMask attentionCausalMask(const std::vector<Node *> &core, int64_t Sq, int64_t Sk);
/// A score chain (attentionCore's nodes from the scores to the Softmax) read as
/// Mul/Div of the chain's value by positive scalar constants, then at most one Add of
/// a value `biasOk` accepts (none without it), Casts and the `masks` nodes (applied by
/// the kernel) aside: the product of the scales (1 for an empty chain) and the bias;
/// none for any other chain.
struct AttentionChain {
  float scale = 1;
  Value *bias = nullptr;
};
std::optional<AttentionChain> attentionChain(const std::vector<Node *> &core,
                                             const std::set<const Node *> &masks,
                                             const std::function<bool(const Value &)> &biasOk = {});
/// The first `count` dims of a strided view (sizes and element strides) as (size,
/// stride) groups: size-1 dims dropped, neighbours merged where the outer stride is
/// the inner one times its size. Attention's batch dims, read as at most two groups.
std::vector<std::pair<int64_t, int64_t>>
mergeBatchDims(const Shape &sizes, const std::vector<int64_t> &strides, size_t count);
/// An additive attention bias of shape `bias`, broadcast to the scores' shape
/// [batch..., Sq, Sk], as a view of its contiguous values: element (bh, q, k) at
/// (bh / innerCount) outer + (bh % innerCount) inner + q row + k. None where its last
/// dim is not Sk, it does not broadcast, or its batch dims do not merge into at most
/// two strided groups.
struct AttentionBiasView {
  int64_t outer = 0, inner = 0, innerCount = 1, row = 0;
};
std::optional<AttentionBiasView> attentionBiasView(const Shape &bias, const Shape &scores);

/// A GEMM epilogue in the form cuBLASLt applies itself:
/// D = act(A*B + residual + bias), bias over the last dim, act ReLU or tanh-GELU.
struct GemmEpilogueMatch {
  Value *bias = nullptr, *residual = nullptr;
  GemmEpilogueOp activation = GemmEpilogueOp::None;
};
/// Matches the nodes after a GEMM's result `gemmOut` (in order, each consuming the
/// previous result) against that form, from the ops' Fusibility::gemmEpilogue;
/// `inGroup` tells which values the group computes itself (a bias or residual must
/// come from memory).
std::optional<GemmEpilogueMatch>
matchGemmEpilogue(const Value *gemmOut, const std::vector<const Node *> &epilogue,
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
/// condition (operand 0; OpDef::selects): the Where of an ONNX If with a run-time
/// condition. Only the selected operand's producers need to run; the code generator
/// predicates their steps on the condition, so such a node joins no group.
bool selectsByRuntimeCondition(const Node &n);

} // namespace dlc::ir
