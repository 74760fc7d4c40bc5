//===- CostModel.h - Modeled latency, traffic and FLOPs of a package --*- C++ -*-===//
//
// A model, not a measurement, built on what the compiled code does. For each GPU
// profile (codegen/GpuModel.h; A100 and H100 by default) it takes the steps that run
// there (per-architecture steps filtered as the runtime filters them) and bounds each:
//  - a kernel launch, from its SASS for that architecture (codegen/Sass.h: the main
//    loop's instruction mix, the code outside loops), its grid and its traffic:
//      issue bound:   warp instructions per SM at each pipe's rate (4 issued per clock;
//                     HMMA, FP32, FP16x2, FP64, integer, MUFU, shared/L1 bytes), the
//                     main loop run as often as the launch's FLOPs (else its bytes) need;
//      memory bound:  every pass over the data at achievable DRAM bandwidth, passes
//                     after the first at L2 bandwidth when the data fits in L2;
//      latency bound: each warp's chain (main-loop iterations x (instructions + an L2
//                     load latency when the loop waits on its own loads)) per wave;
//    modeled time = max(issue, memory, latency) + one CUDA-graph node's overhead.
//    Without a cubin for the architecture, the facts of the package's PTX (the newest
//    compute_XX the GPU runs; counted in ptxPriced); without either, FLOPs / (peak x
//    SM fill), marked "peak" rather than "issue";
//  - a GEMM (cuBLASLt): an efficiency curve (profile libraryEfficiency x K / (K + 128))
//    times the peak that applies, over 128x128 output tiles split along K when that
//    fills more SMs, marked "library";
//  - copies and memsets: bytes / achievable bandwidth + overhead;
//  - data-parallel steps: the all-reduces beside the schedule (dataParallelCostOf);
//  - once per run: the graph's launch and the host's synchronization at its end.
// The roofline (max(bytes / bandwidth, FLOPs / peak) per step, no fill, no launch
// cost) is kept beside it as the optimistic bound.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/codegen/Bounds.h"
#include "dlc/codegen/GpuModel.h"
#include "dlc/codegen/Sass.h"
#include "dlc/package/Package.h"

#include <map>
#include <string>
#include <vector>

namespace dlc::driver {

struct StepCost {
  std::string node, kind; // "launch", "gemm", "copy", "memset"
  int kernel = -1;        // launches: the kernel's index
  uint64_t blocks = 0, bytesRead = 0, bytesWritten = 0;
  double flops = 0;
  bool tensor = false;  // on tensor cores
  bool tf32 = false;    // ... in TF32
  bool integer = false; // integer multiply-adds (quantized models)
  bool fp8 = false;     // float8 operands on tensor cores (FP8 QDQ models)
  /// A tactic group's step (pkg::Step::tactic): its group and alternative (0: none).
  uint32_t altGroup = 0;
  uint8_t alt = 0;
  /// Per GPU profile (PackageCost::gpus): whether the step runs there, its SM fill,
  /// bounds, modeled time and roofline time (microseconds).
  std::vector<bool> runs;
  std::vector<double> fill, micros, roofline;
  std::vector<codegen::Bounds> bounds;
  uint64_t bytes() const { return bytesRead + bytesWritten; }
};

/// The decoded code of a package's modules (cubins by decodeCubin, PTX by analyzePtx),
/// within one work budget for the whole package.
struct PackageFacts {
  /// Decoded kernels by target ("sm_90" from cubins, "compute_80" from PTX) and symbol;
  /// why a module could not be decoded, by target.
  std::map<std::string, std::map<std::string, codegen::sass::KernelFacts>> facts;
  std::map<std::string, std::string> decodeErrors;
  const codegen::sass::KernelFacts *factsOf(const std::string &target,
                                            const std::string &symbol) const;
};
PackageFacts decodePackage(const pkg::PackageFile &pf);

struct PackageCost : PackageFacts {
  std::vector<codegen::GpuModel> gpus;
  std::vector<StepCost> steps;
  uint64_t lowerBoundBytes = 0;
  /// Per GPU: totals over the steps that run there (micros: plus the per-run overhead).
  std::vector<double> micros, roofline, flops;
  /// The FLOPs of steps on tensor cores (tensor-core kernels, FP16/BF16/TF32 GEMMs).
  std::vector<double> tensorFlops;
  /// The FLOPs of integer kernels (quantized models' int32 sums), and of those on tensor
  /// cores; of float8 products on tensor cores.
  std::vector<double> integerFlops, integerTensorFlops, fp8TensorFlops;
  std::vector<uint64_t> bytesRead, bytesWritten;
  /// Per GPU: launches priced at peak because their code could not be read, and
  /// launches priced from PTX facts because the package has no cubin for the GPU.
  std::vector<size_t> peakPriced, ptxPriced;
};

/// The package's own schedule, or with `variant` >= 0 that shape variant's
/// (pkg::Package::variants, shape-range packages), on `gpus` (empty: the reported
/// GPUs, codegen::reportedGpus()). Each kernel is priced from the module the runtime
/// would load on that GPU (pkg::pickModule). `decoded`: the package's decodePackage()
/// (null: decoded here).
PackageCost costOf(const pkg::PackageFile &pf, int variant = -1,
                   const std::vector<codegen::GpuModel> &gpus = {},
                   const PackageFacts *decoded = nullptr);

/// A data-parallel training step on `ranks` GPUs of one machine: each bucket's ring
/// all-reduce (2 (N-1)/N of its bytes over the GPU link, plus 2 (N-1) hops of
/// latency) on a second stream from its AllReduce step, serially; the main stream
/// waits at each CollectiveWait for what is not done yet. `overlap` is the part of
/// the all-reduce time hidden behind compute.
struct DataParallelCost {
  int ranks = 0;
  size_t buckets = 0;
  uint64_t allReduceBytes = 0; // gradient bytes per rank and step
  /// Per GPU (microseconds): all-reduce time, the part the step waits for, and the
  /// whole step.
  std::vector<double> commMicros, exposedMicros, stepMicros;
  double overlap(size_t gpu) const {
    return commMicros[gpu] > 0 ? 1 - exposedMicros[gpu] / commMicros[gpu] : 1;
  }
};
DataParallelCost dataParallelCostOf(const pkg::PackageFile &pf, const PackageCost &cost, int ranks);

} // namespace dlc::driver
