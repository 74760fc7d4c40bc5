//===- ModelChecks.h - dlc's own checks of an ONNX model --------*- C++ -*-===//
//
// What runs on every model before any handler: node order (sorted as ONNX Runtime
// does), the structure every later step takes for granted, and, for models the
// Debian ONNX library does not know (IR > 8 or opset > 17), the checks its checker
// would have made of a malformed file.
//===----------------------------------------------------------------------===//
#pragma once

#include <onnx/onnx_pb.h>
#include <set>
#include <string>
#include <unordered_set>

namespace dlc::frontend {

/// Sorts the nodes of `g` (and of its subgraphs) into a topological order, keeping
/// the file's order wherever it already is one (ONNX Runtime runs unsorted graphs
/// too). Names a subgraph reads from enclosing scopes count as inputs of the node
/// that holds it. Returns a problem (a real cycle) or an empty string; `changed` is
/// set when a node moved.
std::string sortNodes(onnx::GraphProto &g, bool &changed);

/// Names a graph reads without defining them itself (its free variables: what the
/// enclosing scope, or for the main graph its inputs, must provide), into `out`.
void freeNames(const onnx::GraphProto &g, std::unordered_set<std::string> &out);

/// The structure the ONNX library's own passes and the importer take for granted:
/// every node input and graph output is defined, in order. Names in a subgraph may
/// come from enclosing scopes. Returns the first problem, or an empty string.
std::string structuralProblem(const onnx::GraphProto &g, std::set<std::string> scope);

/// dlc's own validation for the models the ONNX library's checker cannot take: each
/// value assigned once (SSA), named nodes, inputs and initializers, attributes that
/// hold the value their type says, known tensor types with non-negative dims.
/// Returns the first problem, or an empty string.
std::string ownModelProblem(const onnx::ModelProto &m);

} // namespace dlc::frontend
