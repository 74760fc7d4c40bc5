//===- Dot.cpp - The fused graph as Graphviz (`dlc compile --dump-dot`) ----===//
#include "Dot.h"

#include "dlc/ir/Graph.h"

#include "llvm/Support/raw_ostream.h"

#include <map>

namespace dlc::driver {

namespace {
std::string quote(const std::string &s) {
  std::string r = "\"";
  for (char c : s)
    r += c == '"' ? std::string("\\\"") : std::string(1, c); // labels keep their \n escapes
  return r + "\"";
}
} // namespace

std::string graphToDot(const ir::Graph &g) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "digraph " << quote(g.name()) << " {\n  rankdir=TB;\n  node [shape=box, fontsize=10];\n";
  std::map<const ir::Node *, int> id;
  int next = 0;
  for (const ir::Node &n : g.nodes())
    id[&n] = next++;
  // Fusion groups are clusters, named by kind.
  auto label = [&](const ir::Node &n) {
    return std::string(n.opName()) + "\\n" + n.result()->type().str();
  };
  int k = 0;
  for (const auto &fg : g.fusionGroups()) {
    os << "  subgraph cluster_" << k << " {\n    label="
       << quote("kernel " + std::to_string(k) + " (" + std::string(groupKindName(fg->kind)) + ")")
       << "; style=filled; color=lightgrey;\n";
    for (const ir::Node *n : fg->nodes)
      os << "    n" << id[n] << " [label=" << quote(label(*n)) << "];\n";
    os << "  }\n";
    ++k;
  }
  for (const ir::Node &n : g.nodes())
    if (!n.fusionGroup())
      os << "  n" << id[&n] << " [label=" << quote(label(n)) << ", style=bold];\n";
  for (const auto &in : g.inputs())
    os << "  " << quote("in:" + in->name()) << " [shape=ellipse, label=" << quote(in->name())
       << "];\n";
  for (const ir::Node &n : g.nodes())
    for (const ir::Value *v : n.operands()) {
      if (!v || v->isConstant())
        continue;
      std::string from = v->definingNode() ? "n" + std::to_string(id[v->definingNode()])
                                           : quote("in:" + v->name());
      os << "  " << from << " -> n" << id[&n] << ";\n";
    }
  for (const ir::GraphOutput &o : g.outputs()) {
    os << "  " << quote("out:" + o.name) << " [shape=ellipse, label=" << quote(o.name) << "];\n";
    if (o.value->definingNode())
      os << "  n" << id[o.value->definingNode()] << " -> " << quote("out:" + o.name) << ";\n";
  }
  os << "}\n";
  return os.str();
}

} // namespace dlc::driver
