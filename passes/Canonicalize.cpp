//===- Canonicalize.cpp - Canonical forms for later passes -----------------===//
//
// Local rewrites driven to a fixed point by the worklist driver:
//  - no-ops disappear: Identity, same-type Cast, a Cast after an exact Cast, same-shape
//  Reshape/Expand, identity
//    Transpose, full Slice, zero Pad, single-input Concat, Tile by ones, x+0, x*1, x/1;
//  - Flatten/Squeeze/Unsqueeze, and a Transpose that only moves size-1 dims, become
//    Reshape, and Reshape/Transpose chains collapse,
//    so layout and fusion passes only see one reshape and one transpose form;
//  - Shape of a statically shaped value becomes a constant;
//  - Gemm becomes MatMul (+ Add) when that is exact (alpha = 1, beta = 1, no transA),
//    so bias and activations fuse as a plain epilogue of a MatMul;
//  - Split becomes one Slice per result (slices fuse into their consumers);
//  - an op with a faster equivalent form in the op table (OpDef::canonical) takes it:
//    ConvTranspose becomes a Conv of its (zero-stuffed) input by the flipped weights;
//  - a LayerNorm spelled out in primitives (opset < 17 exports: ReduceMean, Sub,
//    Pow, ReduceMean, Add eps, Sqrt, Div) becomes LayerNormalization, and a constant
//    per-feature Mul/Add after a LayerNormalization folds into its scale and bias;
//  - an RMSNorm spelled out in primitives (LLaMA/T5 exports: Pow or Mul, ReduceMean,
//    Add eps, Sqrt, then Div, or Reciprocal and Mul) becomes RMSNormalization, and a
//    constant per-feature Mul after it folds into its scale.
//===----------------------------------------------------------------------===//
#include "dlc/ir/GradBuilder.h"
#include "dlc/ir/OpHelpers.h"
#include "dlc/passes/Pass.h"

#include <functional>

