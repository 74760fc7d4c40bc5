//===- Fused.h - Fused element-wise code as functors ------------*- C++ -*-===//
//
// A fusion group (ir::FusionGroup, recorded by the fusion pass) is a contiguous run
// of nodes lowered as one kernel. Its only materialized value is the root's result
// (the last node); every other value lives in registers.
//
// FusedAccess writes the code of the generated functors that library kernels call:
// load(v, i) emits the statements that compute value v at linear index i (loading it
// if it comes from outside the group, else inlining its producer from the op table:
// an element-wise op's expression template, an injective op's index map, a view),
// and store(anchorOut, i, x) runs the group's epilogue on the anchor's value x and
// writes the group's output. Every extent, stride and offset is a field of the
// functor's Params (never a literal), so the code depends only on the structure of
// the group and one functor serves every layer with that structure. The code is
// written against `P` (the Params) and the index type `I`. A node that cannot be
// inlined is an error naming it (the verifier rules it out of recorded groups).
//===----------------------------------------------------------------------===//
#pragma once

#include "Library.h"
#include "Lowering.h"

#include <map>
#include <set>
#include <utility>

namespace dlc::codegen {

class FusedAccess {
public:
  /// `group` may be null (a node lowered alone); loads and stores use `params`.
  FusedAccess(Lowering &l, ParamList &params, const ir::FusionGroup *group);

