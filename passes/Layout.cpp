//===- Layout.cpp - Channels-last (NHWC) regions ----------------------------===//
//
// Moves convolution networks to channels-last, the layout tensor-core convolutions
// and pooling read contiguously (as TensorRT and cuDNN prefer for FP16):
//  1. Seed: every op whose remap hook (OpDef::layout.remap) accepts NHWC data read
//     as NCHW and transposes a weight operand (a Conv) reads its input through the
//     pair Transpose(to NHWC) -> Transpose(to NCHW).
//  2. Sink: a node whose operands are Transpose(perm) (or constants, or values whose
//     dims other than 1 keep their order, such as BatchNorm's [1, C, 1, 1] scale, or a
//     broadcast of such a value: freeBroadcast) asks its op's hook what it
//     becomes on the untransposed operands: the Conv takes channels_last = 1 with
//     OHWI weights, pooling too, element-wise ops stay as they are (constant
//     operands are permuted, broadcast ones rank-extended first), Concat, Softmax,
//     Reduce*, Pad and Slice remap their axes. Its results are read through Transpose
//     again, which moves on to the users. A Reshape that regroups dims in their memory
//     order (a strided input gradient's zero-stuffing) takes it below too, as another
//     transpose; an op without a hook (other Reshapes, Flatten, MatMul) keeps it in
//     front.
//  3. In NHWC a 1x1 convolution with stride 1 and no padding is a GEMM over the
//     channels: MatMul by the [C, M] weights (+ Add bias), for cuBLASLt, when
//     cuBLASLt applies its epilogue too. Conversely an FP16/BF16 MatMul by constant
//     weights with an epilogue cuBLASLt cannot apply becomes such a convolution (in
//     any graph, with or without convolutions): the kernel library's implicit GEMM
//     stores through any element-wise epilogue.
// Graph inputs and outputs keep their layout: the transposes left at the boundary
// (and in front of layout barriers) are the only ones executed; the clean-up after
// this pass cancels Transpose pairs and folds the permuted weights.
//
// Auto mode moves graphs with a 2-D FP16/BF16 (or TF32, or INT8) convolution to NHWC (nhwc: any
// graph with a convolution) and rewrites the products of any graph it runs on (step 3); nchw does
// nothing.
//===----------------------------------------------------------------------===//
#include "dlc/ir/FusionRules.h"
#include "dlc/ir/OpHelpers.h"
#include "dlc/passes/Pass.h"

#include <algorithm>

