//===- MixedPrecision.cpp - Lower FP32 graphs to FP16/BF16 mixed precision ----===//
//
// Decides per node whether it runs in the reduced precision (FP16 or BF16), from
// the op table's policy (OpDef::fp16, refined per node by OpDef::fp16Refine):
//  - Allow:  runs in reduced precision (its kernels still accumulate in FP32);
//  - Follow: no arithmetic of its own: reduced precision when one of its floating
//            operands already is (visited in topological order);
//  - Deny / Unset: stays FP32.
// User overrides (--fp32-ops, --fp32-nodes) force FP32, and so does every node that
// computes a quantization parameter (OpDef::fp32Operands: the scale and zero point of
// QuantizeLinear/DequantizeLinear, and what computes them, up to the data they are
// computed from; a reduced node keeps such operands FP32).
//
// Then rewrites: an FP32 operand of a reduced node is converted once per value (a
// constant at compile time, anything else through one shared Cast), the node's
// results take their inferred types, and an FP32 node reading a reduced value gets
// one shared Cast back. Graph inputs and outputs keep their dtype unless
// PrecisionOptions::ioReduced. FP64 values are never touched.
// Canonicalize's cast-chain folding then removes casts that became exact no-ops.
//===----------------------------------------------------------------------===//
#include "dlc/passes/Pass.h"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

namespace dlc::passes {
namespace {

using namespace ir;

class MixedPrecision : public Pass {
public:
  std::string_view name() const override { return "precision"; }

