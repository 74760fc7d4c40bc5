//===- CostModel.h - Modeled DRAM traffic, FLOPs and a roofline -*- C++ -*-===//
//
// A model, not a measurement: every step reads and writes each distinct tensor it
// touches once (bytes recorded in the package by the code generator), and takes
// max(bytes / DRAM bandwidth, flops / FP32 peak) on a GPU. The lower bound is
// reading the weights and inputs and writing the outputs once.
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/package/Package.h"

#include <string>
#include <vector>

namespace dlc::tool {

struct GpuSpec {
  const char *name;
  double dramBytesPerSecond; // HBM bandwidth
  double fp32FlopsPerSecond; // CUDA-core FP32 peak (cuBLASLt runs FP32 GEMMs without TF32 here)
};
/// A100-SXM4-80GB: 2039 GB/s, 19.5 TFLOP/s FP32. H100-SXM5-80GB: 3350 GB/s, 66.9 TFLOP/s FP32.
const std::vector<GpuSpec> &gpuSpecs();

struct StepCost {
  std::string node, kind; // "launch" (kernel name in `kernel`), "gemm", "copy", "memset"
  int kernel = -1;
  uint64_t bytesRead = 0, bytesWritten = 0;
  double flops = 0;
  uint64_t bytes() const { return bytesRead + bytesWritten; }
  /// Roofline time in microseconds on `gpu`.
  double micros(const GpuSpec &gpu) const;
};

struct PackageCost {
  std::vector<StepCost> steps;
  uint64_t bytesRead = 0, bytesWritten = 0, lowerBoundBytes = 0;
  double flops = 0;
  double micros(const GpuSpec &gpu) const;
};

PackageCost costOf(const pkg::PackageFile &pf);

} // namespace dlc::tool
