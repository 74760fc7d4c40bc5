//===- Accuracy.cpp - Per-node error of mixed precision against FP32 --------===//
#include "dlc/passes/Accuracy.h"

#include "llvm/Support/Format.h"

#include <cmath>
#include <limits>
#include <unordered_map>

namespace dlc::passes {

using namespace ir;

double TensorError::score() const {
  return nonFinite ? std::numeric_limits<double>::infinity() : maxRel;
}

TensorError compareToReference(const Tensor &actual, const Tensor &reference) {
  TensorError e;
  int64_t n = std::min(actual.numElements(), reference.numElements());
  if (n == 0)
    return e;
  if (!isFloat(reference.dtype()) || !isFloat(actual.dtype())) {
    int64_t differ = 0;
    for (int64_t i = 0; i < n; ++i)
      differ += actual.getDouble(i) != reference.getDouble(i);
    e.maxRel = static_cast<double>(differ) / static_cast<double>(n);
    e.maxAbs = e.meanAbs = e.maxRel;
    return e;
  }
  double scale = 0, sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    double a = actual.getDouble(i), b = reference.getDouble(i);
    if (!std::isfinite(b)) // the reference overflowed too: nothing to blame on precision
      continue;
    scale = std::max(scale, std::fabs(b));
    if (!std::isfinite(a)) {
      e.nonFinite = true;
      continue;
    }
    double d = std::fabs(a - b);
    e.maxAbs = std::max(e.maxAbs, d);
    sum += d;
  }
  e.meanAbs = sum / static_cast<double>(n);
  e.maxRel = e.maxAbs / std::max(scale, 1e-30);
  return e;
}

Pipeline precisionPipeline() {
  Pipeline full = defaultPipeline(1, true);
  return Pipeline(full.begin() + 1, full.end()); // drop the clean-up before the pass
}

namespace {

/// A dtype conversion (Cast). Those the precision pass inserted are not in the FP32
/// graph.
bool isConversion(const Node &n) {
  return n.def().fp16 == Fp16Policy::Convert;
}

struct Round {
  std::vector<AccuracyReport::Output> outputs;
  std::optional<AccuracyReport::Culprit> culprit; // the first jump
  std::optional<AccuracyReport::Culprit> largest; // the largest error growth, if no jump
  size_t reduced = 0, fp32 = 0;
};

llvm::Expected<Round> runRound(const Graph &base, const TensorMap &inputs,
                               const TensorMap &reference, const PrecisionOptions &po,
                               const AccuracyOptions &opts) {
  std::unique_ptr<Graph> g = base.clone();
  PassContext ctx;
  ctx.precision = po;
  if (auto e = PassManager().run(*g, precisionPipeline(), ctx))
    return e;
  TensorMap in;
  for (const auto &v : g->inputs()) {
    const Tensor &t = inputs.at(v->name());
    in[v->name()] =
        t.dtype() == v->dtype() ? t : Tensor::fromVector(v->type(), t.toVector<float>());
  }
  Round r;
  for (const Node &n : g->nodes()) {
    bool anyReduced = false;
    for (unsigned i = 0; i < n.numResults(); ++i)
      anyReduced |= isReducedFloat(n.result(i)->dtype());
    if (!isConversion(n))
      ++(anyReduced ? r.reduced : r.fp32);
  }
  // The FP32 reference of a value: by name, or through the casts the pass inserted.
  std::unordered_map<const Value *, std::string> refName;
  auto referenceOf = [&](const Value *v) -> const std::string * {
    if (auto it = refName.find(v); it != refName.end())
      return &it->second;
    if (reference.count(v->name()))
      return &(refName[v] = v->name());
    if (const Node *d = v->definingNode(); d && isConversion(*d))
      if (auto it = refName.find(d->operand(0)); it != refName.end())
        return &(refName[v] = it->second);
    return nullptr;
  };
  std::unordered_map<const Value *, double> err;
  auto errorOf = [&](const Value *v) {
    auto it = err.find(v);
    return it == err.end() ? 0.0 : it->second;
  };
  double bestGrowth = 0;
  auto observe = [&](const Node &n, const std::vector<Tensor> &res) {
    double in = 0, out = 0;
    for (const Value *v : n.operands())
      if (v)
        in = std::max(in, errorOf(v));
    std::string worstValue;
    for (unsigned i = 0; i < n.numResults(); ++i) {
      const std::string *ref = referenceOf(n.result(i));
      if (!ref || reference.at(*ref).type().shape != res[i].type().shape)
        continue;
      double s = compareToReference(res[i], reference.at(*ref)).score();
      err[n.result(i)] = s;
      if (s >= out) {
        out = s;
        worstValue = n.result(i)->name();
      }
    }
    if (worstValue.empty() || out <= in)
      return;
    // A cast the pass inserted is not a node of the model: blame its first user
    // (the reduced node that reads the converted value).
    const Node *blamed = &n;
    if (isConversion(n) && !base.findValue(n.result()->name())) {
      if (n.result()->uses().empty())
        return;
      blamed = n.result()->uses().front().user;
    }
    AccuracyReport::Culprit c{blamed->name(), std::string(blamed->opName()), worstValue, out, in};
    bool jump = out > opts.jumpThreshold && (in == 0 || out >= opts.jumpRatio * in);
    if (jump && !r.culprit)
      r.culprit = c;
    double growth = in > 0 ? out / in : out / 1e-12;
    if (out > opts.jumpThreshold && growth > bestGrowth) {
      bestGrowth = growth;
      r.largest = c;
    }
  };
  auto outs = interpret(*g, in, observe);
  if (!outs)
    return outs.takeError();
  for (const GraphOutput &o : g->outputs()) {
    const Tensor &ref = reference.at("output:" + o.name);
    r.outputs.push_back({o.name, compareToReference(outs->at(o.name), ref)});
  }
  return r;
}

} // namespace