namespace dlc::passes {
namespace {

using namespace ir;

/// The 8-bit operand types whose convolutions are ours on tensor cores (INT8, float8).
bool eightBit(DType t) {
  return t == DType::I8 || isFloat8(t);
}

/// The Transpose producing v, if any.
const Node *transposeOf(const Value *v) {
  return definedBy(v, OpKind::Transpose);
}

/// Whether v is Transpose(perm) of another value.
bool isTransposeBy(const Value *v, const std::vector<int64_t> &perm) {
  const Node *t = transposeOf(v);
  return t && transposePerm(*t) == perm;
}

Attribute permAttr(const std::vector<int64_t> &p) {
  return Attribute(std::vector<int64_t>(p));
}

/// The result of a new node of kind k placed before `before`; null if it does not
/// verify (not reached: the patterns create nodes that verify by construction).
Value *create(PatternRewriter &rw, OpKind k, std::vector<Value *> ops, AttrMap attrs,
              Node &before) {
  auto c = rw.create(k, std::move(ops), std::move(attrs), &before);
  if (!c) {
    llvm::consumeError(c.takeError());
    return nullptr;
  }
  return (*c)->result();
}

/// Whether a tensor of shape s in the channels-last order (s permuted by the inverse of
/// perm) keeps its dims other than 1 in order: then that form is a Reshape of it.
bool movesOnlyUnitDims(const Shape &s, const std::vector<int64_t> &perm) {
  return s.size() == perm.size() && transposeMovesOnlyUnitDims(s, inversePerm(perm));
}

/// The Expand producing v when it is a broadcast of a value whose channels-last form
/// moves only size-1 dims (no data: the gradient of a global average pool, [N, C, 1, 1]
/// over H and W): then v is Transpose(perm) of an Expand of that value reshaped, and
/// the gradient stream after it can stay channels-last. Null otherwise.
const Node *freeBroadcast(const Value *v, const std::vector<int64_t> &perm) {
  const Node *e = definedBy(v, OpKind::Expand);
  if (!e || v->rank() != static_cast<int64_t>(perm.size()) || e->operand(0)->rank() != v->rank())
    return nullptr;
  return movesOnlyUnitDims(e->operand(0)->shape(), perm) ? e : nullptr;
}

/// Reshape(Transpose(u, perm)) as Transpose(Reshape(u), q), where the reshape only
/// splits and merges dims (and adds or drops size-1 ones) in groups whose dims are
/// consecutive in u's order too: then the reshape regroups u's memory in place and the
/// transpose moves below it. Returns the reshape of u and q; nullopt otherwise (a
/// flatten of NHWC data over C, H, W must read through the transpose).
std::optional<std::pair<Shape, std::vector<int64_t>>>
reshapeBelowTranspose(const Shape &us, const std::vector<int64_t> &perm, const Shape &os) {
  Shape is = permuteShape(us, perm);
  auto nonUnit = [](const Shape &s) {
    std::vector<int64_t> r;
    for (size_t k = 0; k < s.size(); ++k)
      if (s[k] != 1)
        r.push_back(static_cast<int64_t>(k));
    return r;
  };
  std::vector<int64_t> in = nonUnit(is), on = nonUnit(os), uPos(us.size(), -1);
  if (in.empty() || on.empty())
    return std::nullopt;
  for (int64_t d = 0, k = 0; d < static_cast<int64_t>(us.size()); ++d)
    if (us[d] != 1)
      uPos[d] = k++;
  struct Group {
    int64_t first; // u position of its first dim
    std::vector<int64_t> outs;
  };
  std::vector<Group> groups;
  std::vector<int64_t> groupOf(os.size(), -1);
  size_t a = 0, b = 0;
  while (a < in.size() && b < on.size()) {
    Group g{uPos[perm[in[a]]], {}};
    int64_t pi = is[in[a]], po = os[on[b]], prev = uPos[perm[in[a]]];
    ++a;
    groupOf[on[b]] = static_cast<int64_t>(groups.size());
    g.outs.push_back(on[b++]);
    while (pi != po) {
      if (pi < po) {
        if (a == in.size() || uPos[perm[in[a]]] != prev + 1)
          return std::nullopt; // (also: a merge across u's order)
        prev = uPos[perm[in[a]]];
        pi *= is[in[a++]];
      } else {
        if (b == on.size())
          return std::nullopt;
        groupOf[on[b]] = static_cast<int64_t>(groups.size());
        g.outs.push_back(on[b]);
        po *= os[on[b++]];
      }
    }
    groups.push_back(std::move(g));
  }
  if (a != in.size() || b != on.size())
    return std::nullopt;
  // Size-1 result dims join the group of the dim before them (the first group's
  // when they lead).
  for (size_t j = 0, owner = static_cast<size_t>(groupOf[on.front()]); j < os.size(); ++j) {
    if (os[j] != 1)
      owner = static_cast<size_t>(groupOf[j]);
    else
      groups[owner].outs.push_back(static_cast<int64_t>(j));
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const Group &x, const Group &y) { return x.first < y.first; });
  std::vector<int64_t> order; // result dims in the reshape's order
  for (Group &g : groups) {
    std::sort(g.outs.begin(), g.outs.end());
    order.insert(order.end(), g.outs.begin(), g.outs.end());
  }
  Shape rs;
  std::vector<int64_t> q(os.size());
  for (size_t k = 0; k < order.size(); ++k) {
    rs.push_back(os[order[k]]);
    q[order[k]] = static_cast<int64_t>(k);
  }
  return std::make_pair(rs, q);
}

/// Moves Transpose(perm) below a Reshape that regroups dims in their memory order
/// (reshapeBelowTranspose): the zero-stuffing of a strided convolution's input
/// gradient ([N, C, H, W] -> [N, C, H, 1, W, 1], padded, merged back), so that the
/// gradient stream after it stays channels-last.
class SinkTransposeThroughReshape : public RewritePattern {
public:
  std::string_view name() const override { return "sink-transpose-through-reshape"; }
  std::optional<OpKind> root() const override { return OpKind::Reshape; }

