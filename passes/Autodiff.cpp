//===- Autodiff.cpp - Reverse-mode differentiation -------------------------===//
//
// The pass differentiates the graph's first output (the loss) with respect to
// every trainable parameter and appends the gradients as outputs "grad.NAME", where
// the training pipeline's next passes find them (Training.h). With FP16's loss-scale
// state (kLossScaleName), the loss gradient is seeded with the scale.
//===----------------------------------------------------------------------===//
#include "dlc/passes/Autodiff.h"

#include "dlc/ir/FusionRules.h"
#include "dlc/ir/GradBuilder.h"
#include "dlc/passes/Pass.h"
#include "dlc/passes/Training.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace dlc::passes {

using namespace ir;

std::string gradientOutputName(const Value &parameter) {
  return "grad." + parameter.name();
}

size_t promoteTrainableConstants(Graph &g, const std::function<bool(const std::string &)> &frozen) {
  // Variables with updates are state (running statistics); the rest are candidates.
  std::set<const Value *> state;
  for (const GraphOutput &o : g.outputs())
    if (o.isUpdate())
      state.insert(o.variable);
  std::vector<Value *> candidates;
  for (const auto *list : {&g.constants(), &g.parameters()})
    for (const auto &c : *list)
      if (!state.count(c.get()))
        candidates.push_back(c.get());
  size_t trained = 0;
  for (Value *c : candidates) {
    bool weight = isFloat(c->dtype()) && c->rank() > 0 && !(frozen && frozen(c->name())) &&
                  llvm::any_of(c->uses(), [](const Use &u) {
                    return !llvm::is_contained(u.user->def().stateOperands, u.operandIndex);
                  });
    if (weight) {
      auto v = c->data().toVector<double>();
      weight = std::all_of(v.begin(), v.end(),
                           [](double x) { return std::isfinite(x); }); // not a -inf mask
    }
    if (weight && c->isConstant())
      g.makeParameter(c);
    else if (weight)
      g.setTrainable(c, true);
    else if (c->isParameter())
      g.makeConstant(c);
    trained += weight;
  }
  return trained;
}

namespace {

/// The values that depend on a trainable parameter.
std::unordered_set<const Value *> findVarying(const Graph &g) {
  std::unordered_set<const Value *> varying;
  for (const auto &p : g.parameters())
    if (p->isTrainable())
      varying.insert(p.get());
  for (const Node &n : g.nodes())
    if (llvm::any_of(n.operands(), [&](Value *v) { return v && varying.count(v); }))
      for (unsigned i = 0; i < n.numResults(); ++i)
        varying.insert(n.result(i));
  return varying;
}

} // namespace

llvm::Error decomposeForGradients(Graph &g) {
  auto varying = findVarying(g);
  GradBuilder b(g);
  bool decomposed = false;
  for (Node *n : g.nodeList()) {
    if (n->def().gradient || !n->def().decompose || llvm::none_of(n->operands(), [&](Value *v) {
          return v && isFloat(v->dtype()) && varying.count(v);
        }))
      continue;
    b.begin(*n, {}, {});
    auto parts = n->def().decompose(b, *n);
    if (!parts)
      return errorf("{0}: cannot differentiate: {1}", n->describe(),
                    llvm::toString(parts.takeError()));
    for (unsigned i = 0; i < n->numResults(); ++i)
      g.replaceAllUsesWith(n->result(i), (*parts)[i]);
    g.eraseNode(n);
    decomposed = true;
  }
  if (decomposed && !g.topologicalSort())
    return makeError("internal error: a decomposition made a cycle");
  return llvm::Error::success();
}

