//===- Dot.h - Graphviz output of a (fused) graph ---------------*- C++ -*-===//
#pragma once

#include "dlc/ir/Graph.h"

#include <string>

namespace dlc::driver {

/// The graph as a Graphviz digraph; each fusion group (ir::FusionGroup) is a cluster,
/// nodes alone in their kernel are drawn bold. Constants are left out.
std::string graphToDot(const ir::Graph &g);

} // namespace dlc::driver