  bool matchAndRewrite(Node &n, PatternRewriter &rw) const override {
    const Node *t = transposeOf(n.operand(0));
    if (!t || isIdentityPerm(transposePerm(*t)))
      return false;
    Value *u = t->operand(0);
    auto m = reshapeBelowTranspose(u->shape(), transposePerm(*t), n.result()->shape());
    if (!m)
      return false;
    Value *r = create(rw, OpKind::Reshape, {u}, {{"shape", Attribute(m->first)}}, n);
    if (r && !isIdentityPerm(m->second))
      r = create(rw, OpKind::Transpose, {r}, {{"perm", permAttr(m->second)}}, n);
    if (!r)
      return false; // not reached: the created nodes verify by construction
    rw.replaceNode(n, {r});
    return true;
  }
};

/// Moves Transpose(perm) below a node whose op's remap hook accepts it.
class SinkTranspose : public RewritePattern {
public:
  std::string_view name() const override { return "sink-transpose"; }
  std::optional<OpKind> root() const override { return std::nullopt; }

  bool matchAndRewrite(Node &n, PatternRewriter &rw) const override {
    LayoutRemapFn remap = n.def().layout.remap; // none for Transpose itself
    if (!remap)
      return false;
    std::vector<int64_t> perm;
    for (Value *v : n.operands())
      if (const Node *t = transposeOf(v)) {
        perm = transposePerm(*t);
        break;
      }
    if (perm.empty() || isIdentityPerm(perm))
      return false;
    std::optional<LayoutRemap> m = remap(n, perm);
    if (!m || m->operands.size() != n.numOperands())
      return false;
    const int64_t rank = static_cast<int64_t>(perm.size());
    // Match: every operand that must change layout is Transpose(perm) or a constant.
    bool stripped = false;
    for (unsigned i = 0; i < n.numOperands(); ++i) {
      Value *v = n.operand(i);
      if (!v || m->operands[i] != LayoutRemap::Operand::Actual)
        continue;
      if (isTransposeBy(v, perm))
        stripped = true;
      else if ((!v->isConstant() || v->rank() > rank) && !freeBroadcast(v, perm) &&
               !movesOnlyUnitDims(v->shape(), perm))
        return false;
    }
    if (!stripped)
      return false;
    // Rewrite.
    std::vector<Value *> ops(n.numOperands(), nullptr);
    for (unsigned i = 0; i < n.numOperands(); ++i) {
      Value *v = n.operand(i);
      if (!v)
        continue;
      ops[i] = v;
      if (m->operands[i] == LayoutRemap::Operand::Permute) {
        ops[i] = create(rw, OpKind::Transpose, {v}, {{"perm", permAttr(m->operandPerms[i])}}, n);
      } else if (m->operands[i] == LayoutRemap::Operand::Actual) {
        if (isTransposeBy(v, perm)) {
          ops[i] = v->definingNode()->operand(0);
          continue;
        }
        std::vector<int64_t> toLast = inversePerm(perm);
        if (!v->isConstant() && movesOnlyUnitDims(v->shape(), perm)) {
          // A per-channel [1, C, 1, 1] operand (BatchNorm's scale): a Reshape, not a
          // Transpose, which this pattern would take up again and never settle.
          ops[i] = create(rw, OpKind::Reshape, {v},
                          {{"shape", Attribute(permuteShape(v->shape(), toLast))}}, n);
          if (!ops[i])
            return false; // not reached: the created node verifies by construction
          continue;
        }
        if (!v->isConstant()) { // a free broadcast: Expand(reshaped) in the actual layout
          Value *u = freeBroadcast(v, perm)->operand(0);
          Value *r = create(rw, OpKind::Reshape, {u},
                            {{"shape", Attribute(permuteShape(u->shape(), toLast))}}, n);
          ops[i] = r ? create(rw, OpKind::Expand, {r},
                              {{"shape", Attribute(permuteShape(v->shape(), toLast))}}, n)
                     : nullptr;
          if (!ops[i])
            return false; // not reached: the created nodes verify by construction
          continue;
        }
        // A constant: rank-extended (numpy broadcasting aligns trailing dims), then
        // permuted; constant folding evaluates both.
        if (v->rank() < rank) {
          Shape s(static_cast<size_t>(rank - v->rank()), 1);
          s.insert(s.end(), v->shape().begin(), v->shape().end());
          v = create(rw, OpKind::Reshape, {v}, {{"shape", Attribute(s)}}, n);
        }
        ops[i] = create(rw, OpKind::Transpose, {v}, {{"perm", permAttr(inversePerm(perm))}}, n);
      }
      if (!ops[i])
        return false; // not reached: the created nodes verify by construction
    }
    AttrMap attrs = n.attrs();
    for (const auto &[k, a] : m->attrs)
      attrs[k] = a;
    auto moved = rw.create(n.kind(), ops, attrs, &n, n.numResults());
    if (!moved) {
      llvm::consumeError(moved.takeError());
      return false;
    }
    std::vector<Value *> results;
    for (unsigned r = 0; r < n.numResults(); ++r) {
      Value *v = (*moved)->result(r);
      if (!m->resultPerm.empty() && !isIdentityPerm(m->resultPerm))
        v = create(rw, OpKind::Transpose, {v}, {{"perm", permAttr(m->resultPerm)}}, n);
      results.push_back(v);
    }
    rw.replaceNode(n, results);
    return true;
  }
};

/// Whether the chain of single-use element-wise consumers that fusion would put after
/// `product` (a MatMul, or a Conv that could be one) is one cuBLASLt applies itself:
/// bias, residual add, ReLU or tanh-GELU (FusionRules' matchGemmEpilogue). A reshape
/// followed by element-wise work is not (cuBLASLt's epilogue does not reach through
/// it; a convolution's does).
bool epilogueFitsGemm(const Node &product) {
  std::vector<const Node *> chain;
  const Graph &g = *product.graph();
  const Value *cur = product.result();
  auto soleUser = [&](const Value *v) -> const Node * {
    return v->uses().size() == 1 && !g.isOutput(v) ? v->uses().front().user : nullptr;
  };
  auto elementwise = [](const Node *u, const Value *in) {
    Fusibility f = fusibility(*u);
    return f.role == Fusibility::Role::Elementwise && !f.operandAccess && u->numResults() == 1 &&
           u->result()->shape() == in->shape();
  };
  while (const Node *u = soleUser(cur)) {
    if (fusibility(*u).role == Fusibility::Role::Metadata && u->numResults() == 1) {
      const Node *next = soleUser(u->result());
      if (next && elementwise(next, u->result()))
        return false;
      break;
    }
    if (!elementwise(u, cur))
      break;
    chain.push_back(u);
    cur = u->result();
  }
  return chain.empty() || matchGemmEpilogue(product.result(), chain,
                                            [&](const Value *v) { return v == product.result(); });
}

/// In NHWC, a 1x1 convolution (stride 1, no padding, one group) is [N*H*W, C] x
/// [C, M]: a MatMul by the reshaped, transposed weights (folded at compile time), for
/// cuBLASLt, when cuBLASLt can also apply what follows it (epilogueFitsGemm). With
/// another element-wise consumer (ReLU6's Clip) the Conv stays: the kernel library's
/// implicit GEMM fuses any element-wise epilogue, where cuBLASLt would need a kernel of
/// its own after it.
class PointwiseConvToMatMul : public RewritePattern {
public:
  std::string_view name() const override { return "pointwise-conv-to-matmul"; }
  std::optional<OpKind> root() const override { return OpKind::Conv; }

