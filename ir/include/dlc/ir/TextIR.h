//===- TextIR.h - Textual IR printer and parser -----------------*- C++ -*-===//
//
//   graph @main(%x: f32[1,4]) -> ("y": f32[1,4]) {
//     %c = const f32[4] dense<[1.0, 2.0, 3.0, 4.0]>
//     %0 = Add(%x, %c) : f32[1,4] loc("add0")
//     %1 = Softmax(%0) {axis = -1} : f32[1,4]
//     group anchored {anchor = %1, prologue = [%0]}
//     return %1
//   }
//
// A fusion group (FusionGroup.h) prints after its root node: its kind, then its nodes
// (named by their first results) or its anchor, prologue, core and epilogue, and a
// GEMM epilogue's bias, residual and activation.
// print(parse(print(g))) == print(g) holds for every graph.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/ir/Graph.h"

#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>

namespace dlc::ir {

struct PrintOptions {
  /// Constants with more elements than this print as `dense<elided>` (not parseable).
  /// Negative: print everything.
  int64_t elideConstantsAbove = -1;
  /// Print loc("node name") after each node.
  bool printLocs = true;
};

void printGraph(const Graph &g, llvm::raw_ostream &os, const PrintOptions &opts = {});
std::string printGraph(const Graph &g, const PrintOptions &opts = {});
/// Prints one node line (without indentation or newline), as in a graph.
void printNode(const Node &n, llvm::raw_ostream &os, const PrintOptions &opts = {});
/// `group KIND {anchor = %a, prologue = [%p], ...}` (one line, no indentation): the
/// members by their first results; an anchor-free group lists its nodes, an anchored
/// one its parts.
void printFusionGroup(const FusionGroup &fg, llvm::raw_ostream &os);
/// "f32[2] dense<[1.0, 2.0]>"
void printTensorLiteral(const Tensor &t, llvm::raw_ostream &os, const PrintOptions &opts = {});

/// Shortest text that reads back to exactly `f` (always has '.', 'e', "nan" or "inf").
std::string formatFloat(float f);
std::string formatDouble(double d);

/// Parses one graph. Errors read "file:line:col: message". `firstLine` is the line
/// number of the first line of `text` within the file (for split input files).
/// The result is not verified; call verifyGraph.
llvm::Expected<std::unique_ptr<Graph>>
parseGraph(std::string_view text, std::string_view fileName = "<input>", unsigned firstLine = 1);

} // namespace dlc::ir
