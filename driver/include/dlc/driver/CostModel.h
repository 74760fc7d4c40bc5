//===- CostModel.h - Modeled latency, traffic and FLOPs of a package --*- C++ -*-===//
//
// A model, not a measurement. For each GPU that `dlc inspect` reports (A100, H100;
// codegen/GpuModel.h) it takes the steps that run there (per-architecture steps
// filtered as the runtime filters them) and models each:
//  - a kernel launch: SM fill from its blocks, the waves they make and the blocks an
//    SM holds (registers from ptxas for that architecture, shared memory, threads);
//    time = max(FLOPs / (FP32 peak x fill), bytes / DRAM bandwidth) + launch overhead;
//  - a GEMM (cuBLASLt): blocks of 128x128 output tiles, split along K when that fills
//    more SMs (as cuBLASLt's heuristics do); FP32 on CUDA cores, FP16/BF16 on tensor
//    cores, TF32 (--tf32) at the TF32 tensor-core peak; a kernel that declares
//    tensor cores (package Kernel.tensor_core) at the FP16 tensor-core peak;
//  - copies and memsets: bytes / bandwidth + overhead (an all-reduce's pack is copies);
//  - data-parallel steps: the all-reduces beside the schedule (dataParallelCostOf).
// The old roofline (max(bytes / bandwidth, FLOPs / peak) per step, no fill, no
// launch cost) is kept beside it: it is the optimistic bound.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/codegen/GpuModel.h"
#include "dlc/package/Package.h"

#include <string>
#include <vector>

namespace dlc::driver {

struct StepCost {
  std::string node, kind; // "launch", "gemm", "copy", "memset"
  int kernel = -1;        // launches: the kernel's index
  uint64_t blocks = 0, bytesRead = 0, bytesWritten = 0;
  double flops = 0;
  bool tensor = false; // on tensor cores
  bool tf32 = false;   // ... in TF32
  /// Per reported GPU (codegen::reportedGpus()): whether the step runs there, its SM
  /// fill, modeled time and roofline time (microseconds).
  std::vector<bool> runs;
  std::vector<double> fill, micros, roofline;
  uint64_t bytes() const { return bytesRead + bytesWritten; }
};

struct PackageCost {
  std::vector<StepCost> steps;
  uint64_t lowerBoundBytes = 0;
  /// Per reported GPU: totals over the steps that run there.
  std::vector<double> micros, roofline, flops;
  /// The FLOPs of steps on tensor cores (tensor-core kernels, FP16/BF16/TF32 GEMMs).
  std::vector<double> tensorFlops;
  std::vector<uint64_t> bytesRead, bytesWritten;
};

/// The package's own schedule, or with `variant` >= 0 that shape variant's
/// (pkg::Package::variants, shape-range packages).
PackageCost costOf(const pkg::PackageFile &pf, int variant = -1);

/// A data-parallel training step on `ranks` GPUs of one machine: each bucket's ring
/// all-reduce (2 (N-1)/N of its bytes over the GPU link, plus 2 (N-1) hops of
/// latency) on a second stream from its AllReduce step, serially; the main stream
/// waits at each CollectiveWait for what is not done yet. `overlap` is the part of
/// the all-reduce time hidden behind compute.
struct DataParallelCost {
  int ranks = 0;
  size_t buckets = 0;
  uint64_t allReduceBytes = 0; // gradient bytes per rank and step
  /// Per reported GPU (microseconds): all-reduce time, the part the step waits for,
  /// and the whole step.
  std::vector<double> commMicros, exposedMicros, stepMicros;
  double overlap(size_t gpu) const {
    return commMicros[gpu] > 0 ? 1 - exposedMicros[gpu] / commMicros[gpu] : 1;
  }
};
DataParallelCost dataParallelCostOf(const pkg::PackageFile &pf, const PackageCost &cost, int ranks);

} // namespace dlc::driver
