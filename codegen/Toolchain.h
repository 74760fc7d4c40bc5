//===- Toolchain.h - NVRTC, nvJitLink and the host compiler, cached -------===//
//
// One translation unit (a chunk of kernels) is compiled by NVRTC's front end once,
// to PTX for the lowest virtual architecture among the targets; nvJitLink then runs
// ptxas on that PTX for each GPU architecture. The emu target is the same source
// compiled by the host C++ compiler. Every step is cached on disk.
//===----------------------------------------------------------------------===//
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
  std::string target; // sm_80 ... compute_80, emu-x86_64
  enum Kind { Cubin, Ptx, EmuObject } kind;
  uint32_t chunk = 0;
  std::vector<uint8_t> image;
  std::map<std::string, KernelResources> resources; // per kernel symbol (cubins)
  std::string log;
  bool cached = false;
  double seconds = 0;
};

/// NVRTC's output for one translation unit.
struct PtxModule {
  std::string virtualArch; // compute_80
  std::string ptx;         // NUL-terminated
  std::string log;
  /// The lowered (mangled) names of the requested name expressions, in order.
  std::vector<std::string> loweredNames;
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
  /// Emu: instrument every load and store for the runtime's initcheck and racecheck of
  /// shared memory (target `emu-check`; its kernels run several times slower).
  bool emuCheck = false;
};

/// NVRTC front end: the translation unit to PTX for `virtualArch` ("compute_80").
/// `nameExpressions` ("&dlc::kernel<...>") are template instantiations whose mangled
/// names are returned. The error carries the full compiler log.
llvm::Expected<PtxModule> compileToPtx(const std::string &source, const std::string &virtualArch,
                                       const std::vector<std::string> &nameExpressions,
                                       const ToolchainOptions &opts);
/// nvJitLink/ptxas: PTX to a cubin for `arch` ("sm_90"), with ptxas's resource report.
llvm::Expected<CompiledModule> ptxToCubin(const PtxModule &ptx, const std::string &arch,
                                          const ToolchainOptions &opts);
/// Both steps for one GPU target: "sm_80" gives a cubin, "compute_90" PTX.
llvm::Expected<CompiledModule> compileWithNvrtc(const std::string &source,
                                                const std::string &target,
                                                const ToolchainOptions &opts);
/// Compiles the translation unit for the emu backend with the host compiler.
llvm::Expected<CompiledModule> compileForEmu(const std::string &source,
                                             const ToolchainOptions &opts);
/// Whether a host C++ compiler can be run.
bool hostCompilerAvailable(const ToolchainOptions &opts);
std::string hostCompilerPath(const ToolchainOptions &opts);

/// NVRTC's CUDA version as the driver API numbers it (13000 for 13.0).
uint32_t nvrtcVersionNumber();

/// Parses ptxas -v output into per-kernel resources.
std::map<std::string, KernelResources> parsePtxasLog(const std::string &log);

} // namespace dlc::codegen
