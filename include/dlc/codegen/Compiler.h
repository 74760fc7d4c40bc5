//===- Compiler.h - Graph to .dlc package -----------------------*- C++ -*-===//
#pragma once

#include "dlc/ir/Graph.h"

#include <functional>
#include <string>
#include <vector>

namespace dlc::codegen {

/// GPU targets compiled by default, plus PTX for the newest virtual architecture.
const std::vector<std::string> &defaultGpuTargets();

struct CompileOptions {
  /// "sm_80", "sm_86", "sm_89", "sm_90", "compute_90", "emu". Empty: the defaults
  /// (all GPU targets, plus emu when a host compiler is present).
  std::vector<std::string> targets;
  std::string cudaRoot = "/usr/local/cuda";
  std::string hostCompiler;
  std::string cacheDir;
  bool useCache = true;
  /// Where the .cu goes if a compiler fails (normally next to the output).
  std::string failureDumpPath;
  /// Progress lines ("nvrtc sm_80 [2/5] ...").
  std::function<void(const std::string &)> progress;
  /// Keep the generated CUDA source in the package (for inspection).
  bool embedSource = true;
};

struct CompileReport {
  size_t kernels = 0, launches = 0, libraryCalls = 0, steps = 0;
  uint64_t arenaBytes = 0, weightBytes = 0, packageBytes = 0;
  int maxRegisters = 0, totalSpills = 0;
  double codegenSeconds = 0, gpuCompileSeconds = 0, emuCompileSeconds = 0;
  std::vector<std::string> targets;
  std::string cudaSource;
};

/// Lowers the graph, compiles it for every target and returns the package bytes.
llvm::Expected<std::vector<uint8_t>> compileGraph(const ir::Graph &g, const CompileOptions &opts,
                                                  CompileReport *report = nullptr);

} // namespace dlc::codegen
