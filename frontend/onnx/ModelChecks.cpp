//===- ModelChecks.cpp - dlc's own checks of an ONNX model ----------------===//
#include "ModelChecks.h"

#include "OnnxUtil.h"

#include <map>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace dlc::frontend {

namespace {

std::string describe(const onnx::NodeProto &n) {
  return "node " + (n.name().empty() ? std::string() : "'" + n.name() + "' ") + "(" + n.op_type() +
         ")";
}

std::vector<const onnx::GraphProto *> subgraphs(const onnx::NodeProto &n) {
  std::vector<const onnx::GraphProto *> subs;
  for (const auto &a : n.attribute()) {
    if (a.has_g())
      subs.push_back(&a.g());
    for (const auto &sg : a.graphs())
      subs.push_back(&sg);
  }
  return subs;
}

} // namespace

void freeNames(const onnx::GraphProto &g, std::unordered_set<std::string> &out) {
  std::unordered_set<std::string> defined;
  for (const auto &i : g.input())
    defined.insert(i.name());
  for (const auto &t : g.initializer())
    defined.insert(t.name());
  for (const auto &t : g.sparse_initializer())
    defined.insert(t.values().name());
  for (const auto &n : g.node())
    for (const auto &o : n.output())
      defined.insert(o);
  auto use = [&](const std::string &name) {
    if (!name.empty() && !defined.count(name))
      out.insert(name);
  };
  for (const auto &n : g.node()) {
    for (const auto &in : n.input())
      use(in);
    for (const onnx::GraphProto *sg : subgraphs(n)) {
      std::unordered_set<std::string> inner;
      freeNames(*sg, inner);
      for (const std::string &name : inner)
        use(name);
    }
  }
  for (const auto &o : g.output())
    use(o.name());
}

std::string sortNodes(onnx::GraphProto &g, bool &changed) {
  for (auto &n : *g.mutable_node())
    for (auto &a : *n.mutable_attribute()) {
      std::vector<onnx::GraphProto *> subs;
      if (a.has_g())
        subs.push_back(a.mutable_g());
      for (auto &sg : *a.mutable_graphs())
        subs.push_back(&sg);
      for (onnx::GraphProto *sg : subs)
        if (std::string p = sortNodes(*sg, changed); !p.empty())
          return describe(n) + ", subgraph '" + a.name() + "': " + p;
    }

  // Kahn's algorithm, always taking the ready node that comes first in the file, so a
  // sorted graph keeps its order.
  const int n = g.node_size();
  std::unordered_map<std::string, int> producer;
  for (int i = 0; i < n; ++i)
    for (const auto &o : g.node(i).output())
      if (!o.empty())
        producer.emplace(o, i); // a second producer is the SSA check's to report
  std::vector<std::vector<int>> users(n);
  std::vector<int> pending(n, 0);
  for (int i = 0; i < n; ++i) {
    const onnx::NodeProto &node = g.node(i);
    std::unordered_set<std::string> reads(node.input().begin(), node.input().end());
    for (const onnx::GraphProto *sg : subgraphs(node))
      freeNames(*sg, reads);
    std::unordered_set<int> deps;
    for (const std::string &name : reads) {
      auto it = producer.find(name);
      if (!name.empty() && it != producer.end() && it->second != i)
        deps.insert(it->second);
      else if (it != producer.end() && it->second == i)
        deps.insert(i); // reads its own output: a cycle of one
    }
    for (int d : deps)
      if (d != i)
        users[d].push_back(i);
    pending[i] = static_cast<int>(deps.size());
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i)
    if (!pending[i])
      ready.push(i);
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int u : users[i])
      if (--pending[u] == 0)
        ready.push(u);
  }
  if (static_cast<int>(order.size()) != n) {
    for (int i = 0; i < n; ++i)
      if (pending[i])
        return describe(g.node(i)) +
               " is part of a cycle: it depends, through other nodes, on its own output";
  }
  bool moved = false;
  for (int i = 0; i < n && !moved; ++i)
    moved = order[i] != i;
  if (!moved)
    return "";
  changed = true;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> sorted;
  for (int i : order)
    *sorted.Add() = std::move(*g.mutable_node(i));
  g.mutable_node()->Swap(&sorted);
  return "";
}