  bool matchAndRewrite(Node &n, PatternRewriter &rw) const override {
    auto all = [](const std::vector<int64_t> &v, int64_t x) {
      return std::all_of(v.begin(), v.end(), [x](int64_t e) { return e == x; });
    };
    // (INT8 and float8 stay convolutions: their tensor-core kernel is ours.)
    if (n.attrInt("channels_last") == 0 || n.attrInt("group") != 1 ||
        !all(n.attrInts("strides"), 1) || !all(n.attrInts("pads"), 0) ||
        eightBit(n.operand(0)->dtype()))
      return false;
    Value *x = n.operand(0), *w = n.operand(1), *b = n.operand(2);
    const Shape &ws = w->shape(); // [M, 1..., C]
    if (!all(Shape(ws.begin() + 1, ws.end() - 1), 1) || !epilogueFitsGemm(n))
      return false;
    Value *wm =
        create(rw, OpKind::Reshape, {w}, {{"shape", Attribute(Shape{ws[0], ws.back()})}}, n);
    Value *wt = wm ? create(rw, OpKind::Transpose, {wm}, {{"perm", permAttr({1, 0})}}, n) : nullptr;
    Value *y = wt ? create(rw, OpKind::MatMul, {x, wt}, {}, n) : nullptr;
    if (y && b)
      y = create(rw, OpKind::Add, {y, b}, {}, n);
    if (!y)
      return false;
    rw.replaceNode(n, {y});
    return true;
  }
};

/// The converse: an INT8 MatMul by constant [K, N] weights (K whole 16-byte chunks),
/// and an FP16/BF16 one whose element-wise
/// consumers cuBLASLt cannot apply (a chain: Clip, exact GELU as one op, a Cast; not a
/// diamond such as x * sigmoid(x), which stays with cuBLASLt) runs as a
/// channels-last 1x1 convolution, [rows, K] x [K, N] on the kernel library's implicit
/// GEMM on tensor cores, which stores through the whole fused epilogue: one kernel
/// where cuBLASLt needs a second. A of rank 3 to 5 is the convolution's input as it is
/// ([N, D..., C]); other ranks are reshaped to [1, rows, K] and back. K is whole
/// 16-byte chunks of channels and A is computed by the graph (a graph input may be
/// bound at any address): else the convolution would repack A on every run. Where
/// the cost model prices cuBLASLt plus a kernel for the epilogue faster
/// (PassContext::ownGemm; --gemm-epilogue library|fused decides instead), the MatMul
/// stays.
class MatMulToPointwiseConv : public RewritePattern {
public:
  explicit MatMulToPointwiseConv(const PassContext &ctx) : ctx_(ctx) {}
  std::string_view name() const override { return "matmul-to-pointwise-conv"; }
  std::optional<OpKind> root() const override { return OpKind::MatMul; }