  /// Value v (in its compute type) at linear index `idx` of v's shape.
  std::string load(CodeStream &b, const ir::Value *v, const std::string &idx);
  /// Value v at `idx` where `bound` (an in-group value v depends on) is `boundExpr`
  /// at the corresponding index (the attention scores chain).
  std::string loadBound(CodeStream &b, const ir::Value *v, const std::string &idx,
                        const ir::Value *bound, const std::string &boundExpr);
  /// Writes the anchor's result `value` at linear index `idx` through the epilogue.
  void store(CodeStream &b, const ir::Value *anchorOut, const std::string &idx,
             const std::string &value);
  /// The same for `v0` at `idx` and `v1` at idx + 1: one paired store (dlc::st2) where
  /// `pairs` and the epilogue keeps the index (no permutation), else two.
  void store2(CodeStream &b, const ir::Value *anchorOut, const std::string &idx,
              const std::string &v0, const std::string &v1, bool pairs);
  /// The value store() writes (the group's root result, or anchorOut alone).
  const ir::Value *stored(const ir::Value *anchorOut) const;
  /// Several values at one index, computed together (shared subexpressions once).
  std::vector<std::string> loadAll(CodeStream &b, const std::vector<const ir::Value *> &vs,
                                   const std::string &idx);
  /// The row form of anchor-free groups (lowerInlineGroup): value v at the `lanes`
  /// elements idx, idx + 1, ... of one run along its last dim (idx a multiple of
  /// `lanes`), a name per lane. Every external value read along the run is read as one
  /// vector; values that stay the same along it (per-row operands, broadcasts) once.
  /// Empty where some read is neither contiguous nor constant along the last dim, or a
  /// vector would be misaligned: the caller then writes the scalar form with another
  /// FusedAccess. `dry` writes code without allocating check words (a trial run).
  std::vector<std::string> loadLanes(CodeStream &b, const ir::Value *v, const std::string &idx,
                                     int lanes, bool dry);
  /// Declares `const I i = row * cols + col;` and lets every split of i into
  /// coordinates whose last dim is `cols` take (row, col) as they are: a kernel that
  /// holds rows and columns (attention's score chain) spares the division.
  void splitIndex(CodeStream &b, const std::string &i, const std::string &row,
                  const std::string &col, int64_t cols);
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
  /// The first node that could not be inlined, if any (the code written is then void).
  llvm::Error takeError() { return std::move(error_); }

private:
  using Memo = std::map<std::pair<const ir::Value *, std::string>, std::string>;
  std::string valueAt(CodeStream &b, const ir::Value *v, const std::string &idx, Memo &memo);
  /// The per-operand accesses of element-wise node n (OpDef::operandAccess) into
  /// `access`, and the coordinates of `idx` where an operand needs them (else "").
  std::string operandCoords(CodeStream &b, const ir::Node &n, const ir::Fusibility &f,
                            const std::string &idx,
                            std::vector<std::optional<ir::OperandAccess>> &access);
  /// Declares element-wise node n's result from its expression, rounded to the storage
  /// type where the op alone would store it; returns its name.
  std::string elementResult(CodeStream &b, const ir::Node &n, const ir::Fusibility &f,
                            const std::string &expr);
  /// The `if`/`else if`/`else` head of concat piece k, `c` the coordinates' prefix.
  std::string concatBranch(const ir::IndexMap &m, size_t k, const std::string &c);
  /// An element-wise node's value at `idx`: its expression over its operands.
  std::string elementwiseAt(CodeStream &b, const ir::Node &n, const ir::Fusibility &f,
                            const std::string &idx, Memo &memo);
  /// An injective node's value at `idx`, read through its index map.
  std::string injectiveAt(CodeStream &b, const ir::Node &n, const ir::IndexMap &m,
                          const std::string &idx, Memo &memo);
  /// The linear index into a Gather's data operand for the coordinates `c` (reading
  /// and checking the gathered index).
  std::string gatherIndex(CodeStream &b, const ir::Node &n, const ir::IndexMap &m,
                          const std::string &c, Memo &memo);
  /// The linear index into `a.operand` of node n for the coordinates `c` (a prefix).
  std::string accessIndex(const ir::Node &n, const ir::OperandAccess &a, const std::string &c);
  /// Records that `n` cannot be inlined; returns a placeholder expression.
  std::string fail(const ir::Node &n, const std::string &why);
  /// valueAt with `bound` replaced by `boundExpr` where it is read at `boundIdx`.
  std::string valueWithBound(CodeStream &b, const ir::Value *v, const std::string &idx,
                             const ir::Value *bound, const std::string &boundIdx,
                             const std::string &boundExpr);
  std::string fresh(const char *prefix);
  /// How lowerInlineGroup's row form reads operand access `a` of n along a run of
  /// lanes_ elements of the result's last dim.
  enum class LaneRead { Contiguous, Uniform, None };
  LaneRead laneRead(const ir::Node &n, const ir::OperandAccess &a) const;
  using LaneMemo = std::map<std::pair<const ir::Value *, std::string>, std::vector<std::string>>;
  std::vector<std::string> lanesAt(CodeStream &b, const ir::Value *v, const std::string &idx,
                                   Memo &memo, LaneMemo &lanes);
  std::vector<std::string> lanesOf(CodeStream &b, const ir::Value *v, const std::string &idx,
                                   LaneRead how, Memo &memo, LaneMemo &lanes);
  /// Declares the coordinates of linear index `idx` in shape s; returns their prefix.
  std::string coords(CodeStream &b, const ir::Shape &s, const std::string &idx);
  /// sum_d f(coord_d) * strides[d] over the coordinates `prefix` (zero strides
  /// dropped), f(c) = c mod moduli[d] where a modulus is given, else c.
  std::string dot(const std::vector<int64_t> &strides, const std::string &prefix,
                  const std::vector<int64_t> &moduli = {});
  /// The linear index into `in`, broadcast (numpy-style) to shape `out`.
  std::string broadcastIndex(const ir::Shape &out, const ir::Shape &in, const std::string &prefix);
  /// An integer as a Params field.
  std::string num(int64_t v) { return params_.i64(v); }
  /// The root's linear index for the anchor element at `idx` (epilogue transposes).
  std::string forwardIndex(CodeStream &b, const ir::Value *from, const std::string &idx);
  /// The epilogue on the anchor's `value` at `idx`: the index and value store() writes.
  std::pair<std::string, std::string> epilogue(CodeStream &b, const ir::Value *anchorOut,
                                               const std::string &idx, const std::string &value);