namespace dlc::passes {
namespace {

using namespace ir;

class FnPattern : public RewritePattern {
public:
  using Fn = std::function<bool(Node &, PatternRewriter &)>;
  FnPattern(std::string_view name, std::optional<OpKind> root, Fn fn)
      : name_(name), root_(root), fn_(std::move(fn)) {}
  std::string_view name() const override { return name_; }
  std::optional<OpKind> root() const override { return root_; }
  bool matchAndRewrite(Node &n, PatternRewriter &rw) const override { return fn_(n, rw); }

private:
  std::string_view name_;
  std::optional<OpKind> root_;
  Fn fn_;
};

/// Replaces a single-result node by one of its operands when types agree.
bool forwardOperand(Node &n, PatternRewriter &rw, unsigned operand = 0) {
  Value *v = n.operand(operand);
  if (!v || v->type() != n.result()->type() || n.numResults() != 1)
    return false;
  rw.replaceNode(n, {v});
  return true;
}

/// True if v is a constant whose every element equals `x`.
bool isSplatConstant(const Value *v, double x) {
  if (!v || !v->isConstant())
    return false;
  const Tensor &t = v->data();
  for (int64_t i = 0; i < t.numElements(); ++i)
    if (t.getDouble(i) != x)
      return false;
  return true;
}

/// Replaces n by a new node of `kind` (same single result type expected).
bool replaceWith(Node &n, PatternRewriter &rw, OpKind kind, std::vector<Value *> operands,
                 AttrMap attrs) {
  auto r = rw.create(kind, std::move(operands), std::move(attrs), &n);
  if (!r) {
    llvm::consumeError(r.takeError());
    return false;
  }
  rw.replaceNode(n, {(*r)->result()});
  return true;
}

std::vector<std::unique_ptr<RewritePattern>> patterns() {
  std::vector<std::unique_ptr<RewritePattern>> p;
  auto add = [&](std::string_view name, std::optional<OpKind> root, FnPattern::Fn fn) {
    p.push_back(std::make_unique<FnPattern>(name, root, std::move(fn)));
  };

  add("remove-identity", OpKind::Identity,
      [](Node &n, PatternRewriter &rw) { return forwardOperand(n, rw); });
  add("remove-same-type-cast", OpKind::Cast,
      [](Node &n, PatternRewriter &rw) { return forwardOperand(n, rw); });
  // Cast(Cast(x, B), C) -> Cast(x, C) when x -> B loses nothing (f16 -> f32 -> f16
  // disappears; bool -> f32 -> f16 is one cast). The lossy f32 -> f16 -> f32 stays.
  add("fold-cast-chain", OpKind::Cast, [](Node &n, PatternRewriter &rw) {
    Node *inner = definedBy(n.operand(0), OpKind::Cast);
    if (!inner || !castIsExact(inner->operand(0)->dtype(), inner->result()->dtype()))
      return false;
    if (inner->operand(0)->dtype() == n.result()->dtype()) {
      rw.replaceNode(n, {inner->operand(0)});
      return true;
    }
    return replaceWith(n, rw, OpKind::Cast, {inner->operand(0)}, n.attrs());
  });
  for (OpKind k : {OpKind::Reshape, OpKind::Expand})
    add("remove-same-shape", k, [](Node &n, PatternRewriter &rw) { return forwardOperand(n, rw); });
  add("remove-full-slice", OpKind::Slice, [](Node &n, PatternRewriter &rw) {
    for (int64_t s : n.attrInts("steps"))
      if (s <= 0)
        return false;
    return forwardOperand(n, rw);
  });
  add("remove-zero-pad", OpKind::Pad, [](Node &n, PatternRewriter &rw) {
    for (int64_t v : n.attrInts("pads"))
      if (v != 0)
        return false;
    return forwardOperand(n, rw);
  });
  add("remove-single-concat", OpKind::Concat,
      [](Node &n, PatternRewriter &rw) { return n.numOperands() == 1 && forwardOperand(n, rw); });
  add("remove-unit-tile", OpKind::Tile,
      [](Node &n, PatternRewriter &rw) { return forwardOperand(n, rw); });

  // x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1 (OpDef::neutral; only when the result
  // type is x's type).
  for (size_t i = 0; i < kNumOps; ++i)
    if (const auto &neutral = opDef(static_cast<OpKind>(i)).neutral)
      add("remove-neutral-operand", static_cast<OpKind>(i),
          [neutral = *neutral](Node &n, PatternRewriter &rw) {
            if (isSplatConstant(n.operand(1), neutral.value) && forwardOperand(n, rw, 0))
              return true;
            return neutral.eitherSide && isSplatConstant(n.operand(0), neutral.value) &&
                   forwardOperand(n, rw, 1);
          });

  // An op's faster equivalent form (OpDef::canonical: ConvTranspose as a Conv).
  for (size_t i = 0; i < kNumOps; ++i)
    if (DecomposeFn canonical = opDef(static_cast<OpKind>(i)).canonical)
      add("op-canonical-form", static_cast<OpKind>(i), [canonical](Node &n, PatternRewriter &rw) {
        GradBuilder b(rw.graph());
        b.setNameSuffix("");
        b.setInsertionPoint(&n);
        b.begin(n, {}, {});
        auto parts = canonical(b, n);
        if (!parts || b.failed()) { // (the hook decides before it builds; dce takes the rest)
          llvm::consumeError(parts ? b.takeError() : parts.takeError());
          return false;
        }
        for (unsigned r = 0; r < n.numResults(); ++r)
          if (!(*parts)[r] || (*parts)[r]->type() != n.result(r)->type())
            return false; // (not reached: the form is built to the node's types)
        std::vector<std::string> names;
        for (unsigned r = 0; r < n.numResults(); ++r)
          names.push_back(n.result(r)->name());
        std::vector<Value *> operands(n.operands().begin(), n.operands().end());
        rw.replaceNode(n, *parts);
        adoptResultNames(rw.graph(), names, operands, *parts);
        return true;
      });

  for (OpKind k : {OpKind::Flatten, OpKind::Squeeze, OpKind::Unsqueeze})
    add("reshape-like-to-reshape", k, [](Node &n, PatternRewriter &rw) {
      return replaceWith(n, rw, OpKind::Reshape, {n.operand(0)},
                         {{"shape", Attribute(n.result()->shape())}});
    });
  add("fold-reshape-chain", OpKind::Reshape, [](Node &n, PatternRewriter &rw) {
    Node *inner = definedBy(n.operand(0), OpKind::Reshape);
    if (!inner)
      return false;
    return replaceWith(n, rw, OpKind::Reshape, {inner->operand(0)},
                       {{"shape", Attribute(n.result()->shape())}});
  });
  add("resolve-reshape-shape", OpKind::Reshape, [](Node &n, PatternRewriter &rw) {
    // Canonical Reshape spells out its result shape (no 0 or -1 entries).
    if (n.attrInts("shape") == n.result()->shape())
      return false;
    return replaceWith(n, rw, OpKind::Reshape, {n.operand(0)},
                       {{"shape", Attribute(n.result()->shape())}});
  });

  add("remove-identity-transpose", OpKind::Transpose, [](Node &n, PatternRewriter &rw) {
    return isIdentityPerm(transposePerm(n)) && forwardOperand(n, rw);
  });
  add("unit-transpose-to-reshape", OpKind::Transpose, [](Node &n, PatternRewriter &rw) {
    // Moving only size-1 dims (NHWC [N, 1, 1, C] to NCHW) keeps the element order.
    if (!transposeMovesOnlyUnitDims(n.operand(0)->shape(), transposePerm(n)))
      return false;
    return replaceWith(n, rw, OpKind::Reshape, {n.operand(0)},
                       {{"shape", Attribute(n.result()->shape())}});
  });
  add("fold-transpose-chain", OpKind::Transpose, [](Node &n, PatternRewriter &rw) {
    Node *inner = definedBy(n.operand(0), OpKind::Transpose);
    if (!inner)
      return false;
    std::vector<int64_t> p1 = transposePerm(*inner), p2 = transposePerm(n), composed(p2.size());
    for (size_t i = 0; i < p2.size(); ++i)
      composed[i] = p1[p2[i]];
    if (isIdentityPerm(composed)) {
      rw.replaceNode(n, {inner->operand(0)});
      return true;
    }
    return replaceWith(n, rw, OpKind::Transpose, {inner->operand(0)},
                       {{"perm", Attribute(composed)}});
  });

  add("shape-to-constant", OpKind::Shape, [](Node &n, PatternRewriter &rw) {
    const Shape &s = n.operand(0)->shape();
    const Shape &out = n.result()->shape();
    int64_t rank = static_cast<int64_t>(s.size());
    int64_t start = n.attrInt("start");
    start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
    std::vector<int64_t> dims(s.begin() + start, s.begin() + start + out[0]);
    rw.replaceNode(
        n, {rw.createConstant(n.result()->name(), Tensor::fromVector(n.result()->type(), dims))});
    return true;
  });

  add("gemm-to-matmul-add", OpKind::Gemm, [](Node &n, PatternRewriter &rw) {
    Value *c = n.operand(2);
    if (n.attrInt("transA") != 0 || n.attrFloat("alpha") != 1.0f ||
        (c && n.attrFloat("beta") != 1.0f))
      return false;
    Value *b = n.operand(1);
    if (n.attrInt("transB") != 0) {
      auto t =
          rw.create(OpKind::Transpose, {b}, {{"perm", Attribute(std::vector<int64_t>{1, 0})}}, &n);
      if (!t) {
        llvm::consumeError(t.takeError());
        return false;
      }
      b = (*t)->result();
    }
    auto mm = rw.create(OpKind::MatMul, {n.operand(0), b}, {}, &n);
    if (!mm) {
      llvm::consumeError(mm.takeError());
      return false;
    }
    Value *r = (*mm)->result();
    if (c) {
      auto sum = rw.create(OpKind::Add, {r, c}, {}, &n);
      if (!sum) {
        llvm::consumeError(sum.takeError());
        return false;
      }
      r = (*sum)->result();
    }
    rw.replaceNode(n, {r});
    return true;
  });

  add("split-to-slices", OpKind::Split, [](Node &n, PatternRewriter &rw) {
    Value *x = n.operand(0);
    int64_t rank = x->rank(), axis = n.attrInt("axis");
    if (axis < 0)
      axis += rank;
    std::vector<Value *> slices;
    int64_t offset = 0;
    for (unsigned i = 0; i < n.numResults(); ++i) {
      int64_t len = n.result(i)->shape()[axis];
      auto s = rw.create(OpKind::Slice, {x},
                         {{"axes", Attribute(std::vector<int64_t>{axis})},
                          {"starts", Attribute(std::vector<int64_t>{offset})},
                          {"ends", Attribute(std::vector<int64_t>{offset + len})}},
                         &n);
      if (!s) {
        llvm::consumeError(s.takeError());
        for (Value *v : slices)
          rw.eraseNode(*v->definingNode());
        return false;
      }
      slices.push_back((*s)->result());
      offset += len;
    }
    rw.replaceNode(n, slices);
    return true;
  });

  add("layernorm-from-parts", OpKind::Div, [](Node &n, PatternRewriter &rw) {
    // y = (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps), means over the last axis.
    auto lastAxisMean = [](const Node *m) {
      if (!m || m->attrInt("keepdims") != 1 || m->attrInts("axes").size() != 1)
        return false;
      int64_t a = m->attrInts("axes")[0], r = m->operand(0)->rank();
      return a == -1 || a == r - 1;
    };
    Node *sub = definedBy(n.operand(0), OpKind::Sub), *sqrt = definedBy(n.operand(1), OpKind::Sqrt);
    if (!sub || !sqrt)
      return false;
    Value *x = sub->operand(0);
    Node *mean = definedBy(sub->operand(1), OpKind::ReduceMean);
    Node *add = definedBy(sqrt->operand(0), OpKind::Add);
    if (!mean || mean->operand(0) != x || !lastAxisMean(mean) || !add)
      return false;
    Node *var = definedBy(add->operand(0), OpKind::ReduceMean);
    Value *eps = add->operand(1);
    if (!var || !lastAxisMean(var) || !eps->isConstant() || eps->type().numElements() != 1)
      return false;
    const Node *pow = definedBy(var->operand(0), OpKind::Pow),
               *mul = definedBy(var->operand(0), OpKind::Mul);
    bool squares =
        (pow && isSplatConstant(pow->operand(1), 2.0) && pow->operand(0) == sub->result()) ||
        (mul && mul->operand(0) == sub->result() && mul->operand(1) == sub->result());
    DType dt = x->dtype();
    if (!squares || (dt != DType::F32 && dt != DType::F64) || n.result()->type() != x->type())
      return false;
    int64_t d = x->shape().back();
    Value *one = rw.createConstant(
        "ln.scale", dt == DType::F32
                        ? Tensor::fromVector(TensorType(dt, {d}), std::vector<float>(d, 1.0f))
                        : Tensor::fromVector(TensorType(dt, {d}), std::vector<double>(d, 1.0)));
    Value *zero = rw.createConstant(
        "ln.bias", dt == DType::F32
                       ? Tensor::fromVector(TensorType(dt, {d}), std::vector<float>(d, 0.0f))
                       : Tensor::fromVector(TensorType(dt, {d}), std::vector<double>(d, 0.0)));
    return replaceWith(n, rw, OpKind::LayerNormalization, {x, one, zero},
                       {{"axis", Attribute(int64_t{-1})},
                        {"epsilon", Attribute(static_cast<float>(eps->data().getDouble(0)))}});
  });

  // y = x / sqrt(mean(x^2) + eps) (or x * (1 / sqrt(...))), the mean over the last
  // axis: RMSNormalization with a scale of ones (FP32: its kernel; the FP32 stash).
  auto rmsFromParts = [](Node &n, PatternRewriter &rw, Value *x, Value *denominator) {
    Node *sqrt = definedBy(denominator, OpKind::Sqrt);
    Node *add = sqrt ? definedBy(sqrt->operand(0), OpKind::Add) : nullptr;
    Node *mean = add ? definedBy(add->operand(0), OpKind::ReduceMean) : nullptr;
    Value *eps = add ? add->operand(1) : nullptr;
    if (!mean || mean->attrInt("keepdims") != 1 || mean->attrInts("axes").size() != 1 ||
        !eps->isConstant() || eps->type().numElements() != 1)
      return false;
    const int64_t a = mean->attrInts("axes")[0], r = x->rank();
    if (a != -1 && a != r - 1)
      return false;
    const Node *pow = definedBy(mean->operand(0), OpKind::Pow),
               *mul = definedBy(mean->operand(0), OpKind::Mul);
    const bool squares = (pow && isSplatConstant(pow->operand(1), 2.0) && pow->operand(0) == x) ||
                         (mul && mul->operand(0) == x && mul->operand(1) == x);
    if (!squares || x->dtype() != DType::F32 || n.result()->type() != x->type())
      return false;
    const int64_t d = x->shape().back();
    Value *one = rw.createConstant(
        "rms.scale", Tensor::fromVector(TensorType(DType::F32, {d}), std::vector<float>(d, 1.0f)));
    return replaceWith(n, rw, OpKind::RMSNormalization, {x, one},
                       {{"axis", Attribute(int64_t{-1})},
                        {"epsilon", Attribute(static_cast<float>(eps->data().getDouble(0)))}});
  };
  add("rmsnorm-from-parts", OpKind::Div, [rmsFromParts](Node &n, PatternRewriter &rw) {
    return rmsFromParts(n, rw, n.operand(0), n.operand(1));
  });
  add("rmsnorm-from-reciprocal", OpKind::Mul, [rmsFromParts](Node &n, PatternRewriter &rw) {
    for (unsigned side = 0; side < 2; ++side)
      if (Node *rec = definedBy(n.operand(1 - side), OpKind::Reciprocal))
        if (rmsFromParts(n, rw, n.operand(side), rec->operand(0)))
          return true;
    return false;
  });
  // A constant per-feature Mul after an RMSNormalization with a constant scale folds
  // into it.
  add("fold-rmsnorm-scale", OpKind::Mul, [](Node &n, PatternRewriter &rw) {
    for (unsigned side = 0; side < 2; ++side) {
      Value *v = n.operand(side), *c = n.operand(1 - side);
      Node *rms = definedBy(v, OpKind::RMSNormalization);
      if (!rms || v->uses().size() != 1 || rw.graph().isOutput(v) || !c->isConstant() ||
          n.result()->type() != v->type() || v->dtype() != DType::F32)
        continue;
      const int64_t axis = rms->attrInt("axis"), d = v->shape().back();
      Value *scale = rms->operand(1);
      if ((axis != -1 && axis != v->rank() - 1) || !scale->isConstant() ||
          scale->shape() != Shape{d} || scale->dtype() != DType::F32 ||
          c->type().numElements() != d || c->shape().back() != d || c->dtype() != DType::F32)
        continue;
      std::vector<float> s = scale->data().toVector<float>(), cv = c->data().toVector<float>();
      for (int64_t i = 0; i < d; ++i)
        s[i] *= cv[i];
      Value *ns = rw.createConstant("rms.scale", Tensor::fromVector(scale->type(), s));
      return replaceWith(n, rw, OpKind::RMSNormalization, {rms->operand(0), ns}, rms->attrs());
    }
    return false;
  });

  // A constant per-feature Mul or Add after a LayerNormalization with constant
  // scale and bias folds into them.
  for (auto [k, scales] : {std::pair{OpKind::Mul, true}, {OpKind::Add, false}})
    add("fold-layernorm-affine", k, [scales = scales](Node &n, PatternRewriter &rw) {
      for (unsigned side = 0; side < 2; ++side) {
        Value *lnv = n.operand(side), *c = n.operand(1 - side);
        Node *ln = definedBy(lnv, OpKind::LayerNormalization);
        if (!ln || ln->numResults() != 1 || lnv->uses().size() != 1 || rw.graph().isOutput(lnv) ||
            !c->isConstant() || n.result()->type() != lnv->type())
          continue;
        int64_t axis = ln->attrInt("axis"), d = lnv->shape().back();
        Value *scale = ln->operand(1), *bias = ln->operand(2);
        if ((axis != -1 && axis != lnv->rank() - 1) || !scale->isConstant() || !bias ||
            !bias->isConstant() || scale->shape() != Shape{d} || bias->shape() != Shape{d} ||
            c->type().numElements() != d || c->shape().back() != d || c->dtype() != lnv->dtype() ||
            lnv->dtype() != DType::F32)
          continue;
        std::vector<float> s = scale->data().toVector<float>(), b = bias->data().toVector<float>(),
                           cv = c->data().toVector<float>();
        for (int64_t i = 0; i < d; ++i) {
          if (scales) {
            s[i] *= cv[i];
            b[i] *= cv[i];
          } else {
            b[i] += cv[i];
          }
        }
        Value *ns = rw.createConstant("ln.scale", Tensor::fromVector(scale->type(), s));
        Value *nb = rw.createConstant("ln.bias", Tensor::fromVector(bias->type(), b));
        return replaceWith(n, rw, OpKind::LayerNormalization, {ln->operand(0), ns, nb},
                           ln->attrs());
      }
      return false;
    });
  return p;
}

class Canonicalize : public Pass {
public:
  std::string_view name() const override { return "canonicalize"; }
  bool run(Graph &g, PassContext &ctx) override {
    static const auto pats = patterns();
    return applyPatternsGreedily(g, pats, ctx);
  }
};

} // namespace

std::unique_ptr<Pass> createCanonicalize() {
  return std::make_unique<Canonicalize>();
}

} // namespace dlc::passes