llvm::Error flashAttentionForGradients(Graph &g, bool fuseDropout) {
  auto varying = findVarying(g);
  GradBuilder b(g);
  b.setNameSuffix("");
  bool rewrote = false;
  for (Node *mm2 : g.nodeList()) {
    if (mm2->kind() != OpKind::MatMul)
      continue;
    // (Training's Dropout of the probabilities: FlashAttention applies its mask.)
    Node *drop = mm2->operand(0)->definingNode();
    if (!drop || drop->kind() != OpKind::Dropout || mm2->operand(0)->uses().size() != 1 ||
        g.isOutput(mm2->operand(0)) || drop->operand(1)->dtype() != DType::I64 ||
        drop->operand(1)->type().numElements() != 1)
      drop = nullptr;
    if (drop && !fuseDropout)
      continue;
    std::vector<Node *> core = attentionCore(*mm2, drop ? drop->operand(0) : nullptr);
    if (core.empty())
      continue;
    Node *mm1 = core.front();
    Value *q = mm1->operand(0), *kT = mm1->operand(1), *v = mm2->operand(1);
    const DType dt = q->dtype();
    if ((dt != DType::F16 && dt != DType::BF16) ||
        !(varying.count(q) || varying.count(kT) || varying.count(v)))
      continue;
    const Shape &ss = mm1->result()->shape();
    const int64_t r = q->rank(), Sq = ss[r - 2], Sk = ss[r - 1], hd = q->shape()[r - 1],
                  hdv = v->shape()[r - 1];
    if (Sq == 0 || Sk == 0 || hd % 8 != 0 || hdv % 8 != 0 || hd == 0 || hdv == 0 ||
        hd > kFlashAttentionMaxHeadSize || hdv > kFlashAttentionMaxHeadSize ||
        product(Shape(ss.begin(), ss.end() - 2)) > kMaxAttentionBatchHeads)
      continue;
    // The score chain: positive scales, then at most one bias that needs no gradient
    // and broadcasts to the scores (a padding mask, a position bias), and the exact
    // causal mask's nodes anywhere.
    const AttentionMask mask = attentionCausalMask(core, Sq, Sk);
    const auto chain = attentionChain(core, mask.nodes, [&](const Value &x) {
      return x.dtype() == dt && !varying.count(&x) && attentionBiasView(x.shape(), ss);
    });
    if (!chain)
      continue;
    Value *bias = chain->bias;
    b.begin(*mm2, {}, {});
    b.setInsertionPoint(mm2);
    std::vector<int64_t> perm(static_cast<size_t>(r));
    for (int64_t d = 0; d < r; ++d)
      perm[static_cast<size_t>(d)] = d;
    std::swap(perm[static_cast<size_t>(r - 1)], perm[static_cast<size_t>(r - 2)]);
    const bool causal = mask.exact && mask.reach < Sk - 1;
    std::vector<Value *> operands = {q, b.transpose(kT, perm), v};
    if (bias || drop)
      operands.push_back(bias);
    AttrMap attrs = {{"scale", Attribute(chain->scale)},
                     {"causal", Attribute(int64_t{causal})},
                     {"reach", Attribute(causal ? mask.reach : int64_t{0})}};
    if (drop) {
      operands.push_back(drop->operand(1));
      attrs["dropout"] = Attribute(drop->attrFloat("ratio"));
      attrs["seed"] = Attribute(drop->attrInt("seed"));
    }
    std::vector<Value *> res = b.ops(OpKind::FlashAttention, operands, attrs, 2);
    if (b.failed())
      return b.takeError();
    const std::string name = mm2->result()->name();
    g.replaceAllUsesWith(mm2->result(), res[0]);
    g.eraseNode(mm2);
    if (drop)
      g.eraseNode(drop);
    for (auto it = core.rbegin(); it != core.rend(); ++it)
      g.eraseNode(*it);
    adoptResultNames(g, {name}, {}, {res[0]});
    rewrote = true;
  }
  if (rewrote && !g.topologicalSort())
    return makeError("internal error: the attention rewrite made a cycle");
  return llvm::Error::success();
}