std::string structuralProblem(const onnx::GraphProto &g, std::set<std::string> scope) {
  for (const auto &i : g.input())
    scope.insert(i.name());
  for (const auto &t : g.initializer())
    scope.insert(t.name());
  for (const auto &t : g.sparse_initializer())
    scope.insert(t.values().name());
  std::set<std::string> produced;
  for (const auto &n : g.node())
    for (const auto &o : n.output())
      if (!o.empty())
        produced.insert(o);
  for (const auto &n : g.node()) {
    std::string who = describe(n);
    for (const auto &in : n.input()) {
      if (in.empty() || scope.count(in))
        continue;
      if (produced.count(in))
        return who + " uses '" + in +
               "' before it is produced (the graph has a cycle or is not in topological order)";
      return who + " uses '" + in + "', which no node, graph input or initializer defines";
    }
    for (const auto &a : n.attribute()) {
      std::vector<const onnx::GraphProto *> subs;
      if (a.has_g())
        subs.push_back(&a.g());
      for (const auto &sg : a.graphs())
        subs.push_back(&sg);
      for (const onnx::GraphProto *sg : subs) {
        std::string p = structuralProblem(*sg, scope);
        if (!p.empty())
          return who + ", subgraph '" + a.name() + "': " + p;
      }
    }
    for (const auto &o : n.output())
      if (!o.empty())
        scope.insert(o);
  }
  for (const auto &o : g.output())
    if (!scope.count(o.name()))
      return "graph output '" + o.name() + "' is not produced by any node";
  return "";
}

