//===- Fused.h - Fused element-wise code as functors ------------*- C++ -*-===//
//
// A FusionGroup is a run of nodes the fusion pass marked with one "dlc.kernel" id
// (see include/dlc/ir/FusionRules.h). Its only materialized value is the root's
// result (the last node); every other value lives in registers.
//
// FusedAccess writes the code of the generated functors that library kernels call:
// load(v, i) emits the statements that compute value v at linear index i (loading it
// if it comes from outside the group, else inlining its producer: element-wise
// expressions, broadcasts, transposes, slices, gathers, concatenations, metadata
// ops), and store(anchorOut, i, x) runs the group's epilogue on the anchor's value x
// and writes the group's output. Every extent, stride and offset is a field of the
// functor's Params (never a literal), so the code depends only on the structure of
// the group and one functor serves every layer with that structure. The code is
// written against `P` (the Params) and the index type `I`.
//===----------------------------------------------------------------------===//
#pragma once

#include "Library.h"
#include "Lowering.h"

#include <map>
#include <set>

namespace dlc::codegen {

struct FusionGroup {
  std::vector<const ir::Node *> nodes;
  const ir::Node *anchor = nullptr;
  const ir::Node *root = nullptr;
  std::set<const ir::Value *> produced;
  bool internal(const ir::Value *v) const { return v != root->result() && produced.count(v); }
  bool contains(const ir::Value *v) const { return produced.count(v) != 0; }
};

class FusedAccess {
public:
  /// `group` may be null (a node lowered alone); loads and stores use `params`.
  FusedAccess(Lowering &l, ParamList &params, const FusionGroup *group);

  /// Value v (in its compute type) at linear index `idx` of v's shape.
  std::string load(CodeStream &b, const ir::Value *v, const std::string &idx);
  /// Value v at `idx` where `bound` (an in-group value v depends on) is `boundExpr`
  /// at the corresponding index (the attention scores chain).
  std::string loadBound(CodeStream &b, const ir::Value *v, const std::string &idx,
                        const ir::Value *bound, const std::string &boundExpr);
  /// Writes the anchor's result `value` at linear index `idx` through the epilogue.
  void store(CodeStream &b, const ir::Value *anchorOut, const std::string &idx,
             const std::string &value);
  /// The value store() writes (the group's root result, or anchorOut alone).
  const ir::Value *stored(const ir::Value *anchorOut) const;
  /// Several values at one index, computed together (shared subexpressions once).
  std::vector<std::string> loadAll(CodeStream &b, const std::vector<const ir::Value *> &vs,
                                   const std::string &idx);
  /// Per-lane override for vectorized kernels: external value -> expression.
  void setExternalOverride(std::map<const ir::Value *, std::string> o) { override_ = std::move(o); }
  /// The pointer field of an external value (added on first use).
  std::string pointer(const ir::Value *v);
  std::string outputPointer(const ir::Value *v);
  /// The pointer of a value updated in place: read, then written at the same index.
  /// Call it before any load of `v`, so that loads use this (non-const) field too.
  std::string inOutPointer(const ir::Value *v);
  /// The check word pointer of a node that checks indices (added on first use).
  std::string checkPointer(const ir::Node &n);

private:
  using Memo = std::map<std::pair<const ir::Value *, std::string>, std::string>;
  std::string valueAt(CodeStream &b, const ir::Value *v, const std::string &idx, Memo &memo);
  /// valueAt with `bound` replaced by `boundExpr` where it is read at `boundIdx`.
  std::string valueWithBound(CodeStream &b, const ir::Value *v, const std::string &idx,
                             const ir::Value *bound, const std::string &boundIdx,
                             const std::string &boundExpr);
  std::string fresh(const char *prefix);
  /// Declares the coordinates of linear index `idx` in shape s; returns their prefix.
  std::string coords(CodeStream &b, const ir::Shape &s, const std::string &idx);
  /// sum_d coord_d * strides[d] over the coordinates `prefix` (zero strides dropped).
  std::string dot(const std::vector<int64_t> &strides, const std::string &prefix);
  /// The linear index into `in`, broadcast (numpy-style) to shape `out`.
  std::string broadcastIndex(const ir::Shape &out, const ir::Shape &in, const std::string &prefix);
  /// An integer as a Params field.
  std::string num(int64_t v) { return params_.i64(v); }
  /// The root's linear index for the anchor element at `idx` (epilogue transposes).
  std::string forwardIndex(CodeStream &b, const ir::Value *from, const std::string &idx);

  Lowering &l_;
  ParamList &params_;
  const FusionGroup *g_;
  std::map<const ir::Value *, std::string> ptrs_, override_;
  std::map<const ir::Node *, std::string> checks_;
  const ir::Value *bound_ = nullptr;
  std::string boundIdx_, boundExpr_;
  int counter_ = 0;
};

/// X::load(P, i): the value of `v` at its linear index i, with the group's producers
/// inlined (the anchor's prologue).
Functor loadFunctor(Lowering &l, const FusionGroup *g, const ir::Value *v);
/// Out::store(P, i, x): the group's epilogue applied to the anchor's result x at
/// index i, and the store of the group's output.
Functor storeFunctor(Lowering &l, const FusionGroup *g, const ir::Value *anchorOut);
/// Sc::apply(P, i, x): `v` at index i where `bound` is x (attention's score chain).
Functor boundFunctor(Lowering &l, const FusionGroup *g, const ir::Value *v, const ir::Value *bound);
/// A functor that loads or stores plain memory (no fusion), for library kernels
/// whose operands are not fused.
Functor plainLoad(Lowering &l, const ir::Value *v);
Functor plainStore(Lowering &l, const ir::Value *v);

/// Lowers a group with no anchor (or whose anchor already materialized its result,
/// like a GEMM): the elementwise template over the root's elements, with a functor
/// computing one element (float4 when every node is element-wise over the same f32
/// index space and every buffer is 16-byte aligned).
llvm::Error lowerInlineGroup(Lowering &l, const FusionGroup &g);
/// One inlinable node alone, as a one-node group.
llvm::Error lowerInlineNode(Lowering &l, const ir::Node &n);
/// The graph's update lanes (ir::updateLanes, marked by the fusion pass) as
/// multi-tensor kernels: lanes with the same generated code share launches (as many
/// as fit a launch's parameters), each block working on a chunk of one lane's
/// elements, and write their variables in place. Returns the number of launches.
llvm::Expected<size_t> lowerUpdateLanes(Lowering &l,
                                        const std::vector<std::vector<const ir::Node *>> &lanes);
/// The fused attention kernel (emitters/Attention.cpp); `mm2` is the anchor.
llvm::Error lowerAttention(Lowering &l, const ir::Node &mm2);

} // namespace dlc::codegen