  Lowering &l_;
  ParamList &params_;
  const ir::FusionGroup *g_;
  llvm::Error error_ = llvm::Error::success();
  std::map<const ir::Value *, std::string> ptrs_, override_;
  std::map<const ir::Node *, std::string> checks_;
  const ir::Value *bound_ = nullptr;
  std::string boundIdx_, boundExpr_;
  struct SplitHint {
    std::string idx, row, col;
    int64_t cols = 0;
  } split_;
  int counter_ = 0;
  int lanes_ = 0;    // the row form's run length (0: scalar code)
  bool dry_ = false; // a trial run: no check words
  bool laneFail_ = false;
};

/// X::load(P, i): the value of `v` at its linear index i, with the group's producers
/// inlined (the anchor's prologue).
llvm::Expected<Functor> loadFunctor(Lowering &l, const ir::FusionGroup *g, const ir::Value *v);
/// The longest run (8, 4 or 2 lanes, dividing `divides`) in which v can be read as
/// FusedAccess::loadLanes does (a trial that changes nothing); 0 if none.
int loadRunLanes(Lowering &l, const ir::FusionGroup *g, const ir::Value *v, int64_t divides);
/// loadFunctor with a second method, X::loadRun(P, i, Value *r): `lanes` values of v
/// at i, i + 1, ... along its last dim (i a multiple of lanes; loadRunLanes says where).
llvm::Expected<Functor> loadRunFunctor(Lowering &l, const ir::FusionGroup *g, const ir::Value *v,
                                       int lanes);
/// Out::store(P, i, x): the group's epilogue applied to the anchor's result x at
/// index i, and the store of the group's output.
llvm::Expected<Functor> storeFunctor(Lowering &l, const ir::FusionGroup *g,
                                     const ir::Value *anchorOut);
/// storeFunctor with a second method, Out::store2(P, i, x0, x1): elements i and i + 1
/// (i even), in one paired store of the output where `pairs` (its buffer holds pairs
/// aligned: AnchorFunctors' caller checks) and the epilogue keeps the index.
llvm::Expected<Functor> storePairFunctor(Lowering &l, const ir::FusionGroup *g,
                                         const ir::Value *anchorOut, bool pairs);
/// An anchor of the current group that reads `in` and writes `out`: its prologue
/// (loadFunctor) and epilogue (storeFunctor), and their type names in the source.
struct AnchorFunctors {
  Functor in, out;
  std::string inName, outName;
};
/// runLanes > 0: the prologue is loadRunFunctor's, with runs of that many lanes.
llvm::Expected<AnchorFunctors> anchorFunctors(Lowering &l, const ir::Value *in,
                                              const ir::Value *out, int runLanes = 0);
/// Sc::apply(P, i, x): `v` at index i where `bound` is x (attention's score chain);
/// Sc::apply2(P, row, col, x) the same at i = row * cols + col, cols the last dim.
llvm::Expected<Functor> boundFunctor(Lowering &l, const ir::FusionGroup *g, const ir::Value *v,
                                     const ir::Value *bound);

/// Lowers a group with no anchor: the elementwise template over the root's elements,
/// with a functor computing one element (float4 when every node is element-wise over
/// the same f32 index space and every buffer is 16-byte aligned).
llvm::Error lowerInlineGroup(Lowering &l, const ir::FusionGroup &g);
/// One inlinable node alone, as a one-node group.
llvm::Error lowerInlineNode(Lowering &l, const ir::Node &n);
/// The graph's update lanes (the fusion pass's UpdateLane groups) as multi-tensor
/// kernels: lanes with the same generated code share launches (as many as fit a
/// launch's parameters), each block working on a chunk of one lane's elements, and
/// write their variables in place. Returns the number of launches.
llvm::Expected<size_t> lowerUpdateLanes(Lowering &l,
                                        const std::vector<const ir::FusionGroup *> &lanes);

} // namespace dlc::codegen