namespace {

/// An attribute holds exactly the value its type says (the ONNX checker's rule).
std::string attributeProblem(const onnx::AttributeProto &a) {
  using A = onnx::AttributeProto;
  if (a.name().empty())
    return "an attribute has no name";
  if (!a.ref_attr_name().empty())
    return "attribute '" + a.name() + "' refers to a function's attribute outside a function";
  int set = a.has_f() + a.has_i() + a.has_s() + a.has_t() + a.has_g() + a.has_sparse_tensor() +
            a.has_tp() + (a.floats_size() > 0) + (a.ints_size() > 0) + (a.strings_size() > 0) +
            (a.tensors_size() > 0) + (a.graphs_size() > 0) + (a.sparse_tensors_size() > 0) +
            (a.type_protos_size() > 0);
  if (set > 1)
    return "attribute '" + a.name() + "' holds more than one value";
  bool matches = false;
  switch (a.type()) {
  case A::FLOAT:
    matches = set == 0 || a.has_f();
    break;
  case A::INT:
    matches = set == 0 || a.has_i();
    break;
  case A::STRING:
    matches = set == 0 || a.has_s();
    break;
  case A::TENSOR:
    matches = set == 0 || a.has_t();
    break;
  case A::GRAPH:
    matches = set == 0 || a.has_g();
    break;
  case A::SPARSE_TENSOR:
    matches = set == 0 || a.has_sparse_tensor();
    break;
  case A::TYPE_PROTO:
    matches = set == 0 || a.has_tp();
    break;
  case A::FLOATS:
    matches = set == 0 || a.floats_size() > 0;
    break;
  case A::INTS:
    matches = set == 0 || a.ints_size() > 0;
    break;
  case A::STRINGS:
    matches = set == 0 || a.strings_size() > 0;
    break;
  case A::TENSORS:
    matches = set == 0 || a.tensors_size() > 0;
    break;
  case A::GRAPHS:
    matches = set == 0 || a.graphs_size() > 0;
    break;
  case A::SPARSE_TENSORS:
    matches = set == 0 || a.sparse_tensors_size() > 0;
    break;
  case A::TYPE_PROTOS:
    matches = set == 0 || a.type_protos_size() > 0;
    break;
  default:
    return "attribute '" + a.name() + "' has no type";
  }
  if (!matches)
    return "attribute '" + a.name() + "' is declared " + A::AttributeType_Name(a.type()) +
           " but holds another kind of value";
  return "";
}

std::string tensorProblem(const onnx::TensorProto &t, const std::string &what) {
  if (!knownOnnxType(t.data_type()))
    return what + " '" + t.name() + "' has no valid element type";
  for (int64_t d : t.dims())
    if (d < 0)
      return what + " '" + t.name() + "' has a negative dimension " + std::to_string(d);
  return "";
}

/// Every value of the graph and its subgraphs is assigned once, as the ONNX checker
/// has it: a node's outputs may not repeat a name of this graph or an enclosing one
/// (`outer`); a subgraph's inputs and initializers may shadow enclosing names.
std::string graphProblem(const onnx::GraphProto &g, const std::unordered_set<std::string> &outer,
                         bool main) {
  std::unordered_set<std::string> local;
  auto assign = [&](const std::string &name, const std::string &who,
                    bool againstOuter) -> std::string {
    if (name.empty())
      return "";
    if (!local.insert(name).second || (againstOuter && outer.count(name)))
      return who + " assigns '" + name +
             "', which is already defined (an ONNX graph assigns each value once)";
    return "";
  };
  std::unordered_set<std::string> inits;
  for (const auto &t : g.initializer()) {
    if (t.name().empty())
      return "an initializer has no name";
    if (std::string p = tensorProblem(t, "initializer"); !p.empty())
      return p;
    if (!inits.insert(t.name()).second)
      return "initializer '" + t.name() + "' is defined twice";
    if (std::string p = assign(t.name(), "initializer '" + t.name() + "'", false); !p.empty())
      return p;
  }
  for (const auto &i : g.input()) {
    if (i.name().empty())
      return "a graph input has no name";
    if (main && !i.has_type())
      return "graph input '" + i.name() + "' has no type";
    if (inits.count(i.name()))
      continue; // an initializer listed as an input too: its default value
    if (std::string p = assign(i.name(), "graph input '" + i.name() + "'", false); !p.empty())
      return p;
  }
  for (const auto &o : g.output())
    if (o.name().empty())
      return "a graph output has no name";
  for (const auto &n : g.node()) {
    std::string who = describe(n);
    if (n.op_type().empty())
      return "a node has no op type";
    std::unordered_set<std::string> attrs;
    for (const auto &a : n.attribute()) {
      if (std::string p = attributeProblem(a); !p.empty())
        return who + ": " + p;
      if (!attrs.insert(a.name()).second)
        return who + ": attribute '" + a.name() + "' is given twice";
      if (a.has_t())
        if (std::string p = tensorProblem(a.t(), "tensor attribute"); !p.empty())
          return who + ": " + p;
      for (const auto &t : a.tensors())
        if (std::string p = tensorProblem(t, "tensor attribute"); !p.empty())
          return who + ": " + p;
    }
    if (auto subs = subgraphs(n); !subs.empty()) {
      std::unordered_set<std::string> visible = outer;
      visible.insert(local.begin(), local.end());
      for (const onnx::GraphProto *sg : subs)
        if (std::string p = graphProblem(*sg, visible, false); !p.empty())
          return who + ", a subgraph: " + p;
    }
    for (const auto &o : n.output())
      if (std::string p = assign(o, who, true); !p.empty())
        return p;
  }
  return "";
}

} // namespace

std::string ownModelProblem(const onnx::ModelProto &m) {
  std::unordered_set<std::string> domains;
  for (const auto &o : m.opset_import()) {
    std::string d = o.domain() == "ai.onnx" ? "" : o.domain();
    if (!domains.insert(d).second)
      return "the model imports domain '" + o.domain() + "' twice";
    if (o.version() < 1)
      return "the model imports domain '" + o.domain() + "' at version " +
             std::to_string(o.version());
  }
  return graphProblem(m.graph(), {}, true);
}

} // namespace dlc::frontend
