//===- Compiler.h - Graph to .dlc package -----------------------*- C++ -*-===//
#pragma once

#include "dlc/ir/Graph.h"
#include "dlc/package/Package.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace dlc::codegen {

struct GpuModel;

/// GPU targets compiled by default, plus PTX for the newest virtual architecture.
const std::vector<std::string> &defaultGpuTargets();
/// The cubin architectures ("sm_80", ...) among `targets`, which plans are made for.
std::vector<std::string> cubinArchs(const std::vector<std::string> &targets);

/// A standalone CUDA C++ translation unit (extern "C" kernels) compiled by NVRTC and
/// ptxas into a cubin for `arch` ("sm_90"), through the compile cache; errors carry
/// the compiler's log. `dlc calibrate` compiles its microbenchmarks with it.
llvm::Expected<std::vector<uint8_t>> compileCubin(const std::string &source,
                                                  const std::string &arch);

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
  /// Progress lines, one per phase ("ptxas sm_80: 2 jobs, 0.41 s").
  std::function<void(const std::string &)> progress;
  /// Called as each compilation job finishes (for a progress bar): jobs done, jobs in
  /// all, what finished ("ptxas sm_90 chunk 1").
  std::function<void(size_t, size_t, const std::string &)> onJob;
  /// Keep the generated CUDA source in the package (for inspection).
  bool embedSource = true;
  /// Recurrent layers as one persistent (cooperative) kernel where they fit; off:
  /// a GEMM and a cell kernel per time step.
  bool persistentRnn = true;
  /// 64-bit indices in every kernel (tests of the wide instantiations).
  bool wideIndices = false;
  /// Tests and benchmarks (--conv-tile): the implicit-GEMM convolutions use the tile
  /// named "BMxBN/WMxWN" (block, warp or thread tile; convTileNames()) where their
  /// family has it, instead of the cost model's choice.
  std::string convTile;
  /// Tests and benchmarks (--attention-kernel): fused attentions use "mma"
  /// (attention_mma, where it applies) or "cuda-core" (attention) instead of the cost
  /// model's choice ("" or "auto").
  std::string attentionKernel;
  /// Tactics: layers that cuDNN or cuBLASLt can run carry them as alternatives to our
  /// kernels, and a convolution our second-best tile, timed on the GPU when a session
  /// starts (dlc compile --no-vendor-tactics: one implementation per layer, ours).
  bool vendorTactics = true;
  /// Floating-point scatter-adds (training's MaxPool and Gather gradients) as 64-bit
  /// fixed-point sums, which give the same bits on every run and in any thread order,
  /// instead of atomic float adds (dlc compile --deterministic).
  bool deterministic = false;
  /// FP32 GEMMs and convolutions on tensor cores in TF32: GEMMs always, convolutions
  /// where the cost model prices the TF32 kernel faster than the CUDA-core one, or
  /// always with tf32Everywhere (dlc compile --tf32 asked explicitly; tests).
  bool tf32 = false, tf32Everywhere = false;
  /// INT8 convolutions on tensor cores even where the cost model prices conv_direct's
  /// int32 CUDA-core arithmetic faster (tests of the tensor-core kernel).
  bool int8TensorCoresEverywhere = false;
  /// Training packages: the model file's bytes, kept for `dlc export`.
  std::string sourceModel;
};

/// A dimension of an input that a shape-range package serves at every value in
/// [min, max] (pkg::ShapeRange); `opt` is the shape the package is tuned and
/// reported for.
struct ShapeRangeDesc {
  std::string input;
  uint32_t axis = 0;
  int64_t min = 0, max = 0, opt = 0;
};

struct CompileReport {
  size_t kernels = 0, launches = 0, libraryCalls = 0, steps = 0, chunks = 0;
  uint64_t arenaBytes = 0, weightBytes = 0, packageBytes = 0;
  /// The memory plan: every intermediate in its own buffer, and the live-set bound.
  uint64_t naiveArenaBytes = 0, maxLiveBytes = 0;
  int maxRegisters = 0, totalSpills = 0;
  /// Wall time of code generation and of compiling every chunk for every target.
  double codegenSeconds = 0, compileSeconds = 0;
  /// Per phase ("nvrtc", "ptxas sm_80", "emu"): jobs, cache hits, and the time the
  /// jobs took (summed: they run in parallel).
  struct Phase {
    size_t jobs = 0, cached = 0;
    double seconds = 0;
  };
  std::map<std::string, Phase> phases;
  std::vector<std::string> targets;
  std::string cudaSource;
  /// Shape-range packages: the schedules in the package (one per shape point), and
  /// the kernels that only other shapes than the opt one need.
  size_t variants = 1, variantKernels = 0;
  /// What the user must know about the package (its host code left unsigned).
  std::vector<std::string> warnings;
  /// The nodes whose FP32 products run on tensor cores in TF32 (CompileOptions::tf32),
  /// in schedule order.
  std::vector<std::string> tf32Layers;
};

/// Lowers the graph, compiles it for every target and returns the package bytes.
llvm::Expected<std::vector<uint8_t>> compileGraph(const ir::Graph &g, const CompileOptions &opts,
                                                  CompileReport *report = nullptr);
/// The same as an image whose weights are written straight from the graph's
/// tensors (no copy of the weights into one buffer).
llvm::Expected<pkg::PackageImage> compileGraphImage(const ir::Graph &g, const CompileOptions &opts,
                                                    CompileReport *report = nullptr);

/// A package that serves every point of shape ranges: `graphAt(i)` gives the
/// optimized graph for point i of `count` (point 0: the opt shape, the package's own
/// schedule). Each point is lowered to its own schedule and memory plan; kernels
/// (instantiations with run-time extents) and weights are shared, and the kernels of
/// all points are compiled once. `onVariant(i, count)` reports progress.
llvm::Expected<pkg::PackageImage> compileShapeRangeImage(
    size_t count, const std::function<llvm::Expected<std::unique_ptr<ir::Graph>>(size_t)> &graphAt,
    const std::vector<ShapeRangeDesc> &ranges, const CompileOptions &opts,
    CompileReport *report = nullptr, const std::function<void(size_t, size_t)> &onVariant = {});

/// Every implicit-GEMM convolution tile by name ("BMxBN/WMxWN": block, then warp or
/// thread tile), of all kernel families, sorted: what CompileOptions::convTile names.
std::vector<std::string> convTileNames();

/// Whether a [rows, K] x [K, N] product in `dt` (FP16/BF16) followed by an element-wise
/// epilogue the GEMM library cannot apply is modeled faster on the kernel library's
/// implicit GEMM, the epilogue fused into its stores (conv_fprop_mma as a 1x1
/// convolution, its best tile and split of K), than as the library GEMM plus an
/// element-wise kernel over its output, on every GPU architecture among `targets` (the
/// default targets when empty; sm_90 when they name none). The layout pass asks it
/// (passes::PassContext::ownGemm).
bool ownGemmIsFaster(const std::vector<std::string> &targets, int64_t rows, int64_t K, int64_t N,
                     ir::DType dt);
/// The same on one GPU's profile.
bool ownGemmIsFaster(const GpuModel &g, int64_t rows, int64_t K, int64_t N, ir::DType dt);

} // namespace dlc::codegen