llvm::Expected<AccuracyReport> checkAccuracy(const Graph &base, const TensorMap &inputs,
                                             const AccuracyOptions &opts) {
  // Every value of the FP32 run, by name (and each output as "output:NAME").
  TensorMap reference;
  auto ref = interpret(base, inputs, [&](const Node &n, const std::vector<Tensor> &res) {
    for (unsigned i = 0; i < n.numResults(); ++i)
      reference[n.result(i)->name()] = res[i];
  });
  if (!ref)
    return ref.takeError();
  for (auto &[name, t] : *ref)
    reference["output:" + name] = std::move(t);

  AccuracyReport rep;
  rep.dtype = std::string(dtypeName(opts.precision.reduced));
  PrecisionOptions po = opts.precision;
  auto withinTarget = [&](const Round &r) {
    for (const auto &o : r.outputs)
      if (o.error.score() > opts.target)
        return false;
    return true;
  };
  for (int round = 0;; ++round) {
    auto r = runRound(base, inputs, reference, po, opts);
    if (!r)
      return r.takeError();
    if (round == 0) {
      rep.outputs = r->outputs;
      rep.reducedNodes = r->reduced;
      rep.fp32Nodes = r->fp32;
    } else {
      rep.outputsWithSuggestion = r->outputs;
    }
    rep.withinTarget = withinTarget(*r);
    if (rep.withinTarget || round >= opts.maxSuggestions)
      break;
    std::optional<AccuracyReport::Culprit> c = r->culprit ? r->culprit : r->largest;
    if (!c)
      break;
    rep.culprits.push_back(*c);
    if (!c->node.empty() && !po.fp32Nodes.count(c->node)) {
      po.fp32Nodes.insert(c->node);
      rep.suggestedFp32Nodes.push_back(c->node);
    } else if (c->node.empty() && !po.fp32Ops.count(c->op)) {
      po.fp32Ops.insert(c->op);
      rep.suggestedFp32Ops.push_back(c->op);
    } else {
      break; // already FP32: nothing more to suggest
    }
  }
  return rep;
}