  bool matchAndRewrite(Node &n, PatternRewriter &rw) const override {
    Value *a = n.operand(0), *b = n.operand(1);
    const DType t = n.result()->dtype();
    // (INT8 products, int32 sums, always: no library runs them yet.)
    const bool int8 = a->dtype() == DType::I8 && b->dtype() == DType::I8;
    // B may be the transpose of constant [N, K] weights (a Gemm's transB; too large for
    // constfold to fold): those are the convolution's weights as they are.
    Value *bt = nullptr;
    if (Node *tr = definedBy(b, OpKind::Transpose);
        tr && tr->operand(0)->isConstant() && tr->attrInts("perm") == std::vector<int64_t>{1, 0})
      bt = tr->operand(0);
    if ((!int8 && ((t != DType::F16 && t != DType::BF16) || a->dtype() != t || b->dtype() != t)) ||
        !(b->isConstant() || bt) || b->rank() != 2 || a->rank() < 2 || boundByCaller(a))
      return false;
    const int64_t K = b->shape()[0], N = b->shape()[1];
    const int64_t rows = a->type().numElements() / std::max<int64_t>(K, 1);
    if (K % (int8 ? 16 : 8) != 0 || N == 0 || rows == 0 ||
        (!int8 && (epilogueFitsGemm(n) || ctx_.gemmEpilogue == GemmEpilogueMode::Library ||
                   (ctx_.gemmEpilogue == GemmEpilogueMode::Auto &&
                    !(ctx_.ownGemm && ctx_.ownGemm(rows, K, N, t))))))
      return false;
    const bool reshape = a->rank() > 5 || a->rank() == 2;
    Value *x = a;
    if (reshape) {
      Shape s = {1, rows, K};
      x = create(rw, OpKind::Reshape, {a}, {{"shape", Attribute(s)}}, n);
      if (!x)
        return false; // not reached: the created nodes verify by construction
    }
    // The weights [N, 1..., K] (OHWI), folded at compile time.
    Shape ws(static_cast<size_t>(x->rank()), 1);
    ws.front() = N;
    ws.back() = K;
    Value *wt = bt ? bt : create(rw, OpKind::Transpose, {b}, {{"perm", permAttr({1, 0})}}, n);
    Value *w = wt ? create(rw, OpKind::Reshape, {wt}, {{"shape", Attribute(ws)}}, n) : nullptr;
    Value *y = w ? create(rw, OpKind::Conv, {x, w}, {{"channels_last", Attribute(1)}}, n) : nullptr;
    if (y && reshape)
      y = create(rw, OpKind::Reshape, {y}, {{"shape", Attribute(n.result()->shape())}}, n);
    if (!y)
      return false; // not reached: the created nodes verify by construction
    rw.replaceNode(n, {y});
    return true;
  }

private:
  /// Whether v is a graph input or output, or a view of one (metadata ops, upstream or
  /// downstream): memory a caller may bind at any element-aligned address, which the
  /// convolution would repack on every run.
  static bool boundByCaller(const Value *v) {
    const Graph &g = *v->graph();
    auto viewedOut = [&](const Value *u, auto &self) -> bool {
      if (g.isOutput(u))
        return true;
      for (const Use &use : u->uses())
        if (fusibility(*use.user).role == Fusibility::Role::Metadata &&
            use.user->numResults() == 1 && self(use.user->result(), self))
          return true;
      return false;
    };
    for (;;) {
      if (viewedOut(v, viewedOut))
        return true;
      const Node *d = v->definingNode();
      if (!d)
        return !v->isConstant();
      if (fusibility(*d).role != Fusibility::Role::Metadata || d->numOperands() < 1)
        return false;
      v = d->operand(0);
    }
  }

