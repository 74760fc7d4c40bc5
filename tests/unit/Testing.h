//===- Testing.h - Shared helpers for dlc unit tests ------------*- C++ -*-===//
#pragma once

#include "dlc/ir/Interpreter.h"
#include "dlc/ir/TextIR.h"
#include "dlc/passes/Pass.h"

#include <gtest/gtest.h>
#include <memory>
#include <string>

namespace dlc::test {

/// Parses and verifies textual IR; fails the test (and returns null) on error.
std::unique_ptr<ir::Graph> parseIR(const std::string &text);

/// Message of an Expected's error, or "" if it holds a value.
template <class T> std::string errorOf(llvm::Expected<T> &e) {
  return e ? std::string() : llvm::toString(e.takeError());
}
std::string errorOf(llvm::Error e);

/// Runs `passes` (comma-separated) on a copy of `g` with --verify-each.
std::unique_ptr<ir::Graph> runPasses(const ir::Graph &g, const std::string &passes,
                                     const passes::PassContext &ctx = {});

/// The numerical-equivalence check used by every pass test: interprets the graph
/// before and after `passes` on `seeds` sets of random inputs and expects the
/// outputs to match within rtol/atol. Returns the transformed graph.
std::unique_ptr<ir::Graph> expectEquivalentAfter(const std::string &irText,
                                                 const std::string &passes, int seeds = 3,
                                                 double rtol = 1e-5, double atol = 1e-6,
                                                 const passes::PassContext &ctx = {});

/// Reads a file relative to the source tree.
std::string readSourceFile(const std::string &relPath);

} // namespace dlc::test