namespace {

void printOutputs(llvm::raw_ostream &os, const std::vector<AccuracyReport::Output> &outs) {
  os << llvm::format("  %-24s %12s %12s %12s\n", (const char *)"output", (const char *)"max abs",
                     (const char *)"mean abs", (const char *)"max rel");
  for (const auto &o : outs)
    os << llvm::format("  %-24s %12.4g %12.4g %12.4g%s\n", o.name.c_str(), o.error.maxAbs,
                       o.error.meanAbs, o.error.score(),
                       o.error.nonFinite ? "  (inf/nan where FP32 is finite)" : "");
}

std::string joined(const std::vector<std::string> &v) {
  std::string s;
  for (const std::string &x : v)
    s += (s.empty() ? "" : ",") + x;
  return s;
}

/// JSON has no infinity: a non-finite error is null.
llvm::json::Value number(double v) {
  return std::isfinite(v) ? llvm::json::Value(v) : llvm::json::Value(nullptr);
}

llvm::json::Array outputsJson(const std::vector<AccuracyReport::Output> &outs) {
  llvm::json::Array a;
  for (const auto &o : outs)
    a.push_back(llvm::json::Object{{"name", o.name},
                                   {"max_abs", o.error.maxAbs},
                                   {"mean_abs", o.error.meanAbs},
                                   {"max_rel", o.error.maxRel},
                                   {"non_finite", o.error.nonFinite}});
  return a;
}

} // namespace

void AccuracyReport::print(llvm::raw_ostream &os, double target) const {
  os << "accuracy of " << dtype << " against fp32 (reference interpreter; " << reducedNodes
     << " nodes in " << dtype << ", " << fp32Nodes << " in fp32):\n";
  printOutputs(os, outputs);
  if (culprits.empty()) {
    os << (withinTarget ? "every output is within " : "no node's error jumps; outputs exceed ")
       << llvm::format("%g", target) << "\n";
    return;
  }
  os << "where the error jumps (in the order found, each with the others in fp32):\n";
  for (const Culprit &c : culprits)
    os << llvm::format("  %-32s %-20s error %10.4g  (its inputs: %.4g)\n",
                       (c.node.empty() ? "(unnamed)" : c.node).c_str(), c.op.c_str(), c.error,
                       c.inputError);
  os << "suggestion:";
  if (!suggestedFp32Nodes.empty())
    os << " --fp32-nodes=" << joined(suggestedFp32Nodes);
  if (!suggestedFp32Ops.empty())
    os << " --fp32-ops=" << joined(suggestedFp32Ops);
  os << "\nwith it:\n";
  printOutputs(os, outputsWithSuggestion);
  os << (withinTarget ? "every output is within " : "outputs still exceed ")
     << llvm::format("%g", target) << "\n";
}

llvm::json::Value AccuracyReport::toJson() const {
  llvm::json::Array cs;
  for (const Culprit &c : culprits)
    cs.push_back(llvm::json::Object{{"node", c.node},
                                    {"op", c.op},
                                    {"value", c.value},
                                    {"error", number(c.error)},
                                    {"input_error", number(c.inputError)}});
  return llvm::json::Object{{"dtype", dtype},
                            {"reduced_nodes", static_cast<int64_t>(reducedNodes)},
                            {"fp32_nodes", static_cast<int64_t>(fp32Nodes)},
                            {"outputs", outputsJson(outputs)},
                            {"culprits", std::move(cs)},
                            {"suggested_fp32_nodes", llvm::json::Array(suggestedFp32Nodes)},
                            {"suggested_fp32_ops", llvm::json::Array(suggestedFp32Ops)},
                            {"outputs_with_suggestion", outputsJson(outputsWithSuggestion)},
                            {"within_target", withinTarget}};
}

} // namespace dlc::passes
