#include "dlc/ir/Interpreter.h"

#include <cmath>
#include <random>
#include <unordered_map>

namespace dlc::ir {

llvm::Expected<std::vector<Tensor>> evaluateNode(const Node &n,
                                                 const std::vector<const Tensor *> &operands) {
  const OpDef &d = n.def();
  if (!d.reference)
    return errorf("{0}: op has no reference kernel", n.describe());
  std::vector<Tensor> out;
  out.reserve(n.numResults());
  for (unsigned i = 0; i < n.numResults(); ++i)
    out.emplace_back(n.result(i)->type());
  if (auto e = d.reference(n, operands, out))
    return errorf("{0}: {1}", n.describe(), llvm::toString(std::move(e)));
  for (unsigned i = 0; i < n.numResults(); ++i)
    if (out[i].type() != n.result(i)->type())
      return errorf("{0}: reference kernel produced {1} for result {2}, expected {3}", n.describe(),
                    out[i].type().str(), i, n.result(i)->type().str());
  return out;
}

llvm::Expected<TensorMap> interpret(const Graph &g, const TensorMap &inputs) {
  return interpret(g, inputs, {});
}

llvm::Expected<TensorMap> interpret(const Graph &g, const TensorMap &inputs,
                                    const NodeObserver &onNode) {
  std::unordered_map<const Value *, Tensor> env;
  for (const auto &in : g.inputs()) {
    auto it = inputs.find(in->name());
    if (it == inputs.end())
      return errorf("missing input '{0}' of type {1}", in->name(), in->type().str());
    if (it->second.type() != in->type())
      return errorf("input '{0}' has type {1}, expected {2}", in->name(), it->second.type().str(),
                    in->type().str());
    env[in.get()] = it->second;
  }
  for (const auto &c : g.constants())
    env[c.get()] = c->data();
  // A parameter takes its initial value unless `inputs` gives it another.
  for (const auto &p : g.parameters()) {
    auto it = inputs.find(p->name());
    if (it != inputs.end() && it->second.type() != p->type())
      return errorf("parameter '{0}' is given type {1}, expected {2}", p->name(),
                    it->second.type().str(), p->type().str());
    env[p.get()] = it != inputs.end() ? it->second : p->data();
  }
  for (const auto &[name, t] : inputs)
    if (!g.findValue(name) || !(g.findValue(name)->isInput() || g.findValue(name)->isParameter()))
      return errorf("'{0}' is not an input of the graph", name);

  // Free intermediate tensors after their last use to bound memory on big models.
  std::unordered_map<const Value *, size_t> remaining;
  for (const Node &n : g.nodes())
    for (Value *v : n.operands())
      if (v)
        ++remaining[v];

  for (const Node &n : g.nodes()) {
    std::vector<const Tensor *> ops;
    for (Value *v : n.operands()) {
      if (!v) {
        ops.push_back(nullptr);
        continue;
      }
      auto it = env.find(v);
      if (it == env.end())
        return errorf("{0}: operand '%{1}' has no value (graph not verified?)", n.describe(),
                      v->name());
      ops.push_back(&it->second);
    }
    auto res = evaluateNode(n, ops);
    if (!res)
      return res.takeError();
    if (onNode)
      onNode(n, *res);
    for (unsigned i = 0; i < n.numResults(); ++i)
      env[n.result(i)] = std::move((*res)[i]);
    for (Value *v : n.operands())
      if (v && --remaining[v] == 0 && !g.isOutput(v) && !v->isInput() && !v->hasData())
        env.erase(v);
  }
  TensorMap out;
  for (const GraphOutput &o : g.outputs())
    out[o.name] = env.at(o.value);
  return out;
}

Tensor randomTensor(const TensorType &type, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 12345);
  int64_t n = type.numElements();
  Tensor t(type);
  void *p = t.mutableRaw();
  if (isFloat(type.dtype)) {
    std::uniform_real_distribution<double> dist(lo, hi);
    for (int64_t i = 0; i < n; ++i)
      storeElement<double>(type.dtype, p, i, dist(rng));
  } else if (type.dtype == DType::Bool) {
    for (int64_t i = 0; i < n; ++i)
      storeElement<bool>(type.dtype, p, i, rng() & 1);
  } else {
    int64_t a = static_cast<int64_t>(std::floor(lo)), b = static_cast<int64_t>(std::ceil(hi));
    if (isUnsignedInt(type.dtype))
      a = std::max<int64_t>(a, 0);
    if (b < a)
      b = a;
    std::uniform_int_distribution<int64_t> dist(a, b);
    for (int64_t i = 0; i < n; ++i)
      storeElement<int64_t>(type.dtype, p, i, dist(rng));
  }
  return t;
}

TensorMap randomInputs(const Graph &g, uint64_t seed) {
  TensorMap m;
  uint64_t k = 0;
  for (const auto &in : g.inputs())
    m[in->name()] = randomTensor(in->type(), seed + 1000 * k++);
  return m;
}

Comparison compareTensors(const Tensor &actual, const Tensor &expected, double rtol, double atol) {
  Comparison c;
  if (actual.shape() != expected.shape()) {
    c.ok = false;
    c.message = "shape " + shapeStr(actual.shape()) + " differs from expected " +
                shapeStr(expected.shape());
    return c;
  }
  bool exact = !isFloat(actual.dtype()) || !isFloat(expected.dtype());
  double worstExcess = -INFINITY;
  int64_t n = actual.numElements();
  for (int64_t i = 0; i < n; ++i) {
    double a = actual.getDouble(i), e = expected.getDouble(i);
    double diff, excess;
    if (std::isnan(a) || std::isnan(e) || std::isinf(a) || std::isinf(e)) {
      bool same = (std::isnan(a) && std::isnan(e)) || a == e;
      diff = same ? 0 : INFINITY;
      excess = same ? -INFINITY : INFINITY;
    } else {
      diff = std::fabs(a - e);
      excess = diff - (exact ? 0.0 : atol + rtol * std::fabs(e));
    }
    c.maxAbsError = std::max(c.maxAbsError, diff);
    if (excess > 0) {
      c.ok = false;
      c.maxRelError = std::max(c.maxRelError, diff / std::max(std::fabs(e), 1e-30));
    }
    if (excess > worstExcess) {
      worstExcess = excess;
      c.worstIndex = i;
    }
  }
  if (!c.ok) {
    double a = actual.getDouble(c.worstIndex), e = expected.getDouble(c.worstIndex);
    c.message = "max abs error " + std::to_string(c.maxAbsError) + ", max rel error " +
                std::to_string(c.maxRelError) + " (element " + std::to_string(c.worstIndex) +
                ": got " + std::to_string(a) + ", expected " + std::to_string(e) + ")";
  }
  return c;
}

} // namespace dlc::ir
