//===- Toolchain.h - NVRTC and the host compiler, with a disk cache -------===//
#pragma once

#include "llvm/Support/Error.h"

#include <map>
#include <string>
#include <vector>

namespace dlc::codegen {

struct KernelResources {
  int registers = 0, spillStores = 0, spillLoads = 0, sharedBytes = 0, stackBytes = 0;
};

struct CompiledModule {
  std::string target;   // sm_80 ... compute_90, emu-x86_64
  enum Kind { Cubin, Ptx, EmuObject } kind;
  std::vector<uint8_t> image;
  std::map<std::string, KernelResources> resources; // per kernel (GPU targets)
  std::string log;
  bool cached = false;
  double seconds = 0;
};

struct ToolchainOptions {
  std::string cudaRoot = "/usr/local/cuda";
  std::string hostCompiler; // empty: $DLC_HOST_CXX, $CXX, then c++
  std::string cacheDir;     // empty: $DLC_CACHE_DIR, $XDG_CACHE_HOME/dlc, ~/.cache/dlc
  bool useCache = true;
  /// Where to write the .cu when a compilation fails (next to the output).
  std::string failureDumpPath;
};

/// Compiles the translation unit for one GPU target with NVRTC ("sm_80" gives a
/// cubin, "compute_90" PTX). The error carries the full compiler log.
llvm::Expected<CompiledModule> compileWithNvrtc(const std::string &source, const std::string &target,
                                                const ToolchainOptions &opts);
/// Compiles the translation unit for the emu backend with the host compiler.
llvm::Expected<CompiledModule> compileForEmu(const std::string &source, const ToolchainOptions &opts);
/// Whether a host C++ compiler can be run.
bool hostCompilerAvailable(const ToolchainOptions &opts);
std::string hostCompilerPath(const ToolchainOptions &opts);

/// Parses ptxas -v output into per-kernel resources.
std::map<std::string, KernelResources> parsePtxasLog(const std::string &log);

} // namespace dlc::codegen
