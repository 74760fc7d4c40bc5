//===- Verifier.cpp - Structural and per-op verification -------------------===//
#include "dlc/ir/FusionRules.h"
#include "dlc/ir/TextIR.h"

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace dlc::ir {

static llvm::Error checkType(const TensorType &t, const std::string &what) {
  for (int64_t d : t.shape)
    if (d < 0)
      return errorf("{0} has negative dimension in type {1}", what, t.str());
  auto n = t.checkedNumElements();
  if (!n || *n > (int64_t{1} << 48) ||
      static_cast<uint64_t>(*n) * dtypeSize(t.dtype) > (uint64_t{1} << 50))
    return errorf("{0} has type {1} whose size overflows", what, t.str());
  return llvm::Error::success();
}

llvm::Error verifyNodeSignature(const Node &n) {
  const OpDef &d = n.def();
  int nOps = static_cast<int>(n.numOperands());
  if (nOps < d.minOperands || (d.maxOperands != kVariadic && nOps > d.maxOperands)) {
    std::string expect = d.maxOperands == kVariadic ? "at least " + std::to_string(d.minOperands)
                         : d.minOperands == d.maxOperands ? std::to_string(d.minOperands)
                                                          : std::to_string(d.minOperands) + " to " +
                                                                std::to_string(d.maxOperands);
    return errorf("{0}: expected {1} operands, got {2}", n.describe(), expect, nOps);
  }
  for (int i = 0; i < d.minOperands; ++i)
    if (!n.operand(i))
      return errorf("{0}: required operand {1} is missing", n.describe(), i);
  int nRes = static_cast<int>(n.numResults());
  if (nRes < d.minResults || (d.maxResults != kVariadic && nRes > d.maxResults))
    return errorf("{0}: {1} results is not allowed (expected {2}{3})", n.describe(), nRes,
                  d.minResults,
                  d.maxResults == kVariadic      ? std::string(" or more")
                  : d.maxResults == d.minResults ? std::string()
                                                 : " to " + std::to_string(d.maxResults));
  if (n.numResults() == 0)
    return errorf("{0}: a node must have at least one result", n.describe());
  for (const auto &[name, a] : n.attrs()) {
    const AttrSpec *spec = d.findAttr(name);
    if (!spec)
      return errorf("{0}: unknown attribute '{1}'", n.describe(), name);
    if (spec->kind != a.kind())
      return errorf("{0}: attribute '{1}' must be {2}, got {3}", n.describe(), name,
                    attrKindName(spec->kind), attrKindName(a.kind()));
  }
  for (const AttrSpec &spec : d.attrs)
    if (!spec.dflt && !n.hasAttr(spec.name))
      return errorf("{0}: missing required attribute '{1}'", n.describe(), spec.name);
  for (unsigned i = 0; i < n.numOperands(); ++i)
    if (Value *v = n.operand(i))
      if (auto e = checkType(v->type(), "operand " + std::to_string(i)))
        return errorf("{0}: {1}", n.describe(), llvm::toString(std::move(e)));
  if (d.verify)
    if (auto e = d.verify(n))
      return errorf("{0}: {1}", n.describe(), llvm::toString(std::move(e)));
  return llvm::Error::success();
}

llvm::Error verifyNode(const Node &n) {
  if (auto e = verifyNodeSignature(n))
    return e;
  auto types = n.def().infer(n);
  if (!types)
    return errorf("{0}: {1}", n.describe(), llvm::toString(types.takeError()));
  if (types->size() != n.numResults())
    return errorf("{0}: op produces {1} results, node declares {2}", n.describe(), types->size(),
                  n.numResults());
  for (unsigned i = 0; i < n.numResults(); ++i) {
    if (auto e = checkType((*types)[i], "result " + std::to_string(i)))
      return errorf("{0}: {1}", n.describe(), llvm::toString(std::move(e)));
    if ((*types)[i] != n.result(i)->type())
      return errorf("{0}: result {1} has type {2}, but the op infers {3}", n.describe(), i,
                    n.result(i)->type().str(), (*types)[i].str());
  }
  return llvm::Error::success();
}

static std::string prefix(std::string_view file, const Node &n) {
  std::string p;
  if (!file.empty())
    p += std::string(file) + ":";
  if (n.loc().valid())
    p += std::to_string(n.loc().line) + ":" + std::to_string(n.loc().col) + ":";
  return p.empty() ? p : p + " ";
}

/// The graph's fusion groups: each as classifyFusionGroup (an update lane: as
/// updateLanes) finds it, in graph order, a kernel's nodes contiguous.
static llvm::Error verifyFusionGroups(const Graph &g, std::string_view fileName) {
  if (g.fusionGroups().empty())
    return llvm::Error::success();
  std::unordered_map<const Node *, size_t> position;
  for (const Node &n : g.nodes())
    position.emplace(&n, position.size());
  auto text = [](const FusionGroup &fg) {
    std::string s;
    llvm::raw_string_ostream os(s);
    printFusionGroup(fg, os);
    return os.str();
  };
  std::optional<std::vector<UpdateLane>> lanes;
  for (const auto &fg : g.fusionGroups()) {
    const Node &root = *fg->root();
    std::string where = prefix(fileName, root) + "`" + text(*fg) + "`";
    for (size_t i = 0; i < fg->nodes.size(); ++i)
      if (i && position.at(fg->nodes[i]) <= position.at(fg->nodes[i - 1]))
        return errorf("{0}: its nodes are not in graph order", where);
    if (fg->kind == GroupKind::UpdateLane) {
      if (!lanes)
        lanes = updateLanes(g);
      if (std::none_of(lanes->begin(), lanes->end(),
                       [&](const UpdateLane &l) { return l.nodes == fg->nodes; }))
        return errorf("{0}: not an update lane", where);
      continue;
    }
    if (position.at(&root) - position.at(fg->nodes.front()) + 1 != fg->nodes.size())
      return errorf("{0}: the nodes of a kernel are not contiguous", where);
    auto expect = classifyFusionGroup(fg->nodes);
    if (!expect)
      return errorf("{0}: not a kernel: {1}", where, llvm::toString(expect.takeError()));
    if (text(*expect) != text(*fg))
      return errorf("{0}: its nodes form `{1}`", where, text(*expect));
  }
  return llvm::Error::success();
}

llvm::Error verifyGraph(const Graph &g, std::string_view fileName) {
  std::unordered_set<const Value *> defined;
  for (auto &in : g.inputs()) {
    if (auto e = checkType(in->type(), "input '" + in->name() + "'"))
      return e;
    defined.insert(in.get());
  }
  for (const auto *list : {&g.constants(), &g.parameters()})
    for (auto &c : *list) {
      const char *what = c->isParameter() ? "parameter" : "constant";
      if (c->data().type() != c->type())
        return errorf("{0} '{1}' has data of type {2} but value type {3}", what, c->name(),
                      c->data().type().str(), c->type().str());
      if (auto e = checkType(c->type(), std::string(what) + " '" + c->name() + "'"))
        return e;
      if (c->isTrainable() && !isFloat(c->dtype()))
        return errorf("parameter '{0}' has type {1}; trainable parameters are floating-point",
                      c->name(), c->type().str());
      defined.insert(c.get());
    }
  std::unordered_set<const Node *> nodes;
  for (const Node &n : g.nodes())
    nodes.insert(&n);
  for (const Node &n : g.nodes()) {
    for (unsigned i = 0; i < n.numOperands(); ++i) {
      const Value *v = n.operand(i);
      if (!v)
        continue;
      if (v->graph() != &g)
        return errorf("{0}{1}: operand {2} belongs to another graph", prefix(fileName, n),
                      n.describe(), i);
      if (!defined.count(v)) {
        bool laterInGraph = v->definingNode() && nodes.count(v->definingNode());
        return errorf("{0}{1}: operand {2} ('%{3}') is used before its definition{4}",
                      prefix(fileName, n), n.describe(), i, v->name(),
                      laterInGraph ? " (the graph has a cycle or is not topologically sorted)"
                                   : " (dangling value)");
      }
      const auto &uses = v->uses();
      if (std::find(uses.begin(), uses.end(), Use{const_cast<Node *>(&n), i}) == uses.end())
        return errorf("{0}{1}: use list of '%{2}' is missing operand {3}", prefix(fileName, n),
                      n.describe(), v->name(), i);
    }
    if (auto e = verifyNode(n))
      return errorf("{0}{1}", prefix(fileName, n), llvm::toString(std::move(e)));
    for (unsigned r = 0; r < n.numResults(); ++r) {
      const Value *v = n.result(r);
      for (const Use &u : v->uses())
        if (!nodes.count(u.user) || u.user->operand(u.operandIndex) != v)
          return errorf("{0}{1}: result '%{2}' has a dangling use", prefix(fileName, n),
                        n.describe(), v->name());
      defined.insert(v);
    }
  }
  if (g.outputs().empty())
    return makeError("graph '" + g.name() + "' has no outputs");
  std::unordered_set<std::string> outNames;
  if (std::all_of(g.outputs().begin(), g.outputs().end(),
                  [](const GraphOutput &o) { return o.isUpdate(); }))
    return makeError("graph '" + g.name() + "' has no outputs (only updates)");
  for (const GraphOutput &o : g.outputs()) {
    if (!o.value || !defined.count(o.value))
      return errorf("graph output '{0}' is not defined in the graph", o.name);
    if (o.isUpdate()) {
      if (!o.variable->isParameter() || o.variable->graph() != &g)
        return errorf("update of '{0}', which is not a variable of the graph", o.variable->name());
      if (o.value->type() != o.variable->type())
        return errorf("update of '{0}' ({1}) with a value of type {2}", o.variable->name(),
                      o.variable->type().str(), o.value->type().str());
    }
    if (o.isGuard() && (o.value->dtype() != DType::Bool || o.value->type().numElements() != 1 ||
                        o.name.find(": ") == std::string::npos))
      return errorf("guard '{0}' must be one bool element named '{1}NODE: WHAT'", o.name,
                    kGuardOutputPrefix);
    if (!outNames.insert(o.name).second)
      return errorf(o.isUpdate() ? "variable '{0}' is updated twice"
                                 : "graph output name '{0}' is used twice",
                    o.name);
  }
  return verifyFusionGroups(g, fileName);
}

} // namespace dlc::ir