  const PassContext &ctx_;
};

class Layout : public Pass {
public:
  std::string_view name() const override { return "layout"; }

  bool run(Graph &g, PassContext &ctx) override {
    if (ctx.layout == LayoutMode::NCHW)
      return false;
    bool changed = false;
    if (wantsChannelsLast(g, ctx.layout, ctx.tf32)) {
      for (Node *n : g.nodeList())
        changed |= seed(g, *n);
      std::vector<std::unique_ptr<RewritePattern>> sink;
      sink.push_back(std::make_unique<SinkTranspose>());
      sink.push_back(std::make_unique<SinkTransposeThroughReshape>());
      changed |= applyPatternsGreedily(g, sink, ctx);
      findPass("dce")->create()->run(g, ctx); // the transposes sinking left behind
    }
    // After sinking, so that the GEMM rewrites see each product's final consumers (one
    // run never undoes itself: epilogueFitsGemm decides both, and the MatMul that
    // pointwise-conv-to-matmul makes has no constant weights for the converse; it
    // judges the conv's consumers, not its bias, so a conv whose bias and a following
    // per-channel Add fill cuBLASLt's one bias slot becomes GEMM + a kernel).
    std::vector<std::unique_ptr<RewritePattern>> gemm;
    gemm.push_back(std::make_unique<PointwiseConvToMatMul>());
    gemm.push_back(std::make_unique<MatMulToPointwiseConv>(ctx));
    changed |= applyPatternsGreedily(g, gemm, ctx);
    if (changed)
      g.topologicalSort();
    return changed;
  }

private:
  /// Ops seeded into channels-last: those whose channels-last form also permutes a
  /// weight operand (Conv); pooling and the rest follow by sinking.
  static std::optional<std::vector<int64_t>> seedPerm(const Node &n) {
    const LayoutRule &lr = n.def().layout;
    Value *x = n.operand(0);
    if (lr.kind != LayoutRule::ChannelAxis || !lr.remap || !x || x->rank() < 3 ||
        !(isFloat(x->dtype()) || eightBit(x->dtype())))
      return std::nullopt;
    std::vector<int64_t> perm = channelsFirstPerm(x->rank());
    std::optional<LayoutRemap> m = lr.remap(n, perm);
    if (!m)
      return std::nullopt;
    for (LayoutRemap::Operand o : m->operands)
      if (o == LayoutRemap::Operand::Permute)
        return perm;
    return std::nullopt;
  }

  /// Auto: conv nets whose convolutions run on tensor cores (FP16/BF16, FP32 in TF32,
  /// INT8, float8).
  static bool wantsChannelsLast(const Graph &g, LayoutMode mode, bool tf32) {
    if (mode == LayoutMode::NCHW)
      return false;
    for (const Node &n : g.nodes())
      if (auto perm = seedPerm(n)) {
        DType t = n.operand(0)->dtype();
        if (mode == LayoutMode::NHWC ||
            (perm->size() == 4 && (isReducedFloat(t) || (tf32 && t == DType::F32) || eightBit(t))))
          return true;
      }
    return false;
  }

  /// x -> Transpose(to NHWC) -> Transpose(to NCHW) -> n: the second one sinks into n.
  static bool seed(Graph &g, Node &n) {
    auto perm = seedPerm(n);
    Value *x = n.operand(0);
    if (!perm || isTransposeBy(x, *perm))
      return false;
    std::vector<int64_t> toLast = inversePerm(*perm);
    Node *t1 = g.createNode(OpKind::Transpose, {x},
                            {TensorType(x->dtype(), permuteShape(x->shape(), toLast))},
                            {{"perm", permAttr(toLast)}}, n.name(), &n);
    Node *t2 = g.createNode(OpKind::Transpose, {t1->result()}, {x->type()},
                            {{"perm", permAttr(*perm)}}, n.name(), &n);
    n.setOperand(0, t2->result());
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createLayout() {
  return std::make_unique<Layout>();
}

} // namespace dlc::passes
