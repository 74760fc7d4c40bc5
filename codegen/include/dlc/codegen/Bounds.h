//===- Bounds.h - Issue, memory and latency bounds of one launch -*- C++ -*-===//
//
// The one model of a kernel launch's time, shared by `dlc inspect` (driver/CostModel.h,
// from the decoded SASS of the package's kernels) and tile choice (codegen/emitters/
// Conv.cpp, from the main-loop facts of each tile in its table). Three bounds:
//   issue:   warp instructions per SM at each pipe's rate (4 issued per clock; HMMA,
//            FP32, FP16x2, FP64, integer, MUFU, shared/L1 bytes), the main loop run as
//            often as the launch's FLOPs (else its bytes) need, over the busy SMs;
//   memory:  every pass over the data at achievable DRAM bandwidth, passes after the
//            first at L2 bandwidth when all passes' reads fit in half of L2;
//   latency: each warp's chain (main-loop iterations x (instructions + an L2 load
//            latency when the loop waits on its own loads)), wave by wave.
// A launch takes the largest. docs/ARCHITECTURE.md "Kernel facts and bounds".
//===----------------------------------------------------------------------===//
#pragma once

#include "dlc/codegen/GpuModel.h"
#include "dlc/codegen/Sass.h"

#include <algorithm>
#include <cstdint>
#include <string>

namespace dlc::codegen {

/// The three bounds of one step on one GPU, in microseconds, and which one limits it.
struct Bounds {
  double issue = 0, memory = 0, latency = 0;
  /// "issue", "memory", "latency"; "peak" (no code to read: FLOPs at peak x fill),
  /// "library" (cuBLASLt's efficiency curve), "copy".
  std::string limit;
  double worst() const { return std::max({issue, memory, latency}); }
};

/// The shape of one kernel launch, as the bounds need it.
struct LaunchShape {
  uint64_t blocks = 0;
  int threads = 0;     // per block
  int blocksPerSm = 1; // resident
  double fill = 1;     // codegen::smFill
  double flops = 0, bytesRead = 0, bytesWritten = 0;
  bool tensor = false, tf32 = false; // for the peak fallback
  bool integer = false;              // ... with tensor: INT8, twice FP16's rate
};
/// The bounds of one launch on `g` from its kernel's facts (null: the peak fallback).
Bounds launchBounds(const GpuModel &g, const sass::KernelFacts *facts, const LaunchShape &s);

/// A GEMM on the vendor library (cuBLASLt): batch x [m, k] x [k, n].
struct LibraryGemm {
  uint64_t m = 0, n = 0, k = 0, batch = 1;
  double bytes = 0; // read and written
  bool tensor = false, tf32 = false;
};
/// Its bounds on `g` (limit "library"): the FLOPs at the profile's libraryEfficiency
/// of peak, less for short K (efficiency x k / (k + 128)), over the SMs its 128x128
/// tiles fill (K split where they leave SMs idle); and its bytes at achievable DRAM
/// bandwidth. `fill` (optional) receives the fraction of SMs busy.
Bounds libraryGemmBounds(const GpuModel &g, const LibraryGemm &gemm, double *fill = nullptr);

} // namespace dlc::codegen