llvm::Expected<std::vector<Gradient>> buildGradients(Graph &g, Value *loss, Value *seed,
                                                     bool fuseAttentionDropout) {
  if (!isFloat(loss->dtype()) || loss->type().numElements() != 1)
    return errorf("the loss '{0}' must be a floating-point scalar, got {1}", loss->name(),
                  loss->type().str());
  if (llvm::none_of(g.parameters(), [](const auto &p) { return p->isTrainable(); }))
    return makeError("the model has no trainable parameters");
  // Ops without a rule of their own that a gradient must cross are decomposed first.
  if (auto e = decomposeForGradients(g))
    return e;
  if (auto e = flashAttentionForGradients(g, fuseAttentionDropout))
    return e;
  auto varying = findVarying(g);
  GradBuilder b(g);
  std::vector<Node *> forward = g.nodeList();

  std::unordered_map<const Value *, Value *> grads;
  if (seed) {
    if (!isFloat(seed->dtype()) || seed->type().numElements() != 1)
      return errorf("the gradient seed '{0}' must be a floating-point scalar, got {1}",
                    seed->name(), seed->type().str());
    Value *s = b.cast(seed, loss->dtype());
    grads[loss] = s->shape() == loss->shape() ? s : b.reshape(s, loss->shape());
  } else {
    grads[loss] = b.full(1, loss->dtype(), loss->shape());
  }
  for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
    Node *n = *it;
    std::vector<Value *> resultGrads;
    bool any = false;
    for (unsigned i = 0; i < n->numResults(); ++i) {
      auto gi = grads.find(n->result(i));
      resultGrads.push_back(gi == grads.end() ? nullptr : gi->second);
      any |= resultGrads.back() != nullptr;
    }
    std::vector<bool> wanted;
    bool anyWanted = false;
    for (Value *v : n->operands()) {
      wanted.push_back(v && isFloat(v->dtype()) && varying.count(v));
      anyWanted |= wanted.back();
    }
    if (!any || !anyWanted)
      continue;
    if (!n->def().gradient)
      return errorf("{0}: op {1} has no gradient rule, and the loss depends on a trainable "
                    "parameter through it",
                    n->describe(), n->opName());
    b.begin(*n, std::move(resultGrads), std::move(wanted));
    if (auto e = n->def().gradient(b, *n))
      return errorf("{0}: {1}", n->describe(), llvm::toString(std::move(e)));
    if (auto e = b.takeError())
      return e;
    for (auto [i, gi] : b.operandGrads()) {
      Value *&acc = grads[n->operand(i)];
      acc = acc ? b.add(acc, gi) : gi;
    }
    if (auto e = b.takeError())
      return e;
  }

  std::vector<Gradient> out;
  for (const auto &p : g.parameters()) {
    if (!p->isTrainable())
      continue;
    auto gi = grads.find(p.get());
    Value *gv = gi != grads.end() ? gi->second : b.zerosLike(p.get());
    if (auto e = b.takeError())
      return e;
    out.push_back({p.get(), gv});
  }
  return out;
}

namespace {

class Autodiff : public Pass {
public:
  std::string_view name() const override { return "autodiff"; }
  bool run(Graph &g, PassContext &ctx) override {
    auto loss = llvm::find_if(g.outputs(), [](const GraphOutput &o) { return !o.isUpdate(); });
    if (loss == g.outputs().end()) {
      ctx.fail(makeError("autodiff: the graph has no output to use as the loss"));
      return false;
    }
    // FP16 training seeds the loss gradient with the loss scale (train-step made it).
    Value *seed = g.findValue(kLossScaleName);
    auto grads = buildGradients(g, loss->value, seed && seed->isParameter() ? seed : nullptr,
                                ctx.training && ctx.training->fuseAttentionDropout);
    if (!grads) {
      ctx.fail(grads.takeError());
      return false;
    }
    for (const Gradient &gr : *grads) {
      std::string name = gradientOutputName(*gr.parameter);
      if (llvm::any_of(g.outputs(), [&](const GraphOutput &o) { return o.name == name; })) {
        ctx.fail(errorf("autodiff: the graph already has an output named '{0}'", name));
        return true;
      }
      g.addOutput(name, gr.grad);
    }
    return true;
  }
};

} // namespace

std::unique_ptr<Pass> createAutodiff() {
  return std::make_unique<Autodiff>();
}

} // namespace dlc::passes