  bool run(Graph &g, PassContext &ctx) override {
    const PrecisionOptions &po = ctx.precision;
    DType low = po.reduced;
    if (low != DType::F16 && low != DType::BF16) {
      ctx.fail(errorf("the reduced precision must be f16 or bf16, not {0}", dtypeName(low)));
      return false;
    }
    bool changed = false;
    if (po.ioReduced)
      for (const auto &in : g.inputs())
        if (in->dtype() == DType::F32) {
          in->setType({low, in->shape()});
          lowered_.insert(in.get());
          changed = true;
        }

    std::unordered_map<Value *, Value *> toLow, toF32; // shared conversions per value
    auto convert = [&](Value *v, DType to, Node *before) -> Value * {
      auto &cache = to == DType::F32 ? toF32 : toLow;
      if (auto it = cache.find(v); it != cache.end())
        return it->second;
      Value *r;
      if (v->isConstant()) {
        Tensor t = Tensor::fromVector(TensorType(to, v->shape()), v->data().toVector<float>());
        r = g.addConstant(g.uniqueName(v->name() + "." + std::string(dtypeName(to))), std::move(t));
      } else {
        // Before the first user (nodes are visited in order, so later users share it).
        Node *c = g.createNode(OpKind::Cast, {v}, {TensorType(to, v->shape())},
                               {{"to", Attribute(std::string(dtypeName(to)))}}, "", before,
                               {g.uniqueName(v->name() + "." + std::string(dtypeName(to)))});
        r = c->result();
      }
      cache[v] = r;
      return r;
    };

    markParameterNodes(g);
    for (Node *n : g.nodeList()) {
      if (!runsReduced(*n, po, low)) {
        // Reading a value that became reduced in place: one shared cast back.
        // (A conversion reads any dtype and keeps its declared result.)
        for (unsigned i = 0; i < n->numOperands(); ++i)
          if (Value *v = n->operand(i);
              v && lowered_.count(v) && n->def().fp16 != Fp16Policy::Convert) {
            n->setOperand(i, convert(v, DType::F32, n));
            changed = true;
          }
        continue;
      }
      // (Quantization parameters, OpDef::fp32Operands, stay FP32 even here.)
      for (unsigned i = 0; i < n->numOperands(); ++i)
        if (Value *v = n->operand(i);
            v && v->dtype() == DType::F32 && !(i < 32 && (n->def().fp32Operands >> i & 1u))) {
          n->setOperand(i, convert(v, low, n));
          changed = true;
        }
      auto types = n->def().infer(*n);
      if (!types) {
        ctx.fail(errorf("{0}: {1}", n->describe(), llvm::toString(types.takeError())));
        return changed;
      }
      for (unsigned r = 0; r < n->numResults(); ++r)
        if (n->result(r)->type() != (*types)[r]) {
          n->result(r)->setType((*types)[r]);
          lowered_.insert(n->result(r));
          changed = true;
        }
    }
    // Graph outputs keep their declared dtype, or all become reduced (ioReduced).
    for (size_t i = 0; i < g.outputs().size(); ++i) {
      Value *v = g.outputs()[i].value;
      if (!po.ioReduced && lowered_.count(v))
        g.setOutputValue(i, convert(v, DType::F32, nullptr));
      else if (po.ioReduced && v->dtype() == DType::F32)
        g.setOutputValue(i, convert(v, low, nullptr));
      changed |= g.outputs()[i].value != v;
    }
    if (changed) {
      g.removeUnusedConstants();
      g.topologicalSort();
    }
    return changed;
  }

private:
  /// Whether n runs in the reduced precision, given the decisions made so far
  /// (operands already carry their new types: nodes are visited in order).
  bool runsReduced(const Node &n, const PrecisionOptions &po, DType low) const {
    if (forcedFp32(n, po) || parameters_.count(&n))
      return false;
    bool floatData = false, reducedOperand = false, onlyConstants = true;
    for (Value *v : n.operands())
      if (v && (v->dtype() == DType::F32 || v->dtype() == low)) {
        floatData = true;
        reducedOperand |= v->dtype() == low && !v->isConstant();
        onlyConstants &= v->isConstant();
      }
    if (!floatData)
      return false;
    switch (policy(n)) {
    case Fp16Policy::Allow:
      return true;
    case Fp16Policy::Follow:
      // Float data only from constants (an embedding table's Gather): reduced when
      // every user is an Allow op, so the table is converted once and no cast follows.
      return reducedOperand || (onlyConstants && allUsersAllow(n, po));
    default:
      return false;
    }
  }
  static Fp16Policy policy(const Node &n) {
    return n.def().fp16Refine ? n.def().fp16Refine(n) : n.def().fp16;
  }
  static bool forcedFp32(const Node &n, const PrecisionOptions &po) {
    return po.fp32Nodes.count(n.name()) || po.fp32Ops.count(n.opName());
  }
  static bool allUsersAllow(const Node &n, const PrecisionOptions &po) {
    bool any = false;
    for (unsigned r = 0; r < n.numResults(); ++r) {
      if (n.graph()->isOutput(n.result(r)))
        return false;
      for (const Use &u : n.result(r)->uses()) {
        if (forcedFp32(*u.user, po) || policy(*u.user) != Fp16Policy::Allow)
          return false;
        any = true;
      }
    }
    return any;
  }

  /// The nodes that compute quantization parameters: a result used as one
  /// (OpDef::fp32Operands), or by such a node, and no larger than the parameters it
  /// reaches (the scale's own reductions and arithmetic, not the data they are
  /// computed from). A small node that also feeds the data path stays FP32 too (a
  /// cast follows it). Visited from the last node back.
  void markParameterNodes(const Graph &g) {
    parameters_.clear();
    std::vector<Node *> nodes = g.nodeList();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
      const Node *n = *it;
      int64_t bound = -1, largest = 0;
      for (unsigned r = 0; r < n->numResults(); ++r) {
        const int64_t size = n->result(r)->type().numElements();
        largest = std::max(largest, size);
        for (const Use &u : n->result(r)->uses())
          if (u.operandIndex < 32 && (u.user->def().fp32Operands >> u.operandIndex & 1u))
            bound = std::max(bound, size);
          else if (auto p = parameters_.find(u.user); p != parameters_.end())
            bound = std::max(bound, p->second);
      }
      if (bound >= 0 && largest <= bound)
        parameters_[n] = bound;
    }
  }

  std::set<Value *> lowered_;
  std::map<const Node *, int64_t> parameters_; // and the size of what they reach
};

} // namespace

std::unique_ptr<Pass> createMixedPrecision() {
  return std::make_unique<MixedPrecision>();
}

} // namespace dlc::passes
